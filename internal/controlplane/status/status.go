// Package status holds the statuses translate computes and how they merge
// into the status an object has stored: Portico's conditions replace its
// own, keep the transition time of a condition that did not change, and
// leave other controllers' entries alone. It writes nothing itself: the
// cluster's status writer and `portico check` both use it.
package status

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/shared/pmap"
)

// Computed is every status translate computed. Only objects Portico is
// responsible for appear; route entries are only Portico's parent entries.
// A Computed is never changed once made: one derived from it (the next
// translation's, Finish's) edits copies of its maps (pmap.Map.Edit),
// which share every entry that did not change, so that a change of one
// status among 100,000 copies neither the map nor the statuses.
type Computed struct {
	GatewayClasses pmap.Map[string, gwv1.GatewayClassStatus]
	Gateways       pmap.Map[types.NamespacedName, gwv1.GatewayStatus]
	ListenerSets   pmap.Map[types.NamespacedName, gwv1.ListenerSetStatus]
	HTTPRoutes     pmap.Map[types.NamespacedName, []gwv1.RouteParentStatus]
	GRPCRoutes     pmap.Map[types.NamespacedName, []gwv1.RouteParentStatus]
	TLSRoutes      pmap.Map[types.NamespacedName, []gwv1.RouteParentStatus]
	TCPRoutes      pmap.Map[types.NamespacedName, []gwv1.RouteParentStatus]
	UDPRoutes      pmap.Map[types.NamespacedName, []gwv1.RouteParentStatus]
	// BackendTLSPolicies holds Portico's ancestor entries of each policy.
	BackendTLSPolicies pmap.Map[types.NamespacedName, []gwv1.PolicyAncestorStatus]
	// TrafficPolicies holds the ancestor entries of each of Portico's
	// BackendTrafficPolicies.
	TrafficPolicies pmap.Map[types.NamespacedName, []gwv1.PolicyAncestorStatus]
	// SecurityPolicies holds the ancestor entries of each of Portico's
	// SecurityPolicies.
	SecurityPolicies pmap.Map[types.NamespacedName, []gwv1.PolicyAncestorStatus]
	// ClientPolicies holds the ancestor entries of each of Portico's
	// ClientTrafficPolicies.
	ClientPolicies pmap.Map[types.NamespacedName, []gwv1.PolicyAncestorStatus]
	// XTrafficPolicies holds the ancestor entries of each
	// XBackendTrafficPolicy.
	XTrafficPolicies pmap.Map[types.NamespacedName, []gwv1.PolicyAncestorStatus]
}

// Maps are statuses being computed: plain maps that whoever builds them
// changes in place, until Computed takes them.
type Maps struct {
	GatewayClasses     map[string]gwv1.GatewayClassStatus
	Gateways           map[types.NamespacedName]gwv1.GatewayStatus
	ListenerSets       map[types.NamespacedName]gwv1.ListenerSetStatus
	HTTPRoutes         map[types.NamespacedName][]gwv1.RouteParentStatus
	GRPCRoutes         map[types.NamespacedName][]gwv1.RouteParentStatus
	TLSRoutes          map[types.NamespacedName][]gwv1.RouteParentStatus
	TCPRoutes          map[types.NamespacedName][]gwv1.RouteParentStatus
	UDPRoutes          map[types.NamespacedName][]gwv1.RouteParentStatus
	BackendTLSPolicies map[types.NamespacedName][]gwv1.PolicyAncestorStatus
	TrafficPolicies    map[types.NamespacedName][]gwv1.PolicyAncestorStatus
	SecurityPolicies   map[types.NamespacedName][]gwv1.PolicyAncestorStatus
	ClientPolicies     map[types.NamespacedName][]gwv1.PolicyAncestorStatus
	XTrafficPolicies   map[types.NamespacedName][]gwv1.PolicyAncestorStatus
}

