package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/testkit/oidctest"
)

// oidcTestKey is the session key of the proxies of these tests.
var oidcTestKey = bytes.Repeat([]byte{7}, 32)

// startOIDCGuarded is startGuarded on port, with oidcTestKey.
func startOIDCGuarded(t *testing.T, port int, sec *config.Security) *guarded {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	g := &guarded{obs: &securityObserver{decisions: map[string]int{}}, access: logs, backend: newRecordingBackend(t)}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 5 * time.Second
	opts.Observer = g.obs
	opts.AccessLog = zap.New(core)
	opts.SessionKey = oidcTestKey
	g.rt = New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.rt.Close(ctx)
	})
	if err := g.rt.Apply(securedConfig(t, port, sec, g.backend.addr)); err != nil {
		t.Fatal(err)
	}
	g.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	return g
}

// forwardedBearer is the Authorization the backend saw on its last request.
func forwardedBearer(t *testing.T, seen string) string {
	t.Helper()
	for _, line := range strings.Split(seen, "\n") {
		if v, ok := strings.CutPrefix(line, "Authorization: Bearer "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("the backend got no bearer token:\n%s", seen)
	return ""
}

// userinfo asks the provider who token belongs to: the token the backend
// got is the provider's own.
func userinfo(t *testing.T, issuer, token string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, issuer+"userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		Sub string `json:"sub"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&info) != nil {
		t.Fatalf("the provider does not take the forwarded token: userinfo %d", resp.StatusCode)
	}
	return info.Sub
}

// TestOIDCAgainstRealProvider logs a scripted browser in through Portico
// at a real OpenID provider, then attacks and exercises the session.
func TestOIDCAgainstRealProvider(t *testing.T) {
	port := freePort(t)
	proxyURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	op := oidctest.Start(t, filepath.Join("..", "hack"), proxyURL+"/oauth2/callback")
	o := &config.OIDC{Issuer: op.Issuer, ClientID: oidctest.ClientID, SecretRef: "default/oidc", RedirectPath: "/oauth2/callback",
		LogoutPath: "/oauth2/logout", Scopes: []string{"openid", "profile", "offline_access"}, ForwardAccessToken: true,
		CookiePrefix: "portico-oidc", Refresh: true, RefreshBefore: time.Minute, SessionLifetime: time.Hour, ClockSkew: 30 * time.Second}
	o.SetClientSecret(oidctest.ClientSecret)
	g := startOIDCGuarded(t, port, &config.Security{Policy: "default/oidc", OIDC: o})

	b := oidctest.NewBrowser(t)
	callback := b.Login(proxyURL+"/app/page?x=1", "/oauth2/callback")
	if callback.Query().Get("code") == "" || callback.Query().Get("state") == "" {
		t.Fatalf("the provider came back without code and state: %s", callback)
	}
	// The login cookie the callback needs, as an attacker who copied it
	// would replay it.
	var loginCookie *http.Cookie
	for _, c := range b.Client.Jar.Cookies(callback) {
		if strings.HasPrefix(c.Name, "portico-oidc-login-") {
			loginCookie = c
		}
	}
	if loginCookie == nil {
		t.Fatal("no login cookie was set for the callback")
	}

	// forge is the browser's session cookie, opened with the proxy's
	// session key, changed by mod and sealed again: the session as it
	// would be later on.
	// forgeFrom does so to the session value.
	var forgeFrom func(value string, mod func(*oidcSession)) string
	forge := func(mod func(*oidcSession)) string {
		t.Helper()
		proxyBase, _ := url.Parse(proxyURL)
		var value string
		for _, c := range b.Client.Jar.Cookies(proxyBase) {
			if c.Name == "portico-oidc-session" {
				value = c.Value
			}
		}
		return forgeFrom(value, mod)
	}
	forgeFrom = func(value string, mod func(*oidcSession)) string {
		t.Helper()
		sealer, err := newCookieSealer(oidcTestKey)
		if err != nil {
			t.Fatal(err)
		}
		_, packed, _ := strings.Cut(value, ".")
		plain, err := sealer.open(sealSession, oidcScope(o), packed, time.Now())
		if err != nil {
			t.Fatalf("the session cookie does not open: %v", err)
		}
		var s oidcSession
		if err := json.Unmarshal(plain, &s); err != nil || s.RefreshToken == "" {
			t.Fatalf("the session has no refresh token (%v)", err)
		}
		mod(&s)
		plain, _ = json.Marshal(s)
		return "1." + sealer.seal(sealSession, oidcScope(o), time.Unix(s.End, 0), plain)
	}
	withSession := func(path, accept, session string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, proxyURL+path, nil)
		req.Header.Set("Accept", accept)
		req.AddCookie(&http.Cookie{Name: "portico-oidc-session", Value: session})
		resp, err := noRedirects.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}

	t.Run("tampered state is refused", func(t *testing.T) {
		bad := *callback
		q := bad.Query()
		q.Set("state", q.Get("state")+"x")
		bad.RawQuery = q.Encode()
		resp, _ := b.Get(bad.String())
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a callback of a tampered state got %d, want 400", resp.StatusCode)
		}
	})
	t.Run("callback without the login cookie is refused", func(t *testing.T) {
		resp, _ := oidctest.NewBrowser(t).Get(callback.String())
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a callback from another browser got %d, want 400", resp.StatusCode)
		}
	})
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d requests before any login", n)
	}

	resp, body := b.Get(callback.String())
	if resp.StatusCode != http.StatusOK || body != "ok" || resp.Request.URL.RequestURI() != "/app/page?x=1" {
		t.Fatalf("after the callback: %d %q at %s, want the backend's ok at the page asked first", resp.StatusCode, body, resp.Request.URL)
	}
	seen := g.backend.last(t)
	access := forwardedBearer(t, seen)
	if sub := userinfo(t, op.Issuer, access); sub == "" {
		t.Fatal("the forwarded token names no subject")
	}
	if strings.Contains(seen, "portico-oidc") {
		t.Fatalf("the backend saw the session cookies:\n%s", seen)
	}
	if g.obs.count("oidc:allowed") == 0 {
		t.Error("no oidc:allowed decision was counted")
	}

	t.Run("replayed callback is refused", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, callback.String(), nil)
		req.Header.Set("Accept", "text/html")
		req.AddCookie(loginCookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a replayed callback got %d, want 400", resp.StatusCode)
		}
		for _, c := range resp.Cookies() {
			if strings.HasPrefix(c.Name, "portico-oidc-session") && c.MaxAge >= 0 {
				t.Fatal("a replayed callback was given a session")
			}
		}
	})

	t.Run("the session rides without the provider", func(t *testing.T) {
		before, backendBefore := op.Requests(), len(g.backend.requests())
		resp, body := b.Get(proxyURL + "/app/other")
		if resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("a request with the session got %d %q", resp.StatusCode, body)
		}
		if after := op.Requests(); after != before {
			t.Fatalf("the provider was asked %d times for a request with a valid session", after-before)
		}
		if n := len(g.backend.requests()) - backendBefore; n != 1 {
			t.Fatalf("the backend got %d requests, want 1", n)
		}
		if got := forwardedBearer(t, g.backend.last(t)); got != access {
			t.Fatal("the backend got another token than the session's")
		}
	})

	t.Run("non-navigation requests get 401", func(t *testing.T) {
		anon := oidctest.NewBrowser(t)
		for _, h := range [][]string{{"Accept", "application/json"}, {"X-Requested-With", "XMLHttpRequest"}, {"Sec-Fetch-Mode", "cors"}} {
			resp, _ := anon.Get(proxyURL+"/app/api", h...)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Www-Authenticate") == "" {
				t.Errorf("%s: %s without a session got %d (WWW-Authenticate %q), want 401", h[0], h[1], resp.StatusCode, resp.Header.Get("Www-Authenticate"))
			}
		}
		resp, _ := anon.Send(oidctest.Form(t, proxyURL+"/app/form", url.Values{"a": {"b"}}))
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a POST without a session got %d, want 401", resp.StatusCode)
		}
	})

	t.Run("an expiring access token is refreshed", func(t *testing.T) {
		// The session made to say its access token expires now: what
		// the next request sees an hour on.
		expired := forge(func(s *oidcSession) { s.AccessExpiry = time.Now().Add(-time.Second).Unix() })
		req, _ := http.NewRequest(http.MethodGet, proxyURL+"/app/refresh", nil)
		req.Header.Set("Accept", "text/html")
		req.AddCookie(&http.Cookie{Name: "portico-oidc-session", Value: expired})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a session whose access token expired got %d, want the backend's 200 after a refresh", resp.StatusCode)
		}
		renewed := forwardedBearer(t, g.backend.last(t))
		if renewed == access {
			t.Fatal("the backend got the expired access token, not a refreshed one")
		}
		userinfo(t, op.Issuer, renewed)
		var refreshed string
		for _, c := range resp.Cookies() {
			if c.Name == "portico-oidc-session" {
				refreshed = c.Value
			}
		}
		if refreshed == "" {
			t.Fatal("the refreshed tokens were not set in the session cookie")
		}

		// A token still valid but due for a refresh serves at once while
		// the refresh runs in the background; a later request takes the
		// new tokens.
		due := forgeFrom(refreshed, func(s *oidcSession) { s.AccessExpiry = time.Now().Add(20 * time.Second).Unix() })
		if resp := withSession("/app/due", "text/html", due); resp.StatusCode != http.StatusOK {
			t.Fatalf("a token due for a refresh got %d", resp.StatusCode)
		}
		if got := forwardedBearer(t, g.backend.last(t)); got != renewed {
			t.Fatal("a token due for a refresh, still valid, was not forwarded while the refresh runs")
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			resp := withSession("/app/due", "text/html", due)
			got := forwardedBearer(t, g.backend.last(t))
			if resp.StatusCode == http.StatusOK && got != renewed {
				userinfo(t, op.Issuer, got)
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the background refresh never reached a later request")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	t.Run("provider down, the session still serves", func(t *testing.T) {
		// Discovery is fetched before the provider goes away, for the
		// logout below to find its end_session_endpoint.
		op.Stop()
		resp, body := b.Get(proxyURL + "/app/while-down")
		if resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("with the provider down, a valid session got %d %q", resp.StatusCode, body)
		}
		// A token due for a refresh the provider cannot give still
		// serves while it is valid (twice: the failed refresh is not
		// waited for again); one that has expired ends the session.
		due := forge(func(s *oidcSession) {
			s.AccessExpiry = time.Now().Add(20 * time.Second).Unix()
			s.RefreshToken += "-not-at-the-provider"
		})
		for range 2 {
			if resp := withSession("/app/due", "text/html", due); resp.StatusCode != http.StatusOK {
				t.Fatalf("a valid token due for a refresh, provider down: %d", resp.StatusCode)
			}
			if got := forwardedBearer(t, g.backend.last(t)); got != access {
				t.Fatal("the backend did not get the session's still-valid token")
			}
		}
		gone := forge(func(s *oidcSession) {
			s.AccessExpiry = time.Now().Add(-time.Second).Unix()
			s.RefreshToken += "-gone" // not the one refreshed above, whose result is kept for 30s
		})
		if resp := withSession("/app/gone", "application/json", gone); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("an expired token that cannot be refreshed, provider down: %d, want 401", resp.StatusCode)
		}
		anon := oidctest.NewBrowser(t)
		anon.StopAt = "/auth"
		resp, _ = anon.Get(proxyURL + "/app/new")
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("a new login with the provider down got %d, want the redirect of the discovery kept", resp.StatusCode)
		}
	})

	t.Run("logout clears the session", func(t *testing.T) {
		b.StopAt = "/end_session"
		resp, _ := b.Get(proxyURL + "/oauth2/logout")
		b.StopAt = ""
		loc, err := resp.Location()
		if resp.StatusCode != http.StatusFound || err != nil {
			t.Fatalf("logout answered %d (%v), want a redirect", resp.StatusCode, err)
		}
		if !strings.HasPrefix(loc.String(), op.Issuer+"end_session") || loc.Query().Get("id_token_hint") == "" {
			t.Fatalf("logout sent the browser to %s, want the provider's end_session_endpoint with id_token_hint", loc)
		}
		resp, _ = b.Get(proxyURL+"/app/after", "Accept", "application/json")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("after the logout a request got %d, want 401", resp.StatusCode)
		}
	})
}
