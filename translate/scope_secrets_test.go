package translate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// TestScopeWithholdsUngrantedSecrets is an attack on the snapshot a
// tenant's data plane receives: a tenant who may create Gateways only in
// its own namespace names another namespace's Secret in a listener's
// certificateRef and in the backend client certificate, with no
// ReferenceGrant there. Translation refuses the refs (RefNotPermitted),
// and the scoped snapshot must not carry the Secrets either: the data
// plane runs in the tenant's namespace, under a ServiceAccount the tenant
// can use, so whatever it is sent is the tenant's. A granted Secret and
// one of the Gateway's own namespace are sent.
func TestScopeWithholdsUngrantedSecrets(t *testing.T) {
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSPrivateKeyKey: []byte("key of " + ns + "/" + name)}}
	}
	ref := func(ns, name string) gwv1.SecretObjectReference {
		n := gwv1.Namespace(ns)
		return gwv1.SecretObjectReference{Namespace: &n, Name: gwv1.ObjectName(name)}
	}
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gw"}, Spec: gwv1.GatewaySpec{
		GatewayClassName: "portico",
		Listeners: []gwv1.Listener{{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, TLS: &gwv1.ListenerTLSConfig{
			CertificateRefs: []gwv1.SecretObjectReference{ref("victim", "wildcard"), ref("shared", "granted"), ref("tenant", "own")},
		}}},
		TLS: &gwv1.GatewayTLSConfig{Backend: &gwv1.GatewayBackendTLS{ClientCertificateRef: &gwv1.SecretObjectReference{
			Namespace: ptrTo(gwv1.Namespace("victim")), Name: "client"}}},
	}}
	all := gwv1.ObjectName("granted")
	res := &snapshot.Resources{
		Gateways: []*gwv1.Gateway{gw},
		Secrets:  []*corev1.Secret{secret("victim", "wildcard"), secret("victim", "client"), secret("shared", "granted"), secret("tenant", "own")},
		ReferenceGrants: []*gwv1.ReferenceGrant{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "shared", Name: "g"}, Spec: gwv1.ReferenceGrantSpec{
				From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "Gateway", Namespace: "tenant"}},
				To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret", Name: &all}},
			}},
			// A grant to another kind or from another namespace lets
			// nothing through.
			{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "g"}, Spec: gwv1.ReferenceGrantSpec{
				From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "HTTPRoute", Namespace: "tenant"}, {Group: gwv1.GroupName, Kind: "Gateway", Namespace: "elsewhere"}},
				To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret"}, {Group: "", Kind: "Service"}},
			}},
		},
	}
	got := map[string]bool{}
	for _, s := range Scope(res, nn("tenant", "gw")).Secrets {
		got[s.Namespace+"/"+s.Name] = true
	}
	for _, name := range []string{"victim/wildcard", "victim/client"} {
		if got[name] {
			t.Errorf("the scoped snapshot carries Secret %s, which no ReferenceGrant lets the Gateway use", name)
		}
	}
	for _, name := range []string{"shared/granted", "tenant/own"} {
		if !got[name] {
			t.Errorf("the scoped snapshot lacks Secret %s, which the Gateway may use", name)
		}
	}
}
