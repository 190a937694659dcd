package translate

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	xv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/telemetrypolicy"
	"portico.dev/portico/listeners"
)

// XTelemetryPolicy (experimental, a Direct policy).
//
// A policy targets Gateways of its own namespace, whole: its tracing
// applies to every listener of the Gateway, those of its ListenerSets
// too (the type's ancestors are Gateways only; a ListenerSet or any
// other kind is not a target, TargetNotFound). Only one policy applies
// to a Gateway: the oldest, then the first by namespace/name; the others
// are Accepted=False Conflicted there. An invalid policy wins nothing.
// The winner's tracing becomes Listener.Tracing: mode
// ImplementationDefault leaves the process's tracing (the flags),
// Disabled turns tracing off, Enabled exports to the policy's collector.
// A winner whose collector cannot be used (ResolvedRefs=False) keeps the
// Gateway, which then exports nothing: its spans never go to a collector
// the policy did not name.

// telemetryPolicies is what translate makes of the XTelemetryPolicies.
type telemetryPolicies struct {
	// winners are the compiled tracing of each Gateway's winner.
	winners  map[types.NamespacedName]*config.Tracing
	verdicts []*tmVerdict // oldest first
}

type tmVerdict struct {
	*ownVerdict[*xv1a1.XTelemetryPolicy]
	compiled *config.Tracing
	refs     *telemetrypolicy.RefProblem
}

// telemetryPolicies decides which policy wins each Gateway and compiles
// the winners.
func (t *translation) telemetryPolicies() {
	tm := &telemetryPolicies{}
	t.telemetry = tm
	if len(t.res.TelemetryPolicies) == 0 {
		return
	}
	services := map[types.NamespacedName]int{}
	for i, s := range t.res.Services {
		services[nn(s.Namespace, s.Name)] = i
	}
	winners, verdicts := attachPolicies(t.res.TelemetryPolicies, attachKind[*xv1a1.XTelemetryPolicy]{
		validate: telemetrypolicy.Validate,
		refs:     telemetryTargets,
	})
	byPolicy := make(map[*xv1a1.XTelemetryPolicy]*tmVerdict, len(verdicts))
	for _, ov := range verdicts {
		v := &tmVerdict{ownVerdict: ov}
		if v.invalid == "" {
			v.compiled, v.refs = telemetrypolicy.Compile(v.p, t.res.ReferenceGrants, func(key types.NamespacedName) *corev1.Service {
				if i, ok := services[key]; ok {
					return t.res.Services[i]
				}
				return nil
			})
			if v.refs != nil {
				v.compiled = &config.Tracing{ID: v.p.Namespace + "/" + v.p.Name + " unresolved", Policy: v.p.Namespace + "/" + v.p.Name, Disabled: true}
			}
		}
		tm.verdicts = append(tm.verdicts, v)
		byPolicy[v.p] = v
	}
	tm.winners = make(map[types.NamespacedName]*config.Tracing, len(winners))
	for target, p := range winners {
		if target.kind == "Gateway" {
			tm.winners[nn(target.namespace, target.name)] = byPolicy[p].compiled
		}
	}
}

// telemetryTargets are p's targetRefs in the form attachPolicies takes;
// a Gateway of another group is no Gateway.
func telemetryTargets(p *xv1a1.XTelemetryPolicy) []gwv1.LocalPolicyTargetReferenceWithSectionName {
	out := make([]gwv1.LocalPolicyTargetReferenceWithSectionName, 0, len(p.Spec.TargetRefs))
	for _, r := range p.Spec.TargetRefs {
		kind := r.Kind
		if r.Group != gwv1.GroupName {
			kind = gwv1.Kind(string(r.Group) + "/" + string(r.Kind))
		}
		out = append(out, gwv1.LocalPolicyTargetReferenceWithSectionName{
			LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Group: r.Group, Kind: kind, Name: r.Name}})
	}
	return out
}

// listener is the tracing of merged listener m: its Gateway's winner's;
// nil when none applies or the winner leaves the process's tracing.
func (tm *telemetryPolicies) listener(m *listeners.Listener) *config.Tracing {
	if tm == nil || len(tm.winners) == 0 {
		return nil
	}
	return tm.winners[nn(m.Gateway.Namespace, m.Gateway.Name)]
}

// telemetryPolicyStatuses writes every XTelemetryPolicy's ancestors.
func (t *translation) telemetryPolicyStatuses() {
	tm := t.telemetry
	out := make(map[types.NamespacedName][]gwv1.PolicyAncestorStatus, len(tm.verdicts))
	t.st.TelemetryPolicies = out
	if len(tm.verdicts) == 0 {
		return
	}
	pa := t.policyAncestry()
	for _, v := range tm.verdicts {
		entries := ancestorEntries{}
		for _, target := range v.targets {
			if target.kind != "Gateway" {
				entries.notFound(target, target.String()+" is not a kind an XTelemetryPolicy targets: only Gateways")
				continue
			}
			pa.addTarget(entries, target, telemetrypolicy.Kind, v.conflict(target, telemetrypolicy.Kind, target.String()))
		}
		st := ancestorStatus{generation: v.p.Generation, resolved: "Every target is found", invalid: v.invalid}
		if v.invalid == "" && v.p.Spec.Tracing.Mode == xv1a1.TracingModeEnabled {
			st.resolved = "Every target and the provider's Service are found"
		}
		if v.refs != nil {
			st.refReason = gwv1.PolicyConditionReason(v.refs.Reason)
			st.refMessage = v.refs.Message + "; the targets' spans are not exported"
		}
		out[nn(v.p.Namespace, v.p.Name)] = ownAncestors(entries, st, t.controller)
	}
}
