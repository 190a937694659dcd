package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// backendObserver records what the backend metrics are told.
type backendObserver struct {
	mu    sync.Mutex
	calls []string // "backend code outcome attempts"
	dials map[config.BackendKey]int
	open  map[config.BackendKey]int
}

func (o *backendObserver) ObserveDial(b config.BackendKey) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dials == nil {
		o.dials, o.open = map[config.BackendKey]int{}, map[config.BackendKey]int{}
	}
	o.dials[b]++
	o.open[b]++
}

func (o *backendObserver) ObserveClose(b config.BackendKey) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.open[b]--
}

func (o *backendObserver) dialed(b config.BackendKey) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dials[b]
}

func (o *backendObserver) opened(b config.BackendKey) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.open[b]
}

func (o *backendObserver) ObserveBackend(b config.BackendKey, code int, outcome string, attempts int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s %d %s %d", b, code, outcome, attempts))
}

func (o *backendObserver) ObserveEjection(b config.BackendKey) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s ejected", b))
}

func (o *backendObserver) seen() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.calls)
}

// backendObservedRuntime is a runtime whose backend and request observers are
// returned.
func backendObservedRuntime(t *testing.T) (*Runtime, *backendObserver, *outcomeObserver) {
	t.Helper()
	obs, requests := &backendObserver{}, &outcomeObserver{}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = time.Second
	opts.Backends = obs
	opts.Observer = requests
	rt := New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return rt, obs, requests
}

// TestBackendObserved: a request sent to a backend is observed with the
// backend the rule picked and the attempts its retry policy made; a
// request no rule matches is not.
func TestBackendObserved(t *testing.T) {
	var calls atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(backend.Close)
	rt, obs, requests := backendObservedRuntime(t)
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", backend.Listener.Addr().String())
	attempts := 1
	prefix := gwv1.PathMatchPathPrefix
	path := "/app"
	cfg.Ports[0].All.At(0).Routes = ruleTable(t, "svc", gwv1.HTTPRouteRule{
		Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: &path}}},
		Retry:   &gwv1.HTTPRouteRetry{Attempts: &attempts, Codes: []gwv1.HTTPRouteRetryStatusCode{503}},
	})
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if code, _ := body(t, fmt.Sprintf("http://127.0.0.1:%d/app", p)); code != 200 {
		t.Fatalf("%d, want 200 from the retry", code)
	}
	if code, _ := body(t, fmt.Sprintf("http://127.0.0.1:%d/other", p)); code != 404 {
		t.Fatalf("%d, want 404: no rule", code)
	}
	// Both are observed after their answer was sent; a request's backend
	// before the request itself.
	if !waitFor(5*time.Second, func() bool { return requests.seen(" 404 no_route") && requests.seen("ns/r 200 complete") }) {
		t.Fatalf("requests observed: %q", requests.calls)
	}
	want := []string{"ns/svc:80 200 complete 2"}
	if got := obs.seen(); !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
}

// TestEjectionObserved: an endpoint that refuses connections, left out
// while its backend has another, is observed as an ejection of its
// backend; the request, sent on to the other endpoint, as one attempt.
func TestEjectionObserved(t *testing.T) {
	rt, obs, requests := backendObservedRuntime(t)
	live := slowBackend(t, "live")
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", live)
	cfg.Endpoints = withEndpoints(cfg.Endpoints, key, config.NewEndpoints(deadAddr(t), live)) // the dead one is picked first
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if code, _ := body(t, fmt.Sprintf("http://127.0.0.1:%d/", p)); code != 200 {
		t.Fatalf("%d, want 200 from the live endpoint", code)
	}
	if !waitFor(5*time.Second, func() bool { return requests.seen("ns/r 200 complete") }) {
		t.Fatalf("requests observed: %q", requests.calls)
	}
	if got, want := obs.seen(), []string{"ns/svc:80 ejected", "ns/svc:80 200 complete 1"}; !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
}

// TestPoolUseObserved: a connection the direct pool opens to a backend is
// told once, not per request, and two requests at once leave two open;
// the pool's idle timeout closing them is told too.
func TestPoolUseObserved(t *testing.T) {
	rt, obs, _ := backendObservedRuntime(t)
	live := slowBackend(t, "live")
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	p := freePort(t)
	if err := rt.Apply(httpPortConfig(t, p, "svc", live)); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", p)
	for range 3 {
		if code, _ := body(t, url); code != 200 {
			t.Fatalf("%d, want 200", code)
		}
	}
	if n := obs.opened(key); n != 1 {
		t.Fatalf("%d open after requests one at a time, want 1", n)
	}
	if n := obs.dialed(key); n != 1 {
		t.Errorf("%d dials told for 3 requests on one connection, want 1", n)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if code, _ := body(t, url+"?delay=200ms"); code != 200 {
				t.Errorf("%d, want 200", code)
			}
		})
	}
	wg.Wait()
	if n := obs.opened(key); n != 2 {
		t.Errorf("%d open after two requests at once, want 2", n)
	}
	if n := obs.dialed(key); n != 2 {
		t.Errorf("%d dials told, want 2", n)
	}
	// What the pool's sweep does to connections idle past h1IdleTimeout.
	rt.fwd.pool.closeIdle(func(*h1Conn) bool { return true })
	if n := obs.opened(key); n != 0 {
		t.Errorf("%d open after the idle ones were closed, want 0", n)
	}
}
