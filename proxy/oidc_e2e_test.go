package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"portico.dev/portico/config"
)

// oidcProvider is a real OpenID provider (hack/oidc-provider.sh: the
// example provider of github.com/zitadel/oidc/v3) on loopback.
type oidcProvider struct {
	issuer string
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    bytes.Buffer // its request log
}

// requests is how many HTTP requests the provider has served.
func (p *oidcProvider) requests() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Count(p.log.String(), `msg="http request"`)
}

func (p *oidcProvider) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// startOIDCProvider builds (once, cached) and starts the provider with
// the client "web" (secret "secret") allowed to come back to redirect.
// It skips when the provider cannot be built here, unless
// PORTICO_REQUIRE_REAL=1.
func startOIDCProvider(t *testing.T, redirect string) *oidcProvider {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", filepath.Join("..", "hack", "oidc-provider.sh")).Output()
	if err != nil {
		msg := "the OpenID provider (hack/oidc-provider.sh) cannot be built here: " + err.Error()
		if os.Getenv("PORTICO_REQUIRE_REAL") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; PORTICO_REQUIRE_REAL=1 makes this a failure")
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	bin := filepath.Join(lines[len(lines)-1], "oidc-provider")
	p := &oidcProvider{}
	p.cmd = exec.Command(bin, "-listen", "127.0.0.1:0", "-redirect", redirect)
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			p.mu.Lock()
			p.log.WriteString(s.Text() + "\n")
			p.mu.Unlock()
		}
	}()
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		if s.Scan() {
			ready <- s.Text()
		}
		close(ready)
		for s.Scan() {
		}
	}()
	select {
	case issuer, ok := <-ready:
		if !ok || !strings.HasPrefix(issuer, "http://") {
			t.Fatalf("the OpenID provider did not start: %q", issuer)
		}
		p.issuer = issuer
	case <-time.After(30 * time.Second):
		t.Fatal("the OpenID provider did not start within 30s")
	}
	return p
}

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

// browser is a scripted browser: a cookie jar, redirects followed except
// the one to the callback when asked to stop there.
type browser struct {
	t      *testing.T
	c      *http.Client
	stopAt string // a path whose redirect is not followed
}

func newBrowser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	b := &browser{t: t}
	b.c = &http.Client{Jar: jar, Timeout: 20 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if b.stopAt != "" && req.URL.Path == b.stopAt {
			return http.ErrUseLastResponse
		}
		if len(via) > 10 {
			return errors.New("too many redirects")
		}
		return nil
	}}
	return b
}

// get fetches u as a page navigation, with extra headers h.
func (b *browser) get(u string, h ...string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml")
	for i := 0; i+1 < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
	}
	return b.send(req)
}

