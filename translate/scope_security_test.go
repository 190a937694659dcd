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

// TestScopeSecurityPolicySecrets: the snapshot a Gateway's own data plane
// receives holds the SecurityPolicies of the Gateway and of its routes,
// with the Secrets they may read (their namespace's, or granted), and
// nothing of another Gateway's policies: not their htpasswd files nor
// their keys, and not a Secret of another namespace a policy names
// without a ReferenceGrant.
func TestScopeSecurityPolicySecrets(t *testing.T) {
	secret := func(ns, name string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{securitypolicy.HtpasswdKey: []byte("u:{SHA}x")}}
	}
	route := func(name, gw string) *gwv1.HTTPRoute {
		return &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}, Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: gwv1.ObjectName(gw)}}}}}
	}
	policy := func(name, kind, target string, users gwv1.SecretObjectReference) *securitypolicy.SecurityPolicy {
		return &securitypolicy.SecurityPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}, Spec: securitypolicy.Spec{
			TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{
				Group: gwv1.GroupName, Kind: gwv1.Kind(kind), Name: gwv1.ObjectName(target)}}},
			BasicAuth: &securitypolicy.BasicAuth{Users: users}}}
	}
	victim := gwv1.Namespace("victim")
	res := &snapshot.Resources{
		Gateways: []*gwv1.Gateway{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gw1"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gw2"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico"}},
		},
		HTTPRoutes: []*gwv1.HTTPRoute{route("r1", "gw1"), route("r2", "gw2")},
		Secrets: []*corev1.Secret{secret("tenant", "gw1-users"), secret("tenant", "r1-users"), secret("tenant", "gw2-users"),
			secret("victim", "keys"), secret("tenant", "unrelated")},
		SecurityPolicies: []*securitypolicy.SecurityPolicy{
			policy("on-gw1", "Gateway", "gw1", gwv1.SecretObjectReference{Name: "gw1-users"}),
			policy("on-r1", "HTTPRoute", "r1", gwv1.SecretObjectReference{Name: "r1-users"}),
			policy("steal", "HTTPRoute", "r1", gwv1.SecretObjectReference{Namespace: &victim, Name: "keys"}),
			policy("on-gw2", "Gateway", "gw2", gwv1.SecretObjectReference{Name: "gw2-users"}),
		},
	}
	out := Scope(res, nn("tenant", "gw1"))
	var secrets, policies []string
	for _, s := range out.Secrets {
		secrets = append(secrets, s.Namespace+"/"+s.Name)
	}
	for _, p := range out.SecurityPolicies {
		policies = append(policies, p.Name)
	}
	slices.Sort(secrets)
	slices.Sort(policies)
	if want := []string{"tenant/gw1-users", "tenant/r1-users"}; !slices.Equal(secrets, want) {
		t.Errorf("Secrets sent to gw1's data plane: %v, want %v", secrets, want)
	}
	if want := []string{"on-gw1", "on-r1", "steal"}; !slices.Equal(policies, want) {
		t.Errorf("SecurityPolicies sent to gw1's data plane: %v, want %v", policies, want)
	}
	for _, p := range out.SecurityPolicies {
		if len(p.Status.Ancestors) != 0 {
			t.Errorf("%s sent with its status", p.Name)
		}
	}
}

// TestScopeSecurityPolicyExtAuthService: a Gateway's own data plane
// receives the Service (and its EndpointSlices) its policies' extAuth
// asks, and not that of another Gateway's policy, nor one of another
// namespace no ReferenceGrant lets its policy use.
func TestScopeSecurityPolicyExtAuthService(t *testing.T) {
	port := gwv1.PortNumber(9000)
	route := func(name, gw string) *gwv1.HTTPRoute {
		return &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}, Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: gwv1.ObjectName(gw)}}}}}
	}
	policy := func(name, route, svc string) *securitypolicy.SecurityPolicy {
		return &securitypolicy.SecurityPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}, Spec: securitypolicy.Spec{
			TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{
				Group: gwv1.GroupName, Kind: "HTTPRoute", Name: gwv1.ObjectName(route)}}},
			ExtAuth: &securitypolicy.ExtAuth{GRPC: &securitypolicy.GRPCExtAuth{BackendRef: &gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: &port}}}}}
	}
	svc := func(name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}}
	}
	res := &snapshot.Resources{
		Gateways: []*gwv1.Gateway{
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gw1"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico"}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "gw2"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico"}},
		},
		HTTPRoutes:       []*gwv1.HTTPRoute{route("r1", "gw1"), route("r2", "gw2")},
		Services:         []*corev1.Service{svc("authz1"), svc("authz2")},
		SecurityPolicies: []*securitypolicy.SecurityPolicy{policy("p1", "r1", "authz1"), policy("p2", "r2", "authz2"), policy("steal", "r1", "victim-svc")},
	}
	victim := gwv1.Namespace("victim")
	res.SecurityPolicies[2].Spec.ExtAuth.GRPC.BackendRef.Namespace = &victim
	res.Services = append(res.Services, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "victim-svc"}})
	out := Scope(res, nn("tenant", "gw1"))
	var names []string
	for _, s := range out.Services {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"authz1"}) {
		t.Fatalf("gw1's data plane got Services %v, want [authz1]", names)
	}
}