// Computed returns the statuses of m. The maps become the Computed's: m
// must not be changed afterwards.
func (m *Maps) Computed() *Computed {
	return &Computed{
		GatewayClasses:     pmap.Of(m.GatewayClasses),
		Gateways:           pmap.Of(m.Gateways),
		ListenerSets:       pmap.Of(m.ListenerSets),
		HTTPRoutes:         pmap.Of(m.HTTPRoutes),
		GRPCRoutes:         pmap.Of(m.GRPCRoutes),
		TLSRoutes:          pmap.Of(m.TLSRoutes),
		TCPRoutes:          pmap.Of(m.TCPRoutes),
		UDPRoutes:          pmap.Of(m.UDPRoutes),
		BackendTLSPolicies: pmap.Of(m.BackendTLSPolicies),
		TrafficPolicies:    pmap.Of(m.TrafficPolicies),
		SecurityPolicies:   pmap.Of(m.SecurityPolicies),
		ClientPolicies:     pmap.Of(m.ClientPolicies),
		XTrafficPolicies:   pmap.Of(m.XTrafficPolicies),
	}
}

// Maps returns a copy of c's statuses in plain maps, to compare
// Computeds by what they hold: how much of a map sits in an overlay
// depends on the edits that made it.
func (c *Computed) Maps() *Maps {
	return &Maps{
		GatewayClasses:     maps.Collect(c.GatewayClasses.All()),
		Gateways:           maps.Collect(c.Gateways.All()),
		ListenerSets:       maps.Collect(c.ListenerSets.All()),
		HTTPRoutes:         maps.Collect(c.HTTPRoutes.All()),
		GRPCRoutes:         maps.Collect(c.GRPCRoutes.All()),
		TLSRoutes:          maps.Collect(c.TLSRoutes.All()),
		TCPRoutes:          maps.Collect(c.TCPRoutes.All()),
		UDPRoutes:          maps.Collect(c.UDPRoutes.All()),
		BackendTLSPolicies: maps.Collect(c.BackendTLSPolicies.All()),
		TrafficPolicies:    maps.Collect(c.TrafficPolicies.All()),
		SecurityPolicies:   maps.Collect(c.SecurityPolicies.All()),
		ClientPolicies:     maps.Collect(c.ClientPolicies.All()),
		XTrafficPolicies:   maps.Collect(c.XTrafficPolicies.All()),
	}
}

// Changed names the statuses a translation may have changed from the one
// before it; every other status is the same. A translation that re-derives
// only what changed says so, and whoever compares statuses with what is
// stored compares only these instead of all of them (100,000 at a time).
type Changed struct {
	Gateways     []types.NamespacedName
	ListenerSets []types.NamespacedName
	HTTPRoutes   []types.NamespacedName
}

// Len is the number of statuses named.
func (c *Changed) Len() int {
	return len(c.Gateways) + len(c.ListenerSets) + len(c.HTTPRoutes)
}

// With returns the names of c and of more, each once; nil (every status
// may have changed) when c is nil. c and more are not changed.
func (c *Changed) With(more *Changed) *Changed {
	if c == nil || more == nil || more.Len() == 0 {
		return c
	}
	return &Changed{
		Gateways:     union(c.Gateways, more.Gateways),
		ListenerSets: union(c.ListenerSets, more.ListenerSets),
		HTTPRoutes:   union(c.HTTPRoutes, more.HTTPRoutes),
	}
}

