package status

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestGatewayRoutabilityPruned: a Gateway CRD of the standard channel
// drops status.addresses[].routability. A status that differs from what
// is stored only by it is not written again (each write would be pruned,
// and the next comparison would write again, without end), while a status
// that differs otherwise is written whole, routability included, for a
// CRD that keeps it.
func TestGatewayRoutabilityPruned(t *testing.T) {
	now := metav1.Now()
	cond := metav1.Condition{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 1, LastTransitionTime: now}
	withR := gwv1.GatewayStatusAddress{Type: ptr.To(gwv1.IPAddressType), Value: "10.96.0.1", Routability: ptr.To(gwv1.GatewayAddressRoutabilityCluster)}
	pruned := withR
	pruned.Routability = nil
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: gwv1.GatewayStatus{
		Addresses: []gwv1.GatewayStatusAddress{pruned}, Conditions: []metav1.Condition{cond},
	}}
	computed := gwv1.GatewayStatus{Addresses: []gwv1.GatewayStatusAddress{withR}, Conditions: []metav1.Condition{cond}}
	if _, changed := MergeGateway(gw, computed, now); changed {
		t.Error("a status differing only by a pruned routability is written again")
	}
	computed.Conditions = []metav1.Condition{{Type: "Accepted", Status: metav1.ConditionFalse, Reason: "Invalid", ObservedGeneration: 1}}
	out, changed := MergeGateway(gw, computed, now)
	if !changed || out.Status.Addresses[0].Routability == nil || *out.Status.Addresses[0].Routability != gwv1.GatewayAddressRoutabilityCluster {
		t.Errorf("changed status written %v with addresses %+v, want routability Cluster", changed, out.Status.Addresses)
	}
	// Another address is a change, whatever the routability.
	computed = gwv1.GatewayStatus{Addresses: []gwv1.GatewayStatusAddress{{Type: ptr.To(gwv1.IPAddressType), Value: "10.96.0.2",
		Routability: ptr.To(gwv1.GatewayAddressRoutabilityCluster)}}, Conditions: []metav1.Condition{cond}}
	if _, changed := MergeGateway(gw, computed, now); !changed {
		t.Error("a new address is not written")
	}
}
