package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
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
	verdicts []*tpVerdict // oldest first
}

type tpVerdict struct {
	p       *trafficpolicy.BackendTrafficPolicy
	invalid string
	targets []tpTarget
	// lost are the targets an older policy won, with that policy.
	lost map[tpTarget]types.NamespacedName
}

// trafficPolicies decides which policy wins each target.
func (t *translation) trafficPolicies() {
	tp := &trafficPolicies{winners: map[tpTarget]*trafficpolicy.BackendTrafficPolicy{}}
	t.traffic = tp
	for _, p := range snapshot.SortedByAge(t.res.TrafficPolicies) {
		v := &tpVerdict{p: p}
		tp.verdicts = append(tp.verdicts, v)
		if err := p.Spec.Validate(); err != nil {
			v.invalid = err.Error()
		}
		for _, ref := range p.Spec.TargetRefs {
			target := tpTarget{string(ref.Kind), p.Namespace, string(ref.Name), string(ptr.Deref(ref.SectionName, ""))}
			if slices.Contains(v.targets, target) {
				continue
			}
			v.targets = append(v.targets, target)
			if v.invalid != "" {
				continue
			}
			if older, taken := tp.winners[target]; taken {
				if v.lost == nil {
					v.lost = map[tpTarget]types.NamespacedName{}
				}
				v.lost[target] = nn(older.Namespace, older.Name)
				continue
			}
			tp.winners[target] = p
		}
	}
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
	lsParent := map[types.NamespacedName]types.NamespacedName{}
	for _, ls := range res.ListenerSets {
		if parent, ok := ListenerSetParent(ls); ok {
			lsParent[nn(ls.Namespace, ls.Name)] = parent
		}
	}
	httpRoutes := make(map[types.NamespacedName]*gwv1.HTTPRoute, len(res.HTTPRoutes))
	for _, r := range res.HTTPRoutes {
		httpRoutes[nn(r.Namespace, r.Name)] = r
	}
	grpcRoutes := make(map[types.NamespacedName]*gwv1.GRPCRoute, len(res.GRPCRoutes))
	for _, r := range res.GRPCRoutes {
		grpcRoutes[nn(r.Namespace, r.Name)] = r
	}
	services := make(map[types.NamespacedName]bool, len(res.Services))
	for _, s := range res.Services {
		services[nn(s.Namespace, s.Name)] = true
	}
	// The Gateways routing to each targeted Service, by Service (which
	// routedGateways takes for the "policy" wanting it).
	wanted := map[tlsTarget][]types.NamespacedName{}
	for _, v := range tp.verdicts {
		for _, target := range v.targets {
			if svc := nn(target.namespace, target.name); target.kind == "Service" {
				wanted[tlsTarget{svc, ""}] = []types.NamespacedName{svc}
			}
		}
	}
	var routedTo map[types.NamespacedName]map[types.NamespacedName]bool
	if len(wanted) > 0 {
		routedTo = routedGateways(res, t.st, t.controller, wanted, nil)
	}
	// acceptedBy is the Gateways of ours that accepted a route.
	acceptedBy := func(parents []gwv1.RouteParentStatus, routeNS string) []types.NamespacedName {
		var gws []types.NamespacedName
		for _, ps := range parents {
			if ps.ControllerName != t.controller || !meta.IsStatusConditionTrue(ps.Conditions, string(gwv1.RouteConditionAccepted)) {
				continue
			}
			parent := nn(string(ptr.Deref(ps.ParentRef.Namespace, gwv1.Namespace(routeNS))), string(ps.ParentRef.Name))
			if ptr.Deref(ps.ParentRef.Kind, "Gateway") == "ListenerSet" {
				gw, ok := lsParent[parent]
				if !ok {
					continue
				}
				parent = gw
			}
			if !slices.Contains(gws, parent) {
				gws = append(gws, parent)
			}
		}
		return gws
	}
	hasRule := func(names []*gwv1.SectionName, section string) bool {
		for _, n := range names {
			if n != nil && string(*n) == section {
				return true
			}
		}
		return false
	}

	for _, v := range tp.verdicts {
		key := nn(v.p.Namespace, v.p.Name)
		entries := map[string]*tpEntry{}
		entry := func(ref gwv1.ParentReference) *tpEntry {
			k := ancestorKey(ref)
			e := entries[k]
			if e == nil {
				e = &tpEntry{ref: ref}
				entries[k] = e
			}
			return e
		}
		for _, target := range v.targets {
			var gws []types.NamespacedName
			missing := ""
			switch target.kind {
			case "Gateway":
				g := nn(target.namespace, target.name)
				if _, ours := t.st.Gateways[g]; ours {
					gws = []types.NamespacedName{g}
				} else {
					missing = "is not a Gateway of a GatewayClass of Portico's"
				}
			case "ListenerSet":
				ls := nn(target.namespace, target.name)
				_, ours := t.st.ListenerSets[ls]
				if parent, ok := lsParent[ls]; ok && ours {
					gws = []types.NamespacedName{parent}
				} else {
					missing = "is not a ListenerSet of a Gateway of Portico's"
				}
			case "HTTPRoute", "GRPCRoute":
				r := nn(target.namespace, target.name)
				var parents []gwv1.RouteParentStatus
				var ruleNames []*gwv1.SectionName
				found := false
				if target.kind == "HTTPRoute" {
					if route := httpRoutes[r]; route != nil {
						found, parents = true, t.st.HTTPRoutes[r]
						for i := range route.Spec.Rules {
							ruleNames = append(ruleNames, route.Spec.Rules[i].Name)
						}
					}
				} else if route := grpcRoutes[r]; route != nil {
					found, parents = true, t.st.GRPCRoutes[r]
					for i := range route.Spec.Rules {
						ruleNames = append(ruleNames, route.Spec.Rules[i].Name)
					}
				}
				gws = acceptedBy(parents, target.namespace)
				switch {
				case !found:
					missing = "does not exist"
				case target.section != "" && !hasRule(ruleNames, target.section):
					missing = "has no rule named " + target.section
				case len(gws) == 0:
					missing = "is not accepted by a Gateway of Portico's"
				}
			case "Service":
				svc := nn(target.namespace, target.name)
				if !services[svc] {
					missing = "does not exist"
					break
				}
				for gw := range routedTo[svc] {
					if _, ours := t.st.Gateways[gw]; ours {
						gws = append(gws, gw)
					}
				}
				slices.SortFunc(gws, func(a, b types.NamespacedName) int { return cmp.Compare(a.String(), b.String()) })
				if len(gws) == 0 {
					// Nothing routes to it yet: the Service is the
					// ancestor, so the policy still says it is accepted.
					entry(targetRef(target))
				}
			default:
				missing = "is not a kind a BackendTrafficPolicy targets"
			}
			if missing != "" {
				e := entry(targetRef(target))
				what := target
				if strings.HasPrefix(missing, "has no rule") {
					what.section = ""
				}
				e.notFound = append(e.notFound, what.String()+" "+missing)
				continue
			}
			older, lost := v.lost[target]
			for _, gw := range gws {
				e := entry(gatewayRef(gw))
				if lost {
					e.conflicts = append(e.conflicts, fmt.Sprintf("%s is already the target of the older BackendTrafficPolicy %s", target, older))
				}
			}
		}
		out[key] = tpAncestors(v, entries, t.controller)
	}
}

