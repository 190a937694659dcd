package translate

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
)

// TestScopeSecurityPolicyOIDCClientSecret: a Gateway's own data plane
// receives the client Secret of its policies' oidc, and neither another
// Gateway's client Secret nor one of another namespace without a
// ReferenceGrant.
func TestScopeSecurityPolicyOIDCClientSecret(t *testing.T) {
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{securitypolicy.ClientSecretKey: []byte(name)}}
	}
	policy := func(name, gw string, ref gwv1.SecretObjectReference) *securitypolicy.SecurityPolicy {
		return &securitypolicy.SecurityPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}, Spec: securitypolicy.Spec{
			TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{
				Group: gwv1.GroupName, Kind: "Gateway", Name: gwv1.ObjectName(gw)}}},
			OIDC: &securitypolicy.OIDC{Provider: securitypolicy.OIDCProvider{Issuer: "https://idp.example"}, ClientID: name, ClientSecret: ref}}}
	}
	victim := gwv1.Namespace("victim")
	res := &snapshot.Resources{
		Gateways: []*gwv1.Gateway{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gw1"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gw2"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico"}},
		},
		Secrets: []*corev1.Secret{secret("tenant", "gw1-client"), secret("tenant", "gw2-client"), secret("victim", "client")},
		SecurityPolicies: []*securitypolicy.SecurityPolicy{
			policy("login1", "gw1", gwv1.SecretObjectReference{Name: "gw1-client"}),
			policy("steal", "gw1", gwv1.SecretObjectReference{Namespace: &victim, Name: "client"}),
			policy("login2", "gw2", gwv1.SecretObjectReference{Name: "gw2-client"}),
		},
	}
	out := Scope(res, nn("tenant", "gw1"))
	var secrets []string
	for _, s := range out.Secrets {
		secrets = append(secrets, s.Namespace+"/"+s.Name)
	}
	slices.Sort(secrets)
	if want := []string{"tenant/gw1-client"}; !slices.Equal(secrets, want) {
		t.Errorf("Secrets sent to gw1's data plane: %v, want %v", secrets, want)
	}
}
