package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/jose"
)

// claimPath parses a claim path or fails the test.
func claimPath(t testing.TB, s string) []string {
	t.Helper()
	p, err := jose.ParseClaimPath(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestJWTExtractFrom: a provider that looks in a header after a prefix,
// a cookie and a query parameter takes a token from each; the token is
// removed from where it was found (the other cookies and parameters left
// as they were sent) unless forwardToken; nested, escaped and typed
// claims are set in headers and required (403 when they do not hold).
// A token in the Authorization header, where this provider does not
// look, is not one (401).
func TestJWTExtractFrom(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p := localProvider(t, "https://idp.example", ecJWK("k", &k.PublicKey))
	p.ExtractFrom = []config.TokenSource{{Header: "X-Token", ValuePrefix: "Token "}, {Cookie: "session"}, {Param: "access_token"}}
	p.ClaimToHeaders = []config.ClaimHeader{
		{Claim: "realm_access.roles", Header: "X-Roles", Path: claimPath(t, "realm_access.roles")},
		{Claim: `https://example\.com/tenant`, Header: "X-Tenant", Path: claimPath(t, `https://example\.com/tenant`)},
		{Claim: "level", Header: "X-Level"},
		{Claim: "email_verified", Header: "X-Verified"},
	}
	j := &config.JWTAuth{Providers: []*config.JWTProvider{p}, RequiredClaims: []config.RequiredClaim{
		{Name: "realm_access.roles", Path: claimPath(t, "realm_access.roles"), Values: []string{"staff"}},
		{Name: "level", Values: []string{"3", "4"}},
		{Name: "email_verified", Values: []string{"true"}},
	}}
	g := startGuarded(t, &config.Security{JWT: j})
	claims := func(edit func(map[string]any)) map[string]any {
		c := idpClaims()
		c["realm_access"] = map[string]any{"roles": []string{"staff", "user"}}
		c["https://example.com/tenant"] = "acme"
		c["level"] = 3
		c["email_verified"] = true
		if edit != nil {
			edit(c)
		}
		return c
	}
	hdr := map[string]any{"alg": "ES256", "kid": "k"}
	tok := signedToken(t, hdr, claims(nil), es256(k))

	for _, tc := range []struct {
		name, path string
		h          [][2]string
		wantURI    string
		wantCookie string
	}{
		{"header", "/", [][2]string{{"X-Token", "token  " + tok}}, "/", ""},
		{"cookie", "/", [][2]string{{"Cookie", "theme=dark; session=" + tok + "; lang=en"}}, "/", "theme=dark; lang=en"},
		{"cookie quoted, alone", "/", [][2]string{{"Cookie", `session="` + tok + `"`}}, "/", ""},
		{"query", "/?a=1&access_token=" + tok + "&b=2", nil, "/?a=1&b=2", ""},
		{"query alone", "/?access_token=" + tok, nil, "/", ""},
	} {
		code, _, _ := g.do(t, "", tc.path, tc.h)
		if code != 200 {
			t.Errorf("%s: %d", tc.name, code)
			continue
		}
		seen := g.backend.last(t)
		if strings.Contains(seen, tok[:40]) {
			t.Errorf("%s: the token reached the backend:\n%s", tc.name, seen)
		}
		if uri, _, _ := strings.Cut(seen, "\n"); uri != "GET "+tc.wantURI {
			t.Errorf("%s: the backend got %q, want %q", tc.name, uri, "GET "+tc.wantURI)
		}
		if tc.wantCookie != "" && !strings.Contains(seen, "Cookie: "+tc.wantCookie+"\r\n") {
			t.Errorf("%s: the other cookies not kept:\n%s", tc.name, seen)
		}
		for _, h := range []string{"X-Roles: staff,user", "X-Tenant: acme", "X-Level: 3", "X-Verified: true"} {
			if !strings.Contains(seen, h+"\r\n") {
				t.Errorf("%s: no %q:\n%s", tc.name, h, seen)
			}
		}
	}

	before := len(g.backend.requests())
	for _, tc := range []struct {
		name string
		h    [][2]string
		code int
	}{
		{"Authorization, where the provider does not look", [][2]string{bearer(tok)}, 401},
		{"X-Token without its prefix", [][2]string{{"X-Token", tok}}, 401},
		{"X-Token after another prefix", [][2]string{{"X-Token", "Bearer " + tok}}, 401},
		{"another cookie's name", [][2]string{{"Cookie", "sessionx=" + tok}}, 401},
		{"role missing", [][2]string{{"X-Token", "Token " + signedToken(t, hdr, claims(func(c map[string]any) { c["realm_access"] = map[string]any{"roles": []string{"user"}} }), es256(k))}}, 403},
		{"roles flat, not nested", [][2]string{{"X-Token", "Token " + signedToken(t, hdr, claims(func(c map[string]any) { delete(c, "realm_access"); c["realm_access.roles"] = "staff" }), es256(k))}}, 403},
		{"level too low", [][2]string{{"X-Token", "Token " + signedToken(t, hdr, claims(func(c map[string]any) { c["level"] = 2 }), es256(k))}}, 403},
		{"level as a string", [][2]string{{"X-Token", "Token " + signedToken(t, hdr, claims(func(c map[string]any) { c["level"] = "3" }), es256(k))}}, 200},
		{"email not verified", [][2]string{{"X-Token", "Token " + signedToken(t, hdr, claims(func(c map[string]any) { c["email_verified"] = false }), es256(k))}}, 403},
		{"email_verified as an object", [][2]string{{"X-Token", "Token " + signedToken(t, hdr, claims(func(c map[string]any) { c["email_verified"] = map[string]any{"v": true} }), es256(k))}}, 403},
	} {
		if code, _, _ := g.do(t, "", "/", tc.h); code != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.code)
		}
	}
	if n := len(g.backend.requests()) - before; n != 1 {
		t.Errorf("the backend got %d requests, want the one allowed", n)
	}

	// forwardToken: the token stays where it was.
	fwd := *j
	fwd.ForwardToken = true
	g = startGuarded(t, &config.Security{JWT: &fwd})
	if code, _, _ := g.do(t, "", "/?access_token="+tok, [][2]string{{"Cookie", "a=b"}}); code != 200 {
		t.Fatalf("forwardToken: %d", code)
	}
	if seen := g.backend.last(t); !strings.HasPrefix(seen, "GET /?access_token="+tok+"\n") || !strings.Contains(seen, "Cookie: a=b\r\n") {
		t.Errorf("forwardToken: the token was not forwarded:\n%s", seen)
	}
}

