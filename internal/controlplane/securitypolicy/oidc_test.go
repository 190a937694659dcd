package securitypolicy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func oidcSpec(mod func(*OIDC)) Spec {
	o := &OIDC{Provider: OIDCProvider{Issuer: "https://idp.example"}, ClientID: "portico", ClientSecret: gwv1.SecretObjectReference{Name: "oidc"}}
	if mod != nil {
		mod(o)
	}
	return Spec{TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{route("web")}, OIDC: o}
}

// TestValidateOIDC: each rule of the oidc section, with the field named.
func TestValidateOIDC(t *testing.T) {
	if s := oidcSpec(nil); s.Validate() != nil {
		t.Fatalf("valid spec refused: %v", s.Validate())
	}
	d := func(s string) *gwv1.Duration { return ptr.To(gwv1.Duration(s)) }
	for _, tc := range []struct {
		mod  func(*OIDC)
		want string
	}{
		{func(o *OIDC) { o.Provider.Issuer = "idp.example" }, "spec.oidc.provider.issuer"},
		{func(o *OIDC) { o.Provider.TokenEndpoint = "ftp://x/token" }, "spec.oidc.provider.tokenEndpoint"},
		{func(o *OIDC) { o.ClientID = "" }, "spec.oidc.clientID"},
		{func(o *OIDC) { o.ClientSecret.Name = "" }, "spec.oidc.clientSecret: name is required"},
		{func(o *OIDC) { o.RedirectURL = "https://app.example/cb" }, "spec.oidc.redirectURL"},
		{func(o *OIDC) { o.LogoutPath = "/a/../b" }, "spec.oidc.logoutPath"},
		{func(o *OIDC) { o.LogoutPath = DefaultOIDCRedirectURL }, "redirectURL and logoutPath are the same path"},
		{func(o *OIDC) { o.Scopes = []string{"a b"} }, "spec.oidc.scopes[0]"},
		{func(o *OIDC) { o.ForwardAccessToken, o.ForwardIDToken = true, true }, "forwardAccessToken and forwardIDToken"},
		{func(o *OIDC) { o.CookieNamePrefix = "a;b" }, "spec.oidc.cookieNamePrefix"},
		{func(o *OIDC) { o.CookieDomain = "a;b" }, "spec.oidc.cookieDomain"},
		{func(o *OIDC) { o.SessionLifetime = d("10s") }, "spec.oidc.sessionLifetime"},
		{func(o *OIDC) { o.RefreshBefore = d("2h") }, "spec.oidc.refreshBefore"},
		{func(o *OIDC) { o.ClockSkew = d("x") }, "spec.oidc.clockSkew"},
	} {
		s := oidcSpec(tc.mod)
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error saying %q", err, tc.want)
		}
	}
	s := oidcSpec(nil)
	s.JWT = &JWT{Providers: []JWTProvider{{Name: "a", Issuer: "x", LocalJWKS: &LocalJWKS{Inline: "{}"}}}}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "oidc cannot be set with basicAuth or jwt") {
		t.Errorf("oidc with jwt: %v", err)
	}
	s = oidcSpec(nil)
	s.ClientAddresses = &ClientAddresses{Allow: []string{"10.0.0.0/8"}}
	if err := s.Validate(); err != nil {
		t.Errorf("oidc with clientAddresses refused: %v", err)
	}
}

// TestCompileOIDC: the client secret comes from its Secret (granted),
// defaults are filled in and "openid" is asked once, first.
func TestCompileOIDC(t *testing.T) {
	p := &SecurityPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "login"}, Spec: oidcSpec(func(o *OIDC) {
		o.Scopes = []string{"email", "openid"}
		o.ClientSecret.Namespace = ptr.To(gwv1.Namespace("vault"))
	})}
	secret := &corev1.Secret{Data: map[string][]byte{ClientSecretKey: []byte("s3cret\n")}}
	secrets := func(k types.NamespacedName) *corev1.Secret {
		if k == (types.NamespacedName{Namespace: "vault", Name: "oidc"}) {
			return secret
		}
		return nil
	}
	if refs := p.SecretRefs(); len(refs) != 1 || refs[0].String() != "vault/oidc" {
		t.Fatalf("SecretRefs = %v, want the client secret's", refs)
	}
	out, prob := Compile(p, nil, secrets)
	if prob == nil || prob.Reason != ReasonRefNotPermitted || out.Invalid == "" {
		t.Fatalf("a Secret of another namespace without a grant: %+v %+v", out, prob)
	}
	grant := &gwv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "vault"}, Spec: gwv1.ReferenceGrantSpec{
		From: []gwv1.ReferenceGrantFrom{{Group: Group, Kind: Kind, Namespace: "apps"}},
		To:   []gwv1.ReferenceGrantTo{{Kind: "Secret"}}}}
	out, prob = Compile(p, []*gwv1.ReferenceGrant{grant}, secrets)
	if prob != nil || out.OIDC == nil {
		t.Fatalf("granted: %+v", prob)
	}
	o := out.OIDC
	if o.ClientSecret() != "s3cret" || o.RedirectPath != DefaultOIDCRedirectURL || o.LogoutPath != DefaultOIDCLogoutPath ||
		o.CookiePrefix != DefaultOIDCCookiePrefix || !o.Refresh || o.SessionLifetime != DefaultOIDCSessionLifetime ||
		strings.Join(o.Scopes, " ") != "openid email" || o.SecretRef != "vault/oidc" {
		t.Fatalf("compiled %+v", o)
	}
	delete(secret.Data, ClientSecretKey)
	if _, prob := Compile(p, []*gwv1.ReferenceGrant{grant}, secrets); prob == nil || !strings.Contains(prob.Message, "has no key client-secret") {
		t.Fatalf("a Secret without the key: %+v", prob)
	}
}
