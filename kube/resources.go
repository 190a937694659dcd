// Package kube turns Kubernetes objects, from a cluster or from YAML files,
// into the data plane's Config and the statuses Portico reports.
package kube

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Resources is one immutable snapshot of every object translate reads. The
// same type comes from informers and from the file source, so everything
// after it is one code path.
type Resources struct {
	GatewayClasses  []*gwv1.GatewayClass
	Gateways        []*gwv1.Gateway
	ListenerSets    []*gwv1.ListenerSet
	HTTPRoutes      []*gwv1.HTTPRoute
	ReferenceGrants []*gwv1.ReferenceGrant
	// BackendTLSPolicies say how to reach Services over TLS; ConfigMaps
	// hold their CA certificates and those of Gateways' client certificate
	// validation (from a cluster, only the key ca.crt).
	BackendTLSPolicies []*gwv1.BackendTLSPolicy
	ConfigMaps         []*corev1.ConfigMap
	Namespaces         []*corev1.Namespace
	Secrets            []*corev1.Secret
	Services           []*corev1.Service
	EndpointSlices     []*discoveryv1.EndpointSlice
	// ACMEErrors is the ACME manager's last error per hostname, shown in
	// the ResolvedRefs condition of listeners still waiting for their
	// certificate. It is replaced, never modified, when it changes.
	ACMEErrors map[string]string
}

// objectMeta is implemented by every object Resources holds.
type objectMeta interface {
	GetNamespace() string
	GetName() string
	GetCreationTimestamp() metav1.Time
}

// compareAge orders objects oldest first, then by namespace/name: the order
// the Gateway API uses to break ties between conflicting objects.
func compareAge[T objectMeta](a, b T) int {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		if ta.Before(&tb) {
			return -1
		}
		return 1
	}
	// The spec breaks ties by "{namespace}/{name}" as one string, which is
	// not the same as namespace then name ("a-b/x" sorts before "a/x").
	return cmp.Compare(a.GetNamespace()+"/"+a.GetName(), b.GetNamespace()+"/"+b.GetName())
}

// sortedByAge returns a sorted copy so callers never reorder a shared snapshot.
func sortedByAge[T objectMeta](in []T) []T {
	out := slices.Clone(in)
	slices.SortStableFunc(out, compareAge[T])
	return out
}
