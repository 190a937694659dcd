package proxy

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"portico.dev/portico/config"
)

// discoveryOnly serves a discovery document and nothing else: enough for
// the steps of the flow that come before the token endpoint.
func discoveryOnly(t *testing.T) string {
	t.Helper()
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"issuer":%q,"authorization_endpoint":%q,"token_endpoint":%q,"jwks_uri":%q}`,
			srv.URL, srv.URL+"/authorize", srv.URL+"/token", srv.URL+"/keys")
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func testOIDC(issuer string) *config.OIDC {
	o := &config.OIDC{Issuer: issuer, ClientID: "client", RedirectPath: "/cb", LogoutPath: "/logout", Scopes: []string{"openid", "email"},
		CookiePrefix: "p", Refresh: true, RefreshBefore: time.Minute, SessionLifetime: time.Hour, ClockSkew: 30 * time.Second}
	o.SetClientSecret("s3cret")
	return o
}

func testGuard(t *testing.T) *guard {
	opts := DefaultOptions()
	opts.SessionKey = oidcTestKey
	return newGuard(opts, zaptest.NewLogger(t))
}

func navigation(target string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Header.Set("Accept", "text/html")
	return r
}

func TestIsNavigation(t *testing.T) {
	cases := []struct {
		method string
		h      []string
		want   bool
	}{
		{"GET", []string{"Accept", "text/html,*/*"}, true},
		{"GET", []string{"Accept", "TEXT/HTML"}, true},
		{"GET", []string{"Accept", "text/html", "Sec-Fetch-Mode", "navigate"}, true},
		{"GET", nil, false},
		{"GET", []string{"Accept", "application/json"}, false},
		{"GET", []string{"Accept", "*/*"}, false},
		{"GET", []string{"Accept", "text/html", "X-Requested-With", "XMLHttpRequest"}, false},
		{"GET", []string{"Accept", "text/html", "Sec-Fetch-Mode", "cors"}, false},
		{"POST", []string{"Accept", "text/html"}, false},
		{"HEAD", []string{"Accept", "text/html"}, false},
		{"GET", []string{"Accept", "text/html", "Content-Type", "application/grpc"}, false},
	}
	for _, c := range cases {
		r := httptest.NewRequest(c.method, "/", nil)
		for i := 0; i+1 < len(c.h); i += 2 {
			r.Header.Set(c.h[i], c.h[i+1])
		}
		if got := isNavigation(r); got != c.want {
			t.Errorf("%s %v: navigation = %v, want %v", c.method, c.h, got, c.want)
		}
	}
}

// startLogin runs a navigation without a session and returns the
// redirect's query and the login cookie.
func startLogin(t *testing.T, g *guard, o *config.OIDC, r *http.Request) (url.Values, *http.Cookie) {
	t.Helper()
	rec := httptest.NewRecorder()
	if g.oidc(rec, r, o) {
		t.Fatal("a request without a session was let through")
	}
	if rec.Code != http.StatusFound {
		t.Fatalf("a navigation without a session got %d, want 302", rec.Code)
	}
	loc, _ := url.Parse(rec.Header().Get("Location"))
	if !strings.HasPrefix(loc.String(), o.Issuer+"/authorize?") {
		t.Fatalf("redirected to %s, not the authorization endpoint", loc)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("%d cookies set, want the login cookie", len(cookies))
	}
	return loc.Query(), cookies[0]
}

func TestOIDCLoginRedirect(t *testing.T) {
	g, o := testGuard(t), testOIDC(discoveryOnly(t))
	r := navigation("http://app.example/a/b?c=d")
	r.TLS = &tls.ConnectionState{}
	q, c := startLogin(t, g, o, r)
	for k, want := range map[string]string{"response_type": "code", "client_id": "client", "scope": "openid email",
		"redirect_uri": "https://app.example/cb", "code_challenge_method": "S256"} {
		if got := q.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if len(q.Get("state")) < 40 || len(q.Get("nonce")) < 40 || q.Get("state") == q.Get("nonce") {
		t.Errorf("state %q and nonce %q are not two random values", q.Get("state"), q.Get("nonce"))
	}
	if c.Name != loginCookieName(o, q.Get("state")) || c.Path != "/cb" || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteLaxMode {
		t.Errorf("login cookie %+v: want the state's name, Path=/cb, HttpOnly, Secure on TLS, SameSite=Lax", c)
	}
	plain, err := g.oidcFlows.sealer.open(sealLogin, oidcScope(o), c.Value, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var login oidcLogin
	_ = json.Unmarshal(plain, &login)
	sum := sha256.Sum256([]byte(login.Verifier))
	if q.Get("code_challenge") != base64.RawURLEncoding.EncodeToString(sum[:]) {
		t.Error("code_challenge is not S256 of the login's verifier")
	}
	if login.State != q.Get("state") || login.Nonce != q.Get("nonce") || login.URL != "/a/b?c=d" {
		t.Errorf("login cookie holds %+v", login)
	}
	if strings.Contains(c.Value, login.Verifier) || strings.Contains(c.Value, login.State) {
		t.Error("the login cookie shows its content")
	}
}

func TestOIDCLoginBackURLStaysOnHost(t *testing.T) {
	g, o := testGuard(t), testOIDC(discoveryOnly(t))
	r := navigation("http://app.example/x")
	r.URL.Path, r.URL.RawPath = "//evil.example/x", ""
	_, c := startLogin(t, g, o, r)
	plain, _ := g.oidcFlows.sealer.open(sealLogin, oidcScope(o), c.Value, time.Now())
	var login oidcLogin
	_ = json.Unmarshal(plain, &login)
	if login.URL != "/" {
		t.Fatalf("back URL %q: a scheme-relative URL would leave the host", login.URL)
	}
}

// callback runs the callback of state with cookie c.
func callback(g *guard, o *config.OIDC, method, query string, c *http.Cookie) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, "http://app.example/cb?"+query, nil)
	if c != nil {
		r.AddCookie(c)
	}
	rec := httptest.NewRecorder()
	g.oidc(rec, r, o)
	return rec
}

func TestOIDCCallbackStateMachine(t *testing.T) {
	g, o := testGuard(t), testOIDC(discoveryOnly(t))
	q, c := startLogin(t, g, o, navigation("http://app.example/"))
	state := q.Get("state")
	sealed := func(l oidcLogin, exp time.Time, scope string) *http.Cookie {
		plain, _ := json.Marshal(l)
		return &http.Cookie{Name: loginCookieName(o, l.State), Value: g.oidcFlows.sealer.seal(sealLogin, scope, exp, plain)}
	}
	other := oidcLogin{State: "another-state", Nonce: "n", Verifier: "v", RedirectURI: "http://app.example/cb", URL: "/"}
	mismatched := sealed(other, time.Now().Add(time.Minute), oidcScope(o))
	mismatched.Name = loginCookieName(o, state)
	refusals := []struct {
		name, method, query string
		cookie              *http.Cookie
	}{
		{"no state", "GET", "code=x", c},
		{"no cookie", "GET", "code=x&state=" + state, nil},
		{"a state of no cookie", "GET", "code=x&state=" + state + "x", c},
		{"a cookie of another state under this state's name", "GET", "code=x&state=" + state, mismatched},
		{"an expired login", "GET", "code=x&state=" + other.State, sealed(other, time.Now().Add(-time.Second), oidcScope(o))},
		{"a login of another client", "GET", "code=x&state=" + other.State, sealed(other, time.Now().Add(time.Minute), "other\x00client")},
		{"a cookie sealed with another key", "GET", "code=x&state=" + state, &http.Cookie{Name: c.Name, Value: mustSealOther(t, c.Value)}},
		{"a POST", "POST", "code=x&state=" + state, c},
	}
	for _, rf := range refusals {
		if rec := callback(g, o, rf.method, rf.query, rf.cookie); rec.Code != http.StatusBadRequest || rec.Header().Get("Set-Cookie") != "" && strings.Contains(rec.Header().Get("Set-Cookie"), "p-session=") {
			t.Errorf("%s: callback answered %d, want 400 and no session", rf.name, rec.Code)
		}
	}
	// The provider's error answer takes the state (it cannot be used
	// again) and refuses.
	if rec := callback(g, o, "GET", "error=access_denied&state="+state, c); rec.Code != http.StatusUnauthorized {
		t.Fatalf("a provider's error got %d, want 401", rec.Code)
	}
	if rec := callback(g, o, "GET", "code=x&state="+state, c); rec.Code != http.StatusBadRequest {
		t.Fatalf("a state used once was taken again: %d", rec.Code)
	}
}

func mustSealOther(t *testing.T, value string) string {
	t.Helper()
	other, err := newCookieSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return other.seal(sealLogin, "x", time.Now().Add(time.Minute), []byte(value))
}

func TestOIDCSessionExpiryAndTampering(t *testing.T) {
	g, o := testGuard(t), testOIDC(discoveryOnly(t))
	seal := func(s oidcSession) string {
		plain, _ := json.Marshal(s)
		return "1." + g.oidcFlows.sealer.seal(sealSession, oidcScope(o), time.Unix(s.End, 0), plain)
	}
	now := time.Now()
	live := oidcSession{IDToken: "id", AccessToken: "access", End: now.Add(time.Hour).Unix(), AccessExpiry: now.Add(time.Hour).Unix()}
	try := func(value string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "http://app.example/x", nil)
		r.Header.Set("Accept", "application/json")
		r.AddCookie(&http.Cookie{Name: "p-session", Value: value})
		rec := httptest.NewRecorder()
		if g.oidc(rec, r, o) {
			rec.Code = 0 // let through
		}
		return rec
	}
	if rec := try(seal(live)); rec.Code != 0 {
		t.Fatalf("a live session got %d", rec.Code)
	}
	ended := live
	ended.End = now.Add(-time.Second).Unix()
	noRefresh := live
	noRefresh.AccessExpiry = now.Add(-time.Second).Unix()
	tampered := []byte(seal(live))
	tampered[len(tampered)/2] ^= 1
	for name, v := range map[string]string{"ended": seal(ended), "access expired, no refresh token": seal(noRefresh), "tampered": string(tampered), "garbage": "1.zzz"} {
		rec := try(v)
		if rec.Code != http.StatusUnauthorized {
			t.Errorf("%s session: %d, want 401", name, rec.Code)
		}
		if !strings.Contains(rec.Header().Get("Set-Cookie"), "p-session=;") {
			t.Errorf("%s session: its cookie was not cleared", name)
		}
	}
}

func TestOIDCClaimStateIsBounded(t *testing.T) {
	f := newOIDCFlows(nil, nil)
	now := time.Now()
	if !f.claimState("a", now) || f.claimState("a", now) {
		t.Fatal("a state was taken twice")
	}
	if !f.claimState("a", now.Add(oidcLoginTTL)) {
		t.Fatal("a state whose login expired stays taken")
	}
	for i := range oidcUsedMax + 10 {
		f.claimState(fmt.Sprint(i), now)
	}
	if len(f.used) > oidcUsedMax {
		t.Fatalf("%d states kept, bound %d", len(f.used), oidcUsedMax)
	}
}
