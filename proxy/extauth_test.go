package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"portico.dev/portico/config"
)

// authService is an HTTP authorization service on loopback whose answer
// the test writes; it keeps what each request carried.
type authService struct {
	addr string
	mu   sync.Mutex
	seen []*http.Request
	body []string
}

func newAuthService(t *testing.T, answer http.HandlerFunc) *authService {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &authService{addr: ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		a.seen = append(a.seen, r)
		a.body = append(a.body, string(b))
		a.mu.Unlock()
		answer(w, r)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return a
}

func (a *authService) requests() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

func (a *authService) last(t *testing.T) (*http.Request, string) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) == 0 {
		t.Fatal("the authorization service got no request")
	}
	return a.seen[len(a.seen)-1], a.body[len(a.body)-1]
}

func extAuthPolicy(addr string) *config.Security {
	return &config.Security{Policy: "ns/ext", ExtAuth: &config.ExtAuth{
		Address: addr, Path: "/check", Timeout: 2 * time.Second,
		HeadersToAuth: []string{"Authorization", "X-Tenant"}, HeadersToBackend: []string{"X-User"},
	}}
}

func TestExtAuthAllowSetsHeadersAndSendsNoBody(t *testing.T) {
	auth := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-User", "alice")
		w.Header().Set("X-Internal", "not for the backend")
		w.WriteHeader(http.StatusOK)
	})
	g := startGuarded(t, extAuthPolicy(auth.addr))
	req, _ := http.NewRequest(http.MethodPost, g.url+"/orders/7?x=1", strings.NewReader("secret body"))
	req.Header.Set("Authorization", "Bearer t")
	req.Header.Set("X-Tenant", "acme")
	req.Header.Set("Cookie", "session=1")
	req.Header.Set("X-User", "mallory")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("allowed request: status %d", resp.StatusCode)
	}
	ar, body := auth.last(t)
	if ar.Method != http.MethodPost || ar.RequestURI != "/check/orders/7?x=1" {
		t.Errorf("authorization request %s %s, want POST /check/orders/7?x=1", ar.Method, ar.RequestURI)
	}
	if body != "" || ar.ContentLength > 0 {
		t.Errorf("the authorization service got a body: %q (length %d)", body, ar.ContentLength)
	}
	if ar.Header.Get("Authorization") != "Bearer t" || ar.Header.Get("X-Tenant") != "acme" {
		t.Errorf("allowed headers not sent: %v", ar.Header)
	}
	if ar.Header.Get("Cookie") != "" {
		t.Errorf("a header outside headersToAuth was sent: %v", ar.Header)
	}
	seen := g.backend.last(t)
	if !strings.Contains(seen, "X-User: alice") || strings.Contains(seen, "mallory") {
		t.Errorf("backend should see the service's X-User only:\n%s", seen)
	}
	if strings.Contains(seen, "X-Internal") {
		t.Errorf("a header outside headersToBackend reached the backend:\n%s", seen)
	}
	if g.obs.count("ext_auth:allowed") != 1 {
		t.Errorf("decisions %v", g.obs.decisions)
	}
}

func TestExtAuthDenyReturnsItsAnswer(t *testing.T) {
	auth := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/check/login" {
			w.Header().Set("Location", "https://idp.example/login")
			w.Header().Set("X-Internal", "x")
			w.WriteHeader(http.StatusFound)
			return
		}
		w.Header().Set("Www-Authenticate", `Bearer realm="api"`)
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "token expired")
	})
	g := startGuarded(t, extAuthPolicy(auth.addr))
	code, challenge, body := g.do(t, "", "/x", nil)
	if code != http.StatusUnauthorized || challenge != `Bearer realm="api"` || body != "token expired" {
		t.Fatalf("denied: %d %q %q, want the service's 401 with its challenge and body", code, challenge, body)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(g.url + "/login")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://idp.example/login" || resp.Header.Get("X-Internal") != "" {
		t.Fatalf("redirect: %d %v", resp.StatusCode, resp.Header)
	}
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d requests the service refused", n)
	}
	if g.obs.count("ext_auth:denied") != 2 {
		t.Errorf("decisions %v", g.obs.decisions)
	}
}

// downAddress is a loopback address nothing listens on.
func downAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestExtAuthDownFailsClosed(t *testing.T) {
	g := startGuarded(t, extAuthPolicy(downAddress(t)))
	if code, _, _ := g.do(t, "", "/x", nil); code != http.StatusForbidden {
		t.Fatalf("service down: %d, want 403", code)
	}
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d requests", n)
	}
	if g.obs.count("ext_auth:unavailable") != 1 {
		t.Errorf("decisions %v", g.obs.decisions)
	}
}

