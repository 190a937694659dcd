// Package status holds the statuses translate computes and how they merge
// into the status an object has stored: Portico's conditions replace its
// own, keep the transition time of a condition that did not change, and
// leave other controllers' entries alone. It writes nothing itself: the
// cluster's status writer and `portico check` both use it.
package status

import (
	"cmp"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/resources"
)

// Computed is every status translate computed. Only objects Portico is
// responsible for appear; route entries are only Portico's parent entries.
type Computed struct {
	GatewayClasses map[string]gwv1.GatewayClassStatus
	Gateways       map[types.NamespacedName]gwv1.GatewayStatus
	ListenerSets   map[types.NamespacedName]gwv1.ListenerSetStatus
	HTTPRoutes     map[types.NamespacedName][]gwv1.RouteParentStatus
	// BackendTLSPolicies holds Portico's ancestor entries of each policy.
	BackendTLSPolicies map[types.NamespacedName][]gwv1.PolicyAncestorStatus
}

// Clone returns a copy whose maps may be changed without changing c's.
// The statuses in them are shared: change their conditions with the
// conditions package, which copies.
func (c *Computed) Clone() *Computed {
	return &Computed{
		GatewayClasses:     maps.Clone(c.GatewayClasses),
		Gateways:           maps.Clone(c.Gateways),
		ListenerSets:       maps.Clone(c.ListenerSets),
		HTTPRoutes:         maps.Clone(c.HTTPRoutes),
		BackendTLSPolicies: maps.Clone(c.BackendTLSPolicies),
	}
}

// MaxPolicyAncestors is the schema's bound on a policy's status.ancestors.
const MaxPolicyAncestors = 16

// stampConditions gives computed conditions (which translate leaves without
// a time) their lastTransitionTime: the stored one when the status did not
// change, now otherwise, as a controller writing to the API server must.
func stampConditions(conds, stored []metav1.Condition, now metav1.Time) []metav1.Condition {
	out := slices.Clone(conds)
	for i := range out {
		if prev := meta.FindStatusCondition(stored, out[i].Type); prev != nil && prev.Status == out[i].Status && !prev.LastTransitionTime.IsZero() {
			out[i].LastTransitionTime = prev.LastTransitionTime
		} else {
			out[i].LastTransitionTime = now
		}
	}
	return out
}

// gatewayStatus merges Portico's computed status into what is stored.
func gatewayStatus(stored, computed gwv1.GatewayStatus, now metav1.Time) gwv1.GatewayStatus {
	out := computed
	out.Addresses = slices.Clone(computed.Addresses)
	out.Conditions = stampConditions(computed.Conditions, stored.Conditions, now)
	out.Listeners = slices.Clone(computed.Listeners)
	for i := range out.Listeners {
		var prev []metav1.Condition
		for _, s := range stored.Listeners {
			if s.Name == out.Listeners[i].Name {
				prev = s.Conditions
			}
		}
		out.Listeners[i].Conditions = stampConditions(out.Listeners[i].Conditions, prev, now)
	}
	return out
}

func listenerSetStatus(stored, computed gwv1.ListenerSetStatus, now metav1.Time) gwv1.ListenerSetStatus {
	out := computed
	out.Conditions = stampConditions(computed.Conditions, stored.Conditions, now)
	out.Listeners = slices.Clone(computed.Listeners)
	for i := range out.Listeners {
		var prev []metav1.Condition
		for _, s := range stored.Listeners {
			if s.Name == out.Listeners[i].Name {
				prev = s.Conditions
			}
		}
		out.Listeners[i].Conditions = stampConditions(out.Listeners[i].Conditions, prev, now)
	}
	return out
}

// routeStatus keeps other controllers' parent entries untouched and replaces
// Portico's own with the computed ones.
func routeStatus(stored gwv1.RouteStatus, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) gwv1.RouteStatus {
	var out gwv1.RouteStatus
	storedOurs := map[string][]metav1.Condition{}
	for _, p := range stored.Parents {
		if p.ControllerName != controller {
			out.Parents = append(out.Parents, p)
			continue
		}
		storedOurs[parentRefKey(p.ParentRef)] = p.Conditions
	}
	for _, p := range computed {
		p.Conditions = stampConditions(p.Conditions, storedOurs[parentRefKey(p.ParentRef)], now)
		out.Parents = append(out.Parents, p)
	}
	return out
}

