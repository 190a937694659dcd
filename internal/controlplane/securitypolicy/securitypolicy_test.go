package securitypolicy

import (
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func route(name string) gwv1.LocalPolicyTargetReferenceWithSectionName {
	return gwv1.LocalPolicyTargetReferenceWithSectionName{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{
		Group: gwv1.GroupName, Kind: "HTTPRoute", Name: gwv1.ObjectName(name)}}
}

// TestValidate: each rule of the CRD is checked again, with the field
// named in the message.
func TestValidate(t *testing.T) {
	ok := Spec{TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{route("web")}, ClientAddresses: &ClientAddresses{Allow: []string{"10.0.0.0/8", "::1"}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{ClientAddresses: ok.ClientAddresses}, "spec.targetRefs: between 1 and 16"},
		{Spec{TargetRefs: ok.TargetRefs}, "one of clientAddresses, apiKeyAuth, basicAuth, jwt, oidc, extAuth is required"},
		{Spec{TargetRefs: ok.TargetRefs, ClientAddresses: &ClientAddresses{Deny: []string{"10.0.0.0/33"}}}, "spec.clientAddresses.deny[0]"},
		{Spec{TargetRefs: ok.TargetRefs, ClientAddresses: &ClientAddresses{}}, "allow or deny is required"},
		{Spec{TargetRefs: ok.TargetRefs, APIKeyAuth: &APIKeyAuth{CredentialRefs: []gwv1.SecretObjectReference{{Name: "k"}}, ExtractFrom: KeySource{Header: "a", Query: "b"}}}, "exactly one of header and query"},
		{Spec{TargetRefs: ok.TargetRefs, APIKeyAuth: &APIKeyAuth{ExtractFrom: KeySource{Header: "a"}}}, "spec.apiKeyAuth.credentialRefs"},
		{Spec{TargetRefs: ok.TargetRefs, BasicAuth: &BasicAuth{Users: gwv1.SecretObjectReference{Name: "u", Kind: ptr.To(gwv1.Kind("ConfigMap"))}}}, "only Secrets are read"},
		{Spec{TargetRefs: ok.TargetRefs, BasicAuth: &BasicAuth{Users: gwv1.SecretObjectReference{Name: "u"}, Realm: `a"b`}}, "spec.basicAuth.realm"},
		{Spec{TargetRefs: ok.TargetRefs, BasicAuth: &BasicAuth{Users: gwv1.SecretObjectReference{Name: "u"}, ForwardUsernameHeader: "a b"}}, "forwardUsernameHeader"},
		{Spec{TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Group: gwv1.GroupName, Kind: "Gateway", Name: "gw"},
			SectionName: ptr.To(gwv1.SectionName("http"))}}, ClientAddresses: ok.ClientAddresses}, "only a route's rule may be named"},
		{Spec{TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{{LocalPolicyTargetReference: gwv1.LocalPolicyTargetReference{Kind: "Service", Name: "s"}}}, ClientAddresses: ok.ClientAddresses}, `"Service" is not one of`},
	} {
		err := tc.spec.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.spec, err, tc.want)
		}
	}
}

// TestParseHtpasswd: bcrypt and {SHA} lines are read, comments and blank
// lines skipped; any other hash, a line without a colon or a user twice
// refuses the file, naming the line and not its content.
func TestParseHtpasswd(t *testing.T) {
	users, err := ParseHtpasswd([]byte("# team\n\nalice:$2a$04$DdzUPzUL4gdhctm0bss0reHl87v3d1kB.RPrf5jbcz4MKdCK1TnPC\nbob:{SHA}bOWgjgJew8XNjPXTyFghAc+ha1M=\n"))
	if err != nil || len(users) != 2 || users["bob"] != "{SHA}bOWgjgJew8XNjPXTyFghAc+ha1M=" {
		t.Fatalf("%v %v", users, err)
	}
	for _, bad := range []string{"carol:$apr1$x$secretsecret", "dave:plaintext-password", "nocolon", "bob:{SHA}short", "", "# only a comment"} {
		_, err := ParseHtpasswd([]byte(bad))
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "plaintext") {
			t.Errorf("%q: the error shows the line: %v", bad, err)
		}
	}
}