// TestAttackJWTTokenPlaces: a request that carries two different tokens
// in the places the policy reads (a header and a cookie, of two
// providers), or one place twice, is refused with 400 whichever token is
// valid; the same token in two places passes and is removed from both.
// A token of one provider slipped into the place only another provider
// reads is refused. Oversized tokens in a header, a cookie or a query
// parameter, and an oversized Cookie header, never reach the backend.
func TestAttackJWTTokenPlaces(t *testing.T) {
	ka, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	kb, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	a := localProvider(t, "https://a.example", ecJWK("a", &ka.PublicKey))
	a.ExtractFrom = []config.TokenSource{{Cookie: "session"}, {Param: "token"}}
	b := localProvider(t, "https://b.example", ecJWK("b", &kb.PublicKey))
	g := startGuarded(t, &config.Security{JWT: &config.JWTAuth{Providers: []*config.JWTProvider{a, b}}})
	tokA := func(sub string) string {
		c := idpClaims()
		c["iss"], c["sub"] = "https://a.example", sub
		return signedToken(t, map[string]any{"alg": "ES256", "kid": "a"}, c, es256(ka))
	}
	tokB := func(sub string) string {
		c := idpClaims()
		c["iss"], c["sub"] = "https://b.example", sub
		return signedToken(t, map[string]any{"alg": "ES256", "kid": "b"}, c, es256(kb))
	}
	forged := tokA("mallory")
	forged = forged[:strings.LastIndexByte(forged, '.')] + "." + b64url(make([]byte, 64))
	big := tokA(strings.Repeat("x", jose.MaxToken))

	if code, _, _ := g.do(t, "", "/", [][2]string{{"Cookie", "session=" + tokA("alice")}}); code != 200 {
		t.Fatalf("a's token in its cookie: %d", code)
	}
	if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tokB("bob"))}); code != 200 {
		t.Fatalf("b's token in Authorization: %d", code)
	}
	same := tokA("carol")
	if code, _, _ := g.do(t, "", "/?token="+same, [][2]string{{"Cookie", "session=" + same}}); code != 200 {
		t.Fatalf("one token in two places: %d", code)
	}
	if seen := g.backend.last(t); strings.Contains(seen, same[:40]) || !strings.HasPrefix(seen, "GET /\n") {
		t.Errorf("the token was left in one of its places:\n%s", seen)
	}

	before := len(g.backend.requests())
	for _, tc := range []struct {
		name, path string
		h          [][2]string
		code       int
	}{
		{"valid cookie, forged header", "/", [][2]string{{"Cookie", "session=" + tokA("alice")}, bearer(forged)}, 400},
		{"forged cookie, valid header", "/", [][2]string{{"Cookie", "session=" + forged}, bearer(tokB("bob"))}, 400},
		{"two valid tokens of two providers", "/", [][2]string{{"Cookie", "session=" + tokA("alice")}, bearer(tokB("bob"))}, 400},
		{"valid cookie, forged parameter", "/?token=" + forged, [][2]string{{"Cookie", "session=" + tokA("alice")}}, 400},
		{"the cookie twice in one header", "/", [][2]string{{"Cookie", "session=" + tokA("alice") + "; session=" + forged}}, 400},
		{"the cookie twice in two headers", "/", [][2]string{{"Cookie", "session=" + forged}, {"Cookie", "session=" + tokA("alice")}}, 400},
		{"the parameter twice", "/?token=" + tokA("alice") + "&tok%65n=" + forged, nil, 400},
		{"two Authorization headers", "/", [][2]string{bearer(tokB("bob")), bearer(forged)}, 400},
		{"b's token in a's cookie", "/", [][2]string{{"Cookie", "session=" + tokB("bob")}}, 401},
		{"a's token in b's header", "/", [][2]string{bearer(tokA("alice"))}, 401},
		{"oversized token in the header", "/", [][2]string{bearer(big)}, 401},
		{"oversized token in the cookie", "/", [][2]string{{"Cookie", "session=" + big}}, 401},
		{"oversized token in the parameter", "/?token=" + big, nil, 401},
	} {
		code, _, _ := g.do(t, "", tc.path, tc.h)
		// An oversized request may be refused before the policy sees it
		// (431, 414): what matters is that it is refused.
		if code != tc.code && !(strings.HasPrefix(tc.name, "oversized") && code >= 400) {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.code)
		}
	}
	// A Cookie header beyond the request's header limit, holding a valid
	// token among padding cookies.
	pad := strings.Repeat("p=0123456789abcdef; ", 64<<10/20)
	if code, _, _ := g.do(t, "", "/", [][2]string{{"Cookie", pad + "session=" + tokA("alice")}}); code < 400 {
		t.Errorf("an oversized Cookie header: %d", code)
	}
	if n := len(g.backend.requests()) - before; n != 0 {
		t.Errorf("the backend got %d refused requests", n)
	}
	if got := g.obs.count("jwt:malformed"); got != 8 {
		t.Errorf("jwt:malformed counted %d, want 8", got)
	}
}

