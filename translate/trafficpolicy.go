package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/routing"
)

// BackendTrafficPolicy (Portico's own, GEP-713).
//
// A policy targets Gateways, ListenerSets, HTTPRoutes and GRPCRoutes (a
// rule of one by sectionName) and Services, in its own namespace. Among
// policies naming the same target the oldest wins it (then the first by
// namespace/name); the others are Conflicted on the ancestors of that
// target, and still apply to the targets they won. A request's rule takes
// each section (loadBalancer) from the most specific winner that sets it:
// the rule's, its route's, the ListenerSet's of the listener it came
// through, the Gateway's: that picks among the rule's backends and their
// endpoints. A Service's policy is the most specific for what is the
// Service's own: it picks among the Service's endpoints whatever the
// rule's says. Invalid policies apply
// nowhere. The result is plain fields of the Config (Rule.LB, Backend.LB):
// the data plane never sees a policy.
//
// Status goes to each ancestor (GEP-713): the Gateway a target is served
// under (a ListenerSet's parent; every Gateway a route is accepted by, or
// that routes to a Service); the target itself when there is none, or
// when it does not exist (Accepted=False, TargetNotFound).

// tpTarget is what one targetRef names.
type tpTarget struct {
	kind, namespace, name, section string
}

func (t tpTarget) String() string {
	s := t.kind + " " + t.namespace + "/" + t.name
	if t.section != "" {
		s += " rule " + t.section
	}
	return s
}

// trafficPolicies is what translate makes of the BackendTrafficPolicies.
type trafficPolicies struct {
	winners  map[tpTarget]*trafficpolicy.BackendTrafficPolicy
	verdicts []*ownVerdict[*trafficpolicy.BackendTrafficPolicy] // oldest first
}

// trafficPolicies decides which policy wins each target.
func (t *translation) trafficPolicies() {
	tp := &trafficPolicies{}
	t.traffic = tp
	tp.winners, tp.verdicts = attachPolicies(t.res.TrafficPolicies, attachKind[*trafficpolicy.BackendTrafficPolicy]{
		validate: func(p *trafficpolicy.BackendTrafficPolicy) error { return p.Spec.Validate() },
		refs: func(p *trafficpolicy.BackendTrafficPolicy) []gwv1.LocalPolicyTargetReferenceWithSectionName {
			return p.Spec.TargetRefs
		},
	})
}

// traffic is routing.Input.Traffic; nil when no policy won a target.
func (tp *trafficPolicies) traffic() func(l *routing.Listener, kind routing.RouteKind, route types.NamespacedName, rule string) config.RuleTraffic {
	if tp == nil || len(tp.winners) == 0 {
		return nil
	}
	return func(l *routing.Listener, kind routing.RouteKind, route types.NamespacedName, rule string) config.RuleTraffic {
		routeKind := "HTTPRoute"
		if kind == routing.KindGRPCRoute {
			routeKind = "GRPCRoute"
		}
		// Most specific first.
		candidates := make([]tpTarget, 0, 4)
		if rule != "" {
			candidates = append(candidates, tpTarget{routeKind, route.Namespace, route.Name, rule})
		}
		candidates = append(candidates, tpTarget{routeKind, route.Namespace, route.Name, ""})
		if l.Parent.Kind == "ListenerSet" {
			candidates = append(candidates, tpTarget{"ListenerSet", l.Parent.Namespace, l.Parent.Name, ""})
		}
		candidates = append(candidates, tpTarget{"Gateway", l.Gateway.Namespace, l.Gateway.Name, ""})
		// Each section from the most specific policy that sets it.
		var out config.RuleTraffic
		var timeout, keepalive *trafficpolicy.BackendTrafficPolicy
		for _, c := range candidates {
			p := tp.winners[c]
			if p == nil {
				continue
			}
			if out.LB == nil && p.Spec.LoadBalancer != nil {
				out.LB = p.Spec.LoadBalancer.Config(p.Namespace + "/" + p.Name)
			}
			if hc := p.Spec.HealthCheck; hc != nil {
				if out.Outlier == nil {
					out.Outlier = hc.Config(p.Namespace + "/" + p.Name)
				}
				if out.Active == nil {
					out.Active = hc.ActiveConfig(p.Namespace + "/" + p.Name)
				}
			}
			if out.Breaker == nil && p.Spec.CircuitBreaker != nil {
				out.Breaker = p.Spec.CircuitBreaker.Config(p.Namespace + "/" + p.Name)
			}
			if timeout == nil && p.Spec.Timeout != nil {
				timeout = p
			}
			if keepalive == nil && p.Spec.TCPKeepalive != nil {
				keepalive = p
			}
		}
		out.Conn = trafficpolicy.ConnConfig(timeout, keepalive)
		return out
	}
}

