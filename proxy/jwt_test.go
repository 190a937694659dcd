package proxy

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/jose"
)

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// signedToken makes a compact JWS of claims with header hdr, signed by
// sign over "header.payload".
func signedToken(t testing.TB, hdr map[string]any, claims map[string]any, sign func([]byte) []byte) string {
	t.Helper()
	h, _ := json.Marshal(hdr)
	c, _ := json.Marshal(claims)
	signed := b64url(h) + "." + b64url(c)
	return signed + "." + b64url(sign([]byte(signed)))
}

func es256(key *ecdsa.PrivateKey) func([]byte) []byte {
	return func(msg []byte) []byte {
		d := sha256.Sum256(msg)
		r, s, err := ecdsa.Sign(rand.Reader, key, d[:])
		if err != nil {
			panic(err)
		}
		out := make([]byte, 64)
		r.FillBytes(out[:32])
		s.FillBytes(out[32:])
		return out
	}
}

func rs256(key *rsa.PrivateKey) func([]byte) []byte {
	return func(msg []byte) []byte {
		d := sha256.Sum256(msg)
		sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, d[:])
		if err != nil {
			panic(err)
		}
		return sig
	}
}

func ecJWK(kid string, k *ecdsa.PublicKey) map[string]any {
	x, y := make([]byte, 32), make([]byte, 32)
	k.X.FillBytes(x)
	k.Y.FillBytes(y)
	return map[string]any{"kty": "EC", "crv": "P-256", "kid": kid, "x": b64url(x), "y": b64url(y), "use": "sig"}
}

func rsaJWK(kid string, k *rsa.PublicKey) map[string]any {
	return map[string]any{"kty": "RSA", "kid": kid, "n": b64url(k.N.Bytes()), "e": b64url(big.NewInt(int64(k.E)).Bytes())}
}

