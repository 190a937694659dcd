package configstream

import (
	"context"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
)

var web = types.NamespacedName{Namespace: "apps", Name: "web"}

// tokens: "web-token" is apps/web-dedicated's, "other-token" belongs to
// another ServiceAccount of the same namespace.
func testAuth(_ context.Context, token string) (string, string, error) {
	switch token {
	case "web-token":
		return "apps", "web-dedicated", nil
	case "other-token":
		return "apps", "other-dedicated", nil
	}
	return "", "", errors.New("unknown token")
}

func objectsOfRoute(routeName string) *snapshot.Resources {
	return &snapshot.Resources{
		Gateways:   []*gwv1.Gateway{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}}},
		HTTPRoutes: []*gwv1.HTTPRoute{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: routeName}}},
		Secrets:    []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "tls"}, Data: map[string][]byte{"tls.key": []byte("k")}}},
	}
}

// hubServer serves h over TLS on addr ("127.0.0.1:0" for any port).
func hubServer(t *testing.T, h *Hub, addr string) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.EnableHTTP2 = true
	srv.StartTLS()
	// Streams outlive any request: close their connections, or Close
	// waits for them.
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, pool
}

type runningSource struct {
	src     *Source
	changes atomic.Int64
	ready   chan struct{}
	cancel  context.CancelFunc
	done    chan error
}

func startSource(t *testing.T, addr, token string, roots *x509.CertPool) *runningSource {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &runningSource{
		src:   &Source{Gateway: web, Controller: addr, TokenFile: tokenFile, RootCAs: roots, Pod: "web-0", Log: zaptest.NewLogger(t), Silence: time.Second},
		ready: make(chan struct{}),
		done:  make(chan error, 1),
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- r.src.Run(ctx, func() { r.changes.Add(1) }, func() { close(r.ready) })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func routeOf(t *testing.T, s *Source) string {
	t.Helper()
	res, err := s.Snapshot()
	if err != nil {
		return ""
	}
	return res.HTTPRoutes[0].Name
}

// TestStream: the data plane gets its Gateway's snapshot (Secrets
// included) once it is ready, then every change; its acknowledgement
// reaches the controller; when the controller goes away it keeps the last
// snapshot, and catches up once a controller is back.
func TestStream(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.Heartbeat = 100 * time.Millisecond
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v1")}})
	srv, roots := hubServer(t, h, "127.0.0.1:0")
	addr := srv.Listener.Addr().String()
	r := startSource(t, addr, "web-token", roots)
	select {
	case <-r.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if got := routeOf(t, r.src); got != "v1" {
		t.Fatalf("route %q, want v1", got)
	}
	res, _ := r.src.Snapshot()
	if len(res.Secrets) != 1 || string(res.Secrets[0].Data["tls.key"]) != "k" {
		t.Fatalf("Secrets did not come through: %+v", res.Secrets)
	}
	r.src.Acknowledge(nil)
	current, _ := h.Version(web)
	waitUntil(t, "acknowledgement", func() bool { _, a := h.Version(web); return a.Version == current && a.Pod == "web-0" })

	// Publishing the same objects again changes nothing.
	before := r.changes.Load()
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v1")}})
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v2")}})
	waitUntil(t, "v2", func() bool { return routeOf(t, r.src) == "v2" })
	if got := r.changes.Load() - before; got != 1 {
		t.Errorf("%d changes for one new snapshot", got)
	}

	// A Gateway that is not accepted now keeps what was sent.
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Keep: true}})
	if v, _ := h.Version(web); v == "" {
		t.Fatal("a kept plane was dropped")
	}

	// The controller goes away: the data plane keeps v2.
	srv.CloseClientConnections()
	srv.Close()
	time.Sleep(300 * time.Millisecond)
	if got := routeOf(t, r.src); got != "v2" {
		t.Fatalf("route %q after the controller left, want v2", got)
	}
	// A controller comes back on the same address with v3.
	h2 := NewHub(testAuth, zaptest.NewLogger(t))
	h2.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v3")}})
	waitUntil(t, "the address free again", func() bool {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		ln.Close()
		return true
	})
	srv2, _ := hubServer(t, h2, addr)
	// httptest gives every server its own certificate, where controller
	// replicas share one (provisioner.ServerCertificate): trust it too.
	r.src.RootCAs.AddCert(srv2.Certificate())
	r.src.mu.Lock()
	r.src.client = nil
	r.src.mu.Unlock()
	waitUntil(t, "v3 after the controller came back", func() bool { return routeOf(t, r.src) == "v3" })
}

