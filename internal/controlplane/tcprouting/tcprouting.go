// Package tcprouting attaches TCPRoutes to TCP listeners and UDPRoutes to
// UDP listeners and picks, per listener, the one route its connections
// (or sessions) go to. It is pure: the same input gives the same output.
//
// A TCP connection or a UDP datagram carries nothing that could choose
// between two routes, so a listener serves one: the oldest of those
// attached (the spec's rule for conflicts, which the conformance suite
// checks as "only the oldest route receives traffic"). Every route that
// attaches is still Accepted and counted in the listener's
// attachedRoutes, as that suite requires. The two kinds differ only in
// the listeners that carry them.
package tcprouting

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/routing"
)

// Input is everything Compile needs. Listeners, Parents, Services and
// NamespaceLabels mean what they mean in routing.Input.
type Input struct {
	ControllerName  gwv1.GatewayController
	Listeners       []routing.Listener
	Parents         map[routing.Parent]bool
	Routes          []*gwv1.TCPRoute // any order
	UDPRoutes       []*gwv1.UDPRoute // any order
	NamespaceLabels map[string]map[string]string
	Services        map[types.NamespacedName]routing.Service
	ReferenceGrants []*gwv1.ReferenceGrant
	// ProxyProtocol is the PROXY header a Service's connections start
	// with (its BackendTrafficPolicy's proxyProtocol); nil, or nil for
	// every Service, when none is sent. UDPRoutes send none.
	ProxyProtocol func(svc config.NamespacedName) *config.BackendProxyProtocol
}

// Output is each listener's route and the route statuses. TCP and UDP
// listeners have IDs of their own, so Routes and AttachedRoutes hold both.
type Output struct {
	Routes          map[int]*config.StreamRoute // listener ID -> the route it serves; absent when none attached
	AttachedRoutes  map[int]int32
	RouteParents    map[types.NamespacedName][]gwv1.RouteParentStatus // TCPRoutes
	UDPRouteParents map[types.NamespacedName][]gwv1.RouteParentStatus
}

// route is what Compile reads of a TCPRoute or a UDPRoute.
type route struct {
	kind        routing.RouteKind
	meta        *metav1.ObjectMeta
	parentRefs  []gwv1.ParentReference
	backendRefs [][]gwv1.BackendRef // by rule
}

func tcpRoutes(in []*gwv1.TCPRoute) []route {
	out := make([]route, 0, len(in))
	for _, r := range snapshot.SortedByAge(in) {
		if r == nil {
			continue
		}
		rr := route{kind: routing.KindTCPRoute, meta: &r.ObjectMeta, parentRefs: r.Spec.ParentRefs}
		for _, rule := range r.Spec.Rules {
			rr.backendRefs = append(rr.backendRefs, rule.BackendRefs)
		}
		out = append(out, rr)
	}
	return out
}

func udpRoutes(in []*gwv1.UDPRoute) []route {
	out := make([]route, 0, len(in))
	for _, r := range snapshot.SortedByAge(in) {
		if r == nil {
			continue
		}
		rr := route{kind: routing.KindUDPRoute, meta: &r.ObjectMeta, parentRefs: r.Spec.ParentRefs}
		for _, rule := range r.Spec.Rules {
			rr.backendRefs = append(rr.backendRefs, rule.BackendRefs)
		}
		out = append(out, rr)
	}
	return out
}

// Compile attaches every route and picks each listener's.
func Compile(in Input) Output {
	out := Output{Routes: map[int]*config.StreamRoute{}, AttachedRoutes: map[int]int32{},
		RouteParents:    make(map[types.NamespacedName][]gwv1.RouteParentStatus, len(in.Routes)),
		UDPRouteParents: make(map[types.NamespacedName][]gwv1.RouteParentStatus, len(in.UDPRoutes))}
	c := compiler{in: &in, byParent: map[routing.Parent][]*routing.Listener{},
		admission: routing.NewAdmission(in.NamespaceLabels), backendRefs: routing.NewBackendRefs(in.Services, in.ReferenceGrants)}
	for i := range in.Listeners {
		l := &in.Listeners[i]
		c.byParent[l.Parent] = append(c.byParent[l.Parent], l)
	}
	// Oldest first: the first route a listener takes is the one it serves.
	c.compile(in, tcpRoutes(in.Routes), &out, out.RouteParents)
	c.compile(in, udpRoutes(in.UDPRoutes), &out, out.UDPRouteParents)
	return out
}