func TestExtAuthDownFailOpen(t *testing.T) {
	sec := extAuthPolicy(downAddress(t))
	sec.ExtAuth.FailOpen = true
	g := startGuarded(t, sec)
	if code, _, body := g.do(t, "", "/x", [][2]string{{"X-User", "mallory"}}); code != http.StatusOK || body != "ok" {
		t.Fatalf("fail open: %d %q", code, body)
	}
	if g.obs.count("ext_auth:fail_open") != 1 {
		t.Errorf("decisions %v", g.obs.decisions)
	}
}

func TestExtAuthServiceWithoutEndpointsFailsClosed(t *testing.T) {
	sec := &config.Security{Policy: "ns/ext", ExtAuth: &config.ExtAuth{
		Backend: &config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "auth"}, Port: 9000}, Timeout: time.Second,
	}}
	g := startGuarded(t, sec)
	if code, _, _ := g.do(t, "", "/x", nil); code != http.StatusForbidden {
		t.Fatalf("Service without endpoints: %d, want 403", code)
	}
}

func TestExtAuthServiceByBackendKey(t *testing.T) {
	auth := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") == "acme" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.WriteHeader(http.StatusForbidden)
	})
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "auth"}, Port: 9000}
	sec := &config.Security{Policy: "ns/ext", ExtAuth: &config.ExtAuth{Backend: &key, Timeout: time.Second, HeadersToAuth: []string{"X-Tenant"}}}
	g := startGuarded(t, sec)
	port := freePort(t)
	cfg := securedConfig(t, port, sec, g.backend.addr)
	cfg.Endpoints = cfg.Endpoints.With(map[config.BackendKey]*config.Endpoints{key: config.NewEndpoints(auth.addr)})
	if err := g.rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	g.url = fmt.Sprintf("http://127.0.0.1:%d", port)
	if code, _, _ := g.do(t, "", "/x", [][2]string{{"X-Tenant", "acme"}}); code != http.StatusOK {
		t.Fatalf("allowed by the Service's endpoint: %d", code)
	}
	if code, _, _ := g.do(t, "", "/x", [][2]string{{"X-Tenant", "other"}}); code != http.StatusForbidden {
		t.Fatalf("refused by the Service's endpoint: %d", code)
	}
}

func TestAttackExtAuthHangs(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	auth := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	sec := extAuthPolicy(auth.addr)
	sec.ExtAuth.Timeout = 200 * time.Millisecond
	g := startGuarded(t, sec)
	if code, _, _ := g.do(t, "", "/x", nil); code != http.StatusForbidden {
		t.Fatalf("hanging service: %d, want 403", code)
	}
	if n := len(g.backend.requests()); n != 0 {
		t.Fatalf("the backend got %d requests", n)
	}
}

func TestAttackExtAuthHugeRefusal(t *testing.T) {
	auth := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusForbidden)
		chunk := strings.Repeat("x", 64<<10)
		for range 256 { // 16 MiB
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	})
	g := startGuarded(t, extAuthPolicy(auth.addr))
	code, _, body := g.do(t, "", "/x", nil)
	if code != http.StatusForbidden || len(body) != extAuthBodyMax {
		t.Fatalf("huge refusal: %d with %d bytes, want 403 with %d", code, len(body), extAuthBodyMax)
	}
}

func TestAttackExtAuthSlowRefusalBody(t *testing.T) {
	auth := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		for range 100 {
			if _, err := io.WriteString(w, "x"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-time.After(50 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	})
	for _, failOpen := range []bool{false, true} {
		// failOpen lets through what the service could not decide, not
		// what it refused.
		sec := extAuthPolicy(auth.addr)
		sec.ExtAuth.Timeout = 300 * time.Millisecond
		sec.ExtAuth.FailOpen = failOpen
		g := startGuarded(t, sec)
		code, _, body := g.do(t, "", "/x", nil)
		if code != http.StatusForbidden || strings.Contains(body, "x") {
			t.Fatalf("trickled refusal, failOpen %v: %d %q, want 403", failOpen, code, body)
		}
		if len(g.backend.requests()) != 0 {
			t.Fatalf("failOpen %v: the backend got a refused request", failOpen)
		}
	}
}

func TestAttackExtAuthSlowAnswerDoesNotBlockOthers(t *testing.T) {
	// One request held by a slow service does not hold another's.
	slow := make(chan struct{})
	t.Cleanup(func() { close(slow) })
	auth := newAuthService(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/check/slow" {
			select {
			case <-slow:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	sec := extAuthPolicy(auth.addr)
	sec.ExtAuth.Timeout = 5 * time.Second
	g := startGuarded(t, sec)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url+"/slow", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for auth.requests() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	if code, _, _ := g.do(t, "", "/fast", nil); code != http.StatusOK {
		t.Fatalf("request behind a slow one: %d", code)
	}
}
