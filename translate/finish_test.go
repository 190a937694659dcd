package translate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/testkit/testyaml"
)

// TestFinishNotApplied: a Gateway whose configuration could not be put on
// the data plane is Programmed=False with the reason and message given, its
// Programmed listeners and ListenerSets are Pending and ParentNotProgrammed,
// and a ListenerSet or listener that was not programmed keeps its own
// reason. Accepted is left alone, observedGeneration kept, and the statuses
// of the translation are not changed under it.
func TestFinishNotApplied(t *testing.T) {
	const yaml = testyaml.Class + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: infra, generation: 4}
spec:
  gatewayClassName: portico
  allowedListeners: {namespaces: {from: All}}
  listeners: [{name: a, hostname: a.example.com, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ok, namespace: team}
spec:
  parentRef: {name: gw, namespace: infra}
  listeners: [{name: x, hostname: x.example.com, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: bad, namespace: team}
spec:
  parentRef: {name: gw, namespace: infra}
  listeners: [{name: y, hostname: a.example.com, port: 80, protocol: HTTP}]
`
	res := yamlSnapshot(t, yaml)
	out, _ := Translate(Settings{}, res, Memory{})
	gwKey := types.NamespacedName{Namespace: "infra", Name: "gw"}
	gen := condition(t, out.Statuses.Gateways.At(gwKey).Conditions, "Programmed").ObservedGeneration
	st, decorated := Finish(out.Statuses, res, Facts{NotApplied: "port 80 is in use"})
	if len(decorated.Gateways) != 1 || len(decorated.ListenerSets) != 2 {
		t.Errorf("decorated %+v, want the Gateway and its two ListenerSets", decorated)
	}

	gs := st.Gateways.At(gwKey)
	if c := condition(t, gs.Conditions, "Programmed"); c.Status != metav1.ConditionFalse || c.Reason != "NoResources" || c.Message != "port 80 is in use" || c.ObservedGeneration != gen {
		t.Errorf("Gateway Programmed = %+v", c)
	}
	if c := condition(t, gs.Conditions, "Accepted"); c.Status != metav1.ConditionTrue {
		t.Errorf("Gateway Accepted = %+v", c)
	}
	if c := condition(t, gs.Listeners[0].Conditions, "Programmed"); c.Status != metav1.ConditionFalse || c.Reason != "Pending" {
		t.Errorf("Gateway listener Programmed = %+v", c)
	}
	ok := st.ListenerSets.At(types.NamespacedName{Namespace: "team", Name: "ok"})
	if c := condition(t, ok.Conditions, "Programmed"); c.Status != metav1.ConditionFalse || c.Reason != "ParentNotProgrammed" {
		t.Errorf("team/ok Programmed = %+v", c)
	}
	if c := condition(t, ok.Listeners[0].Conditions, "Programmed"); c.Status != metav1.ConditionFalse || c.Reason != "Pending" {
		t.Errorf("team/ok x Programmed = %+v", c)
	}
	bad := st.ListenerSets.At(types.NamespacedName{Namespace: "team", Name: "bad"})
	if c := condition(t, bad.Conditions, "Programmed"); c.Reason != "ListenersNotValid" {
		t.Errorf("team/bad Programmed = %+v, want its own reason kept", c)
	}
	if c := condition(t, bad.Listeners[0].Conditions, "Programmed"); c.Reason != "HostnameConflict" {
		t.Errorf("team/bad y Programmed = %+v, want its own reason kept", c)
	}
	if c := condition(t, out.Statuses.Gateways.At(gwKey).Conditions, "Programmed"); c.Status != metav1.ConditionTrue {
		t.Errorf("the translation's own status changed: %+v", c)
	}
	if c := condition(t, out.Statuses.Gateways.At(gwKey).Listeners[0].Conditions, "Programmed"); c.Status != metav1.ConditionTrue {
		t.Errorf("the translation's own listener status changed: %+v", c)
	}
}

// TestFinishUnsupportedVersion: CRDs of another minor version make the
// GatewayClass report SupportedVersion=False; it stays Accepted.
func TestFinishUnsupportedVersion(t *testing.T) {
	st := (&status.Maps{GatewayClasses: map[string]gwv1.GatewayClassStatus{"a": {Conditions: []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 3},
		{Type: "SupportedVersion", Status: metav1.ConditionTrue, Reason: "SupportedVersion", ObservedGeneration: 3},
	}}}}).Computed()
	out, _ := Finish(st, &snapshot.Resources{}, Facts{CRDProblems: []string{"CRD gateways.gateway.networking.k8s.io is version v1.5.0"}})
	if c := meta.FindStatusCondition(st.GatewayClasses.At("a").Conditions, "SupportedVersion"); c.Status != metav1.ConditionTrue {
		t.Errorf("the translation's own status changed: %+v", c)
	}
	conds := out.GatewayClasses.At("a").Conditions
	if c := meta.FindStatusCondition(conds, "SupportedVersion"); c == nil || c.Status != "False" || c.Reason != "UnsupportedVersion" || c.ObservedGeneration != 3 || !strings.Contains(c.Message, "v1.5.0") {
		t.Errorf("SupportedVersion = %+v", c)
	}
	if !meta.IsStatusConditionTrue(conds, "Accepted") {
		t.Error("Accepted changed")
	}
}

// TestFinishUnacknowledged: a Gateway with a data plane of its own is
// Programmed only once its Deployment records that its data plane applied
// the configuration the controller would send now; a Gateway without a
// data plane of its own is left alone.
func TestFinishUnacknowledged(t *testing.T) {
	web := types.NamespacedName{Namespace: "apps", Name: "web"}
	shared := types.NamespacedName{Namespace: "apps", Name: "shared"}
	const current = "aaaaaaaaaaaaaaaaaaaaaaaa"
	gateways := []*gwv1.Gateway{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}, Spec: gwv1.GatewaySpec{GatewayClassName: "dedicated"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "shared"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico"}},
	}
	programmed := func() *status.Computed {
		st := &status.Maps{Gateways: map[types.NamespacedName]gwv1.GatewayStatus{}}
		for _, k := range []types.NamespacedName{web, shared} {
			st.Gateways[k] = gwv1.GatewayStatus{Conditions: []metav1.Condition{{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed"}}}
		}
		return st.Computed()
	}
	for _, tc := range []struct {
		applied string
		want    metav1.ConditionStatus
	}{{"", metav1.ConditionFalse}, {"an-older-one", metav1.ConditionFalse}, {current, metav1.ConditionTrue}} {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-dedicated",
			Annotations: map[string]string{provision.AppliedVersionAnnotation: tc.applied}}}
		st, _ := Finish(programmed(), &snapshot.Resources{Gateways: gateways, Deployments: []*appsv1.Deployment{dep}},
			Facts{DataPlaneVersions: map[types.NamespacedName]string{web: current}})
		if got := st.Gateways.At(web).Conditions[0]; got.Status != tc.want {
			t.Errorf("applied %q: Programmed %s (%s), want %s", tc.applied, got.Status, got.Message, tc.want)
		}
		if got := st.Gateways.At(shared).Conditions[0]; got.Status != metav1.ConditionTrue {
			t.Errorf("a shared Gateway was demoted: %s", got.Message)
		}
	}
}

// yamlSnapshot is the snapshot of the objects in yaml.
func yamlSnapshot(t *testing.T, yaml string) *snapshot.Resources {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return loadFixture(t, path)
}

func condition(t *testing.T, conds []metav1.Condition, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, conds)
	}
	return *c
}

// TestFinishUnboundUDPPort: a UDP port the data plane could not bind
// unprograms the Gateway whose UDP listener is on it, not one whose TCP
// listener has the same number (another socket, bound).
func TestFinishUnboundUDPPort(t *testing.T) {
	const yaml = testyaml.Class + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: tcp, namespace: infra}
spec:
  gatewayClassName: portico
  listeners: [{name: dns, port: 5353, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: udp, namespace: infra}
spec:
  gatewayClassName: portico
  listeners: [{name: dns, port: 5353, protocol: UDP}]
`
	res := yamlSnapshot(t, yaml)
	out, _ := Translate(Settings{}, res, Memory{})
	st, _ := Finish(out.Statuses, res, Facts{Unbound: []UnboundPort{{Port: config.PortKey{Number: 5353, UDP: true}, Message: "address in use"}}})
	programmed := func(name string) metav1.ConditionStatus {
		return condition(t, st.Gateways.At(types.NamespacedName{Namespace: "infra", Name: name}).Conditions, "Programmed").Status
	}
	if programmed("udp") != metav1.ConditionFalse || programmed("tcp") != metav1.ConditionTrue {
		t.Errorf("Programmed: udp %s, tcp %s; want False, True", programmed("udp"), programmed("tcp"))
	}
}