// TestAttackJWTClaimHeaderInjection: claims that would end a header and
// start another (CR LF), cut it (NUL), or carry a large value are not set
// as headers, nor is the header of that name the client sent kept; the
// backend gets one request with no header the token made up, and the
// safe claims' headers.
func TestAttackJWTClaimHeaderInjection(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p := localProvider(t, "https://idp.example", ecJWK("k", &k.PublicKey))
	for _, c := range [][2]string{{"sub", "X-Sub"}, {"name", "X-Name"}, {"groups", "X-Groups"}, {"blob", "X-Blob"}, {"org.name", "X-Org"}, {"org.unit", "X-Unit"}, {"org", "X-Org-Object"}} {
		p.ClaimToHeaders = append(p.ClaimToHeaders, config.ClaimHeader{Claim: c[0], Header: c[1], Path: claimPath(t, c[0])})
	}
	g := startGuarded(t, &config.Security{JWT: &config.JWTAuth{Providers: []*config.JWTProvider{p}}})
	c := idpClaims()
	c["sub"] = "alice\r\nX-Admin: true"
	c["name"] = "bob\x00root"
	c["groups"] = []string{"staff", "a\nX-Admin: true"}
	c["blob"] = strings.Repeat("b", config.MaxClaimHeader+1)
	c["org"] = map[string]any{"name": "acme", "unit": "r&d\r\n\r\nGET /admin HTTP/1.1"}
	tok := signedToken(t, map[string]any{"alg": "ES256", "kid": "k"}, c, es256(k))
	code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok), {"X-Sub", "root"}, {"X-Name", "root"}, {"X-Blob", "mine"}})
	if code != 200 {
		t.Fatalf("a valid token: %d", code)
	}
	seen := g.backend.requests()
	if len(seen) != 1 {
		t.Fatalf("the backend got %d requests, want 1:\n%s", len(seen), strings.Join(seen, "\n---\n"))
	}
	for _, bad := range []string{"X-Admin", "X-Sub", "X-Name", "X-Groups", "X-Blob", "X-Unit", "X-Org-Object", "root", "/admin"} {
		if strings.Contains(seen[0], bad) {
			t.Errorf("the backend got %q:\n%s", bad, seen[0])
		}
	}
	if !strings.Contains(seen[0], "X-Org: acme\r\n") {
		t.Errorf("the safe nested claim is not set:\n%s", seen[0])
	}
}

