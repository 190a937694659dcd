package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
	"portico.dev/portico/routing"
)

// XBackendTrafficPolicy (the Gateway API's experimental kind, a Direct
// policy).
//
// A policy targets Services of its own namespace (the one kind of
// backend Portico serves among those the type allows). Among policies
// naming the same Service the oldest wins it (then the first by
// namespace/name); the others are Conflicted on its ancestors and still
// apply to the Services they won. The winner gives every backendRef to
// the Service, of any route and rule, its sessionPersistence
// (Backend.Session; a route rule's own sessionPersistence is the more
// specific and wins) and its retry budget (Backend.Budget). Portico's own
// BackendTrafficPolicy sets none of these two: both kinds apply to a
// Service at once. An invalid policy applies nowhere.
//
// Status goes to each ancestor (GEP-713): the Gateways whose accepted
// routes send to the Service, or the Service itself when none does;
// the target itself when it does not exist or is not a Service
// (Accepted=False, TargetNotFound).

// xTrafficPolicies is what translate makes of the XBackendTrafficPolicies.
type xTrafficPolicies struct {
	// byService is what the winner of each Service gives its backends.
	byService map[types.NamespacedName]xServicePolicy
	verdicts  []*ownVerdict[*gwxv1a1.XBackendTrafficPolicy] // oldest first
}

// xServicePolicy is what an XBackendTrafficPolicy gives a Service.
type xServicePolicy struct {
	session *config.SessionPersistence
	budget  *config.RetryBudget
}

// xTargetRefs are a policy's targetRefs as attachPolicies takes them; a
// reference to anything but a core Service keeps its group in its kind,
// so that it is never taken for one.
func xTargetRefs(p *gwxv1a1.XBackendTrafficPolicy) []gwv1.LocalPolicyTargetReferenceWithSectionName {
	out := make([]gwv1.LocalPolicyTargetReferenceWithSectionName, 0, len(p.Spec.TargetRefs))
	for _, ref := range p.Spec.TargetRefs {
		if !xtrafficpolicy.IsService(ref) && ref.Group != "" {
			ref.Kind = gwv1.Kind(string(ref.Kind) + "." + string(ref.Group))
		}
		out = append(out, gwv1.LocalPolicyTargetReferenceWithSectionName{LocalPolicyTargetReference: ref})
	}
	return out
}

// xCompiled is a policy's session and budget, per Service for the
// session's default cookie name.
func xCompiled(p *gwxv1a1.XBackendTrafficPolicy, svc types.NamespacedName) (xServicePolicy, error) {
	name := p.Namespace + "/" + p.Name
	budget, err := xtrafficpolicy.Budget(&p.Spec, name)
	if err != nil {
		return xServicePolicy{}, err
	}
	out := xServicePolicy{budget: budget}
	if sp := p.Spec.SessionPersistence; sp != nil {
		// A name of the policy and Service, the same in every process.
		cookie := fmt.Sprintf("portico-session-%08x", uint32(config.HashKey(xtrafficpolicy.Kind+"/"+name+"#"+svc.String())))
		if out.session, err = routing.SessionPersistence(sp, cookie); err != nil {
			return xServicePolicy{}, err
		}
	}
	return out, nil
}

// xTrafficPolicies decides which policy wins each Service.
func (t *translation) xTrafficPolicies() {
	xp := &xTrafficPolicies{}
	t.xtraffic = xp
	if len(t.res.XTrafficPolicies) == 0 {
		return
	}
	winners, verdicts := attachPolicies(t.res.XTrafficPolicies, attachKind[*gwxv1a1.XBackendTrafficPolicy]{
		validate: func(p *gwxv1a1.XBackendTrafficPolicy) error {
			if err := xtrafficpolicy.Validate(&p.Spec); err != nil {
				return err
			}
			_, err := xCompiled(p, types.NamespacedName{})
			return err
		},
		refs: xTargetRefs,
	})
	xp.verdicts = verdicts
	xp.byService = make(map[types.NamespacedName]xServicePolicy, len(winners))
	for target, p := range winners {
		if target.kind != "Service" {
			continue
		}
		svc := nn(target.namespace, target.name)
		if c, err := xCompiled(p, svc); err == nil {
			xp.byService[svc] = c
		}
	}
}

// service is what the policy that won Service svc gives its backends.
func (xp *xTrafficPolicies) service(svc types.NamespacedName) xServicePolicy {
	if xp == nil || len(xp.byService) == 0 {
		return xServicePolicy{}
	}
	return xp.byService[svc]
}

// withX adds what the XBackendTrafficPolicy of Service key gives to rs.
func (xp *xTrafficPolicies) withX(key types.NamespacedName, rs routing.Service) routing.Service {
	x := xp.service(key)
	rs.Session, rs.Budget = x.session, x.budget
	return rs
}

// xTrafficPolicyStatuses writes every XBackendTrafficPolicy's ancestors,
// once routes have their statuses.
func (t *translation) xTrafficPolicyStatuses() {
	xp := t.xtraffic
	out := make(map[types.NamespacedName][]gwv1.PolicyAncestorStatus, len(xp.verdicts))
	t.st.XTrafficPolicies = out
	if len(xp.verdicts) == 0 {
		return
	}
	services, routedTo := serviceAncestry(t, xp.verdicts)
	for _, v := range xp.verdicts {
		entries := ancestorEntries{}
		for _, target := range v.targets {
			svc := nn(target.namespace, target.name)
			switch {
			case target.kind != "Service":
				// The target itself is the ancestor, of its own group.
				ref := targetRef(target)
				kind, group, _ := strings.Cut(target.kind, ".")
				ref.Kind, ref.Group = ptr.To(gwv1.Kind(kind)), ptr.To(gwv1.Group(group))
				e := entries.entry(ref)
				e.notFound = append(e.notFound, target.String()+" is not a kind an "+xtrafficpolicy.Kind+" of Portico's targets (a Service of the core group)")
				continue
			case !services[svc]:
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
				// Nothing of Portico's routes to it yet: the Service is
				// the ancestor, so the policy still says it is accepted.
				e := entries.entry(targetRef(target))
				if c := v.conflict(target, xtrafficpolicy.Kind, target.String()); c != "" {
					e.conflicts = append(e.conflicts, c)
				}
			}
			entries.gateways(gws, v.conflict(target, xtrafficpolicy.Kind, target.String()))
		}
		out[nn(v.p.Namespace, v.p.Name)] = ownAncestors(entries, validStatus(v), t.controller)
	}
}
