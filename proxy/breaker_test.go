package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// breakerConfig is one rule over Service svc (port 80, endpoints addrs)
// whose policy's circuit breaker is cb, retrying 503 once when retry.
func breakerConfig(t testing.TB, port int, cb *config.CircuitBreaker, retry bool, addrs []string) *config.Config {
	return serviceConfig(t, port, routing.Service{Breaker: cb}, retry, addrs)
}

// serviceConfig is one rule over Service svc (port 80, endpoints addrs)
// whose policy is what svc says, retrying 503 once when retry.
func serviceConfig(t testing.TB, port int, svc routing.Service, retry bool, addrs []string) *config.Config {
	t.Helper()
	var rule gwv1.HTTPRouteRule
	if retry {
		rule.Retry = &gwv1.HTTPRouteRetry{Codes: []gwv1.HTTPRouteRetryStatusCode{503}, Attempts: ptr.To(1)}
	}
	in := oneListener([]*gwv1.HTTPRoute{ruleRoute("svc", rule)}, httpService("svc", svc))
	return onePortConfig(port, compileOne(t, in).Tables[0], nil, map[string][]string{"svc": addrs})
}

// heldBackend holds every request until release is closed, counting the
// requests it got and the connections open to it at most at once.
type heldBackend struct {
	addr             string
	release          chan struct{}
	arrived          chan string // each request's path, as it arrives
	conns, peakConns atomic.Int32
}

func newHeldBackend(t *testing.T) *heldBackend {
	hb := &heldBackend{release: make(chan struct{}), arrived: make(chan string, 100)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hb.arrived <- r.URL.Path
		<-hb.release
		io.WriteString(w, "held "+r.URL.Path)
	}), ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			n := hb.conns.Add(1)
			for {
				peak := hb.peakConns.Load()
				if n <= peak || hb.peakConns.CompareAndSwap(peak, n) {
					break
				}
			}
		case http.StateClosed, http.StateHijacked:
			hb.conns.Add(-1)
		}
	}}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	hb.addr = ln.Addr().String()
	return hb
}

// breakerRuntime is a runtime whose access log is observed.
func breakerRuntime(t *testing.T) (*Runtime, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.InfoLevel)
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.AccessLog = zap.New(core)
	rt := New(opts, zap.NewNop())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return rt, logs
}

type heldAnswer struct {
	status int
	body   string
	err    error
}

