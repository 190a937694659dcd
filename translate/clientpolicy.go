package translate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/listeners"
	"portico.dev/portico/routing"
)

// ClientTrafficPolicy (Portico's own, GEP-713).
//
// A policy targets Gateways and ListenerSets, whole or one listener of
// them by sectionName, in its own namespace, and HTTPRoutes (or one rule
// of one) for a rate limit. Among policies naming the
// same target the oldest wins it (then the first by namespace/name); the
// others are Conflicted on that target's Gateway, and still apply to the
// targets they won. A listener takes each section (clientIPDetection,
// proxyProtocol) from the most specific winner that sets it: its own
// (sectionName), its ListenerSet's, its Gateway's. Invalid policies apply
// nowhere. The result is plain fields of the Config (Listener.Client,
// Port.ProxyProtocol, Rule.RateLimit: a rule takes the rate limit of its
// rule, route, listener, ListenerSet or Gateway, the most specific): the
// data plane never sees a policy. The PROXY
// protocol is read before anything tells listeners apart, so a port takes
// that of its first listener that has one.
//
// Status goes to the Gateway of each target (a ListenerSet's parent), or
// to the target itself when it does not exist (Accepted=False,
// TargetNotFound).

// clientPolicies is what translate makes of the ClientTrafficPolicies.
type clientPolicies struct {
	winners  map[tpTarget]*clientpolicy.ClientTrafficPolicy
	verdicts []*cpVerdict // oldest first
	// limits: a winner sets a rate limit or a request timeout.
	limits bool
}

type cpVerdict struct {
	p       *clientpolicy.ClientTrafficPolicy
	invalid string
	targets []tpTarget
	// lost are the targets an older policy won, with that policy.
	lost map[tpTarget]types.NamespacedName
}

// clientPolicies decides which policy wins each target.
func (t *translation) clientPolicies() {
	cp := &clientPolicies{winners: map[tpTarget]*clientpolicy.ClientTrafficPolicy{}}
	t.client = cp
	for _, p := range snapshot.SortedByAge(t.res.ClientPolicies) {
		v := &cpVerdict{p: p}
		cp.verdicts = append(cp.verdicts, v)
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
			if older, taken := cp.winners[target]; taken {
				if v.lost == nil {
					v.lost = map[tpTarget]types.NamespacedName{}
				}
				v.lost[target] = nn(older.Namespace, older.Name)
				continue
			}
			cp.winners[target] = p
			cp.limits = cp.limits || p.Spec.RateLimit != nil || p.Spec.HTTP.Timeout() > 0
		}
	}
}

// listener is what the policies give the merged listener m; nil when
// none applies.
func (cp *clientPolicies) listener(m *listeners.Listener) *config.ClientTraffic {
	if cp == nil || len(cp.winners) == 0 {
		return nil
	}
	// Most specific first.
	candidates := make([]tpTarget, 0, 3)
	src := m.Source
	candidates = append(candidates, tpTarget{src.Kind, src.Namespace, src.Name, string(m.Name)})
	if src.Kind == "ListenerSet" {
		candidates = append(candidates, tpTarget{src.Kind, src.Namespace, src.Name, ""})
	}
	candidates = append(candidates, tpTarget{"Gateway", m.Gateway.Namespace, m.Gateway.Name, ""})
	var out config.ClientTraffic
	httpSet := false
	for _, c := range candidates {
		p := cp.winners[c]
		if p == nil {
			continue
		}
		name := p.Namespace + "/" + p.Name
		if out.Address == nil && p.Spec.ClientIPDetection != nil {
			out.Address = p.Spec.ClientIPDetection.Config(name)
		}
		if out.ProxyProtocol == nil && p.Spec.ProxyProtocol != nil {
			out.ProxyProtocol = p.Spec.ProxyProtocol.Config(name)
		}
		if out.TLS == nil && p.Spec.TLS != nil {
			out.TLS = p.Spec.TLS.Config()
		}
		if h := p.Spec.HTTP; h != nil && !httpSet {
			httpSet = true
			if h.MaxHeaderBytes != nil {
				out.MaxHeaderBytes = int(*h.MaxHeaderBytes)
			}
			if h.MaxHeaderCount != nil {
				out.MaxHeaderCount = int(*h.MaxHeaderCount)
			}
			if h2 := h.HTTP2; h2 != nil {
				if h2.MaxConcurrentStreams != nil {
					out.MaxConcurrentStreams = uint32(*h2.MaxConcurrentStreams)
				}
				if h2.IdleTimeout != nil {
					out.IdleTimeout, _ = time.ParseDuration(string(*h2.IdleTimeout))
				}
			}
		}
	}
	if out == (config.ClientTraffic{}) {
		return nil
	}
	return &out
}

