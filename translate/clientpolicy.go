package translate

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/listeners"
)

// ClientTrafficPolicy (Portico's own, GEP-713).
//
// A policy targets Gateways and ListenerSets, whole or one listener of
// them by sectionName, in its own namespace. Among policies naming the
// same target the oldest wins it (then the first by namespace/name); the
// others are Conflicted on that target's Gateway, and still apply to the
// targets they won. A listener takes each section (clientIPDetection,
// proxyProtocol) from the most specific winner that sets it: its own
// (sectionName), its ListenerSet's, its Gateway's. Invalid policies apply
// nowhere. The result is plain fields of the Config (Listener.Client,
// Port.ProxyProtocol): the data plane never sees a policy. The PROXY
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
	}
	if out == (config.ClientTraffic{}) {
		return nil
	}
	return &out
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
	type lsInfo struct {
		parent    types.NamespacedName
		listeners []gwv1.SectionName
	}
	lsets := map[types.NamespacedName]lsInfo{}
	for _, ls := range res.ListenerSets {
		if parent, ok := ListenerSetParent(ls); ok {
			info := lsInfo{parent: parent}
			for _, l := range ls.Spec.Listeners {
				info.listeners = append(info.listeners, l.Name)
			}
			lsets[nn(ls.Namespace, ls.Name)] = info
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
			default:
				missing = "is not a kind a ClientTrafficPolicy targets"
			}
			what := target
			if missing == "" && target.section != "" && !slices.Contains(names, gwv1.SectionName(target.section)) {
				what.section = ""
				missing = "has no listener named " + target.section
			}
			if missing != "" {
				e := entry(targetRef(target))
				e.notFound = append(e.notFound, cpTargetString(what)+" "+missing)
				continue
			}
			e := entry(gatewayRef(gw))
			if older, lost := v.lost[target]; lost {
				e.conflicts = append(e.conflicts, fmt.Sprintf("%s is already the target of the older ClientTrafficPolicy %s", cpTargetString(target), older))
			}
		}
		out[nn(v.p.Namespace, v.p.Name)] = cpAncestors(v, entries, t.controller)
	}
}

// cpTargetString names a target, its listener by "listener".
func cpTargetString(t tpTarget) string {
	s := t.kind + " " + t.namespace + "/" + t.name
	if t.section != "" {
		s += " listener " + t.section
	}
	return s
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