func (b *browser) send(req *http.Request) (*http.Response, string) {
	b.t.Helper()
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

var loginFormID = regexp.MustCompile(`name="id" value="([^"]+)"`)

// login goes to u without a session, fills the provider's login form and
// returns the redirect to Portico's callback, not followed.
func (b *browser) login(u string) *url.URL {
	b.t.Helper()
	b.stopAt = "/oauth2/callback"
	defer func() { b.stopAt = "" }()
	resp, body := b.get(u)
	m := loginFormID.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m == nil {
		b.t.Fatalf("no login form at the provider: %d %s\n%s", resp.StatusCode, resp.Request.URL, body)
	}
	form := url.Values{"id": {m[1]}, "username": {"test-user2"}, "password": {"verysecure"}}
	action := resp.Request.URL.ResolveReference(&url.URL{Path: "/login/username"})
	resp, body = b.send(mustRequest(b.t, http.MethodPost, action.String(), form))
	if resp.StatusCode != http.StatusFound {
		b.t.Fatalf("the login did not come back to the callback: %d %s", resp.StatusCode, body)
	}
	loc, err := resp.Location()
	if err != nil || loc.Path != "/oauth2/callback" {
		b.t.Fatalf("the login came back to %v (%v), not the callback", loc, err)
	}
	return loc
}

func mustRequest(t *testing.T, method, u string, form url.Values) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
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
	op := startOIDCProvider(t, proxyURL+"/oauth2/callback")
	o := &config.OIDC{Issuer: op.issuer, ClientID: "web", SecretRef: "default/oidc", RedirectPath: "/oauth2/callback",
		LogoutPath: "/oauth2/logout", Scopes: []string{"openid", "profile", "offline_access"}, ForwardAccessToken: true,
		CookiePrefix: "portico-oidc", Refresh: true, RefreshBefore: time.Minute, SessionLifetime: time.Hour, ClockSkew: 30 * time.Second}
	o.SetClientSecret("secret")
	g := startOIDCGuarded(t, port, &config.Security{Policy: "default/oidc", OIDC: o})

	b := newBrowser(t)
	callback := b.login(proxyURL + "/app/page?x=1")
	if callback.Query().Get("code") == "" || callback.Query().Get("state") == "" {
		t.Fatalf("the provider came back without code and state: %s", callback)
	}
	// The login cookie the callback needs, as an attacker who copied it
	// would replay it.
	var loginCookie *http.Cookie
	for _, c := range b.c.Jar.Cookies(callback) {
		if strings.HasPrefix(c.Name, "portico-oidc-login-") {
			loginCookie = c
		}
	}
	if loginCookie == nil {
		t.Fatal("no login cookie was set for the callback")
	}

	t.Run("tampered state is refused", func(t *testing.T) {
		bad := *callback
		q := bad.Query()
		q.Set("state", q.Get("state")+"x")
		bad.RawQuery = q.Encode()
		resp, _ := b.get(bad.String())
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a callback of a tampered state got %d, want 400", resp.StatusCode)
		}
	})
	t.Run("callback without the login cookie is refused", func(t *testing.T) {
		resp, _ := newBrowser(t).get(callback.String())
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a callback from another browser got %d, want 400", resp.StatusCode)
		}
	})
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d requests before any login", n)
	}

	resp, body := b.get(callback.String())
	if resp.StatusCode != http.StatusOK || body != "ok" || resp.Request.URL.RequestURI() != "/app/page?x=1" {
		t.Fatalf("after the callback: %d %q at %s, want the backend's ok at the page asked first", resp.StatusCode, body, resp.Request.URL)
	}
	seen := g.backend.last(t)
	access := forwardedBearer(t, seen)
	if sub := userinfo(t, op.issuer, access); sub == "" {
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
		before, backendBefore := op.requests(), len(g.backend.requests())
		resp, body := b.get(proxyURL + "/app/other")
		if resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("a request with the session got %d %q", resp.StatusCode, body)
		}
		if after := op.requests(); after != before {
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
		anon := newBrowser(t)
		for _, h := range [][]string{{"Accept", "application/json"}, {"X-Requested-With", "XMLHttpRequest"}, {"Sec-Fetch-Mode", "cors"}} {
			resp, _ := anon.get(proxyURL+"/app/api", h...)
			if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Www-Authenticate") == "" {
				t.Errorf("%s: %s without a session got %d (WWW-Authenticate %q), want 401", h[0], h[1], resp.StatusCode, resp.Header.Get("Www-Authenticate"))
			}
		}
		resp, _ := anon.send(mustRequest(t, http.MethodPost, proxyURL+"/app/form", url.Values{"a": {"b"}}))
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a POST without a session got %d, want 401", resp.StatusCode)
		}
	})

	t.Run("an expiring access token is refreshed", func(t *testing.T) {
		// The session as the browser holds it, made to say its access
		// token expires now: what the next request sees an hour on.
		sessionURL, _ := url.Parse(proxyURL)
		var value string
		for _, c := range b.c.Jar.Cookies(sessionURL) {
			if c.Name == "portico-oidc-session" {
				value = c.Value
			}
		}
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
		s.AccessExpiry = time.Now().Add(-time.Second).Unix()
		plain, _ = json.Marshal(s)
		expired := "1." + sealer.seal(sealSession, oidcScope(o), time.Unix(s.End, 0), plain)
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
		userinfo(t, op.issuer, renewed)
		var set bool
		for _, c := range resp.Cookies() {
			set = set || (c.Name == "portico-oidc-session" && c.Value != "")
		}
		if !set {
			t.Fatal("the refreshed tokens were not set in the session cookie")
		}
	})

	t.Run("provider down, the session still serves", func(t *testing.T) {
		// Discovery is fetched before the provider goes away, for the
		// logout below to find its end_session_endpoint.
		op.stop()
		resp, body := b.get(proxyURL + "/app/while-down")
		if resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("with the provider down, a valid session got %d %q", resp.StatusCode, body)
		}
		anon := newBrowser(t)
		anon.stopAt = "/auth"
		resp, _ = anon.get(proxyURL + "/app/new")
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("a new login with the provider down got %d, want the redirect of the discovery kept", resp.StatusCode)
		}
	})

	t.Run("logout clears the session", func(t *testing.T) {
		b.stopAt = "/end_session"
		resp, _ := b.get(proxyURL + "/oauth2/logout")
		b.stopAt = ""
		loc, err := resp.Location()
		if resp.StatusCode != http.StatusFound || err != nil {
			t.Fatalf("logout answered %d (%v), want a redirect", resp.StatusCode, err)
		}
		if !strings.HasPrefix(loc.String(), op.issuer+"end_session") || loc.Query().Get("id_token_hint") == "" {
			t.Fatalf("logout sent the browser to %s, want the provider's end_session_endpoint with id_token_hint", loc)
		}
		resp, _ = b.get(proxyURL+"/app/after", "Accept", "application/json")
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("after the logout a request got %d, want 401", resp.StatusCode)
		}
	})
}
