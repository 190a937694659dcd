package listeners

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// reasonParentNotProgrammed is listed by the ListenerSet Programmed
// condition's documentation but has no constant in the API package.
const reasonParentNotProgrammed gwv1.ListenerSetConditionReason = "ParentNotProgrammed"

// SetAttachedRoutes records, in the status of the object that declares
// r.Listeners[i], how many routes attached to that listener.
func (r *Result) SetAttachedRoutes(i int, n int32) {
	l := &r.Listeners[i]
	if l.Source.Kind == kindGateway {
		r.Gateway.Listeners[l.statusIndex].AttachedRoutes = n
		return
	}
	if l.attachedRoutes != nil {
		*l.attachedRoutes = n
		return
	}
	st := r.ListenerSets[types.NamespacedName{Namespace: l.Source.Namespace, Name: l.Source.Name}]
	st.Listeners[l.statusIndex].AttachedRoutes = n
}

// SetGatewayNotProgrammed is for the caller that could not put the merged
// listeners on the data plane (a port failed to bind, say) after Merge said
// they were fine. It turns the Gateway's Programmed condition False with
// reason and message, every attached ListenerSet's Programmed False with
// ParentNotProgrammed, and every Programmed listener's Programmed False with
// Pending. Accepted conditions are left alone: the configuration is valid,
// it just is not live.
func (r *Result) SetGatewayNotProgrammed(reason gwv1.GatewayConditionReason, message string) {
	for i, c := range r.Gateway.Conditions {
		if c.Type == string(gwv1.GatewayConditionProgrammed) {
			r.Gateway.Conditions[i] = cond(gwv1.GatewayConditionProgrammed, false, reason, message, c.ObservedGeneration)
		}
	}
	for i := range r.Gateway.Listeners {
		unprogram(r.Gateway.Listeners[i].Conditions, message)
	}
	for _, st := range r.ListenerSets {
		for i, c := range st.Conditions {
			if c.Type == string(gwv1.ListenerSetConditionProgrammed) && c.Status == metav1.ConditionTrue {
				st.Conditions[i] = cond(gwv1.ListenerSetConditionProgrammed, false, reasonParentNotProgrammed,
					"The parent Gateway is not programmed", c.ObservedGeneration)
			}
		}
		for i := range st.Listeners {
			unprogram(st.Listeners[i].Conditions, "The parent Gateway is not programmed")
		}
	}
}

func unprogram(conds []metav1.Condition, message string) {
	for i, c := range conds {
		if c.Type == string(gwv1.ListenerConditionProgrammed) && c.Status == metav1.ConditionTrue {
			conds[i] = cond(gwv1.ListenerConditionProgrammed, false, gwv1.ListenerReasonPending, message, c.ObservedGeneration)
		}
	}
}
