package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"portico.dev/portico/config"
)

// hostileProvider is an OpenID provider whose token endpoint answers
// what the test makes it: ID tokens signed by its key or another, of any
// claims. It records what the token endpoint was sent.
type hostileProvider struct {
	url string
	key *ecdsa.PrivateKey
	mu  sync.Mutex
	// answer makes the token endpoint's answer from the nonce of the
	// login (the test reads it from the authorization redirect).
	answer      func() map[string]any
	authMethods []string
	form        url.Values
	basicUser   string
	basicPass   string
	// gate, when set before the server starts serving tokens, holds
	// every token request until it is closed: a provider that hangs.
	gate chan struct{}
}

func newHostileProvider(t *testing.T) *hostileProvider {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &hostileProvider{key: key}
	srv := newLoopbackServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		gate := p.gate
		p.mu.Unlock()
		if gate != nil && r.URL.Path == "/token" {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		switch r.URL.Path {
		case "/.well-known/openid-configuration", "/tenant/.well-known/openid-configuration":
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": p.url, "authorization_endpoint": p.url + "/authorize",
				"token_endpoint": p.url + "/token", "jwks_uri": p.url + "/keys", "end_session_endpoint": p.url + "/logout",
				"token_endpoint_auth_methods_supported": p.authMethods})
		case "/keys":
			_, _ = w.Write(jwksJSON(ecJWK("k1", &p.key.PublicKey)))
		case "/token":
			_ = r.ParseForm()
			p.form = r.PostForm
			p.basicUser, p.basicPass, _ = r.BasicAuth()
			_ = json.NewEncoder(w).Encode(p.answer())
		default:
			http.NotFound(w, r)
		}
	}))
	p.url = srv
	return p
}

// newLoopbackServer serves h on a loopback port and returns its URL.
func newLoopbackServer(t *testing.T, h http.Handler) string {
	t.Helper()
	port := freePort(t)
	srv := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Handler: h, ReadHeaderTimeout: time.Second}
	ready := make(chan struct{})
	go func() {
		close(ready)
		_ = srv.ListenAndServe()
	}()
	<-ready
	t.Cleanup(func() { srv.Close() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for i := 0; i < 100; i++ {
		if resp, err := http.Get(base + "/"); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return base
}

// loginThrough starts a login at the proxy and returns the authorization
// redirect's query and the login cookie.
func loginThrough(t *testing.T, proxyURL string) (url.Values, *http.Cookie) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, proxyURL+"/app?x=1", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if resp.StatusCode != http.StatusFound || err != nil {
		t.Fatalf("a navigation without a session got %d, want a redirect", resp.StatusCode)
	}
	var login *http.Cookie
	for _, c := range resp.Cookies() {
		if strings.HasPrefix(c.Name, "p-login-") {
			login = c
		}
	}
	if login == nil {
		t.Fatal("no login cookie")
	}
	return loc.Query(), login
}

var noRedirects = &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// callbackThrough sends the provider's redirect back to the proxy.
func callbackThrough(t *testing.T, proxyURL, state string, login *http.Cookie) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, proxyURL+"/cb?code=c0de&state="+url.QueryEscape(state), nil)
	req.Header.Set("Accept", "text/html")
	req.AddCookie(login)
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

func hasSession(resp *http.Response) bool {
	for _, c := range resp.Cookies() {
		if c.Name == "p-session" && c.MaxAge >= 0 && c.Value != "" {
			return true
		}
	}
	return false
}