// TestAttackJWTCacheExpiry: a token taken from the cache of verified
// tokens stops passing when it expires (no skew here): the cache does
// not stretch a token's life.
func TestAttackJWTCacheExpiry(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p := localProvider(t, "https://idp.example", ecJWK("k", &k.PublicKey))
	p.ClockSkew = 0
	g := startGuarded(t, &config.Security{JWT: &config.JWTAuth{Providers: []*config.JWTProvider{p}}})
	c := idpClaims()
	exp := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	c["exp"] = exp.Unix()
	tok := signedToken(t, map[string]any{"alg": "ES256", "kid": "k"}, c, es256(k))
	for range 3 {
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok)}); code != 200 {
			t.Fatalf("before its expiry: %d", code)
		}
	}
	if n, _ := g.rt.fwd.guard.tokens.size(); n != 1 {
		t.Fatalf("%d tokens cached, want 1", n)
	}
	time.Sleep(time.Until(exp) + 50*time.Millisecond)
	if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok)}); code != 401 {
		t.Errorf("after its expiry, cached before: %d, want 401", code)
	}
}

// TestAttackJWTCacheKeyRemoved: a token verified and cached stops passing
// once its key leaves the provider's keys: removed from the issuer's
// JWKS (seen at the next refresh), or from a local JWKS by a new
// configuration. A token of a key that stays keeps passing, and a set
// fetched again unchanged keeps the cache.
func TestAttackJWTCacheKeyRemoved(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tok1 := signedToken(t, map[string]any{"alg": "ES256", "kid": "k1"}, idpClaims(), es256(k1))
	tok2 := signedToken(t, map[string]any{"alg": "ES256", "kid": "k2"}, idpClaims(), es256(k2))
	both := jwksJSON(ecJWK("k1", &k1.PublicKey), ecJWK("k2", &k2.PublicKey))

	t.Run("remote", func(t *testing.T) {
		s := newJWKSServer(t, both)
		g := startGuarded(t, &config.Security{JWT: remoteAuth(s.url, time.Hour)})
		for _, tok := range []string{tok1, tok2} {
			if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok)}); code != 200 {
				t.Fatalf("before the rotation: %d", code)
			}
		}
		e := g.rt.fwd.guard.jwks.entry(s.url)
		refresh := func() {
			t.Helper()
			n := s.fetches.Load()
			e.mu.Lock()
			e.fetched, e.tried = time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
			e.mu.Unlock()
			// A cached token's request finds the set stale and has it
			// fetched in the background.
			g.do(t, "", "/", [][2]string{bearer(tok2)})
			fetched := func() bool {
				e.mu.Lock()
				defer e.mu.Unlock()
				return s.fetches.Load() > n && e.fetched.After(time.Now().Add(-time.Hour))
			}
			for deadline := time.Now().Add(5 * time.Second); !fetched(); {
				if time.Now().After(deadline) {
					t.Fatal("the set was not fetched again")
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		refresh() // the same keys: the cache stays
		if n, _ := g.rt.fwd.guard.tokens.size(); n != 2 {
			t.Errorf("%d tokens cached after an unchanged set, want 2", n)
		}
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok1)}); code != 200 {
			t.Errorf("after an unchanged set: %d", code)
		}
		s.set(jwksJSON(ecJWK("k2", &k2.PublicKey)), 0)
		refresh()
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok1)}); code != 401 {
			t.Errorf("a cached token of a removed key: %d, want 401", code)
		}
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok2)}); code != 200 {
			t.Errorf("a token of the key that stays: %d", code)
		}
	})

	t.Run("local", func(t *testing.T) {
		p := localProvider(t, "https://idp.example", ecJWK("k1", &k1.PublicKey), ecJWK("k2", &k2.PublicKey))
		g := startGuarded(t, &config.Security{JWT: &config.JWTAuth{Providers: []*config.JWTProvider{p}}})
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok1)}); code != 200 {
			t.Fatalf("before the change: %d", code)
		}
		// The same provider (its ID too: the data plane must not rely on
		// it) with k1 gone.
		q := localProvider(t, "https://idp.example", ecJWK("k2", &k2.PublicKey))
		port := strings.TrimPrefix(g.url, "http://127.0.0.1:")
		var n int
		fmt.Sscan(port, &n)
		if err := g.rt.Apply(securedConfig(t, n, &config.Security{JWT: &config.JWTAuth{Providers: []*config.JWTProvider{q}}}, g.backend.addr)); err != nil {
			t.Fatal(err)
		}
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok1)}); code != 401 {
			t.Errorf("a cached token of a key the new configuration lacks: %d, want 401", code)
		}
	})
}