func jwksJSON(keys ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

func localProvider(t testing.TB, issuer string, keys ...map[string]any) *config.JWTProvider {
	t.Helper()
	set, err := jose.ParseKeySet(jwksJSON(keys...))
	if err != nil {
		t.Fatal(err)
	}
	p := &config.JWTProvider{Name: "p", Issuer: issuer, ClockSkew: 30 * time.Second, ID: issuer + " local"}
	p.SetLocalKeys(set)
	return p
}

func bearer(token string) [2]string { return [2]string{"Authorization", "Bearer " + token} }

// TestJWTLocalKeys: a token of the provider's key, issuer and audience
// reaches the backend without its Authorization header and with its
// claims in the configured headers (those the client sent replaced);
// every other token gets a 401 with a Bearer challenge and never reaches
// the backend: none, expired (beyond the skew), not valid yet, of another
// issuer or audience, forged with another key under the same kid,
// "alg": "none", HS256 with the RSA public key as the HMAC secret
// (algorithm confusion), RS256 checked against the EC key. A valid token
// without a required claim or scope gets a 403.
func TestJWTLocalKeys(t *testing.T) {
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	p := localProvider(t, "https://idp.example", ecJWK("ec1", &ecKey.PublicKey), rsaJWK("rsa1", &rsaKey.PublicKey))
	p.Audiences = []string{"api"}
	p.ClaimToHeaders = []config.ClaimHeader{{Claim: "sub", Header: "X-Sub"}, {Claim: "groups", Header: "X-Groups"}}
	j := &config.JWTAuth{Providers: []*config.JWTProvider{p}, RequiredClaims: []config.RequiredClaim{{Name: "groups", Values: []string{"staff", "admin"}}},
		RequiredScopes: []string{"read"}}
	g := startGuarded(t, &config.Security{JWT: j})

	now := time.Now()
	claims := func(edit func(map[string]any)) map[string]any {
		c := map[string]any{"iss": "https://idp.example", "aud": []string{"api"}, "sub": "alice", "groups": []string{"staff"},
			"scope": "read write", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
		if edit != nil {
			edit(c)
		}
		return c
	}
	ec := map[string]any{"alg": "ES256", "kid": "ec1", "typ": "JWT"}
	valid := signedToken(t, ec, claims(nil), es256(ecKey))

	code, _, _ := g.do(t, "", "/", [][2]string{bearer(valid), {"X-Sub", "root"}})
	if code != 200 {
		t.Fatalf("valid token: %d", code)
	}
	seen := g.backend.last(t)
	if strings.Contains(seen, "Authorization") || strings.Contains(seen, valid[:20]) {
		t.Errorf("the token reached the backend:\n%s", seen)
	}
	if !strings.Contains(seen, "X-Sub: alice\r\n") || strings.Contains(seen, "root") || !strings.Contains(seen, "X-Groups: staff\r\n") {
		t.Errorf("claims not in headers as configured:\n%s", seen)
	}
	if code, _, _ := g.do(t, "", "/", [][2]string{bearer(signedToken(t, ec, claims(func(c map[string]any) { c["exp"] = now.Add(-10 * time.Second).Unix() }), es256(ecKey)))}); code != 200 {
		t.Errorf("expired 10s ago, within the 30s skew: %d", code)
	}
	before := len(g.backend.requests())

	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&rsaKey.PublicKey))})
	hs256 := func(secret []byte) func([]byte) []byte {
		return func(msg []byte) []byte { m := hmac.New(sha256.New, secret); m.Write(msg); return m.Sum(nil) }
	}
	for _, tc := range []struct {
		name  string
		token string
		code  int
	}{
		{"no token", "", 401},
		{"expired", signedToken(t, ec, claims(func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() }), es256(ecKey)), 401},
		{"no exp", signedToken(t, ec, claims(func(c map[string]any) { delete(c, "exp") }), es256(ecKey)), 401},
		{"not yet", signedToken(t, ec, claims(func(c map[string]any) { c["nbf"] = now.Add(time.Hour).Unix() }), es256(ecKey)), 401},
		{"other issuer", signedToken(t, ec, claims(func(c map[string]any) { c["iss"] = "https://evil.example" }), es256(ecKey)), 401},
		{"other audience", signedToken(t, ec, claims(func(c map[string]any) { c["aud"] = "other" }), es256(ecKey)), 401},
		{"forged", signedToken(t, ec, claims(nil), es256(other)), 401},
		{"tampered", valid[:strings.LastIndexByte(valid, '.')-2] + "AA" + valid[strings.LastIndexByte(valid, '.'):], 401},
		{"alg none", signedToken(t, map[string]any{"alg": "none", "kid": "ec1"}, claims(nil), func([]byte) []byte { return nil }), 401},
		{"alg none, no signature", strings.TrimSuffix(signedToken(t, map[string]any{"alg": "none"}, claims(nil), func([]byte) []byte { return nil }), "."), 401},
		{"HS256 with the RSA public key", signedToken(t, map[string]any{"alg": "HS256", "kid": "rsa1"}, claims(nil), hs256(rsaPEM)), 401},
		{"HS256 with the RSA modulus", signedToken(t, map[string]any{"alg": "HS256", "kid": "rsa1"}, claims(nil), hs256(rsaKey.N.Bytes())), 401},
		{"RS256 with the EC key's kid", signedToken(t, map[string]any{"alg": "RS256", "kid": "ec1"}, claims(nil), rs256(rsaKey)), 401},
		{"unknown kid", signedToken(t, map[string]any{"alg": "ES256", "kid": "nope"}, claims(nil), es256(ecKey)), 401},
		{"garbage", "not.a.token", 401},
		{"missing claim value", signedToken(t, ec, claims(func(c map[string]any) { c["groups"] = []string{"guest"} }), es256(ecKey)), 403},
		{"missing scope", signedToken(t, ec, claims(func(c map[string]any) { c["scope"] = "write" }), es256(ecKey)), 403},
	} {
		var h [][2]string
		if tc.token != "" {
			h = [][2]string{bearer(tc.token)}
		}
		code, challenge, _ := g.do(t, "", "/", h)
		if code != tc.code {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.code)
		}
		if code == 401 && !strings.HasPrefix(challenge, `Bearer realm="portico"`) {
			t.Errorf("%s: WWW-Authenticate %q", tc.name, challenge)
		}
	}
	if code, _, _ := g.do(t, "", "/", [][2]string{bearer(signedToken(t, map[string]any{"alg": "RS256", "kid": "rsa1"}, claims(nil), rs256(rsaKey)))}); code != 200 {
		t.Errorf("RS256 token of the RSA key: %d", code)
	}
	if n := len(g.backend.requests()) - before; n != 1 {
		t.Errorf("the backend got %d requests of refused tokens", n-1)
	}
	if got := g.obs.count("jwt:forbidden"); got != 2 {
		t.Errorf("jwt:forbidden counted %d, want 2", got)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// jwksServer serves a JWKS the test changes, counting fetches; it can
// answer slowly, with garbage, or stop.
type jwksServer struct {
	url     string
	mu      sync.Mutex
	body    []byte
	delay   time.Duration
	fetches atomic.Int32
	srv     *http.Server
}

func newJWKSServer(t *testing.T, body []byte) *jwksServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &jwksServer{url: "http://" + ln.Addr().String() + "/jwks", body: body}
	s.srv = &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.fetches.Add(1)
		s.mu.Lock()
		body, delay := s.body, s.delay
		s.mu.Unlock()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return
			}
		}
		w.Write(body)
	})}
	go s.srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func (s *jwksServer) set(body []byte, delay time.Duration) {
	s.mu.Lock()
	s.body, s.delay = body, delay
	s.mu.Unlock()
}

func remoteAuth(uri string, ttl time.Duration) *config.JWTAuth {
	return &config.JWTAuth{Providers: []*config.JWTProvider{{Name: "idp", Issuer: "https://idp.example", RemoteJWKS: uri,
		CacheDuration: ttl, ClockSkew: 30 * time.Second, ID: "https://idp.example " + uri}}}
}

