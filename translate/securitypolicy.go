package translate

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/routing"
)

// SecurityPolicy (Portico's own, GEP-713).
//
// A policy targets Gateways, ListenerSets, HTTPRoutes and GRPCRoutes (a
// rule of one by sectionName) in its own namespace. Among policies naming
// the same target the oldest wins it (then the first by namespace/name);
// the others are Conflicted on the ancestors of that target. A request's
// rule takes the whole of the most specific winner: the rule's, its
// route's, the ListenerSet's of the listener it came through, the
// Gateway's; sections are not merged, so a route's policy replaces its
// Gateway's. The policy is compiled once, with the Secrets it names, into
// a config.Security every rule it applies to shares.
//
// Unlike a traffic policy, a policy that cannot be enforced still applies
// to the targets it won: an invalid spec or a Secret that is missing, not
// permitted (another namespace without a ReferenceGrant) or unreadable
// makes them answer 500 (config.Security.Invalid), so that a mistake never
// opens what the policy guards. Its status says why: Accepted=False
// Invalid, or ResolvedRefs=False with RefNotPermitted or
// InvalidReference.

// securityPolicies is what translate makes of the SecurityPolicies.
type securityPolicies struct {
	winners  map[tpTarget]*spVerdict
	verdicts []*spVerdict // oldest first
}

type spVerdict struct {
	*ownVerdict[*securitypolicy.SecurityPolicy]
	compiled *config.Security
	refs     *securitypolicy.RefProblem
}

// securityPolicies decides which policy wins each target and compiles
// each policy.
func (t *translation) securityPolicies() {
	sp := &securityPolicies{winners: map[tpTarget]*spVerdict{}}
	t.security = sp
	if len(t.res.SecurityPolicies) == 0 {
		return
	}
	secrets := func(key types.NamespacedName) *corev1.Secret { return t.ix.secrets[key] }
	winners, verdicts := attachPolicies(t.res.SecurityPolicies, attachKind[*securitypolicy.SecurityPolicy]{
		validate: func(p *securitypolicy.SecurityPolicy) error { return p.Spec.Validate() },
		refs: func(p *securitypolicy.SecurityPolicy) []gwv1.LocalPolicyTargetReferenceWithSectionName {
			return p.Spec.TargetRefs
		},
		invalidWins: true,
	})
	byPolicy := make(map[*securitypolicy.SecurityPolicy]*spVerdict, len(verdicts))
	for _, ov := range verdicts {
		v := &spVerdict{ownVerdict: ov}
		p := v.p
		if v.invalid != "" {
			v.compiled = &config.Security{Policy: p.Namespace + "/" + p.Name, Invalid: "the SecurityPolicy is invalid"}
		} else {
			v.compiled, v.refs = securitypolicy.Compile(p, t.res.ReferenceGrants, secrets)
			if v.refs == nil {
				if prob := securitypolicy.ExtAuthRefProblem(p, t.res.ReferenceGrants, t.servicePorts); prob != nil {
					v.compiled, v.refs = &config.Security{Policy: v.compiled.Policy, Invalid: prob.Message}, prob
				}
			}
		}
		sp.verdicts = append(sp.verdicts, v)
		byPolicy[p] = v
	}
	for target, p := range winners {
		sp.winners[target] = byPolicy[p]
	}
}

// rules is routing.Input.Security; nil when no policy won a target.
func (sp *securityPolicies) rules() func(l *routing.Listener, kind routing.RouteKind, route types.NamespacedName, rule string) *config.Security {
	if sp == nil || len(sp.winners) == 0 {
		return nil
	}
	return func(l *routing.Listener, kind routing.RouteKind, route types.NamespacedName, rule string) *config.Security {
		routeKind := "HTTPRoute"
		if kind == routing.KindGRPCRoute {
			routeKind = "GRPCRoute"
		}
		// Most specific first; the first winner applies whole.
		if rule != "" {
			if v := sp.winners[tpTarget{routeKind, route.Namespace, route.Name, rule}]; v != nil {
				return v.compiled
			}
		}
		if v := sp.winners[tpTarget{routeKind, route.Namespace, route.Name, ""}]; v != nil {
			return v.compiled
		}
		if l.Parent.Kind == "ListenerSet" {
			if v := sp.winners[tpTarget{"ListenerSet", l.Parent.Namespace, l.Parent.Name, ""}]; v != nil {
				return v.compiled
			}
		}
		if v := sp.winners[tpTarget{"Gateway", l.Gateway.Namespace, l.Gateway.Name, ""}]; v != nil {
			return v.compiled
		}
		return nil
	}
}

// securityPolicyStatuses writes every SecurityPolicy's ancestors, once
// routes have their statuses.
func (t *translation) securityPolicyStatuses() {
	sp := t.security
	out := make(map[types.NamespacedName][]gwv1.PolicyAncestorStatus, len(sp.verdicts))
	t.st.SecurityPolicies = out
	if len(sp.verdicts) == 0 {
		return
	}
	pa := t.policyAncestry()
	for _, v := range sp.verdicts {
		entries := ancestorEntries{}
		for _, target := range v.targets {
			pa.addTarget(entries, target, securitypolicy.Kind, v.conflict(target, securitypolicy.Kind, target.String()))
		}
		// A policy that cannot be enforced still holds its targets, which
		// fail closed: its status says so.
		st := ancestorStatus{generation: v.p.Generation, resolved: "Every target and Secret is found"}
		if v.invalid != "" {
			st.invalid = v.invalid + "; the policy's targets answer 500"
		}
		if v.refs != nil {
			st.refReason, st.refMessage = gwv1.PolicyConditionReason(v.refs.Reason), v.refs.Message+"; the policy's targets answer 500"
		}
		out[nn(v.p.Namespace, v.p.Name)] = ownAncestors(entries, st, t.controller)
	}
}

// servicePorts is securitypolicy.ServicePorts of the snapshot's Services.
func (t *translation) servicePorts(key types.NamespacedName) ([]int32, bool) {
	for _, s := range t.res.Services {
		if s.Namespace == key.Namespace && s.Name == key.Name {
			ports := make([]int32, 0, len(s.Spec.Ports))
			for _, p := range s.Spec.Ports {
				ports = append(ports, p.Port)
			}
			return ports, true
		}
	}
	return nil, false
}