// ancestorStatus is routeStatus for a policy: other controllers' ancestor
// entries stay, Portico's are replaced with the computed ones, as many as
// fit within the schema's bound next to the others.
func ancestorStatus(stored gwv1.PolicyStatus, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) gwv1.PolicyStatus {
	out := gwv1.PolicyStatus{Ancestors: []gwv1.PolicyAncestorStatus{}}
	storedOurs := map[string][]metav1.Condition{}
	for _, a := range stored.Ancestors {
		if a.ControllerName != controller {
			out.Ancestors = append(out.Ancestors, a)
			continue
		}
		storedOurs[parentRefKey(a.AncestorRef)] = a.Conditions
	}
	for _, a := range computed {
		if len(out.Ancestors) >= MaxPolicyAncestors {
			break
		}
		a.Conditions = stampConditions(a.Conditions, storedOurs[parentRefKey(a.AncestorRef)], now)
		out.Ancestors = append(out.Ancestors, a)
	}
	return out
}

func parentRefKey(r gwv1.ParentReference) string {
	s := string(deref(r.Group)) + "/" + string(deref(r.Kind)) + "/" + string(deref(r.Namespace)) + "/" + string(r.Name) + "/" + string(deref(r.SectionName))
	if r.Port != nil {
		s += "/" + strconv.Itoa(int(*r.Port))
	}
	return s
}

// statusDocument is one object as `portico check` prints it: what the API
// server would hold after Portico wrote status.
type statusDocument struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   statusMetadata `json:"metadata"`
	Status     any            `json:"status"`
}

type statusMetadata struct {
	Name       string `json:"name"`
	Namespace  string `json:"namespace,omitempty"`
	Generation int64  `json:"generation,omitempty"`
}

