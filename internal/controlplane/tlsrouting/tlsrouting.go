// Package tlsrouting attaches TLSRoutes to TLS listeners and compiles, per
// listener, the table that picks a route by the SNI of a connection's
// ClientHello. It is pure: the same input gives the same output.
package tlsrouting

import (
	"cmp"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/routing"
)

// Input is everything Compile needs. Listeners, Parents, Services and
// NamespaceLabels mean what they mean in routing.Input.
type Input struct {
	ControllerName  gwv1.GatewayController
	Listeners       []routing.Listener
	Parents         map[routing.Parent]bool
	Routes          []*gwv1.TLSRoute // any order
	NamespaceLabels map[string]map[string]string
	Services        map[types.NamespacedName]routing.Service
	ReferenceGrants []*gwv1.ReferenceGrant
	// ProxyProtocol is the PROXY header a Service's connections start
	// with (its BackendTrafficPolicy's proxyProtocol); nil, or nil for
	// every Service, when none is sent.
	ProxyProtocol func(svc config.NamespacedName) *config.BackendProxyProtocol
}

// Output is the compiled tables and the route statuses.
type Output struct {
	Tables         map[int]*config.StreamTable // listener ID -> its routes; absent when none attached
	AttachedRoutes map[int]int32
	RouteParents   map[types.NamespacedName][]gwv1.RouteParentStatus
}

// candidate is one hostname a route serves on a listener.
type candidate struct {
	host     string // the intersection, the table's key
	original string // the route's own hostname it came from
	order    int    // the route's position, oldest first
	route    *config.StreamRoute
}

// Compile attaches every route and builds each listener's table.
func Compile(in Input) Output {
	out := Output{Tables: map[int]*config.StreamTable{}, AttachedRoutes: map[int]int32{},
		RouteParents: make(map[types.NamespacedName][]gwv1.RouteParentStatus, len(in.Routes))}
	c := compiler{in: &in, byParent: map[routing.Parent][]*routing.Listener{},
		admission: routing.NewAdmission(in.NamespaceLabels), backendRefs: routing.NewBackendRefs(in.Services, in.ReferenceGrants)}
	for i := range in.Listeners {
		l := &in.Listeners[i]
		c.byParent[l.Parent] = append(c.byParent[l.Parent], l)
	}
	routes := slices.Clone(in.Routes)
	slices.SortFunc(routes, snapshot.CompareAge[*gwv1.TLSRoute])
	perListener := map[int][]candidate{}
	for order, route := range routes {
		if route == nil {
			continue
		}
		compiled, refs := c.compileRoute(route)
		var parents []gwv1.RouteParentStatus
		for pi := range route.Spec.ParentRefs {
			ref := &route.Spec.ParentRefs[pi]
			p, ok := routing.ParentOf(*ref, route.Namespace)
			if !ok {
				continue
			}
			accepted, known := in.Parents[p]
			if !known {
				continue
			}
			hits, problem := c.attach(route, ref, p, accepted)
			for _, h := range hits {
				out.AttachedRoutes[h.listener]++
				for _, hc := range h.hosts {
					perListener[h.listener] = append(perListener[h.listener], candidate{host: hc[0], original: hc[1], order: order, route: compiled})
				}
			}
			parents = append(parents, gwv1.RouteParentStatus{
				ParentRef:      *ref,
				ControllerName: in.ControllerName,
				Conditions:     routing.RouteConditions(route.Generation, problem, refs),
			})
		}
		if parents != nil {
			out.RouteParents[types.NamespacedName{Namespace: route.Namespace, Name: route.Name}] = parents
		}
	}
	for id, cands := range perListener {
		out.Tables[id] = buildTable(cands)
	}
	return out
}

// buildTable keeps, for each hostname, the candidate whose own hostname is
// the most specific (an exact name before a wildcard, longer before
// shorter), then the oldest route.
func buildTable(cands []candidate) *config.StreamTable {
	slices.SortStableFunc(cands, func(a, b candidate) int {
		if c := cmp.Compare(a.host, b.host); c != 0 {
			return c
		}
		if aw, bw := hostname.IsWildcard(a.original), hostname.IsWildcard(b.original); aw != bw {
			if aw {
				return 1
			}
			return -1
		}
		if c := cmp.Compare(len(b.original), len(a.original)); c != 0 {
			return c
		}
		return cmp.Compare(a.order, b.order)
	})
	patterns := make([]string, 0, len(cands))
	values := make([]*config.StreamRoute, 0, len(cands))
	for i, cd := range cands {
		if i > 0 && cands[i-1].host == cd.host {
			continue
		}
		patterns = append(patterns, cd.host)
		values = append(values, cd.route)
	}
	return config.NewStreamTable(patterns, values)
}

