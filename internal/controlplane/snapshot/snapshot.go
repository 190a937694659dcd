// Package snapshot holds the snapshot every later stage reads: one
// immutable set of the Kubernetes objects Portico serves, whether they come
// from a cluster's informers or from YAML files, and the order the Gateway
// API breaks ties between conflicting objects in.
package snapshot

import (
	"cmp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
)

// Resources is one immutable snapshot of every object translate reads. The
// same type comes from informers and from the file source, so everything
// after it is one code path. Its objects are shared with the source's
// caches: nothing may modify them.
type Resources struct {
	GatewayClasses  []*gwv1.GatewayClass
	Gateways        []*gwv1.Gateway
	ListenerSets    []*gwv1.ListenerSet
	HTTPRoutes      []*gwv1.HTTPRoute
	GRPCRoutes      []*gwv1.GRPCRoute
	TLSRoutes       []*gwv1.TLSRoute
	TCPRoutes       []*gwv1.TCPRoute
	UDPRoutes       []*gwv1.UDPRoute
	ReferenceGrants []*gwv1.ReferenceGrant
	// BackendTLSPolicies say how to reach Services over TLS; ConfigMaps
	// hold their CA certificates and those of Gateways' client certificate
	// validation (from a cluster, only the key ca.crt).
	BackendTLSPolicies []*gwv1.BackendTLSPolicy
	ConfigMaps         []*corev1.ConfigMap
	// ClusterTrustBundles (certificates.k8s.io/v1) hold CA certificates
	// the same two can name by name instead of a ConfigMap; empty when
	// the cluster does not serve the kind.
	ClusterTrustBundles []*certv1.ClusterTrustBundle
	Namespaces          []*corev1.Namespace
	Secrets             []*corev1.Secret
	Services            []*corev1.Service
	EndpointSlices      []*discoveryv1.EndpointSlice
	// KIngresses are Knative Serving's Ingresses of every class; translate
	// serves those of Portico's (Settings.Knative).
	KIngresses []*knative.Ingress
	// KCertificates are Knative's Certificates of every class; translate
	// orders those of Portico's certificate class over ACME.
	KCertificates []*knative.Certificate
	// Parameters are the PorticoParameters GatewayClasses and Gateways
	// may name (parametersRef).
	Parameters []*parameters.PorticoParameters
	// TrafficPolicies are Portico's BackendTrafficPolicies.
	TrafficPolicies []*trafficpolicy.BackendTrafficPolicy
	// SecurityPolicies are Portico's SecurityPolicies.
	SecurityPolicies []*securitypolicy.SecurityPolicy
	// ClientPolicies are Portico's ClientTrafficPolicies.
	ClientPolicies []*clientpolicy.ClientTrafficPolicy
	// XTrafficPolicies are the Gateway API's experimental
	// XBackendTrafficPolicies.
	XTrafficPolicies []*gwxv1a1.XBackendTrafficPolicy
	// Deployments are the data planes Portico provisioned (GEP-1762);
	// their status tells whether a replica is available.
	Deployments []*appsv1.Deployment
	// ACMEErrors is the ACME manager's last error per hostname, shown in
	// the ResolvedRefs condition of listeners still waiting for their
	// certificate. It is replaced, never modified, when it changes.
	ACMEErrors map[string]string
}

// Object is implemented by every object Resources holds.
type Object interface {
	GetNamespace() string
	GetName() string
	GetCreationTimestamp() metav1.Time
}

// CompareAge orders objects oldest first, then by "namespace/name": the
// order the Gateway API uses to break ties between conflicting objects.
func CompareAge[T Object](a, b T) int {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		if ta.Before(&tb) {
			return -1
		}
		return 1
	}
	return CompareNames(a.GetNamespace(), a.GetName(), b.GetNamespace(), b.GetName())
}

// SortedByAge returns a copy of in sorted by CompareAge, so that callers
// never reorder a shared snapshot.
func SortedByAge[T Object](in []T) []T {
	out := slices.Clone(in)
	slices.SortStableFunc(out, CompareAge[T])
	return out
}

// CompareNames compares aNS+"/"+aName with bNS+"/"+bName without building
// the strings. The spec breaks ties by the joined form, which differs from
// comparing namespaces first: '-' sorts before '/', so "a-b/x" comes
// before "a/x".
func CompareNames(aNS, aName, bNS, bName string) int {
	if aNS == bNS {
		return strings.Compare(aName, bName)
	}
	n := min(len(aNS), len(bNS))
	if c := strings.Compare(aNS[:n], bNS[:n]); c != 0 {
		return c
	}
	// One namespace is a prefix of the other; the shorter one goes on
	// with the '/'.
	if len(aNS) < len(bNS) {
		return cmp.Compare('/', bNS[n])
	}
	return cmp.Compare(aNS[n], '/')
}