// TestAttackOIDCIDToken: the callback makes a session only of an ID
// token the provider's key signed for this client, this login's nonce,
// unexpired and issued by the provider; a token endpoint that answers
// anything else gets the browser a 400 and no session, and the backend
// never sees the request.
func TestAttackOIDCIDToken(t *testing.T) {
	op := newHostileProvider(t)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	port := freePort(t)
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	o := testOIDC(op.url)
	g := startOIDCGuarded(t, port, &config.Security{Policy: "default/oidc", OIDC: o})

	now := time.Now()
	claims := func(nonce string, mod func(map[string]any)) map[string]any {
		c := map[string]any{"iss": op.url, "sub": "alice", "aud": "client", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "nonce": nonce}
		if mod != nil {
			mod(c)
		}
		return c
	}
	signed := func(c map[string]any) string {
		return signedToken(t, map[string]any{"alg": "ES256", "kid": "k1", "typ": "JWT"}, c, es256(op.key))
	}
	cases := []struct {
		name  string
		token func(nonce string) string
	}{
		{"another login's nonce", func(string) string { return signed(claims("not-this-one", nil)) }},
		{"no nonce", func(n string) string { return signed(claims(n, func(c map[string]any) { delete(c, "nonce") })) }},
		{"another client's audience", func(n string) string { return signed(claims(n, func(c map[string]any) { c["aud"] = "other" })) }},
		{"several audiences, azp another client", func(n string) string {
			return signed(claims(n, func(c map[string]any) { c["aud"], c["azp"] = []string{"client", "other"}, "other" }))
		}},
		{"another issuer", func(n string) string {
			return signed(claims(n, func(c map[string]any) { c["iss"] = "https://evil.example" }))
		}},
		{"expired", func(n string) string {
			return signed(claims(n, func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() }))
		}},
		{"issued in the future", func(n string) string {
			return signed(claims(n, func(c map[string]any) { c["iat"] = now.Add(time.Hour).Unix() }))
		}},
		{"no iat", func(n string) string { return signed(claims(n, func(c map[string]any) { delete(c, "iat") })) }},
		{"signed by another key under the provider's key ID", func(n string) string {
			return signedToken(t, map[string]any{"alg": "ES256", "kid": "k1"}, claims(n, nil), es256(other))
		}},
		{"alg none", func(n string) string {
			return signedToken(t, map[string]any{"alg": "none", "kid": "k1"}, claims(n, nil), func([]byte) []byte { return nil })
		}},
		{"not a JWT", func(string) string { return "garbage" }},
		{"no ID token", func(string) string { return "" }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, login := loginThrough(t, proxyURL)
			nonce := q.Get("nonce")
			op.mu.Lock()
			op.answer = func() map[string]any {
				return map[string]any{"access_token": "at", "id_token": c.token(nonce), "token_type": "Bearer", "expires_in": 3600}
			}
			op.mu.Unlock()
			resp := callbackThrough(t, proxyURL, q.Get("state"), login)
			if resp.StatusCode != http.StatusBadRequest || hasSession(resp) {
				t.Fatalf("callback answered %d (session set: %v), want 400 and no session", resp.StatusCode, hasSession(resp))
			}
		})
	}
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d requests", n)
	}

	// The right token makes a session; the token endpoint was sent the
	// PKCE verifier of the challenge and the client's credentials.
	q, login := loginThrough(t, proxyURL)
	op.mu.Lock()
	op.answer = func() map[string]any {
		return map[string]any{"access_token": "at", "id_token": signed(claims(q.Get("nonce"), nil)), "token_type": "Bearer", "expires_in": 3600}
	}
	op.mu.Unlock()
	resp := callbackThrough(t, proxyURL, q.Get("state"), login)
	if resp.StatusCode != http.StatusFound || !hasSession(resp) || resp.Header.Get("Location") != "/app?x=1" {
		t.Fatalf("a valid ID token: %d to %q (session %v)", resp.StatusCode, resp.Header.Get("Location"), hasSession(resp))
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	sum := sha256.Sum256([]byte(op.form.Get("code_verifier")))
	if base64.RawURLEncoding.EncodeToString(sum[:]) != q.Get("code_challenge") {
		t.Error("the token endpoint was not sent the verifier of the code challenge")
	}
	if op.form.Get("grant_type") != "authorization_code" || op.form.Get("code") != "c0de" || op.form.Get("redirect_uri") != proxyURL+"/cb" {
		t.Errorf("token request form %v", op.form)
	}
	if op.basicUser != "client" || op.basicPass != "s3cret" || op.form.Get("client_secret") != "" {
		t.Errorf("client authenticated as %q:%q (form secret %q), want client_secret_basic", op.basicUser, op.basicPass, op.form.Get("client_secret"))
	}
}