// Write prints every Gateway, ListenerSet, HTTPRoute and
// BackendTLSPolicy of res with the status Portico computed, as a YAML
// stream sorted by kind, namespace and name. Objects of other controllers keep the status they had.
func Write(w io.Writer, res *resources.Resources, st *Computed, controller gwv1.GatewayController, now time.Time) error {
	ts := metav1.NewTime(now.Truncate(time.Second))
	var docs []statusDocument
	md := func(o metav1.Object) statusMetadata {
		return statusMetadata{Name: o.GetName(), Namespace: o.GetNamespace(), Generation: o.GetGeneration()}
	}
	for _, gw := range byName(res.Gateways) {
		status := gw.Status
		if computed, ok := st.Gateways[types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}]; ok {
			status = gatewayStatus(gw.Status, computed, ts)
		}
		docs = append(docs, statusDocument{APIVersion: gwv1.GroupVersion.String(), Kind: "Gateway", Metadata: md(gw), Status: status})
	}
	for _, ls := range byName(res.ListenerSets) {
		status := ls.Status
		if computed, ok := st.ListenerSets[types.NamespacedName{Namespace: ls.Namespace, Name: ls.Name}]; ok {
			status = listenerSetStatus(ls.Status, computed, ts)
		}
		docs = append(docs, statusDocument{APIVersion: gwv1.GroupVersion.String(), Kind: "ListenerSet", Metadata: md(ls), Status: status})
	}
	for _, r := range byName(res.HTTPRoutes) {
		status := r.Status.RouteStatus
		if computed, ok := st.HTTPRoutes[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}]; ok {
			status = routeStatus(r.Status.RouteStatus, computed, controller, ts)
		}
		docs = append(docs, statusDocument{APIVersion: gwv1.GroupVersion.String(), Kind: "HTTPRoute", Metadata: md(r), Status: status})
	}
	for _, p := range byName(res.BackendTLSPolicies) {
		status := p.Status
		if computed, ok := st.BackendTLSPolicies[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}]; ok || HasAncestorsOf(p.Status.Ancestors, controller) {
			status = ancestorStatus(p.Status, computed, controller, ts)
		}
		docs = append(docs, statusDocument{APIVersion: gwv1.GroupVersion.String(), Kind: "BackendTLSPolicy", Metadata: md(p), Status: status})
	}
	for i, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return err
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func byName[T metav1.Object](in []T) []T {
	out := slices.Clone(in)
	slices.SortFunc(out, func(a, b T) int {
		if a.GetNamespace() != b.GetNamespace() {
			if a.GetNamespace() < b.GetNamespace() {
				return -1
			}
			return 1
		}
		if a.GetName() < b.GetName() {
			return -1
		}
		if a.GetName() > b.GetName() {
			return 1
		}
		return 0
	})
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// The Merge functions return a copy of obj with the computed status merged
// in, and whether that differs from obj's stored status.

// MergeGatewayClass merges a GatewayClass status.
func MergeGatewayClass(obj *gwv1.GatewayClass, computed gwv1.GatewayClassStatus, now metav1.Time) (*gwv1.GatewayClass, bool) {
	status := computed
	status.Conditions = stampConditions(computed.Conditions, obj.Status.Conditions, now)
	if apiequality.Semantic.DeepEqual(status, obj.Status) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status = status
	return out, true
}

// MergeGateway merges a Gateway status.
func MergeGateway(obj *gwv1.Gateway, computed gwv1.GatewayStatus, now metav1.Time) (*gwv1.Gateway, bool) {
	status := gatewayStatus(obj.Status, computed, now)
	if apiequality.Semantic.DeepEqual(status, obj.Status) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status = status
	return out, true
}

// MergeListenerSet merges a ListenerSet status.
func MergeListenerSet(obj *gwv1.ListenerSet, computed gwv1.ListenerSetStatus, now metav1.Time) (*gwv1.ListenerSet, bool) {
	status := listenerSetStatus(obj.Status, computed, now)
	if apiequality.Semantic.DeepEqual(status, obj.Status) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status = status
	return out, true
}

// MergeHTTPRoute replaces Portico's parent entries and keeps every other
// controller's. Entries are compared regardless of order, so Portico never
// rewrites a route only to move its entries after someone else's.
func MergeHTTPRoute(obj *gwv1.HTTPRoute, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.HTTPRoute, bool) {
	status := routeStatus(obj.Status.RouteStatus, computed, controller, now)
	if status.Parents == nil {
		// The field is required: no entries left is an empty list, not null.
		status.Parents = []gwv1.RouteParentStatus{}
	}
	if apiequality.Semantic.DeepEqual(sortedParents(status.Parents), sortedParents(obj.Status.Parents)) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status.RouteStatus = status
	return out, true
}

func sortedParents(in []gwv1.RouteParentStatus) []gwv1.RouteParentStatus {
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(a, b gwv1.RouteParentStatus) int {
		if c := cmp.Compare(a.ControllerName, b.ControllerName); c != 0 {
			return c
		}
		return cmp.Compare(parentRefKey(a.ParentRef), parentRefKey(b.ParentRef))
	})
	return out
}

// MergeBackendTLSPolicy replaces Portico's ancestor entries and keeps every
// other controller's. It reports whether anything changed.
func MergeBackendTLSPolicy(obj *gwv1.BackendTLSPolicy, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.BackendTLSPolicy, bool) {
	status := ancestorStatus(obj.Status, computed, controller, now)
	if apiequality.Semantic.DeepEqual(sortedAncestors(status.Ancestors), sortedAncestors(obj.Status.Ancestors)) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status = status
	return out, true
}

func sortedAncestors(in []gwv1.PolicyAncestorStatus) []gwv1.PolicyAncestorStatus {
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(a, b gwv1.PolicyAncestorStatus) int {
		if c := cmp.Compare(a.ControllerName, b.ControllerName); c != 0 {
			return c
		}
		return cmp.Compare(parentRefKey(a.AncestorRef), parentRefKey(b.AncestorRef))
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