// tpAncestors turns a policy's entries into its status, Gateways first,
// at most status.MaxPolicyAncestors of them.
func tpAncestors(v *tpVerdict, entries map[string]*tpEntry, controller gwv1.GatewayController) []gwv1.PolicyAncestorStatus {
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > status.MaxPolicyAncestors {
		keys = keys[:status.MaxPolicyAncestors]
	}
	gen := v.p.Generation
	out := make([]gwv1.PolicyAncestorStatus, 0, len(keys))
	for _, k := range keys {
		e := entries[k]
		accepted := policyCondition(gwv1.PolicyConditionAccepted, true, gwv1.PolicyReasonAccepted, "Policy is accepted", gen)
		resolved := policyCondition(tpResolvedRefs, true, tpReasonResolved, "Every target is found", gen)
		if len(e.notFound) > 0 {
			msg := strings.Join(e.notFound, "; ")
			resolved = policyCondition(tpResolvedRefs, false, gwv1.PolicyReasonTargetNotFound, msg, gen)
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonTargetNotFound, msg, gen)
		}
		switch {
		case v.invalid != "":
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonInvalid, v.invalid, gen)
		case len(e.notFound) > 0:
		case len(e.conflicts) > 0:
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonConflicted, strings.Join(e.conflicts, "; "), gen)
		}
		out = append(out, gwv1.PolicyAncestorStatus{AncestorRef: e.ref, ControllerName: controller, Conditions: []metav1.Condition{accepted, resolved}})
	}
	return out
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