// TestParsePrefix: CIDRs come out masked, addresses as prefixes of their
// length, IPv4-mapped IPv6 as IPv4.
func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{"10.1.2.3/8": "10.0.0.0/8", "::1": "::1/128", "192.0.2.7": "192.0.2.7/32",
		"::ffff:10.0.0.0/104": "10.0.0.0/8", "2001:db8::1/32": "2001:db8::/32"} {
		p, err := ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("%s: %v %v, want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "nope", "10.0.0.0/"} {
		if _, err := ParsePrefix(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// TestGranted: a Secret of the policy's namespace needs no grant; one of
// another needs a ReferenceGrant there from SecurityPolicies of the
// policy's namespace, to that Secret or every Secret.
func TestGranted(t *testing.T) {
	grant := func(ns, fromNS, fromKind string, name *gwv1.ObjectName) *gwv1.ReferenceGrant {
		return &gwv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: ns}, Spec: gwv1.ReferenceGrantSpec{
			From: []gwv1.ReferenceGrantFrom{{Group: Group, Kind: gwv1.Kind(fromKind), Namespace: gwv1.Namespace(fromNS)}},
			To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret", Name: name}}}}
	}
	secret := types.NamespacedName{Namespace: "vault", Name: "keys"}
	for _, tc := range []struct {
		grants []*gwv1.ReferenceGrant
		want   bool
	}{
		{nil, false},
		{[]*gwv1.ReferenceGrant{grant("vault", "apps", Kind, nil)}, true},
		{[]*gwv1.ReferenceGrant{grant("vault", "apps", Kind, ptr.To(gwv1.ObjectName("keys")))}, true},
		{[]*gwv1.ReferenceGrant{grant("vault", "apps", Kind, ptr.To(gwv1.ObjectName("other")))}, false},
		{[]*gwv1.ReferenceGrant{grant("vault", "other", Kind, nil)}, false},
		{[]*gwv1.ReferenceGrant{grant("vault", "apps", "BackendTrafficPolicy", nil)}, false},
		{[]*gwv1.ReferenceGrant{grant("apps", "apps", Kind, nil)}, false},
	} {
		if got := Granted(tc.grants, "apps", secret); got != tc.want {
			t.Errorf("%d grants: %v, want %v", len(tc.grants), got, tc.want)
		}
	}
	if !Granted(nil, "vault", secret) {
		t.Error("a Secret of the policy's own namespace needs no grant")
	}
}

// TestValidateJWTExtraction: a provider's places and claim paths are
// refused with the field named when they cannot be read: a place naming
// two kinds or none, a prefix without a header, a claim path with an
// empty name or a dangling escape, a claim set into a header that frames
// the request; the forms the data plane reads are accepted.
func TestValidateJWTExtraction(t *testing.T) {
	spec := func(p JWTProvider, claims ...RequiredClaim) Spec {
		p.Name, p.Issuer, p.RemoteJWKS = "idp", "https://idp.example", &RemoteJWKS{URI: "https://idp.example/jwks"}
		return Spec{TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{route("web")}, JWT: &JWT{Providers: []JWTProvider{p}, RequiredClaims: claims}}
	}
	good := spec(JWTProvider{
		ExtractFrom:    []TokenSource{{Header: "Authorization", ValuePrefix: "Bearer "}, {Cookie: "session"}, {Param: "access_token"}},
		ClaimToHeaders: []ClaimToHeader{{Header: "X-Roles", Claim: "realm_access.roles"}, {Header: "X-Tenant", Claim: `https://example\.com/tenant`}},
	}, RequiredClaim{Name: "realm_access.roles", Values: []string{"staff"}})
	if err := good.Validate(); err != nil {
		t.Fatalf("valid spec refused: %v", err)
	}
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{spec(JWTProvider{ExtractFrom: []TokenSource{{Header: "X-Token", Cookie: "t"}}}), "spec.jwt.providers[0].extractFrom[0]: exactly one of header, cookie and param"},
		{spec(JWTProvider{ExtractFrom: []TokenSource{{}}}), "spec.jwt.providers[0].extractFrom[0]: exactly one of header, cookie and param"},
		{spec(JWTProvider{ExtractFrom: []TokenSource{{Cookie: "t", ValuePrefix: "Bearer "}}}), "extractFrom[0].valuePrefix"},
		{spec(JWTProvider{ExtractFrom: []TokenSource{{Cookie: "a b"}}}), "extractFrom[0].cookie"},
		{spec(JWTProvider{ExtractFrom: make([]TokenSource, MaxTokenSources+1)}), "at most 8 places"},
		{spec(JWTProvider{ClaimToHeaders: []ClaimToHeader{{Header: "X-R", Claim: "a..b"}}}), "claimToHeaders[0].claim: claim path \"a..b\": an empty name"},
		{spec(JWTProvider{ClaimToHeaders: []ClaimToHeader{{Header: "X-R", Claim: `a\b`}}}), "claimToHeaders[0].claim"},
		{spec(JWTProvider{ClaimToHeaders: []ClaimToHeader{{Header: "Transfer-Encoding", Claim: "sub"}}}), "claimToHeaders[0].header: \"Transfer-Encoding\" is not a header a claim may set"},
		{spec(JWTProvider{}, RequiredClaim{Name: "a.", Values: []string{"x"}}), "spec.jwt.requiredClaims[0].name"},
		{spec(JWTProvider{}, RequiredClaim{Name: "a.b.c.d.e.f.g.h.i", Values: []string{"x"}}), "more than 8 names"},
	} {
		err := tc.spec.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.spec.JWT.Providers[0], err, tc.want)
		}
	}
}

// TestJWTFieldsSurviveCopies: the JWT fields this policy's JSON carries
// (extractFrom, claim paths) survive DeepCopy, the JSON round trip the
// informers' caches and the per-Gateway stream (configstream) make of it.
func TestJWTFieldsSurviveCopies(t *testing.T) {
	p := &SecurityPolicy{Spec: Spec{TargetRefs: []gwv1.LocalPolicyTargetReferenceWithSectionName{route("web")}, JWT: &JWT{
		Providers: []JWTProvider{{Name: "idp", Issuer: "i", RemoteJWKS: &RemoteJWKS{URI: "https://i/jwks"},
			ExtractFrom:    []TokenSource{{Header: "X-Token", ValuePrefix: "Token "}, {Cookie: "session"}, {Param: "access_token"}},
			ClaimToHeaders: []ClaimToHeader{{Header: "X-Tenant", Claim: `https://example\.com/tenant`}}}},
		RequiredClaims: []RequiredClaim{{Name: "realm_access.roles", Values: []string{"staff"}}},
	}}}
	if got := p.DeepCopy(); !reflect.DeepEqual(got.Spec, p.Spec) {
		t.Errorf("DeepCopy lost JWT fields:\n%+v\nwant\n%+v", got.Spec.JWT, p.Spec.JWT)
	}
}