// sendAsync sends GET path and delivers its answer on the channel.
func sendAsync(base, path string) chan heldAnswer {
	ch := make(chan heldAnswer, 1)
	go func() {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get(base + path)
		if err != nil {
			ch <- heldAnswer{err: err}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		ch <- heldAnswer{status: resp.StatusCode, body: string(b)}
	}()
	return ch
}

func waitArrived(t *testing.T, hb *heldBackend, n int) {
	t.Helper()
	for range n {
		select {
		case <-hb.arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("a request never reached the backend")
		}
	}
}

// TestBreakerParallelRequests: with maxParallelRequests 2, two requests
// held by the backend fill it; a third is answered 503 at once, logged
// breaker_requests, without reaching the backend; the two admitted ones
// are answered in full once the backend lets them go, and a request
// after them is admitted again.
func TestBreakerParallelRequests(t *testing.T) {
	hb := newHeldBackend(t)
	cb := &config.CircuitBreaker{MaxConnections: 100, MaxPendingRequests: 100, MaxParallelRequests: 2, MaxParallelRetries: 3}
	cb.MakeID()
	rt, logs := breakerRuntime(t)
	port := freePort(t)
	if err := rt.Apply(breakerConfig(t, port, cb, false, []string{hb.addr})); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	a, b := sendAsync(base, "/a"), sendAsync(base, "/b")
	waitArrived(t, hb, 2)
	c := <-sendAsync(base, "/c")
	if c.err != nil || c.status != http.StatusServiceUnavailable {
		t.Fatalf("third request: %d %v, want 503", c.status, c.err)
	}
	if status, outcome := outcomeLine(t, logs, "/c"); status != 503 || outcome != outcomeBreakerRequests {
		t.Errorf("access log of the refused request: %d %s", status, outcome)
	}
	close(hb.release)
	for _, ch := range []chan heldAnswer{a, b} {
		if got := <-ch; got.err != nil || got.status != 200 {
			t.Errorf("an admitted request: %d %v", got.status, got.err)
		}
	}
	if got := <-sendAsync(base, "/d"); got.status != 200 {
		t.Errorf("a request after the others ended: %d %v", got.status, got.err)
	}
	select {
	case p := <-hb.arrived:
		if p != "/d" {
			t.Errorf("the refused request reached the backend (%s)", p)
		}
	default:
	}
}

// TestBreakerConnectionsAndPending: with maxConnections 2 and
// maxPendingRequests 1, two held requests take both connections; a third
// waits without reaching the backend; a fourth is answered 503
// (breaker_pending) at once. Once the backend lets the first two go, the
// waiting one is sent and answered: nothing admitted is lost, and the
// backend never had more than 2 connections.
func TestBreakerConnectionsAndPending(t *testing.T) {
	hb := newHeldBackend(t)
	cb := &config.CircuitBreaker{MaxConnections: 2, MaxPendingRequests: 1, MaxParallelRequests: 100, MaxParallelRetries: 3}
	cb.MakeID()
	rt, logs := breakerRuntime(t)
	port := freePort(t)
	if err := rt.Apply(breakerConfig(t, port, cb, false, []string{hb.addr})); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	a, b := sendAsync(base, "/a"), sendAsync(base, "/b")
	waitArrived(t, hb, 2)
	waiting := sendAsync(base, "/waiting")
	// The third is pending once the breaker counts it.
	br := rt.fwd.breakers.get(config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}, cb)
	if !waitFor(5*time.Second, func() bool { return br.pending.Load() == 1 }) {
		t.Fatal("the third request is not waiting")
	}
	d := <-sendAsync(base, "/d")
	if d.err != nil || d.status != http.StatusServiceUnavailable {
		t.Fatalf("fourth request: %d %v, want 503", d.status, d.err)
	}
	if status, outcome := outcomeLine(t, logs, "/d"); status != 503 || outcome != outcomeBreakerPending {
		t.Errorf("access log of the refused request: %d %s", status, outcome)
	}
	select {
	case p := <-hb.arrived:
		t.Fatalf("%s reached the backend while both connections were busy", p)
	case <-time.After(50 * time.Millisecond):
	}
	close(hb.release)
	for _, ch := range []chan heldAnswer{a, b, waiting} {
		if got := <-ch; got.err != nil || got.status != 200 {
			t.Errorf("an admitted request: %d %v", got.status, got.err)
		}
	}
	if peak := hb.peakConns.Load(); peak > 2 {
		t.Errorf("the backend had %d connections at once, past maxConnections 2", peak)
	}
	if br.requests.Load() != 0 || br.pending.Load() != 0 || len(br.slots) != 0 {
		t.Errorf("counts left after every request ended: %d requests, %d pending, %d slots", br.requests.Load(), br.pending.Load(), len(br.slots))
	}
}

// TestBreakerParallelRetries: with maxParallelRetries 1, request A is
// retried (its first answer a 503) and its retry held by the backend; a
// request B answered 503 meanwhile is not retried: it gets the backend's
// own answer, after one attempt. Once A's retry ends, a retry is free
// again.
func TestBreakerParallelRetries(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	attempts := map[string]int{}
	addr := serveBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		attempts[r.URL.Path]++
		n := attempts[r.URL.Path]
		mu.Unlock()
		if r.URL.Path == "/a" && n == 2 {
			<-release
			io.WriteString(w, "a retried")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "backend says 503")
	}))
	count := func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return attempts[path]
	}
	cb := &config.CircuitBreaker{MaxConnections: 100, MaxPendingRequests: 100, MaxParallelRequests: 100, MaxParallelRetries: 1}
	cb.MakeID()
	rt, _ := breakerRuntime(t)
	port := freePort(t)
	if err := rt.Apply(breakerConfig(t, port, cb, true, []string{addr})); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	a := sendAsync(base, "/a")
	if !waitFor(5*time.Second, func() bool { return count("/a") == 2 }) {
		t.Fatal("A was not retried")
	}
	b := <-sendAsync(base, "/b")
	if b.status != http.StatusServiceUnavailable || b.body != "backend says 503" || count("/b") != 1 {
		t.Errorf("B with the retries full: %d %q after %d attempts, want the backend's 503 after 1", b.status, b.body, count("/b"))
	}
	close(release)
	if got := <-a; got.status != 200 || got.body != "a retried" {
		t.Errorf("A: %d %q", got.status, got.body)
	}
	<-sendAsync(base, "/c")
	if n := count("/c"); n != 2 {
		t.Errorf("C after A's retry ended: %d attempts, want 2 (retried)", n)
	}
}