func idpClaims() map[string]any {
	return map[string]any{"iss": "https://idp.example", "sub": "alice", "exp": time.Now().Add(time.Hour).Unix()}
}

// TestJWTRemoteKeyRotation: the keys come from the issuer's JWKS, fetched
// once; when the issuer rotates to a new key, the first token of the new
// key ID fetches the set again and passes, without a restart. A flood of
// tokens with made-up key IDs costs no more than one fetch per
// jwksMinRefetch.
func TestJWTRemoteKeyRotation(t *testing.T) {
	k1, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	k2, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	s := newJWKSServer(t, jwksJSON(ecJWK("k1", &k1.PublicKey)))
	g := startGuarded(t, &config.Security{JWT: remoteAuth(s.url, time.Hour)})
	tok1 := signedToken(t, map[string]any{"alg": "ES256", "kid": "k1"}, idpClaims(), es256(k1))
	for range 5 {
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok1)}); code != 200 {
			t.Fatalf("token of k1: %d", code)
		}
	}
	if n := s.fetches.Load(); n != 1 {
		t.Errorf("%d fetches for one key, want 1", n)
	}
	s.set(jwksJSON(ecJWK("k2", &k2.PublicKey)), 0)
	// The rotation comes later than jwksMinRefetch after the fetch.
	e := g.rt.fwd.guard.jwks.entry(s.url)
	e.mu.Lock()
	e.tried = time.Now().Add(-jwksMinRefetch)
	e.mu.Unlock()
	tok2 := signedToken(t, map[string]any{"alg": "ES256", "kid": "k2"}, idpClaims(), es256(k2))
	if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok2)}); code != 200 {
		t.Fatalf("token of the rotated key: %d", code)
	}
	if n := s.fetches.Load(); n != 2 {
		t.Errorf("%d fetches after the rotation, want 2", n)
	}
	for i := range 50 {
		tok := signedToken(t, map[string]any{"alg": "ES256", "kid": fmt.Sprintf("made-up-%d", i)}, idpClaims(), es256(k2))
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok)}); code != 401 {
			t.Fatalf("made-up kid: %d", code)
		}
	}
	if n := s.fetches.Load(); n > 3 {
		t.Errorf("%d fetches after 50 made-up key IDs, want at most 3", n)
	}
}

// TestAttackJWKSEndpoint: an issuer whose JWKS endpoint is down, slow
// (beyond the fetch timeout) or answers garbage gets its tokens refused
// (401, fail closed) within the timeout; once a set was fetched, it is
// served stale past its cache duration while the endpoint fails.
func TestAttackJWKSEndpoint(t *testing.T) {
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tok := signedToken(t, map[string]any{"alg": "ES256", "kid": "k"}, idpClaims(), es256(k))
	good := jwksJSON(ecJWK("k", &k.PublicKey))

	down := newJWKSServer(t, good)
	down.srv.Close()
	slow := newJWKSServer(t, good)
	slow.set(good, 5*time.Second)
	garbage := newJWKSServer(t, []byte(`{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}`))
	huge := newJWKSServer(t, append([]byte(`{"keys":[],"pad":"`), append([]byte(strings.Repeat("a", jwksMaxBytes)), `"}`...)...))
	for name, s := range map[string]*jwksServer{"down": down, "slow": slow, "garbage": garbage, "huge": huge} {
		g := startGuarded(t, &config.Security{JWT: remoteAuth(s.url, time.Hour)})
		g.rt.fwd.guard.jwks.timeout.Store(int64(300 * time.Millisecond))
		start := time.Now()
		if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok)}); code != 401 {
			t.Errorf("%s: %d, want 401", name, code)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s: answered after %v", name, d)
		}
		if n := len(g.backend.requests()); n != 0 {
			t.Errorf("%s: the backend got %d requests", name, n)
		}
	}

	stale := newJWKSServer(t, good)
	g := startGuarded(t, &config.Security{JWT: remoteAuth(stale.url, time.Second)})
	g.rt.fwd.guard.jwks.timeout.Store(int64(300 * time.Millisecond))
	if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok)}); code != 200 {
		t.Fatalf("first token: %d", code)
	}
	stale.set([]byte("garbage"), 0)
	// Past the cache duration and the refetch gap, a token not verified
	// before (the cache of tokens would hide the set).
	e := g.rt.fwd.guard.jwks.entry(stale.url)
	e.mu.Lock()
	e.fetched, e.tried = time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)
	e.mu.Unlock()
	other := idpClaims()
	other["sub"] = "bob"
	tok2 := signedToken(t, map[string]any{"alg": "ES256", "kid": "k"}, other, es256(k))
	if code, _, _ := g.do(t, "", "/", [][2]string{bearer(tok2)}); code != 200 {
		t.Errorf("with the issuer failing, the stale set: %d, want 200", code)
	}
}
