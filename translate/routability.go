package translate

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/conditions"
)

// Address routability (GEP-5093, spec.addresses[].routability).
//
// Every address a Gateway reports says where it is reachable from: Cluster
// for a Service's cluster IP (Portico's own Service, or a per-Gateway data
// plane's), "" for any other address (a load balancer's, --gateway-address,
// the address pool's). A request for Cluster is met only by a cluster IP; a
// request without routability by any address of Portico's default choice;
// testing.x-k8s.io/sentinel, reserved for conformance, as a request without
// routability, reported with that value. Any other value (another
// testing.x-k8s.io one, any other prefixed one) is one Portico does not
// serve: the entry is left unmet, never met with another scope.
//
// AddressesAssigned then says whether every entry was met (or, without
// spec.addresses, the default addresses chosen), some (PartiallyAssigned:
// the Gateway is served on those) or none (NotAssigned, and
// Programmed=False AddressNotAssigned unless another reason is given).

// sentinelRoutability is the value conformance asks for: supported, with
// no guarantee, and reported as asked.
const sentinelRoutability gwv1.GatewayAddressRoutabilityType = "testing.x-k8s.io/sentinel"

// routabilityDefault and routabilityCluster are what status reports;
// pointers, as status reports the empty value explicitly.
func routability(r gwv1.GatewayAddressRoutabilityType) *gwv1.GatewayAddressRoutabilityType {
	return &r
}

// routabilityUnsupported says why a requested routability cannot be met,
// or "" when Portico serves it.
func routabilityUnsupported(r gwv1.GatewayAddressRoutabilityType) string {
	switch {
	case r == gwv1.GatewayAddressRoutabilityDefault, r == gwv1.GatewayAddressRoutabilityCluster, r == sentinelRoutability:
		return ""
	case strings.HasPrefix(string(r), "testing.x-k8s.io/"):
		return fmt.Sprintf("routability %q is reserved for conformance and not supported", r)
	}
	return fmt.Sprintf("routability %q is not supported: Portico serves \"\" (its default) and Cluster", r)
}

// withRoutability is a copy of a with routability r.
func withRoutability(a gwv1.GatewayStatusAddress, r gwv1.GatewayAddressRoutabilityType) gwv1.GatewayStatusAddress {
	a.Routability = routability(r)
	return a
}

// setAddressesAssigned sets AddressesAssigned from how many of want
// entries were met; unmet lists why the others were not. With nothing to
// meet (no spec.addresses), the default addresses are assigned when there
// are any. When none is met, Programmed is False (AddressNotAssigned)
// unless it already says why.
func setAddressesAssigned(gs *gwv1.GatewayStatus, want, met int, unmet []string) {
	switch {
	case want == 0 && len(gs.Addresses) > 0, want > 0 && met == want:
		gs.Conditions = conditions.Put(gs.Conditions, gwv1.GatewayConditionAddressesAssigned, metav1.ConditionTrue,
			gwv1.GatewayReasonAddressesAssigned, "All addresses asked for are assigned")
	case want > 0 && met > 0:
		gs.Conditions = conditions.Put(gs.Conditions, gwv1.GatewayConditionAddressesAssigned, metav1.ConditionFalse,
			gwv1.GatewayReasonAddressesPartiallyAssigned, fmt.Sprintf("%d of %d addresses asked for are assigned; not assigned: %s",
				met, want, strings.Join(unmet, "; ")))
	default:
		msg := "No address asked for can be assigned: " + strings.Join(unmet, "; ")
		if want == 0 {
			msg = "No address can be assigned: " + strings.Join(unmet, "; ")
		}
		gs.Conditions = conditions.Put(gs.Conditions, gwv1.GatewayConditionAddressesAssigned, metav1.ConditionFalse,
			gwv1.GatewayReasonAddressesNotAssigned, msg)
		if c := findCondition(gs.Conditions, gwv1.GatewayConditionProgrammed); c == nil || c.Status == metav1.ConditionTrue {
			gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse,
				gwv1.GatewayReasonAddressNotAssigned, msg)
		}
	}
}

func findCondition(conds []metav1.Condition, typ gwv1.GatewayConditionType) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == string(typ) {
			return &conds[i]
		}
	}
	return nil
}