// compile attaches routes, oldest first, recording their statuses in
// statuses.
func (c *compiler) compile(in Input, routes []route, out *Output, statuses map[types.NamespacedName][]gwv1.RouteParentStatus) {
	for i := range routes {
		route := &routes[i]
		compiled, refs := c.compileRoute(route)
		var parents []gwv1.RouteParentStatus
		for pi := range route.parentRefs {
			ref := &route.parentRefs[pi]
			p, ok := routing.ParentOf(*ref, route.meta.Namespace)
			if !ok {
				continue
			}
			accepted, known := in.Parents[p]
			if !known {
				continue
			}
			hits, problem := c.attach(route, ref, p, accepted)
			for _, id := range hits {
				out.AttachedRoutes[id]++
				if _, taken := out.Routes[id]; !taken {
					out.Routes[id] = compiled
				}
			}
			parents = append(parents, gwv1.RouteParentStatus{
				ParentRef:      *ref,
				ControllerName: in.ControllerName,
				Conditions:     routing.RouteConditions(route.meta.Generation, problem, refs),
			})
		}
		if parents != nil {
			statuses[types.NamespacedName{Namespace: route.meta.Namespace, Name: route.meta.Name}] = parents
		}
	}
}

type compiler struct {
	in          *Input
	byParent    map[routing.Parent][]*routing.Listener
	admission   routing.Admission
	backendRefs routing.BackendRefs
}

// problem is routing.Problem, by its short name.
type problem = routing.Problem

// attach returns the IDs of the listeners of parent p that ref selects and
// that take the route, or the reason there are none.
func (c *compiler) attach(route *route, ref *gwv1.ParentReference, p routing.Parent, accepted bool) ([]int, *problem) {
	selected := routing.SelectedBy(c.byParent[p], ref)
	carries := func(l *routing.Listener) bool { return routing.Carries(l, route.kind) }
	protocol := "TCP"
	if route.kind == routing.KindUDPRoute {
		protocol = "UDP"
	}
	if reason, msg := routing.SelectionProblem(p, selected, accepted, carries, route.kind.String(), protocol); reason != "" {
		return nil, &problem{Reason: reason, Msg: msg}
	}
	var hits []int
	for _, l := range selected {
		if c.admission.Allows(l, route.kind, route.meta.Namespace) {
			hits = append(hits, l.ID)
		}
	}
	if len(hits) == 0 {
		return nil, &problem{Reason: gwv1.RouteReasonNotAllowedByListeners,
			Msg: "no selected listener allows " + route.kind.String() + "s from namespace " + route.meta.Namespace}
	}
	return hits, nil
}

// compileRoute resolves the backends of the route's rule (the API allows
// exactly one). The problems are those of the references, for
// ResolvedRefs. A backend that does not resolve keeps its weight: the spec
// has that share of connections refused, not spread over the others.
func (c *compiler) compileRoute(route *route) (*config.StreamRoute, []problem) {
	r := &config.StreamRoute{Name: route.meta.Namespace + "/" + route.meta.Name}
	var refs []problem
	for _, rule := range route.backendRefs {
		for _, br := range rule {
			weight := int32(1)
			if br.Weight != nil {
				weight = *br.Weight
			}
			res := c.backendRefs.Resolve(route.kind, route.meta.Namespace, br.BackendObjectReference)
			// The port's BackendTLSPolicy is not used: the client's bytes
			// go to the backend as they are.
			b := config.StreamBackend{Key: res.Key, Weight: weight}
			if route.kind == routing.KindTCPRoute && c.in.ProxyProtocol != nil && res.Reason == "" {
				b.ProxyProtocol = c.in.ProxyProtocol(res.Key.Service)
			}
			if res.Reason != "" {
				refs = append(refs, problem{Reason: res.Reason, Msg: res.Message})
				b.Invalid = res.Message
			}
			if weight > 0 {
				r.Backends = append(r.Backends, b)
				r.TotalWeight += weight
			}
		}
	}
	return r, refs
}