// TestStreamRefusesOthers: a token of another ServiceAccount, an unknown
// token and a missing one get nothing.
func TestStreamRefusesOthers(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute("v1")}})
	srv, _ := hubServer(t, h, "127.0.0.1:0")
	for token, want := range map[string]int{"other-token": http.StatusForbidden, "forged": http.StatusUnauthorized, "": http.StatusUnauthorized} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+StreamPath+"?gateway=apps/web", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("token %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
	// An unknown Gateway says only "not yet".
	req, _ := http.NewRequest(http.MethodGet, srv.URL+StreamPath+"?gateway=apps/nope", nil)
	req.Header.Set("Authorization", "Bearer web-token")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("unknown Gateway: %d", resp.StatusCode)
	}
}

type fakeACME map[string]string // host/token -> key authorization

func (f fakeACME) HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	token, _ := strings.CutPrefix(r.URL.Path, "/.well-known/acme-challenge/")
	answer, ok := f[r.Host+"/"+token]
	if ok {
		_, _ = io.WriteString(w, answer)
	}
	return ok
}

// TestChallenges: the CA's HTTP-01 request reaching a data plane is
// answered with what the controller's ACME manager holds for that host and
// token; an unknown token, a token of another host and any other path go
// on to routing.
func TestChallenges(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.Challenges = fakeACME{"a.example.com/tok-1": "tok-1.thumbprint"}
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: withHosts(objectsOfRoute("v1"), "a.example.com")}})
	srv, roots := hubServer(t, h, "127.0.0.1:0")
	r := startSource(t, srv.Listener.Addr().String(), "web-token", roots)
	ask := func(host, path string) (bool, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "http://"+host+path, nil)
		handled := r.src.HandleHTTPChallenge(rec, req)
		return handled, rec.Body.String()
	}
	if ok, body := ask("a.example.com", "/.well-known/acme-challenge/tok-1"); !ok || body != "tok-1.thumbprint" {
		t.Errorf("challenge: handled %v, %q", ok, body)
	}
	for _, c := range [][2]string{
		{"a.example.com", "/.well-known/acme-challenge/tok-2"},
		{"b.example.com", "/.well-known/acme-challenge/tok-1"},
		{"a.example.com", "/.well-known/acme-challenge/../../v1/stream"},
		{"a.example.com", "/hello"},
	} {
		if ok, _ := ask(c[0], c[1]); ok {
			t.Errorf("%s%s was answered", c[0], c[1])
		}
	}
}

// TestSuperseded: a version the hub replaced with a newer one is
// superseded (an acknowledgement of it is out of date); the current one
// and versions it never published are not, and a Gateway that is gone
// takes its history with it.
func TestSuperseded(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	publish := func(route string) string {
		h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: objectsOfRoute(route)}})
		v, _ := h.Version(web)
		return v
	}
	a := publish("a")
	if h.Superseded(web, a) {
		t.Error("the current version is superseded")
	}
	b := publish("b")
	if !h.Superseded(web, a) || h.Superseded(web, b) || h.Superseded(web, "unknown") {
		t.Errorf("after a then b: superseded a %v (want true), b %v, unknown %v (want false)",
			h.Superseded(web, a), h.Superseded(web, b), h.Superseded(web, "unknown"))
	}
	if publish("a") != a || h.Superseded(web, a) || !h.Superseded(web, b) {
		t.Error("back to a: a is current again, b superseded")
	}
	h.Publish(nil)
	if h.Superseded(web, b) {
		t.Error("a Gateway that is gone still has superseded versions")
	}
}
