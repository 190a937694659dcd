package translate

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
)

// GEP-713 attachment of Portico's own policy kinds (group portico.dev):
// which policy wins each target, and the ancestors each policy's status
// lists. What a winner does is each kind's own.

// attachable is a policy of one of Portico's own kinds.
type attachable interface {
	snapshot.Object
	GetGeneration() int64
}

// ownVerdict is what translate makes of one policy.
type ownVerdict[P attachable] struct {
	p       P
	invalid string
	targets []tpTarget
	// lost are the targets an older policy won, with that policy.
	lost map[tpTarget]types.NamespacedName
}

// attachKind is what attachPolicies needs to know of a kind.
type attachKind[P attachable] struct {
	validate func(P) error
	refs     func(P) []gwv1.LocalPolicyTargetReferenceWithSectionName
	// invalidWins: an invalid policy still wins its targets (that then
	// fail closed); otherwise it wins nothing.
	invalidWins bool
	// won, when set, is told of each policy as it wins a target.
	won func(P)
}

// attachPolicies decides which policy of kind k wins each target: among
// policies naming the same target the oldest (then the first by
// namespace/name). The verdicts are oldest first.
func attachPolicies[P attachable](policies []P, k attachKind[P]) (map[tpTarget]P, []*ownVerdict[P]) {
	winners := map[tpTarget]P{}
	var verdicts []*ownVerdict[P]
	for _, p := range snapshot.SortedByAge(policies) {
		v := &ownVerdict[P]{p: p}
		verdicts = append(verdicts, v)
		if err := k.validate(p); err != nil {
			v.invalid = err.Error()
		}
		for _, ref := range k.refs(p) {
			target := tpTarget{string(ref.Kind), p.GetNamespace(), string(ref.Name), string(ptr.Deref(ref.SectionName, ""))}
			if slices.Contains(v.targets, target) {
				continue
			}
			v.targets = append(v.targets, target)
			if v.invalid != "" && !k.invalidWins {
				continue
			}
			if older, taken := winners[target]; taken {
				if v.lost == nil {
					v.lost = map[tpTarget]types.NamespacedName{}
				}
				v.lost[target] = nn(older.GetNamespace(), older.GetName())
				continue
			}
			winners[target] = p
			if k.won != nil {
				k.won(p)
			}
		}
	}
	return winners, verdicts
}

// conflict is the Conflicted message of target, named name, when an
// older policy of kind won it; "" when v won it.
func (v *ownVerdict[P]) conflict(target tpTarget, kind, name string) string {
	older, lost := v.lost[target]
	if !lost {
		return ""
	}
	return fmt.Sprintf("%s is already the target of the older %s %s", name, kind, older)
}

// policyAncestry is what a snapshot says of the ancestors of policies'
// targets: the Gateways of Portico's they are served under.
type policyAncestry struct {
	t        *translation
	lsParent map[types.NamespacedName]types.NamespacedName
	// rules are the names of the named rules of each HTTPRoute and
	// GRPCRoute, by the route as a target without section.
	rules map[tpTarget][]gwv1.SectionName
}

func (t *translation) policyAncestry() *policyAncestry {
	a := &policyAncestry{t: t, lsParent: map[types.NamespacedName]types.NamespacedName{}, rules: map[tpTarget][]gwv1.SectionName{}}
	for _, ls := range t.res.ListenerSets {
		if parent, ok := ListenerSetParent(ls); ok {
			a.lsParent[nn(ls.Namespace, ls.Name)] = parent
		}
	}
	for _, r := range t.res.HTTPRoutes {
		names := []gwv1.SectionName{}
		for i := range r.Spec.Rules {
			if n := r.Spec.Rules[i].Name; n != nil {
				names = append(names, *n)
			}
		}
		a.rules[tpTarget{"HTTPRoute", r.Namespace, r.Name, ""}] = names
	}
	for _, r := range t.res.GRPCRoutes {
		names := []gwv1.SectionName{}
		for i := range r.Spec.Rules {
			if n := r.Spec.Rules[i].Name; n != nil {
				names = append(names, *n)
			}
		}
		a.rules[tpTarget{"GRPCRoute", r.Namespace, r.Name, ""}] = names
	}
	return a
}

