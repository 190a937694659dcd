package translate

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
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
	p        *securitypolicy.SecurityPolicy
	invalid  string
	targets  []tpTarget
	lost     map[tpTarget]types.NamespacedName
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
	for _, p := range snapshot.SortedByAge(t.res.SecurityPolicies) {
		v := &spVerdict{p: p}
		sp.verdicts = append(sp.verdicts, v)
		if err := p.Spec.Validate(); err != nil {
			v.invalid = err.Error()
			v.compiled = &config.Security{Policy: p.Namespace + "/" + p.Name, Invalid: "the SecurityPolicy is invalid"}
		} else {
			v.compiled, v.refs = securitypolicy.Compile(p, t.res.ReferenceGrants, secrets)
			if v.refs == nil {
				if prob := securitypolicy.ExtAuthRefProblem(p, t.res.ReferenceGrants, t.servicePorts); prob != nil {
					v.compiled, v.refs = &config.Security{Policy: v.compiled.Policy, Invalid: prob.Message}, prob
				}
			}
		}
		for _, ref := range p.Spec.TargetRefs {
			target := tpTarget{string(ref.Kind), p.Namespace, string(ref.Name), string(ptr.Deref(ref.SectionName, ""))}
			if slices.Contains(v.targets, target) {
				continue
			}
			v.targets = append(v.targets, target)
			if older, taken := sp.winners[target]; taken {
				if v.lost == nil {
					v.lost = map[tpTarget]types.NamespacedName{}
				}
				v.lost[target] = nn(older.p.Namespace, older.p.Name)
				continue
			}
			sp.winners[target] = v
		}
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
	res := t.res
	lsParent := map[types.NamespacedName]types.NamespacedName{}
	for _, ls := range res.ListenerSets {
		if parent, ok := ListenerSetParent(ls); ok {
			lsParent[nn(ls.Namespace, ls.Name)] = parent
		}
	}
	ruleNames := map[tpTarget][]string{} // route (kind, namespace, name) -> its rules' names
	for _, r := range res.HTTPRoutes {
		names := []string{}
		for i := range r.Spec.Rules {
			names = append(names, string(ptr.Deref(r.Spec.Rules[i].Name, "")))
		}
		ruleNames[tpTarget{"HTTPRoute", r.Namespace, r.Name, ""}] = names
	}
	for _, r := range res.GRPCRoutes {
		names := []string{}
		for i := range r.Spec.Rules {
			names = append(names, string(ptr.Deref(r.Spec.Rules[i].Name, "")))
		}
		ruleNames[tpTarget{"GRPCRoute", r.Namespace, r.Name, ""}] = names
	}
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
	for _, v := range sp.verdicts {
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
				names, found := ruleNames[tpTarget{target.kind, target.namespace, target.name, ""}]
				parents := t.st.HTTPRoutes[r]
				if target.kind == "GRPCRoute" {
					parents = t.st.GRPCRoutes[r]
				}
				gws = acceptedBy(parents, target.namespace)
				switch {
				case !found:
					missing = "does not exist"
				case target.section != "" && !slices.Contains(names, target.section):
					missing = "has no rule named " + target.section
				case len(gws) == 0:
					missing = "is not accepted by a Gateway of Portico's"
				}
			default:
				missing = "is not a kind a SecurityPolicy targets"
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
					e.conflicts = append(e.conflicts, fmt.Sprintf("%s is already the target of the older SecurityPolicy %s", target, older))
				}
			}
		}
		out[nn(v.p.Namespace, v.p.Name)] = spAncestors(v, entries, t.controller)
	}
}

// spAncestors turns a policy's entries into its status, Gateways first,
// at most status.MaxPolicyAncestors of them.
func spAncestors(v *spVerdict, entries map[string]*tpEntry, controller gwv1.GatewayController) []gwv1.PolicyAncestorStatus {
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
		resolved := policyCondition(tpResolvedRefs, true, tpReasonResolved, "Every target and Secret is found", gen)
		switch {
		case len(e.notFound) > 0:
			msg := strings.Join(e.notFound, "; ")
			resolved = policyCondition(tpResolvedRefs, false, gwv1.PolicyReasonTargetNotFound, msg, gen)
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonTargetNotFound, msg, gen)
		case v.refs != nil:
			resolved = policyCondition(tpResolvedRefs, false, gwv1.PolicyConditionReason(v.refs.Reason),
				v.refs.Message+"; the policy's targets answer 500", gen)
		}
		switch {
		case v.invalid != "":
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonInvalid,
				v.invalid+"; the policy's targets answer 500", gen)
		case len(e.notFound) > 0:
		case len(e.conflicts) > 0:
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonConflicted, strings.Join(e.conflicts, "; "), gen)
		}
		out = append(out, gwv1.PolicyAncestorStatus{AncestorRef: e.ref, ControllerName: controller, Conditions: []metav1.Condition{accepted, resolved}})
	}
	return out
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
