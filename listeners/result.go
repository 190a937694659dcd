package listeners

import (
	"k8s.io/apimachinery/pkg/types"
)

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