// rules is what routing asks of a rule's rate limit and request timeout;
// nil when no policy that won a target sets one.
func (cp *clientPolicies) rules() func(l *routing.Listener, kind routing.RouteKind, route types.NamespacedName, rule string) config.RuleTraffic {
	if cp == nil || !cp.limits {
		return nil
	}
	return func(l *routing.Listener, kind routing.RouteKind, route types.NamespacedName, rule string) config.RuleTraffic {
		// Most specific first; each limits what it names as one: a
		// route's buckets are shared by its rules and listeners, a
		// Gateway's or ListenerSet's are per listener.
		listener := l.Parent.Kind + "/" + l.Parent.Namespace + "/" + l.Parent.Name + "/" + string(l.Name)
		candidates := make([]struct {
			t     tpTarget
			scope string
		}, 0, 5)
		add := func(t tpTarget, scope string) {
			candidates = append(candidates, struct {
				t     tpTarget
				scope string
			}{t, scope})
		}
		if kind == routing.KindHTTPRoute {
			if rule != "" {
				t := tpTarget{"HTTPRoute", route.Namespace, route.Name, rule}
				add(t, t.String())
			}
			t := tpTarget{"HTTPRoute", route.Namespace, route.Name, ""}
			add(t, t.String())
		}
		add(tpTarget{l.Parent.Kind, l.Parent.Namespace, l.Parent.Name, string(l.Name)}, listener)
		if l.Parent.Kind == "ListenerSet" {
			add(tpTarget{"ListenerSet", l.Parent.Namespace, l.Parent.Name, ""}, listener)
		}
		add(tpTarget{"Gateway", l.Gateway.Namespace, l.Gateway.Name, ""}, listener)
		var out config.RuleTraffic
		for _, c := range candidates {
			p := cp.winners[c.t]
			if p == nil {
				continue
			}
			if out.RateLimit == nil && p.Spec.RateLimit != nil {
				name := p.Namespace + "/" + p.Name
				out.RateLimit = p.Spec.RateLimit.Config(name+" "+c.scope, name)
			}
			if out.RequestTimeout == 0 {
				out.RequestTimeout = p.Spec.HTTP.Timeout()
			}
		}
		return out
	}
}

// withClientRules is routing's Traffic: what BackendTrafficPolicies
// give a rule (traffic), with the rate limit and request timeout of
// ClientTrafficPolicies (client).
func withClientRules(traffic, client func(*routing.Listener, routing.RouteKind, types.NamespacedName, string) config.RuleTraffic,
) func(*routing.Listener, routing.RouteKind, types.NamespacedName, string) config.RuleTraffic {
	if client == nil {
		return traffic
	}
	return func(l *routing.Listener, kind routing.RouteKind, route types.NamespacedName, rule string) config.RuleTraffic {
		var out config.RuleTraffic
		if traffic != nil {
			out = traffic(l, kind, route, rule)
		}
		c := client(l, kind, route, rule)
		out.RateLimit, out.RequestTimeout = c.RateLimit, c.RequestTimeout
		return out
	}
}

