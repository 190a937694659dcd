package status

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
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

// TestMergeGatewayKeepsForeignConditions: a condition type another
// controller added (domain-qualified) survives Portico's writes, on the
// Gateway and on its listeners, unchanged; Portico's own types are
// replaced, and one it no longer computes goes.
func TestMergeGatewayKeepsForeignConditions(t *testing.T) {
	then := metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(then.Add(time.Hour))
	foreign := metav1.Condition{Type: "example.com/Audited", Status: metav1.ConditionTrue, Reason: "Seeded", ObservedGeneration: 1, LastTransitionTime: then}
	stored := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: gwv1.GatewayStatus{
		Conditions: []metav1.Condition{
			{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1, LastTransitionTime: then},
			{Type: "Conflicted", Status: metav1.ConditionTrue, Reason: "Old", ObservedGeneration: 1, LastTransitionTime: then},
			foreign,
		},
		Listeners: []gwv1.ListenerStatus{{Name: "http", Conditions: []metav1.Condition{foreign}}},
	}}
	computed := gwv1.GatewayStatus{
		Conditions: []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 2}},
		Listeners:  []gwv1.ListenerStatus{{Name: "http", Conditions: []metav1.Condition{{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed", ObservedGeneration: 2}}}},
	}
	got, changed := MergeGateway(stored, computed, now)
	if !changed {
		t.Fatal("merge reports no change")
	}
	types := func(cs []metav1.Condition) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Type)
		}
		return out
	}
	if want := []string{"Accepted", "example.com/Audited"}; !slices.Equal(types(got.Status.Conditions), want) {
		t.Errorf("Gateway conditions %v, want %v", types(got.Status.Conditions), want)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, foreign.Type); c == nil || !reflect.DeepEqual(*c, foreign) {
		t.Errorf("foreign Gateway condition %+v, want it unchanged", c)
	}
	if want := []string{"Programmed", "example.com/Audited"}; !slices.Equal(types(got.Status.Listeners[0].Conditions), want) {
		t.Errorf("listener conditions %v, want %v", types(got.Status.Listeners[0].Conditions), want)
	}
	if _, again := MergeGateway(got, computed, now); again {
		t.Error("merging the same computed status again reports a change")
	}
}