type compiler struct {
	in          *Input
	byParent    map[routing.Parent][]*routing.Listener
	admission   routing.Admission
	backendRefs routing.BackendRefs
}

// hit is a listener a route attached to and the hostnames it serves there,
// each as {intersection, the route's own hostname}.
type hit struct {
	listener int
	hosts    [][2]string
}

// problem is routing.Problem, by its short name.
type problem = routing.Problem

// attach finds the listeners of parent p that ref selects and that take the
// route, or the reason there are none.
func (c *compiler) attach(route *gwv1.TLSRoute, ref *gwv1.ParentReference, p routing.Parent, accepted bool) ([]hit, *problem) {
	selected := routing.SelectedBy(c.byParent[p], ref)
	if reason, msg := routing.SelectionProblem(p, selected, accepted, carriesTLSRoutes, "TLSRoute", "TLS"); reason != "" {
		return nil, &problem{Reason: reason, Msg: msg}
	}
	var hits []hit
	allowed := false
	for _, l := range selected {
		if !c.admission.Allows(l, routing.KindTLSRoute, route.Namespace) {
			continue
		}
		allowed = true
		if hosts := intersect(l.Hostname, route.Spec.Hostnames); len(hosts) > 0 {
			hits = append(hits, hit{listener: l.ID, hosts: hosts})
		}
	}
	switch {
	case len(hits) > 0:
		return hits, nil
	case !allowed:
		return nil, &problem{Reason: gwv1.RouteReasonNotAllowedByListeners, Msg: "no selected listener allows TLSRoutes from namespace " + route.Namespace}
	}
	return nil, &problem{Reason: gwv1.RouteReasonNoMatchingListenerHostname, Msg: "no selected listener has a hostname in common with the route"}
}

func carriesTLSRoutes(l *routing.Listener) bool { return routing.Carries(l, routing.KindTLSRoute) }

// intersect returns the hostnames a route serves on a listener, each with
// the route hostname it came from: a route hostname the listener's admits
// as it is, or the listener's own when that is the narrower one. A route
// without hostnames serves the listener's.
func intersect(listener string, route []gwv1.Hostname) [][2]string {
	listener = hostname.Normalize(listener)
	if listener == "*" {
		listener = ""
	}
	if len(route) == 0 {
		return [][2]string{{listener, listener}}
	}
	var out [][2]string
	for _, rh := range route {
		h := hostname.Normalize(string(rh))
		switch {
		case listener == "" || h == listener || hostname.Match(listener, h):
			out = append(out, [2]string{h, h})
		case hostname.Match(h, listener):
			out = append(out, [2]string{listener, h})
		}
	}
	return out
}

// compileRoute resolves the backends of the route's rule (the API allows
// exactly one). The problems are those of the references, for
// ResolvedRefs.
func (c *compiler) compileRoute(route *gwv1.TLSRoute) (*config.StreamRoute, []problem) {
	r := &config.StreamRoute{Name: route.Namespace + "/" + route.Name}
	var refs []problem
	for _, rule := range route.Spec.Rules {
		for _, br := range rule.BackendRefs {
			weight := int32(1)
			if br.Weight != nil {
				weight = *br.Weight
			}
			b, p := c.resolveBackend(route.Namespace, br.BackendObjectReference)
			b.Weight = weight
			if p != nil {
				refs = append(refs, *p)
				b.Invalid = p.Msg
			}
			if weight > 0 {
				r.Backends = append(r.Backends, b)
				r.TotalWeight += weight
			}
		}
	}
	return r, refs
}

// resolveBackend checks a backendRef (routing.BackendRefs.Resolve) and
// makes it the data plane's. A port's BackendTLSPolicy that cannot be
// used does not make the backend invalid: passthrough streams ignore it,
// and a terminated one refuses the connection when it dials.
func (c *compiler) resolveBackend(routeNS string, ref gwv1.BackendObjectReference) (config.StreamBackend, *problem) {
	r := c.backendRefs.Resolve(routing.KindTLSRoute, routeNS, ref)
	b := config.StreamBackend{Key: r.Key, TLS: r.TLS}
	if r.Reason != "" {
		return b, &problem{Reason: r.Reason, Msg: r.Message}
	}
	if c.in.ProxyProtocol != nil {
		b.ProxyProtocol = c.in.ProxyProtocol(r.Key.Service)
	}
	return b, nil
}
