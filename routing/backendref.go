package routing

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// BackendRefs checks the backendRefs of routes of every kind against the
// Services and ReferenceGrants of one compilation. It is not for
// concurrent use.
type BackendRefs struct {
	services map[types.NamespacedName]Service
	grants   []*gwv1.ReferenceGrant
	// byNamespace is grants indexed by their namespace, built on the first
	// reference to another namespace: most configurations have none.
	byNamespace map[string][]*gwv1.ReferenceGrant
}

// NewBackendRefs returns a BackendRefs for these Services and grants.
func NewBackendRefs(services map[types.NamespacedName]Service, grants []*gwv1.ReferenceGrant) BackendRefs {
	return BackendRefs{services: services, grants: grants}
}

// ResolvedBackend is a backendRef checked: the Service port it names and
// what that port says, or why it cannot be used. A caller turns it into
// the backend of its own data plane.
type ResolvedBackend struct {
	Key config.BackendKey
	// AppProtocol is what to speak to the port, known once the port is
	// found: its appProtocol, or HTTP/2 for a GRPCRoute.
	AppProtocol string
	// TLS is the port's BackendTLSPolicy, if any, known once the port is
	// found.
	TLS *config.BackendTLS
	// LB and Outlier are the Service's policy's (Service.LB, Outlier).
	LB      *config.LoadBalancer
	Outlier *config.OutlierDetection
	Active  *config.ActiveHealthCheck
	Breaker *config.CircuitBreaker
	Conn    *config.BackendConn
	// Session and Budget are the Service's XBackendTrafficPolicy's.
	Session *config.SessionPersistence
	Budget  *config.RetryBudget
	// Reason is empty when the reference resolved; otherwise it is the
	// route's ResolvedRefs reason, and Message says why.
	Reason  gwv1.RouteConditionReason
	Message string
}

func (r *ResolvedBackend) fail(reason gwv1.RouteConditionReason, format string, args ...any) ResolvedBackend {
	r.Reason, r.Message = reason, fmt.Sprintf(format, args...)
	return *r
}

// Resolve checks ref, a backendRef of a route of kind k in namespace
// routeNS: a core Service, in the route's namespace or one whose
// ReferenceGrant allows it, that exists and has the port, with an
// application protocol routes of kind k can be forwarded over.
func (b *BackendRefs) Resolve(k RouteKind, routeNS string, ref gwv1.BackendObjectReference) ResolvedBackend {
	group, kind := "", "Service"
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	ns := routeNS
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	svc := types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
	r := ResolvedBackend{Key: config.BackendKey{Service: config.NamespacedName(svc)}}
	if ref.Port != nil {
		r.Key.Port = *ref.Port
	}
	if group != "" || kind != "Service" {
		return r.fail(gwv1.RouteReasonInvalidKind, "backend %s: unsupported kind %s.%s", ref.Name, kind, group)
	}
	if ns != routeNS && !b.granted(routeNS, svc, k) {
		return r.fail(gwv1.RouteReasonRefNotPermitted, "backend %s: no ReferenceGrant allows %ss in %s to use it", svc, k, routeNS)
	}
	s, ok := b.services[svc]
	if !ok {
		return r.fail(gwv1.RouteReasonBackendNotFound, "backend %s: Service not found", svc)
	}
	if ref.Port == nil {
		return r.fail(gwv1.RouteReasonBackendNotFound, "backend %s: port is required", svc)
	}
	found := false
	for _, p := range s.Ports {
		if p.Port == *ref.Port {
			found, r.AppProtocol, r.TLS, r.LB, r.Outlier, r.Active, r.Breaker, r.Conn = true, p.AppProtocol, p.TLS, s.LB, s.Outlier, s.Active, s.Breaker, s.Conn
			r.Session, r.Budget = s.Session, s.Budget
			break
		}
	}
	if !found {
		return r.fail(gwv1.RouteReasonBackendNotFound, "backend %s: Service has no port %d", svc, *ref.Port)
	}
	if k == KindTLSRoute || k == KindTCPRoute || k == KindUDPRoute {
		// A TLSRoute's or TCPRoute's connections and a UDPRoute's
		// datagrams are forwarded as they are: whatever the port speaks
		// is the client's business.
		return r
	}
	if tlsAppProtocol(r.AppProtocol) && r.TLS == nil {
		return r.fail(gwv1.RouteReasonUnsupportedProtocol, "backend %s port %d: appProtocol %q needs a BackendTLSPolicy for the port, "+
			"which says how to verify the backend", svc, *ref.Port, r.AppProtocol)
	}
	if !httpAppProtocol(r.AppProtocol) && !tlsAppProtocol(r.AppProtocol) {
		return r.fail(gwv1.RouteReasonUnsupportedProtocol, "backend %s port %d: appProtocol %q is not supported for %s", svc, *ref.Port, r.AppProtocol, k)
	}
	if k == KindGRPCRoute {
		r.AppProtocol = grpcAppProtocol
	}
	return r
}

// httpAppProtocol reports whether Portico can forward HTTPRoute traffic to a
// Service port with this appProtocol: plain HTTP/1.1, cleartext HTTP/2 and
// WebSocket.
func httpAppProtocol(p string) bool {
	switch strings.ToLower(p) {
	case "", "http", "kubernetes.io/h2c", "kubernetes.io/ws":
		return true
	}
	return false
}

// tlsAppProtocol reports whether a Service port's appProtocol says it
// speaks HTTP over TLS: Portico forwards to it only with the port's
// BackendTLSPolicy.
func tlsAppProtocol(p string) bool {
	switch strings.ToLower(p) {
	case "https", "kubernetes.io/wss":
		return true
	}
	return false
}

// granted reports whether a ReferenceGrant in the Service's namespace lets
// routes of kind k from namespace from refer to it. Only an omitted to.name
// covers every Service: an empty one, which the API refuses, names none,
// as for the Secrets of listeners.
func (b *BackendRefs) granted(from string, svc types.NamespacedName, k RouteKind) bool {
	if b.byNamespace == nil {
		b.byNamespace = make(map[string][]*gwv1.ReferenceGrant, len(b.grants))
		for _, g := range b.grants {
			if g != nil {
				b.byNamespace[g.Namespace] = append(b.byNamespace[g.Namespace], g)
			}
		}
	}
	for _, g := range b.byNamespace[svc.Namespace] {
		if grantsFrom(g, from, k) && grantsTo(g, svc) {
			return true
		}
	}
	return false
}

// grantsFrom reports whether g lets routes of kind k in namespace ns refer
// to its namespace.
func grantsFrom(g *gwv1.ReferenceGrant, ns string, k RouteKind) bool {
	for _, f := range g.Spec.From {
		if f.Group == gwv1.GroupName && f.Kind == gwv1.Kind(k.String()) && string(f.Namespace) == ns {
			return true
		}
	}
	return false
}

// grantsTo reports whether g lets references reach Service svc.
func grantsTo(g *gwv1.ReferenceGrant, svc types.NamespacedName) bool {
	for _, t := range g.Spec.To {
		if t.Group == "" && t.Kind == "Service" && (t.Name == nil || string(*t.Name) == svc.Name) {
			return true
		}
	}
	return false
}