// TestAttackJWTCacheFlood: a flood of distinct tokens keeps the cache of
// verified tokens within its bounds of entries and memory: tokens whose
// signature does not verify never enter it, valid ones push out the
// oldest, large ones count for their size.
func TestAttackJWTCacheFlood(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	p := localProvider(t, "https://idp.example", ecJWK("k", &k.PublicKey))
	g := startGuarded(t, &config.Security{JWT: &config.JWTAuth{Providers: []*config.JWTProvider{p}}})
	cache := &g.rt.fwd.guard.tokens
	const maxEntries, maxBytes = 64, 256 << 10
	cache.mu.Lock()
	cache.maxEntries, cache.maxBytes = maxEntries, maxBytes
	cache.mu.Unlock()
	hdr := map[string]any{"alg": "ES256", "kid": "k"}
	check := func(stage string) {
		t.Helper()
		n, cost := cache.size()
		if n > maxEntries || cost > maxBytes {
			t.Errorf("%s: %d tokens of cost %d cached, bounds %d and %d", stage, n, cost, maxEntries, maxBytes)
		}
	}
	for i := range 200 {
		c := idpClaims()
		c["jti"] = fmt.Sprint("forged-", i)
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(signedToken(t, hdr, c, es256(other)))}); code != 401 {
			t.Fatalf("forged token: %d", code)
		}
	}
	if n, _ := cache.size(); n != 0 {
		t.Errorf("%d forged tokens cached", n)
	}
	for i := range 300 {
		c := idpClaims()
		c["jti"] = fmt.Sprint("valid-", i)
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(signedToken(t, hdr, c, es256(k)))}); code != 200 {
			t.Fatalf("valid token %d: %d", i, code)
		}
	}
	check("small tokens")
	for i := range 100 {
		c := idpClaims()
		c["jti"] = fmt.Sprint("large-", i)
		c["pad"] = strings.Repeat("p", 8<<10)
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(signedToken(t, hdr, c, es256(k)))}); code != 200 {
			t.Fatalf("large token %d: %d", i, code)
		}
	}
	check("large tokens")
	if n, _ := cache.size(); n == 0 {
		t.Error("nothing cached: the bounds leave no room")
	}
}

// TestJWTCacheAcrossPolicies: a token cached by a policy that reads only
// the registered claims gives its other claims to a policy of the same
// provider that reads them (decoded from the kept payload, the signature
// not checked again), and the first policy still gets its answer.
func TestJWTCacheAcrossPolicies(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	bare := localProvider(t, "https://idp.example", ecJWK("k", &k.PublicKey))
	reading := *bare
	reading.ClaimToHeaders = []config.ClaimHeader{{Claim: "org.name", Header: "X-Org", Path: claimPath(t, "org.name")}}
	c := idpClaims()
	c["org"] = map[string]any{"name": "acme"}
	tok := signedToken(t, map[string]any{"alg": "ES256", "kid": "k"}, c, es256(k))
	g := newGuard(DefaultOptions(), nil)
	check := func(j *config.JWTAuth) http.Header {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", "Bearer "+tok)
		if w := httptest.NewRecorder(); !g.check(w, r, &config.Security{JWT: j}, config.EndpointTable{}) {
			t.Fatalf("refused: %d", w.Code)
		}
		return r.Header
	}
	check(&config.JWTAuth{Providers: []*config.JWTProvider{bare}})
	if v := g.tokens.get(sha256.Sum256([]byte(tok))); v == nil || v.full || v.claims["org"] != nil {
		t.Fatalf("cached by a policy reading no claim: %+v", v)
	}
	if h := check(&config.JWTAuth{Providers: []*config.JWTProvider{&reading}}); h.Get("X-Org") != "acme" {
		t.Errorf("a policy reading a claim of a token cached without it: X-Org %q", h.Get("X-Org"))
	}
	if h := check(&config.JWTAuth{Providers: []*config.JWTProvider{bare}}); h.Get("X-Org") != "" {
		t.Errorf("X-Org set by a policy that does not ask for it")
	}
}