// service is what the policy that won Service svc gives its backends; one
// value per Service, shared by every backend naming it.
func (tp *trafficPolicies) service(svc types.NamespacedName) config.RuleTraffic {
	if tp == nil || len(tp.winners) == 0 {
		return config.RuleTraffic{}
	}
	p := tp.winners[tpTarget{"Service", svc.Namespace, svc.Name, ""}]
	if p == nil {
		return config.RuleTraffic{}
	}
	var out config.RuleTraffic
	if p.Spec.LoadBalancer != nil {
		out.LB = p.Spec.LoadBalancer.Config(p.Namespace + "/" + p.Name)
	}
	if hc := p.Spec.HealthCheck; hc != nil {
		out.Outlier = hc.Config(p.Namespace + "/" + p.Name)
		out.Active = hc.ActiveConfig(p.Namespace + "/" + p.Name)
	}
	if p.Spec.CircuitBreaker != nil {
		out.Breaker = p.Spec.CircuitBreaker.Config(p.Namespace + "/" + p.Name)
	}
	out.Conn = trafficpolicy.ConnConfig(p, p)
	return out
}

// proxyProtocol is tcprouting's and tlsrouting's Input.ProxyProtocol: the
// header of the policy that won each Service, one value per Service; nil
// when no winner sets one.
func (tp *trafficPolicies) proxyProtocol() func(svc config.NamespacedName) *config.BackendProxyProtocol {
	if tp == nil {
		return nil
	}
	var byService map[config.NamespacedName]*config.BackendProxyProtocol
	for target, p := range tp.winners {
		if target.kind == "Service" && p.Spec.ProxyProtocol != nil {
			if byService == nil {
				byService = map[config.NamespacedName]*config.BackendProxyProtocol{}
			}
			byService[config.NamespacedName{Namespace: target.namespace, Name: target.name}] = p.Spec.ProxyProtocol.Config(p.Namespace + "/" + p.Name)
		}
	}
	if byService == nil {
		return nil
	}
	return func(svc config.NamespacedName) *config.BackendProxyProtocol { return byService[svc] }
}

// tpEntry is one ancestor's status being made.
type tpEntry struct {
	ref       gwv1.ParentReference
	conflicts []string
	notFound  []string
}

// trafficPolicyStatuses writes every BackendTrafficPolicy's ancestors,
// once routes have their statuses.
func (t *translation) trafficPolicyStatuses() {
	tp := t.traffic
	out := make(map[types.NamespacedName][]gwv1.PolicyAncestorStatus, len(tp.verdicts))
	t.st.TrafficPolicies = out
	if len(tp.verdicts) == 0 {
		return
	}
	res := t.res
	pa := t.policyAncestry()
	services, routedTo := serviceAncestry(t, tp.verdicts)
	for _, v := range tp.verdicts {
		key := nn(v.p.Namespace, v.p.Name)
		entries := ancestorEntries{}
		for _, target := range v.targets {
			if target.kind != "Service" {
				pa.addTarget(entries, target, trafficpolicy.Kind, v.conflict(target, trafficpolicy.Kind, target.String()))
				continue
			}
			// A Service's ancestors are the Gateways routing to it.
			svc := nn(target.namespace, target.name)
			if !services[svc] {
				entries.notFound(target, target.String()+" does not exist")
				continue
			}
			var gws []types.NamespacedName
			for gw := range routedTo[svc] {
				if _, ours := t.st.Gateways[gw]; ours {
					gws = append(gws, gw)
				}
			}
			slices.SortFunc(gws, func(a, b types.NamespacedName) int { return cmp.Compare(a.String(), b.String()) })
			if len(gws) == 0 {
				// Nothing routes to it yet: the Service is the
				// ancestor, so the policy still says it is accepted.
				entries.entry(targetRef(target))
			}
			entries.gateways(gws, v.conflict(target, trafficpolicy.Kind, target.String()))
		}
		st := validStatus(v)
		if v.p.Spec.ProxyProtocol != nil && v.invalid == "" {
			st.acceptedNote = proxyProtocolNote(res, v.targets)
		}
		out[key] = ownAncestors(entries, st, t.controller)
	}
}