func union(a, b []types.NamespacedName) []types.NamespacedName {
	if len(b) == 0 {
		return a
	}
	seen := make(map[types.NamespacedName]bool, len(a)+len(b))
	out := make([]types.NamespacedName, 0, len(a)+len(b))
	for _, k := range slices.Concat(a, b) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// MaxPolicyAncestors is the schema's bound on a policy's status.ancestors.
const MaxPolicyAncestors = 16

// stampConditions gives computed conditions (which translate leaves without
// a time) their lastTransitionTime: the stored one when the status did not
// change, now otherwise, as a controller writing to the API server must.
//
// Stored conditions of a type that is not Portico's are kept as they are,
// after Portico's: another controller or tool may add conditions of its own
// to the objects Portico writes, and they are not Portico's to remove.
func stampConditions(conds, stored []metav1.Condition, now metav1.Time) []metav1.Condition {
	out := slices.Clone(conds)
	for i := range out {
		if prev := meta.FindStatusCondition(stored, out[i].Type); prev != nil && prev.Status == out[i].Status && !prev.LastTransitionTime.IsZero() {
			out[i].LastTransitionTime = prev.LastTransitionTime
		} else {
			out[i].LastTransitionTime = now
		}
	}
	for _, c := range stored {
		if foreignCondition(c.Type) && meta.FindStatusCondition(conds, c.Type) == nil {
			out = append(out, c)
		}
	}
	return out
}

// foreignCondition reports whether a condition type belongs to someone else.
// Portico sets only the Gateway API's own types, which have no domain
// prefix; a type with one ("example.com/Checked") is another's. An
// unprefixed type Portico no longer sets is its own stale condition, and is
// dropped.
func foreignCondition(typ string) bool {
	return strings.Contains(typ, "/")
}

// gatewayStatus merges Portico's computed status into what is stored.
func gatewayStatus(stored, computed gwv1.GatewayStatus, now metav1.Time) gwv1.GatewayStatus {
	out := computed
	out.Addresses = slices.Clone(computed.Addresses)
	out.Conditions = stampConditions(computed.Conditions, stored.Conditions, now)
	out.Listeners = stampListeners(computed.Listeners, stored.Listeners, func(l *gwv1.ListenerStatus) (gwv1.SectionName, *[]metav1.Condition) {
		return l.Name, &l.Conditions
	}, now)
	if prunedRoutability(stored.Addresses, computed.Addresses) {
		// The Gateway CRD of the standard channel has no routability:
		// the API server drops it, and writing it again for that alone
		// would never end. A status that differs otherwise is written
		// whole, so an experimental CRD gets the field then.
		alt := out
		alt.Addresses = slices.Clone(stored.Addresses)
		if apiequality.Semantic.DeepEqual(alt, stored) {
			return alt
		}
	}
	return out
}

// prunedRoutability reports whether stored addresses are the computed
// ones as a CRD without status.addresses[].routability keeps them: the
// same types and values, none with a routability.
func prunedRoutability(stored, computed []gwv1.GatewayStatusAddress) bool {
	if len(stored) != len(computed) || len(stored) == 0 {
		return false
	}
	for i := range stored {
		s, c := stored[i], computed[i]
		if s.Routability != nil || s.Value != c.Value || ptr.Deref(s.Type, gwv1.IPAddressType) != ptr.Deref(c.Type, gwv1.IPAddressType) {
			return false
		}
	}
	return true
}

func listenerSetStatus(stored, computed gwv1.ListenerSetStatus, now metav1.Time) gwv1.ListenerSetStatus {
	out := computed
	out.Conditions = stampConditions(computed.Conditions, stored.Conditions, now)
	out.Listeners = stampListeners(computed.Listeners, stored.Listeners, func(l *gwv1.ListenerEntryStatus) (gwv1.SectionName, *[]metav1.Condition) {
		return l.Name, &l.Conditions
	}, now)
	return out
}

// stampListeners returns a copy of computed listener statuses with their
// conditions stamped against those of the stored listener of the same
// name. L is a Gateway's or a ListenerSet's listener status.
func stampListeners[L any](computed, stored []L, fields func(*L) (gwv1.SectionName, *[]metav1.Condition), now metav1.Time) []L {
	out := slices.Clone(computed)
	for i := range out {
		name, conds := fields(&out[i])
		var prev []metav1.Condition
		for j := range stored {
			if n, c := fields(&stored[j]); n == name {
				prev = *c
			}
		}
		*conds = stampConditions(*conds, prev, now)
	}
	return out
}

// routeStatus keeps other controllers' parent entries untouched and replaces
// Portico's own with the computed ones.
func routeStatus(stored gwv1.RouteStatus, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) gwv1.RouteStatus {
	return gwv1.RouteStatus{Parents: mergeEntries(nil, stored.Parents, computed, controller, parentFields, len(stored.Parents)+len(computed), now)}
}

// ancestorStatus is routeStatus for a policy: other controllers' ancestor
// entries stay, Portico's are replaced with the computed ones, as many as
// fit within the schema's bound next to the others.
func ancestorStatus(stored gwv1.PolicyStatus, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) gwv1.PolicyStatus {
	return gwv1.PolicyStatus{Ancestors: mergeEntries([]gwv1.PolicyAncestorStatus{}, stored.Ancestors, computed, controller, ancestorFields, MaxPolicyAncestors, now)}
}

func parentFields(p *gwv1.RouteParentStatus) (gwv1.GatewayController, gwv1.ParentReference, *[]metav1.Condition) {
	return p.ControllerName, p.ParentRef, &p.Conditions
}

func ancestorFields(a *gwv1.PolicyAncestorStatus) (gwv1.GatewayController, gwv1.ParentReference, *[]metav1.Condition) {
	return a.ControllerName, a.AncestorRef, &a.Conditions
}

// mergeEntries appends to out the stored entries (route parents or policy
// ancestors) of other controllers, then the computed ones, stamped against
// Portico's stored entry for the same reference, up to limit entries in
// all.
func mergeEntries[E any](out, stored, computed []E, controller gwv1.GatewayController,
	fields func(*E) (gwv1.GatewayController, gwv1.ParentReference, *[]metav1.Condition), limit int, now metav1.Time) []E {
	storedOurs := map[string][]metav1.Condition{}
	for i := range stored {
		c, ref, conds := fields(&stored[i])
		if c != controller {
			out = append(out, stored[i])
			continue
		}
		storedOurs[parentRefKey(ref)] = *conds
	}
	for _, e := range computed {
		if len(out) >= limit {
			break
		}
		_, ref, conds := fields(&e)
		*conds = stampConditions(*conds, storedOurs[parentRefKey(ref)], now)
		out = append(out, e)
	}
	return out
}

func parentRefKey(r gwv1.ParentReference) string {
	s := string(ptr.Deref(r.Group, "")) + "/" + string(ptr.Deref(r.Kind, "")) + "/" + string(ptr.Deref(r.Namespace, "")) + "/" + string(r.Name) + "/" + string(ptr.Deref(r.SectionName, ""))
	if r.Port != nil {
		s += "/" + strconv.Itoa(int(*r.Port))
	}
	return s
}

// The Merge functions return a copy of obj with the computed status merged
// in, and whether that differs from obj's stored status.

// MergeGatewayClass merges a GatewayClass status.
func MergeGatewayClass(obj *gwv1.GatewayClass, computed gwv1.GatewayClassStatus, now metav1.Time) (*gwv1.GatewayClass, bool) {
	status := computed
	status.Conditions = stampConditions(computed.Conditions, obj.Status.Conditions, now)
	return replaced(obj, apiequality.Semantic.DeepEqual(status, obj.Status), func(o *gwv1.GatewayClass) { o.Status = status })
}

// MergeGateway merges a Gateway status.
func MergeGateway(obj *gwv1.Gateway, computed gwv1.GatewayStatus, now metav1.Time) (*gwv1.Gateway, bool) {
	status := gatewayStatus(obj.Status, computed, now)
	return replaced(obj, apiequality.Semantic.DeepEqual(status, obj.Status), func(o *gwv1.Gateway) { o.Status = status })
}

// MergeListenerSet merges a ListenerSet status.
func MergeListenerSet(obj *gwv1.ListenerSet, computed gwv1.ListenerSetStatus, now metav1.Time) (*gwv1.ListenerSet, bool) {
	status := listenerSetStatus(obj.Status, computed, now)
	return replaced(obj, apiequality.Semantic.DeepEqual(status, obj.Status), func(o *gwv1.ListenerSet) { o.Status = status })
}

// MergeHTTPRoute replaces Portico's parent entries and keeps every other
// controller's. Entries are compared regardless of order, so Portico never
// rewrites a route only to move its entries after someone else's.
func MergeHTTPRoute(obj *gwv1.HTTPRoute, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.HTTPRoute, bool) {
	status, same := mergeRouteStatus(obj.Status.RouteStatus, computed, controller, now)
	return replaced(obj, same, func(o *gwv1.HTTPRoute) { o.Status.RouteStatus = status })
}

// MergeTLSRoute is MergeHTTPRoute for a TLSRoute.
func MergeTLSRoute(obj *gwv1.TLSRoute, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.TLSRoute, bool) {
	status, same := mergeRouteStatus(obj.Status.RouteStatus, computed, controller, now)
	return replaced(obj, same, func(o *gwv1.TLSRoute) { o.Status.RouteStatus = status })
}

// MergeTCPRoute is MergeHTTPRoute for a TCPRoute.
func MergeTCPRoute(obj *gwv1.TCPRoute, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.TCPRoute, bool) {
	status, same := mergeRouteStatus(obj.Status.RouteStatus, computed, controller, now)
	return replaced(obj, same, func(o *gwv1.TCPRoute) { o.Status.RouteStatus = status })
}

// MergeUDPRoute is MergeHTTPRoute for a UDPRoute.
func MergeUDPRoute(obj *gwv1.UDPRoute, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.UDPRoute, bool) {
	status, same := mergeRouteStatus(obj.Status.RouteStatus, computed, controller, now)
	return replaced(obj, same, func(o *gwv1.UDPRoute) { o.Status.RouteStatus = status })
}

// mergeRouteStatus is a route's status with Portico's parent entries
// replaced, and whether that is what it already holds.
func mergeRouteStatus(old gwv1.RouteStatus, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) (gwv1.RouteStatus, bool) {
	status := routeStatus(old, computed, controller, now)
	if status.Parents == nil {
		// The field is required: no entries left is an empty list, not null.
		status.Parents = []gwv1.RouteParentStatus{}
	}
	return status, apiequality.Semantic.DeepEqual(sortedEntries(status.Parents, parentFields), sortedEntries(old.Parents, parentFields))
}

// MergeGRPCRoute is MergeHTTPRoute for a GRPCRoute.
func MergeGRPCRoute(obj *gwv1.GRPCRoute, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.GRPCRoute, bool) {
	status := routeStatus(obj.Status.RouteStatus, computed, controller, now)
	if status.Parents == nil {
		status.Parents = []gwv1.RouteParentStatus{}
	}
	same := apiequality.Semantic.DeepEqual(sortedEntries(status.Parents, parentFields), sortedEntries(obj.Status.Parents, parentFields))
	return replaced(obj, same, func(o *gwv1.GRPCRoute) { o.Status.RouteStatus = status })
}

// MergeBackendTLSPolicy replaces Portico's ancestor entries and keeps every
// other controller's, compared regardless of order too.
func MergeBackendTLSPolicy(obj *gwv1.BackendTLSPolicy, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.BackendTLSPolicy, bool) {
	status := ancestorStatus(obj.Status, computed, controller, now)
	same := apiequality.Semantic.DeepEqual(sortedEntries(status.Ancestors, ancestorFields), sortedEntries(obj.Status.Ancestors, ancestorFields))
	return replaced(obj, same, func(o *gwv1.BackendTLSPolicy) { o.Status = status })
}

// MergeTrafficPolicy replaces Portico's ancestor entries of a
// BackendTrafficPolicy and keeps any other controller's.
func MergeTrafficPolicy(obj *trafficpolicy.BackendTrafficPolicy, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) (*trafficpolicy.BackendTrafficPolicy, bool) {
	status := ancestorStatus(obj.Status, computed, controller, now)
	same := apiequality.Semantic.DeepEqual(sortedEntries(status.Ancestors, ancestorFields), sortedEntries(obj.Status.Ancestors, ancestorFields))
	return replaced(obj, same, func(o *trafficpolicy.BackendTrafficPolicy) { o.Status = status })
}

// MergeSecurityPolicy replaces Portico's ancestor entries of a
// SecurityPolicy and keeps any other controller's.
func MergeSecurityPolicy(obj *securitypolicy.SecurityPolicy, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) (*securitypolicy.SecurityPolicy, bool) {
	status := ancestorStatus(obj.Status, computed, controller, now)
	same := apiequality.Semantic.DeepEqual(sortedEntries(status.Ancestors, ancestorFields), sortedEntries(obj.Status.Ancestors, ancestorFields))
	return replaced(obj, same, func(o *securitypolicy.SecurityPolicy) { o.Status = status })
}

// MergeClientPolicy replaces Portico's ancestor entries of a
// ClientTrafficPolicy and keeps any other controller's.
func MergeClientPolicy(obj *clientpolicy.ClientTrafficPolicy, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) (*clientpolicy.ClientTrafficPolicy, bool) {
	status := ancestorStatus(obj.Status, computed, controller, now)
	same := apiequality.Semantic.DeepEqual(sortedEntries(status.Ancestors, ancestorFields), sortedEntries(obj.Status.Ancestors, ancestorFields))
	return replaced(obj, same, func(o *clientpolicy.ClientTrafficPolicy) { o.Status = status })
}

// MergeXTrafficPolicy replaces Portico's ancestor entries of an
// XBackendTrafficPolicy and keeps any other controller's.
func MergeXTrafficPolicy(obj *gwxv1a1.XBackendTrafficPolicy, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) (*gwxv1a1.XBackendTrafficPolicy, bool) {
	status := ancestorStatus(obj.Status, computed, controller, now)
	same := apiequality.Semantic.DeepEqual(sortedEntries(status.Ancestors, ancestorFields), sortedEntries(obj.Status.Ancestors, ancestorFields))
	return replaced(obj, same, func(o *gwxv1a1.XBackendTrafficPolicy) { o.Status = status })
}

// replaced is obj when its status stays the same, else a copy of it that
// set gave the new status.
func replaced[O interface{ DeepCopy() O }](obj O, same bool, set func(O)) (O, bool) {
	if same {
		return obj, false
	}
	out := obj.DeepCopy()
	set(out)
	return out, true
}

// sortedEntries sorts route parent or policy ancestor entries by
// controller, then reference.
func sortedEntries[E any](in []E, fields func(*E) (gwv1.GatewayController, gwv1.ParentReference, *[]metav1.Condition)) []E {
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(a, b E) int {
		ca, ra, _ := fields(&a)
		cb, rb, _ := fields(&b)
		if c := cmp.Compare(ca, cb); c != 0 {
			return c
		}
		return cmp.Compare(parentRefKey(ra), parentRefKey(rb))
	})
	return out
}

// HasAncestorsOf reports whether a policy has entries of controller.
func HasAncestorsOf(ancestors []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController) bool {
	return slices.ContainsFunc(ancestors, func(a gwv1.PolicyAncestorStatus) bool { return a.ControllerName == controller })
}

// HasParentsOf reports whether a route has entries of controller.
func HasParentsOf(parents []gwv1.RouteParentStatus, controller gwv1.GatewayController) bool {
	return slices.ContainsFunc(parents, func(p gwv1.RouteParentStatus) bool { return p.ControllerName == controller })
}
