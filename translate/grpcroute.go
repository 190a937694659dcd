package translate

import (
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
)

// grpcRouteBackends is routeBackends for GRPCRoutes.
func grpcRouteBackends(res *snapshot.Resources, st *status.Maps) []routedBackends {
	out := make([]routedBackends, 0, len(res.GRPCRoutes))
	for _, r := range res.GRPCRoutes {
		rb := routedBackends{namespace: r.Namespace, parents: st.GRPCRoutes[nn(r.Namespace, r.Name)]}
		for _, rule := range r.Spec.Rules {
			rb.refs = appendGRPCMirrors(rb.refs, rule.Filters)
			for _, b := range rule.BackendRefs {
				rb.refs = appendGRPCMirrors(append(rb.refs, b.BackendObjectReference), b.Filters)
			}
		}
		out = append(out, rb)
	}
	return out
}

func appendGRPCMirrors(refs []gwv1.BackendObjectReference, filters []gwv1.GRPCRouteFilter) []gwv1.BackendObjectReference {
	for _, f := range filters {
		if f.RequestMirror != nil {
			refs = append(refs, f.RequestMirror.BackendRef)
		}
	}
	return refs
}