// gateway is the Gateway a Gateway or ListenerSet target is served
// under, or why there is none.
func (a *policyAncestry) gateway(target tpTarget) (gw types.NamespacedName, missing string) {
	key := nn(target.namespace, target.name)
	if target.kind == "Gateway" {
		if _, ours := a.t.st.Gateways[key]; ours {
			return key, ""
		}
		return types.NamespacedName{}, "is not a Gateway of a GatewayClass of Portico's"
	}
	_, ours := a.t.st.ListenerSets[key]
	if parent, ok := a.lsParent[key]; ok && ours {
		return parent, ""
	}
	return types.NamespacedName{}, "is not a ListenerSet of a Gateway of Portico's"
}

// route tells whether an HTTPRoute or GRPCRoute target exists, the
// Gateways of Portico's that accepted it (a ListenerSet's parent for
// one), in name order, and the names of its named rules.
func (a *policyAncestry) route(target tpTarget) (found bool, gws []types.NamespacedName, rules []gwv1.SectionName) {
	rules, found = a.rules[tpTarget{target.kind, target.namespace, target.name, ""}]
	if !found {
		return false, nil, nil
	}
	r := nn(target.namespace, target.name)
	parents := a.t.st.HTTPRoutes[r]
	if target.kind == "GRPCRoute" {
		parents = a.t.st.GRPCRoutes[r]
	}
	for _, ps := range parents {
		if ps.ControllerName != a.t.controller || !meta.IsStatusConditionTrue(ps.Conditions, string(gwv1.RouteConditionAccepted)) {
			continue
		}
		parent := nn(string(ptr.Deref(ps.ParentRef.Namespace, gwv1.Namespace(r.Namespace))), string(ps.ParentRef.Name))
		if ptr.Deref(ps.ParentRef.Kind, "Gateway") == "ListenerSet" {
			gw, ok := a.lsParent[parent]
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
	return true, gws, rules
}

// addTarget makes the ancestors of target, of a policy of kind whose
// verdict on it is conflict: the Gateways a Gateway, ListenerSet,
// HTTPRoute or GRPCRoute (or a route's rule) is served under, or the
// target itself when it is not found there, or is of another kind.
func (a *policyAncestry) addTarget(es ancestorEntries, target tpTarget, kind, conflict string) {
	var gws []types.NamespacedName
	missing := ""
	switch target.kind {
	case "Gateway", "ListenerSet":
		var gw types.NamespacedName
		if gw, missing = a.gateway(target); missing == "" {
			gws = []types.NamespacedName{gw}
		}
	case "HTTPRoute", "GRPCRoute":
		var found bool
		var rules []gwv1.SectionName
		found, gws, rules = a.route(target)
		switch {
		case !found:
			missing = "does not exist"
		case target.section != "" && !slices.Contains(rules, gwv1.SectionName(target.section)):
			missing = "has no rule named " + target.section
		case len(gws) == 0:
			missing = "is not accepted by a Gateway of Portico's"
		}
	default:
		missing = "is not a kind a " + kind + " targets"
	}
	if missing != "" {
		what := target
		if strings.HasPrefix(missing, "has no rule") {
			what.section = ""
		}
		es.notFound(target, what.String()+" "+missing)
		return
	}
	es.gateways(gws, conflict)
}

// ancestorEntries are the statuses of one policy's ancestors being made,
// by ancestorKey.
type ancestorEntries map[string]*tpEntry

// entry is ref's, made when new.
func (es ancestorEntries) entry(ref gwv1.ParentReference) *tpEntry {
	k := ancestorKey(ref)
	e := es[k]
	if e == nil {
		e = &tpEntry{ref: ref}
		es[k] = e
	}
	return e
}

// notFound says on target itself, its ancestor, that msg.
func (es ancestorEntries) notFound(target tpTarget, msg string) {
	e := es.entry(targetRef(target))
	e.notFound = append(e.notFound, msg)
}

// gateways makes each of gws an ancestor, Conflicted by conflict when it
// is not "".
func (es ancestorEntries) gateways(gws []types.NamespacedName, conflict string) {
	for _, gw := range gws {
		e := es.entry(gatewayRef(gw))
		if conflict != "" {
			e.conflicts = append(e.conflicts, conflict)
		}
	}
}

// ancestorStatus is what a policy's status says on each of its
// ancestors besides whether its targets there are found.
type ancestorStatus struct {
	generation int64
	// resolved is the message of ResolvedRefs=True.
	resolved string
	// invalid, when set, is the message of Accepted=False Invalid.
	invalid string
	// acceptedNote, when set, is added to the message of Accepted=True:
	// what of an accepted policy does not apply somewhere.
	acceptedNote string
	// refReason and refMessage, when set, are ResolvedRefs=False where
	// the targets are found: a reference other than a target is not.
	refReason  gwv1.PolicyConditionReason
	refMessage string
}

// validStatus is the ancestorStatus of a policy whose only references are
// its targets.
func validStatus[P attachable](v *ownVerdict[P]) ancestorStatus {
	return ancestorStatus{generation: v.p.GetGeneration(), resolved: "Every target is found", invalid: v.invalid}
}

// ownAncestors turns a policy's entries into its status, Gateways first,
// at most status.MaxPolicyAncestors of them.
func ownAncestors(entries ancestorEntries, st ancestorStatus, controller gwv1.GatewayController) []gwv1.PolicyAncestorStatus {
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if len(keys) > status.MaxPolicyAncestors {
		keys = keys[:status.MaxPolicyAncestors]
	}
	gen := st.generation
	out := make([]gwv1.PolicyAncestorStatus, 0, len(keys))
	for _, k := range keys {
		e := entries[k]
		acceptedMsg := "Policy is accepted"
		if st.acceptedNote != "" {
			acceptedMsg += "; " + st.acceptedNote
		}
		accepted := policyCondition(gwv1.PolicyConditionAccepted, true, gwv1.PolicyReasonAccepted, acceptedMsg, gen)
		resolved := policyCondition(tpResolvedRefs, true, tpReasonResolved, st.resolved, gen)
		switch {
		case len(e.notFound) > 0:
			msg := strings.Join(e.notFound, "; ")
			resolved = policyCondition(tpResolvedRefs, false, gwv1.PolicyReasonTargetNotFound, msg, gen)
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonTargetNotFound, msg, gen)
		case st.refReason != "":
			resolved = policyCondition(tpResolvedRefs, false, st.refReason, st.refMessage, gen)
		}
		switch {
		case st.invalid != "":
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonInvalid, st.invalid, gen)
		case len(e.notFound) > 0:
		case len(e.conflicts) > 0:
			accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonConflicted, strings.Join(e.conflicts, "; "), gen)
		}
		out = append(out, gwv1.PolicyAncestorStatus{AncestorRef: e.ref, ControllerName: controller, Conditions: []metav1.Condition{accepted, resolved}})
	}
	return out
}

// serviceAncestry is what a kind whose policies may target Services needs
// for their ancestor entries: the Services that exist, and for each
// targeted Service the Gateways whose routes send to it (routedGateways,
// which takes each Service as the "policy" wanting it).
func serviceAncestry[P attachable](t *translation, verdicts []*ownVerdict[P]) (map[types.NamespacedName]bool, map[types.NamespacedName]map[types.NamespacedName]bool) {
	services := make(map[types.NamespacedName]bool, len(t.res.Services))
	for _, s := range t.res.Services {
		services[nn(s.Namespace, s.Name)] = true
	}
	wanted := map[tlsTarget][]types.NamespacedName{}
	for _, v := range verdicts {
		for _, target := range v.targets {
			if svc := nn(target.namespace, target.name); target.kind == "Service" {
				wanted[tlsTarget{svc, ""}] = []types.NamespacedName{svc}
			}
		}
	}
	if len(wanted) == 0 {
		return services, nil
	}
	return services, routedGateways(t.res, t.st, t.controller, wanted, nil)
}
