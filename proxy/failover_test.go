package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// deadAddr is a loopback address nothing listens on: connecting is refused.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestFailoverToLiveEndpoint: an endpoint that refuses connections costs a
// request that can be sent again nothing (it goes to another endpoint), and
// is left out for the requests after it, those with a body included.
func TestFailoverToLiveEndpoint(t *testing.T) {
	live := slowBackend(t, "live")
	dead := deadAddr(t)
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	start := func() (*Runtime, string) {
		rt := newRuntime(t)
		p := freePort(t)
		cfg := httpPortConfig(t, p, "svc", live)
		cfg.Endpoints = withEndpoints(cfg.Endpoints, key, config.NewEndpoints(dead, live)) // the dead one is picked first
		if err := rt.Apply(cfg); err != nil {
			t.Fatal(err)
		}
		return rt, fmt.Sprintf("http://127.0.0.1:%d/", p)
	}
	post := func(url string) (int, string) {
		resp, err := http.Post(url, "text/plain", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	rt, url := start()
	for i := range 6 {
		if code, got := body(t, url); code != 200 || got != "live" {
			t.Fatalf("GET %d: %d %q, want 200 from the live endpoint", i, code, got)
		}
	}
	if !rt.fwd.down.isDown(dead, time.Now()) || rt.fwd.down.isDown(live, time.Now()) {
		t.Errorf("down: %v, want only %s", rt.fwd.down.until, dead)
	}
	for i := range 4 {
		if code, got := post(url); code != 200 || got != "live" {
			t.Fatalf("POST %d after the failure: %d %q", i, code, got)
		}
	}

	// A body Portico did not keep cannot be sent twice: the first request
	// to pick the dead endpoint fails, the ones after it do not.
	_, url = start()
	if code, _ := post(url); code != http.StatusBadGateway {
		t.Errorf("first POST to the dead endpoint: %d, want 502", code)
	}
	for i := range 4 {
		if code, got := post(url); code != 200 || got != "live" {
			t.Fatalf("POST %d: %d %q", i, code, got)
		}
	}
}

// TestAllEndpointsDown: with nowhere to fail over to, a request is still
// tried (one endpoint may be back) and answered 502.
func TestAllEndpointsDown(t *testing.T) {
	rt := newRuntime(t)
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", deadAddr(t))
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	cfg.Endpoints = withEndpoints(cfg.Endpoints, key, config.NewEndpoints(deadAddr(t), deadAddr(t)))
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", p)
	for i := range 3 {
		if code, _ := body(t, url); code != http.StatusBadGateway {
			t.Fatalf("GET %d: %d, want 502", i, code)
		}
	}
}

// TestDownSetExpires: an endpoint is left out for downFor, and entries that
// expired are dropped at the next mark.
func TestDownSetExpires(t *testing.T) {
	var d downSet
	t0 := time.Now()
	if !d.mark("10.0.0.1:80", t0) || d.mark("10.0.0.1:80", t0.Add(time.Second)) {
		t.Error("mark: only the first failure finds the endpoint up")
	}
	t1 := t0.Add(time.Second) // the second mark
	if !d.any(t1) || !d.isDown("10.0.0.1:80", t1.Add(downFor-time.Millisecond)) || d.isDown("10.0.0.1:80", t1.Add(downFor)) {
		t.Fatal("10.0.0.1 not down for exactly downFor after its last failure")
	}
	d.mark("10.0.0.2:80", t1.Add(downFor))
	if len(d.until) != 1 {
		t.Errorf("after expiry: %v, want only 10.0.0.2", d.until)
	}

	if d.any(t1.Add(2 * downFor)) {
		t.Error("something down after every entry expired")
	}

	e := config.NewEndpoints("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	now := time.Now()
	d.mark("10.0.0.1:80", now)
	d.mark("10.0.0.2:80", now)
	for range 6 {
		if a := d.pickUp(e, now); a != "10.0.0.3:80" {
			t.Fatalf("pickUp = %s, want the only endpoint up", a)
		}
	}
	if !d.hasUp(e, "10.0.0.2:80", now) || d.hasUp(e, "10.0.0.3:80", now) {
		t.Error("hasUp")
	}
	if a := d.pickUp(e, now.Add(downFor)); a == "" || d.hasUp(e, "10.0.0.3:80", now.Add(downFor)) != true {
		t.Error("endpoints still left out after downFor")
	}
}

// TestUnreachable: a dial cut short by the request's own context says
// nothing of the endpoint.
func TestUnreachable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	req := httptest.NewRequest("GET", "http://a.example/", nil)
	if !unreachable(req, refused) {
		t.Error("connection refused: not unreachable")
	}
	ctx, cancel := context.WithCancel(req.Context())
	cancel()
	if unreachable(req.WithContext(ctx), refused) {
		t.Error("request canceled: unreachable")
	}
	if unreachable(req, &net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}) {
		t.Error("deadline of the request: unreachable")
	}
	if unreachable(req, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}) {
		t.Error("reset after connecting: unreachable")
	}
}

// TestFailoverDoesNotSpendRetries: a request that failed over to another
// endpoint still has its retry policy's attempts for what that endpoint
// answers.
func TestFailoverDoesNotSpendRetries(t *testing.T) {
	var calls atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "flaky")
	}))
	t.Cleanup(flaky.Close)
	attempts := 1
	url := retryRuntime(t, []string{deadAddr(t), flaky.Listener.Addr().String()},
		&gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{500}, Attempts: &attempts}, nil)
	if code, got := body(t, url); code != 200 || got != "flaky" {
		t.Errorf("dead endpoint, then a 500, then the retry: %d %q, want 200", code, got)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the live endpoint saw %d requests, want 2", n)
	}
}

// pastDeadline is a context whose deadline has passed but whose timer has
// not yet marked it done: the moment between the poller cutting a dial at
// the deadline and the context's own timer.
type pastDeadline struct{ context.Context }

func (pastDeadline) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// TestDialCutAtDeadline: a dial the poller cut at the attempt's deadline,
// failing before the context says so, is the attempt's timeout (504), and
// says nothing of the endpoint.
func TestDialCutAtDeadline(t *testing.T) {
	cut := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	req := httptest.NewRequest("GET", "http://a.example/", nil)
	ctx := pastDeadline{req.Context()}
	err := cutByDeadline(ctx, cut)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial cut at the deadline: %v, not the deadline", err)
	}
	if unreachable(req.WithContext(ctx), err) {
		t.Error("dial cut at the deadline: endpoint unreachable")
	}
	if err := cutByDeadline(req.Context(), cut); errors.Is(err, context.DeadlineExceeded) {
		t.Error("a dial timeout without a request deadline taken for the request's")
	}
	rec := httptest.NewRecorder()
	(&forwarder{log: zap.NewNop()}).proxyError(rec, req.WithContext(ctx), cut)
	if rec.Code != http.StatusGatewayTimeout {
		t.Errorf("status %d, want 504", rec.Code)
	}
}
