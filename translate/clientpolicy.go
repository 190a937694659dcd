package translate

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/clientpolicy"
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
	verdicts []*ownVerdict[*clientpolicy.ClientTrafficPolicy] // oldest first
	// limits: a winner sets a rate limit or a request timeout.
	limits bool
}

// clientPolicies decides which policy wins each target.
func (t *translation) clientPolicies() {
	cp := &clientPolicies{}
	t.client = cp
	cp.winners, cp.verdicts = attachPolicies(t.res.ClientPolicies, attachKind[*clientpolicy.ClientTrafficPolicy]{
		validate: func(p *clientpolicy.ClientTrafficPolicy) error { return p.Spec.Validate() },
		refs: func(p *clientpolicy.ClientTrafficPolicy) []gwv1.LocalPolicyTargetReferenceWithSectionName {
			return p.Spec.TargetRefs
		},
		won: func(p *clientpolicy.ClientTrafficPolicy) {
			cp.limits = cp.limits || p.Spec.RateLimit != nil || p.Spec.HTTP.Timeout() > 0
		},
	})
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
			if h1 := h.HTTP1; h1 != nil {
				if h1.IdleTimeout != nil {
					out.H1IdleTimeout, _ = time.ParseDuration(string(*h1.IdleTimeout))
				}
				if h1.HeaderTimeout != nil {
					out.HeaderTimeout, _ = time.ParseDuration(string(*h1.HeaderTimeout))
				}
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
	pa := t.policyAncestry()
	// The listeners' names, of each Gateway and ListenerSet.
	listenerNames := map[tpTarget][]gwv1.SectionName{}
	for _, g := range res.Gateways {
		for _, l := range g.Spec.Listeners {
			key := tpTarget{"Gateway", g.Namespace, g.Name, ""}
			listenerNames[key] = append(listenerNames[key], l.Name)
		}
	}
	for _, ls := range res.ListenerSets {
		for _, l := range ls.Spec.Listeners {
			key := tpTarget{"ListenerSet", ls.Namespace, ls.Name, ""}
			listenerNames[key] = append(listenerNames[key], l.Name)
		}
	}
	for _, v := range cp.verdicts {
		entries := ancestorEntries{}
		for _, target := range v.targets {
			// Every Gateway the target is served under is an ancestor.
			var gws []types.NamespacedName
			var names []gwv1.SectionName
			missing := ""
			switch target.kind {
			case "Gateway", "ListenerSet":
				var gw types.NamespacedName
				if gw, missing = pa.gateway(target); missing == "" {
					gws, names = []types.NamespacedName{gw}, listenerNames[tpTarget{target.kind, target.namespace, target.name, ""}]
				}
			case "HTTPRoute":
				var found bool
				found, gws, names = pa.route(target)
				switch {
				case !found:
					missing = "does not exist"
				case len(gws) == 0:
					missing = "is not accepted by a Gateway of Portico's"
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
				entries.notFound(target, cpTargetString(what)+" "+missing)
				continue
			}
			entries.gateways(gws, v.conflict(target, clientpolicy.Kind, cpTargetString(target)))
		}
		out[nn(v.p.Namespace, v.p.Name)] = ownAncestors(entries, validStatus(v), t.controller)
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
