package kube

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/telemetrypolicy"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

// TestTelemetryPolicyAgainstAPIServer: against a real API server with
// the experimental XTelemetryPolicy CRD of the gateway-api module, the
// CRD's rules refuse what the type forbids (a provider without mode
// Enabled, none with it, sampling fields when tracing is not enabled,
// an attribute without its source), and the leader writes the statuses:
// the older of two policies on a Gateway Accepted, the newer Conflicted,
// one on a missing Gateway TargetNotFound, one whose collector Service
// does not exist ResolvedRefs=False BackendNotFound.
func TestTelemetryPolicyAgainstAPIServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatal(err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "experimental", "gateway.networking.x-k8s.io_xtelemetrypolicies.yaml")
	pc := startPolicyCluster(t, crd, source.TelemetryPolicyResource, telemetrypolicy.APIVersion, telemetrypolicy.Kind)
	create := pc.create
	const gw = `[{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]`
	for _, tc := range []struct{ spec, refusal string }{
		{`{targetRefs: ` + gw + `, tracing: {mode: Enabled}}`, "provider is required when mode is Enabled"},
		{`{targetRefs: ` + gw + `, tracing: {mode: Disabled, provider: {backendRef: {name: otel, port: 4318}}}}`, "must be empty otherwise"},
		{`{targetRefs: ` + gw + `, tracing: {mode: Disabled, samplingRate: {numerator: 1}}}`, "samplingRate can only be set when mode is Enabled"},
		{`{targetRefs: ` + gw + `, tracing: {mode: Enabled, provider: {backendRef: {name: otel, port: 4318}}, attributes: [{name: a, sourceType: Header}]}}`,
			"headerName is required when sourceType is Header"},
		{`{targetRefs: [], tracing: {mode: Disabled}}`, "should have at least 1 items"},
	} {
		err := create("refused", tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("spec %s: %v, want a refusal saying %q", tc.spec, err, tc.refusal)
		}
	}

	pc.startGateway(18083)
	if err := create("first", `{targetRefs: `+gw+`, tracing: {mode: Disabled}}`); err != nil {
		t.Fatal(err)
	}
	// creationTimestamp has a resolution of one second: "second" must be
	// newer.
	time.Sleep(1100 * time.Millisecond)
	if err := create("second", `{targetRefs: `+gw+`, tracing: {mode: Disabled}}`); err != nil {
		t.Fatal(err)
	}
	if err := create("ghost", `{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: nowhere}], tracing: {mode: Disabled}}`); err != nil {
		t.Fatal(err)
	}
	if err := create("nocollector", `{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: other}], tracing: {mode: Enabled, provider: {backendRef: {name: missing, port: 4318}}}}`); err != nil {
		t.Fatal(err)
	}
	other := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico",
		Listeners: []gwv1.Listener{{Name: "http", Port: 18084, Protocol: gwv1.HTTPProtocolType}}}}
	if _, err := pc.f.Gateway.GatewayV1().Gateways("default").Create(pc.ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ancestor := func(name, gateway, typ string, status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			p := &telemetrypolicy.XTelemetryPolicy{}
			if err := pc.get(name, p); err != nil {
				return err
			}
			for _, a := range p.Status.Ancestors {
				if string(a.AncestorRef.Name) == gateway && a.ControllerName == "portico.dev/gateway-controller" {
					return conditionIs(a.Conditions, typ, status, reason, p.Generation)
				}
			}
			return fmt.Errorf("no ancestor %s in %+v", gateway, p.Status.Ancestors)
		}
	}
	accepted := string(gwv1.PolicyConditionAccepted)
	kubetest.WaitFor(t, 30*time.Second, "first accepted", ancestor("first", "gw", accepted, metav1.ConditionTrue, string(gwv1.PolicyReasonAccepted)))
	kubetest.WaitFor(t, 30*time.Second, "second conflicted", ancestor("second", "gw", accepted, metav1.ConditionFalse, string(gwv1.PolicyReasonConflicted)))
	kubetest.WaitFor(t, 30*time.Second, "ghost TargetNotFound", ancestor("ghost", "nowhere", accepted, metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound)))
	kubetest.WaitFor(t, 30*time.Second, "nocollector BackendNotFound", ancestor("nocollector", "other", "ResolvedRefs", metav1.ConditionFalse, telemetrypolicy.ReasonBackendNotFound))
}
