package kube

import (
	"io"
	"slices"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

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
		if len(out.Ancestors) >= maxPolicyAncestors {
			break
		}
		a.Conditions = stampConditions(a.Conditions, storedOurs[parentRefKey(a.AncestorRef)], now)
		out.Ancestors = append(out.Ancestors, a)
	}
	return out
}

func parentRefKey(r gwv1.ParentReference) string {
	s := string(ptrValue(r.Group)) + "/" + string(ptrValue(r.Kind)) + "/" + string(ptrValue(r.Namespace)) + "/" + string(r.Name) + "/" + string(ptrValue(r.SectionName))
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

// WriteStatuses prints every Gateway, ListenerSet, HTTPRoute and
// BackendTLSPolicy of res with the status Portico computed, as a YAML
// stream sorted by kind, namespace and name. Objects of other controllers keep the status they had.
func WriteStatuses(w io.Writer, res *Resources, st *Statuses, controller gwv1.GatewayController, now time.Time) error {
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
		if computed, ok := st.BackendTLSPolicies[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}]; ok || hasAncestorsOf(p.Status.Ancestors, controller) {
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
