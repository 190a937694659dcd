package kube

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

// TestSecurityPolicyAgainstAPIServer: against a real API server with the
// SecurityPolicy CRD of deploy/, the CRD's rules refuse what translate
// would call invalid (no mechanism, a sectionName on a Gateway, a bad
// CIDR, both header and query) with their messages; the leader writes the
// status of a policy whose htpasswd Secret carries the credentials label
// (ResolvedRefs=True: the labelled Secret is watched though it is not a
// TLS one) and of one whose Secret does not carry it (ResolvedRefs=False
// InvalidReference: Portico does not see it).
func TestSecurityPolicyAgainstAPIServer(t *testing.T) {
	pc := startPolicyCluster(t, "securitypolicy.yaml", source.SecurityPolicyResource, securitypolicy.APIVersion, securitypolicy.Kind)
	ctx, create := pc.ctx, pc.create

	for _, tc := range []struct{ spec, refusal string }{
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}]}`,
			"one of clientAddresses, apiKeyAuth, basicAuth, jwt, oidc, extAuth is required"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}], clientAddresses: {allow: [10.0.0.0/8]}}`,
			"sectionName names a rule of an HTTPRoute or GRPCRoute only"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], clientAddresses: {allow: [10.0.0.0/33]}}`,
			"allow holds CIDRs or addresses"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], apiKeyAuth: {credentialRefs: [{name: k}], extractFrom: {header: x-key, query: key}}}`,
			"exactly one of header and query is required"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: Service, name: web}], clientAddresses: {deny: [10.0.0.1]}}`,
			"Unsupported value"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], basicAuth: {users: {name: u}, realm: 'a"b'}}`,
			"should match"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], basicAuth: {users: {name: u}}, jwt: {providers: [{name: a, issuer: i, remoteJWKS: {uri: "https://i/jwks"}}]}}`,
			"basicAuth and jwt both read the Authorization header"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], jwt: {providers: [{name: a, issuer: i, remoteJWKS: {uri: "https://i/jwks"}, localJWKS: {inline: "{}"}}]}}`,
			"exactly one of remoteJWKS and localJWKS is required"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], jwt: {providers: [{name: a, issuer: i, remoteJWKS: {uri: "ftp://i/jwks"}}]}}`,
			"should match"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], jwt: {providers: [{name: a, issuer: i, remoteJWKS: {uri: "https://i/jwks"}, extractFrom: [{header: x-token, cookie: token}]}]}}`,
			"exactly one of header, cookie and param is required"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], jwt: {providers: [{name: a, issuer: i, remoteJWKS: {uri: "https://i/jwks"}, extractFrom: [{cookie: token, valuePrefix: "Bearer "}]}]}}`,
			"valuePrefix goes with header only"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], jwt: {providers: [{name: a, issuer: i, remoteJWKS: {uri: "https://i/jwks"}, claimToHeaders: [{header: Host, claim: sub}]}]}}`,
			"a claim may not set a header that frames or routes the request"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], jwt: {providers: [{name: a, issuer: i, remoteJWKS: {uri: "https://i/jwks"}}], requiredClaims: [{name: "realm_access..roles", values: [x]}]}}`,
			"should match"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], extAuth: {http: {backendRef: {name: authz, port: 9000}, address: "127.0.0.1:9191"}}}`,
			"exactly one of backendRef and address is required"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], extAuth: {http: {address: "127.0.0.1:9191", headersToAuth: ["a b"]}}}`,
			"should match"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], extAuth: {http: {backendRef: {name: authz}}}}`,
			"port: Required value"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], extAuth: {http: {address: "127.0.0.1:9191"}, grpc: {address: "127.0.0.1:9191"}}}`,
			"exactly one of http and grpc is required"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], extAuth: {grpc: {}}}`,
			"exactly one of backendRef and address is required"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], oidc: {provider: {issuer: "https://idp.example"}, clientID: c, clientSecret: {name: s}}, jwt: {providers: [{name: a, issuer: i, remoteJWKS: {uri: "https://i/jwks"}}]}}`,
			"oidc cannot be set with basicAuth or jwt"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], oidc: {provider: {issuer: "https://idp.example"}, clientID: c, clientSecret: {name: s}, forwardAccessToken: true, forwardIDToken: true}}`,
			"forwardAccessToken and forwardIDToken both set Authorization"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], oidc: {provider: {issuer: "https://idp.example"}, clientID: c, clientSecret: {name: s}, logoutPath: /oauth2/callback}}`,
			"redirectURL and logoutPath are the same path"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], oidc: {provider: {issuer: "https://idp.example"}, clientSecret: {name: s}}}`,
			"clientID: Required value"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], oidc: {provider: {issuer: "idp.example"}, clientID: c, clientSecret: {name: s}, redirectURL: "https://app/cb"}}`,
			"should match"},
	} {
		err := create("refused", tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("spec %s: %v, want a refusal saying %q", tc.spec, err, tc.refusal)
		}
	}

	pc.startGateway(18080)
	pc.createWebRoute()
	htpasswd := map[string][]byte{securitypolicy.HtpasswdKey: []byte("bob:{SHA}bOWgjgJew8XNjPXTyFghAc+ha1M=\n")}
	for name, labels := range map[string]map[string]string{"users": {securitypolicy.SecretLabel: "true"}, "unlabelled": nil} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels}, Data: htpasswd}
		if _, err := pc.f.Kube.CoreV1().Secrets("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := create("guard", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], basicAuth: {users: {name: users}}}`); err != nil {
		t.Fatal(err)
	}
	if err := create("tokens", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web, sectionName: api}], jwt: {providers: [{name: idp, issuer: "https://idp.example", audiences: [api], remoteJWKS: {uri: "https://idp.example/jwks", cacheDuration: 10m}, claimToHeaders: [{header: X-Sub, claim: sub}, {header: X-Roles, claim: realm_access.roles}, {header: X-Tenant, claim: 'https://example\.com/tenant'}], extractFrom: [{header: Authorization, valuePrefix: "Bearer "}, {cookie: session}, {param: access_token}], clockSkew: 1m}], requiredClaims: [{name: realm_access.roles, values: [staff]}], requiredScopes: [read]}}`); err != nil {
		t.Fatalf("a valid jwt policy was refused: %v", err)
	}
	if err := create("authz", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web, sectionName: api}], extAuth: {timeout: 500ms, failOpen: true, http: {backendRef: {name: authz, namespace: other, port: 9000}, path: /check, headersToAuth: [authorization], headersToBackend: [x-user]}}}`); err != nil {
		t.Fatalf("an extAuth the schema accepts was refused: %v", err)
	}
	// Accepted by the schema is all it shows: it goes, so that it does
	// not contend with "tokens" for the rule.
	if err := pc.policies.Delete(ctx, "authz", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := create("opa", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web, sectionName: api}], extAuth: {grpc: {backendRef: {name: opa, port: 9191}, headersToAuth: [authorization]}}}`); err != nil {
		t.Fatalf("a gRPC extAuth the schema accepts was refused: %v", err)
	}
	if err := pc.policies.Delete(ctx, "opa", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := create("unseen", `{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}], basicAuth: {users: {name: unlabelled}}}`); err != nil {
		t.Fatal(err)
	}

	ancestor := func(name, condition string, status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			p := &securitypolicy.SecurityPolicy{}
			if err := pc.get(name, p); err != nil {
				return err
			}
			for _, a := range p.Status.Ancestors {
				if ptr.Deref(a.AncestorRef.Kind, "") == "Gateway" && a.AncestorRef.Name == "gw" {
					return conditionIs(a.Conditions, condition, status, reason, p.Generation)
				}
			}
			return fmt.Errorf("no ancestor Gateway gw in %+v", p.Status.Ancestors)
		}
	}
	kubetest.WaitFor(t, 30*time.Second, "guard accepted on Gateway gw", ancestor("guard", string(gwv1.PolicyConditionAccepted), metav1.ConditionTrue, string(gwv1.PolicyReasonAccepted)))
	kubetest.WaitFor(t, 30*time.Second, "guard's Secret resolved", ancestor("guard", "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs"))
	kubetest.WaitFor(t, 30*time.Second, "unseen's Secret not found", ancestor("unseen", "ResolvedRefs", metav1.ConditionFalse, securitypolicy.ReasonInvalidReference))

	// OIDC: the client secret's Secret is found once it exists with the
	// credentials label, watched like the other Secrets of the policy.
	if err := pc.policies.Delete(ctx, "unseen", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := create("login", `{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}], oidc: {provider: {issuer: "https://idp.example", endSessionEndpoint: "https://idp.example/logout"}, clientID: portico, clientSecret: {name: oidc-client}, redirectURL: /auth/callback, scopes: [email, offline_access], forwardIDToken: true, cookieNamePrefix: app, cookieDomain: app.example, refreshBefore: 2m, sessionLifetime: 8h, clockSkew: 10s}}`); err != nil {
		t.Fatalf("a valid oidc policy was refused: %v", err)
	}
	kubetest.WaitFor(t, 30*time.Second, "login's client Secret not found", ancestor("login", "ResolvedRefs", metav1.ConditionFalse, securitypolicy.ReasonInvalidReference))
	client := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "oidc-client", Namespace: "default", Labels: map[string]string{securitypolicy.SecretLabel: "true"}},
		Data: map[string][]byte{securitypolicy.ClientSecretKey: []byte("s3cret")}}
	if _, err := pc.f.Kube.CoreV1().Secrets("default").Create(ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitFor(t, 30*time.Second, "login's client Secret resolved", ancestor("login", "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs"))
}