// clientPolicyStatuses writes every ClientTrafficPolicy's ancestors.
func (t *translation) clientPolicyStatuses() {
	cp := t.client
	out := map[types.NamespacedName][]gwv1.PolicyAncestorStatus{}
	t.st.ClientPolicies = out
	if cp == nil || len(cp.verdicts) == 0 {
		return
	}
	res := t.res
	gwListeners := map[types.NamespacedName][]gwv1.SectionName{}
	for _, g := range res.Gateways {
		for _, l := range g.Spec.Listeners {
			gwListeners[nn(g.Namespace, g.Name)] = append(gwListeners[nn(g.Namespace, g.Name)], l.Name)
		}
	}
	lsets := map[types.NamespacedName]lsInfo{}
	lsParent := map[types.NamespacedName]types.NamespacedName{}
	for _, ls := range res.ListenerSets {
		if parent, ok := ListenerSetParent(ls); ok {
			info := lsInfo{parent: parent}
			for _, l := range ls.Spec.Listeners {
				info.listeners = append(info.listeners, l.Name)
			}
			lsets[nn(ls.Namespace, ls.Name)] = info
			lsParent[nn(ls.Namespace, ls.Name)] = parent
		}
	}
	for _, v := range cp.verdicts {
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
			var gw types.NamespacedName
			var more []types.NamespacedName
			var names []gwv1.SectionName
			missing := ""
			key := nn(target.namespace, target.name)
			switch target.kind {
			case "Gateway":
				if _, ours := t.st.Gateways[key]; ours {
					gw, names = key, gwListeners[key]
				} else {
					missing = "is not a Gateway of a GatewayClass of Portico's"
				}
			case "ListenerSet":
				info, ok := lsets[key]
				if _, ours := t.st.ListenerSets[key]; ok && ours {
					gw, names = info.parent, info.listeners
				} else {
					missing = "is not a ListenerSet of a Gateway of Portico's"
				}
			case "HTTPRoute":
				var found bool
				var gws []types.NamespacedName
				found, gws, names = t.cpRoute(key, lsParent)
				switch {
				case !found:
					missing = "does not exist"
				case len(gws) == 0:
					missing = "is not accepted by a Gateway of Portico's"
				default:
					// Every Gateway accepting it is an ancestor.
					gw, more = gws[0], gws[1:]
				}
			default:
				missing = "is not a kind a ClientTrafficPolicy targets"
			}
			what := target
			if missing == "" && target.section != "" && !slices.Contains(names, gwv1.SectionName(target.section)) {
				what.section = ""
				missing = "has no listener named " + target.section
				if target.kind == "HTTPRoute" {
					missing = "has no rule named " + target.section
				}
			}
			if missing != "" {
				e := entry(targetRef(target))
				e.notFound = append(e.notFound, cpTargetString(what)+" "+missing)
				continue
			}
			for _, g := range append([]types.NamespacedName{gw}, more...) {
				e := entry(gatewayRef(g))
				if older, lost := v.lost[target]; lost {
					e.conflicts = append(e.conflicts, fmt.Sprintf("%s is already the target of the older ClientTrafficPolicy %s", cpTargetString(target), older))
				}
			}
		}
		out[nn(v.p.Namespace, v.p.Name)] = cpAncestors(v, entries, t.controller)
	}
}

// cpTargetString names a target, its listener (or a route's rule) by
// sectionName.
func cpTargetString(t tpTarget) string {
	s := t.kind + " " + t.namespace + "/" + t.name
	switch {
	case t.section != "" && t.kind == "HTTPRoute":
		s += " rule " + t.section
	case t.section != "":
		s += " listener " + t.section
	}
	return s
}

// cpRoute tells whether HTTPRoute r exists, the Gateways of Portico's
// that accepted it (a ListenerSet's parent for one), and its rules' names.
func (t *translation) cpRoute(r types.NamespacedName, lsParent map[types.NamespacedName]types.NamespacedName) (bool, []types.NamespacedName, []gwv1.SectionName) {
	var route *gwv1.HTTPRoute
	for _, x := range t.res.HTTPRoutes {
		if x.Namespace == r.Namespace && x.Name == r.Name {
			route = x
			break
		}
	}
	if route == nil {
		return false, nil, nil
	}
	var names []gwv1.SectionName
	for i := range route.Spec.Rules {
		if n := route.Spec.Rules[i].Name; n != nil {
			names = append(names, *n)
		}
	}
	var gws []types.NamespacedName
	for _, ps := range t.st.HTTPRoutes[r] {
		if ps.ControllerName != t.controller || !meta.IsStatusConditionTrue(ps.Conditions, string(gwv1.RouteConditionAccepted)) {
			continue
		}
		parent := nn(string(ptr.Deref(ps.ParentRef.Namespace, gwv1.Namespace(r.Namespace))), string(ps.ParentRef.Name))
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
	slices.SortFunc(gws, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return true, gws, names
}

// cpAncestors turns a policy's entries into its status, Gateways first,
// at most status.MaxPolicyAncestors of them.
func cpAncestors(v *cpVerdict, entries map[string]*tpEntry, controller gwv1.GatewayController) []gwv1.PolicyAncestorStatus {
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

// lsInfo is what statuses need of a ListenerSet.
type lsInfo struct {
	parent    types.NamespacedName
	listeners []gwv1.SectionName
}