// proxyProtocolNote says which routes of other kinds than TCPRoute and
// TLSRoute send to the Services of targets (a policy's with
// proxyProtocol), whose connections carry no PROXY header: "" when none
// does. At most three are named.
func proxyProtocolNote(res *snapshot.Resources, targets []tpTarget) string {
	svcs := map[types.NamespacedName]bool{}
	for _, target := range targets {
		svcs[nn(target.namespace, target.name)] = true
	}
	var routes []string
	add := func(kind, ns, name string, refs []gwv1.BackendObjectReference) {
		for _, ref := range refs {
			if ptr.Deref(ref.Group, "") == "" && ptr.Deref(ref.Kind, "Service") == "Service" &&
				svcs[nn(string(ptr.Deref(ref.Namespace, gwv1.Namespace(ns))), string(ref.Name))] {
				routes = append(routes, kind+" "+ns+"/"+name)
				return
			}
		}
	}
	for _, r := range res.HTTPRoutes {
		var refs []gwv1.BackendObjectReference
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
		}
		add("HTTPRoute", r.Namespace, r.Name, refs)
	}
	for _, r := range res.GRPCRoutes {
		var refs []gwv1.BackendObjectReference
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
		}
		add("GRPCRoute", r.Namespace, r.Name, refs)
	}
	for _, r := range res.UDPRoutes {
		var refs []gwv1.BackendObjectReference
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				refs = append(refs, b.BackendObjectReference)
			}
		}
		add("UDPRoute", r.Namespace, r.Name, refs)
	}
	if len(routes) == 0 {
		return ""
	}
	slices.Sort(routes)
	more := ""
	if len(routes) > 3 {
		more = fmt.Sprintf(" and %d more", len(routes)-3)
		routes = routes[:3]
	}
	return "proxyProtocol: the traffic of " + strings.Join(routes, ", ") + more +
		" to its Services carries no PROXY header (only TCPRoutes and TLSRoutes send one)"
}

// ResolvedRefs of a BackendTrafficPolicy's ancestor: whether its targets
// there exist.
const (
	tpResolvedRefs   gwv1.PolicyConditionType   = "ResolvedRefs"
	tpReasonResolved gwv1.PolicyConditionReason = "ResolvedRefs"
)

// ancestorKey orders ancestors: Gateways first, then the targets that
// stand for themselves, by kind, namespace and name.
func ancestorKey(ref gwv1.ParentReference) string {
	kind := string(ptr.Deref(ref.Kind, "Gateway"))
	first := "1"
	if kind == "Gateway" {
		first = "0"
	}
	return first + "/" + kind + "/" + string(ptr.Deref(ref.Namespace, "")) + "/" + string(ref.Name) + "/" + string(ptr.Deref(ref.SectionName, ""))
}

func gatewayRef(gw types.NamespacedName) gwv1.ParentReference {
	return gwv1.ParentReference{Group: ptr.To(gwv1.Group(gwv1.GroupName)), Kind: ptr.To(gwv1.Kind("Gateway")),
		Namespace: ptr.To(gwv1.Namespace(gw.Namespace)), Name: gwv1.ObjectName(gw.Name)}
}

func targetRef(t tpTarget) gwv1.ParentReference {
	group := gwv1.Group(gwv1.GroupName)
	if t.kind == "Service" {
		group = ""
	}
	ref := gwv1.ParentReference{Group: &group, Kind: ptr.To(gwv1.Kind(t.kind)),
		Namespace: ptr.To(gwv1.Namespace(t.namespace)), Name: gwv1.ObjectName(t.name)}
	if t.section != "" {
		ref.SectionName = ptr.To(gwv1.SectionName(t.section))
	}
	return ref
}
