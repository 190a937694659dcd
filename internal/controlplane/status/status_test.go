package status

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"k8s.io/utils/ptr"
)

// TestAncestorStatusKeepsOthers: writing Portico's ancestor entries keeps
// every other controller's, keeps a condition's transition time while its
// status holds, and stays within the schema's 16 entries.
func TestAncestorStatusKeepsOthers(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Hour))
	ancestor := func(name string, controller gwv1.GatewayController, status metav1.ConditionStatus, at metav1.Time) gwv1.PolicyAncestorStatus {
		return gwv1.PolicyAncestorStatus{
			AncestorRef:    gwv1.ParentReference{Kind: ptr.To(gwv1.Kind("Gateway")), Name: gwv1.ObjectName(name)},
			ControllerName: controller,
			Conditions:     []metav1.Condition{{Type: "Accepted", Status: status, Reason: "Accepted", LastTransitionTime: at}},
		}
	}
	stored := gwv1.PolicyStatus{Ancestors: []gwv1.PolicyAncestorStatus{
		ancestor("theirs", otherController, "True", earlier),
		ancestor("kept", ourController, "True", earlier),
		ancestor("gone", ourController, "True", earlier),
	}}
	computed := []gwv1.PolicyAncestorStatus{ancestor("kept", ourController, "True", metav1.Time{})}
	for i := range 20 {
		computed = append(computed, ancestor(fmt.Sprintf("gw-%02d", i), ourController, "False", metav1.Time{}))
	}
	got := ancestorStatus(stored, computed, ourController, now)
	if len(got.Ancestors) != MaxPolicyAncestors {
		t.Fatalf("%d entries, want %d", len(got.Ancestors), MaxPolicyAncestors)
	}
	if a := got.Ancestors[0]; a.ControllerName != otherController || a.AncestorRef.Name != "theirs" {
		t.Errorf("first entry %+v, want the other controller's", a)
	}
	if a := got.Ancestors[1]; a.AncestorRef.Name != "kept" || !a.Conditions[0].LastTransitionTime.Equal(&earlier) {
		t.Errorf("kept entry %+v, want its transition time kept", a)
	}
	if a := got.Ancestors[2]; a.AncestorRef.Name != "gw-00" || !a.Conditions[0].LastTransitionTime.Equal(&now) {
		t.Errorf("new entry %+v, want stamped now", a)
	}
	for _, a := range got.Ancestors {
		if a.AncestorRef.Name == "gone" {
			t.Error("an entry Portico no longer computes is still there")
		}
	}
	if _, changed := MergeBackendTLSPolicy(&gwv1.BackendTLSPolicy{Status: got}, computed, ourController, now); changed {
		t.Error("merging the same status again reports a change")
	}
}

const ourController gwv1.GatewayController = "portico.dev/gateway-controller"

const otherController gwv1.GatewayController = "example.net/other-controller"

// TestGatewayKeepsForeignConditions: conditions of another's type on a
// Gateway and on its listeners survive Portico's writes unchanged; a stale
// condition of a Gateway API type Portico no longer sets does not.
func TestGatewayKeepsForeignConditions(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	earlier := metav1.NewTime(now.Add(-time.Hour))
	foreign := metav1.Condition{Type: "example.com/Audited", Status: "True", Reason: "Seeded", ObservedGeneration: 1, LastTransitionTime: earlier}
	stale := metav1.Condition{Type: "Conflicted", Status: "True", Reason: "HostnameConflict", ObservedGeneration: 1, LastTransitionTime: earlier}
	accepted := func(gen int64) metav1.Condition {
		return metav1.Condition{Type: "Accepted", Status: "True", Reason: "Accepted", ObservedGeneration: gen}
	}
	gw := &gwv1.Gateway{Status: gwv1.GatewayStatus{
		Conditions: []metav1.Condition{accepted(1), foreign},
		Listeners:  []gwv1.ListenerStatus{{Name: "http", Conditions: []metav1.Condition{accepted(1), stale, foreign}}},
	}}
	computed := gwv1.GatewayStatus{
		Conditions: []metav1.Condition{accepted(2)},
		Listeners:  []gwv1.ListenerStatus{{Name: "http", Conditions: []metav1.Condition{accepted(2)}}},
	}
	got, changed := MergeGateway(gw, computed, now)
	if !changed {
		t.Fatal("a new generation reports no change")
	}
	for what, conds := range map[string][]metav1.Condition{"gateway": got.Status.Conditions, "listener": got.Status.Listeners[0].Conditions} {
		if len(conds) != 2 || conds[0].ObservedGeneration != 2 || conds[1] != foreign {
			t.Errorf("%s conditions %+v, want Accepted of generation 2 and the foreign one unchanged", what, conds)
		}
	}
	if _, changed := MergeGateway(got, computed, now); changed {
		t.Error("merging the same status again reports a change")
	}
	ls := &gwv1.ListenerSet{Status: gwv1.ListenerSetStatus{Conditions: []metav1.Condition{foreign}}}
	if got, _ := MergeListenerSet(ls, gwv1.ListenerSetStatus{Conditions: []metav1.Condition{accepted(1)}}, now); len(got.Status.Conditions) != 2 {
		t.Errorf("ListenerSet conditions %+v, want the foreign one kept", got.Status.Conditions)
	}
	gc := &gwv1.GatewayClass{Status: gwv1.GatewayClassStatus{Conditions: []metav1.Condition{foreign}}}
	if got, _ := MergeGatewayClass(gc, gwv1.GatewayClassStatus{Conditions: []metav1.Condition{accepted(1)}}, now); len(got.Status.Conditions) != 2 {
		t.Errorf("GatewayClass conditions %+v, want the foreign one kept", got.Status.Conditions)
	}
}