// TestOIDCClientSecretPost: a provider whose discovery lists only
// client_secret_post is sent the client's credentials in the form.
func TestOIDCClientSecretPost(t *testing.T) {
	op := newHostileProvider(t)
	op.authMethods = []string{"client_secret_post"}
	port := freePort(t)
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	startOIDCGuarded(t, port, &config.Security{Policy: "default/oidc", OIDC: testOIDC(op.url)})
	q, login := loginThrough(t, proxyURL)
	op.mu.Lock()
	op.answer = func() map[string]any {
		c := map[string]any{"iss": op.url, "sub": "alice", "aud": "client", "exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix(), "nonce": q.Get("nonce")}
		return map[string]any{"access_token": "at", "id_token": signedToken(t, map[string]any{"alg": "ES256", "kid": "k1"}, c, es256(op.key))}
	}
	op.mu.Unlock()
	if resp := callbackThrough(t, proxyURL, q.Get("state"), login); !hasSession(resp) {
		t.Fatalf("callback: %d without a session", resp.StatusCode)
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	if op.form.Get("client_id") != "client" || op.form.Get("client_secret") != "s3cret" || op.basicUser != "" {
		t.Errorf("client authenticated with form %v and Basic %q, want client_secret_post", op.form, op.basicUser)
	}
}

// TestAttackOIDCProviderDiscovery: a discovery document of another issuer
// (a provider answering for another) is not used: a new login is a 503.
func TestAttackOIDCProviderDiscovery(t *testing.T) {
	op := newHostileProvider(t)
	port := freePort(t)
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	o := testOIDC(op.url + "/tenant")
	startOIDCGuarded(t, port, &config.Security{Policy: "default/oidc", OIDC: o})
	req, _ := http.NewRequest(http.MethodGet, proxyURL+"/app", nil)
	req.Header.Set("Accept", "text/html")
	resp, err := noRedirects.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a login at a provider whose discovery names another issuer got %d, want 503", resp.StatusCode)
	}
}

// TestAttackOIDCHungProviderOnRefresh: a provider whose token endpoint
// hangs does not hold the requests of a session whose access token is
// due for a refresh but still valid: they are answered while the refresh
// waits, with the token the session has.
func TestAttackOIDCHungProviderOnRefresh(t *testing.T) {
	op := newHostileProvider(t)
	gate := make(chan struct{})
	t.Cleanup(func() { close(gate) })
	op.mu.Lock()
	op.gate = gate
	op.answer = func() map[string]any { return map[string]any{"access_token": "new", "expires_in": 3600} }
	op.mu.Unlock()
	port := freePort(t)
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	o := testOIDC(op.url)
	o.ForwardAccessToken = true
	g := startOIDCGuarded(t, port, &config.Security{Policy: "default/oidc", OIDC: o})
	sealer, _ := newCookieSealer(oidcTestKey)
	now := time.Now()
	plain, _ := json.Marshal(oidcSession{IDToken: "id", AccessToken: "old", RefreshToken: "r", AccessExpiry: now.Add(20 * time.Second).Unix(), End: now.Add(time.Hour).Unix()})
	session := "1." + sealer.seal(sealSession, oidcScope(o), now.Add(time.Hour), plain)
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, proxyURL+"/app", nil)
		req.AddCookie(&http.Cookie{Name: "p-session", Value: session})
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a valid session with the token endpoint hung got %d", resp.StatusCode)
		}
		if got := g.backend.last(t); !strings.Contains(got, "Authorization: Bearer old") {
			t.Fatalf("the backend got:\n%s", got)
		}
	}
}
