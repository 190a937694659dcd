package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/routing"
)

// routeTable compiles one HTTPRoute sending every request on an HTTP
// listener to svc:80.
func routeTable(t testing.TB, svc string) *config.Table {
	t.Helper()
	return ruleTable(t, svc, gwv1.HTTPRouteRule{})
}

// ruleTable is routeTable with rule's other fields (retry, timeouts, ...)
// in the one rule.
func ruleTable(t testing.TB, svc string, rule gwv1.HTTPRouteRule) *config.Table {
	t.Helper()
	return compileRoute(t, ruleRoute(svc, rule), httpService(svc, routing.Service{}))
}

// compileRoute compiles route (namespace ns, parent Gateway ns/gw) for the
// one HTTP listener of ns/gw on port 80, with services.
func compileRoute(t testing.TB, route *gwv1.HTTPRoute, services map[types.NamespacedName]routing.Service) *config.Table {
	t.Helper()
	return compileOne(t, oneListener([]*gwv1.HTTPRoute{route}, services)).Tables[0]
}

func httpPortConfig(t testing.TB, number int, svc, backendAddr string) *config.Config {
	return onePortConfig(number, routeTable(t, svc), nil, map[string][]string{svc: {backendAddr}})
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// slowBackend answers after the delay given in ?delay=, naming itself.
func slowBackend(t testing.TB, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil {
			time.Sleep(d)
		}
		io.WriteString(w, name)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func newRuntime(t testing.TB) *Runtime {
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 5 * time.Second
	rt := New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return rt
}

func body(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestApplyKeepsOldConfigWhenABindFails: a config whose new port cannot be
// bound is not applied at all.
func TestApplyKeepsOldConfigWhenABindFails(t *testing.T) {
	rt := newRuntime(t)
	a := slowBackend(t, "a")
	b := slowBackend(t, "b")
	p1 := freePort(t)
	if err := rt.Apply(httpPortConfig(t, p1, "svc", a)); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port

	next := httpPortConfig(t, p1, "svc", b)
	next.Ports = append(next.Ports, httpPortConfig(t, takenPort, "svc", b).Ports[0])
	err = rt.Apply(next)
	if err == nil || !strings.Contains(err.Error(), "bind port "+strconv.Itoa(takenPort)) {
		t.Fatalf("Apply with a taken port: %v, want a bind error naming the port", err)
	}
	if _, got := body(t, fmt.Sprintf("http://127.0.0.1:%d/", p1)); got != "a" {
		t.Errorf("after a failed apply the port answers from %q, want the old config's backend a", got)
	}
}

// TestRemovedPortDrainsInFlightRequests: a request in flight when its port
// is removed completes; new connections are refused.
func TestRemovedPortDrainsInFlightRequests(t *testing.T) {
	rt := newRuntime(t)
	a := slowBackend(t, "a")
	p1, p2 := freePort(t), freePort(t)
	inFlight := removeDuringRequest(t, rt, a, p1, p2, 300*time.Millisecond)
	if status, got := inFlight(); status != 200 || got != "a" {
		t.Errorf("in-flight request across the port's removal: %d %q", status, got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p1), time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("removed port still accepts connections")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, got := body(t, fmt.Sprintf("http://127.0.0.1:%d/", p2)); got != "a" {
		t.Errorf("new port answers %q", got)
	}
}

// TestRemovedPortRefusesAtOnceAndBindsAgain: once Apply has returned, a
// removed port refuses connections, even while a request on it is still
// being served, and a later Apply that adds the port back binds it at once,
// without waiting for the drain.
func TestRemovedPortRefusesAtOnceAndBindsAgain(t *testing.T) {
	rt := newRuntime(t)
	a, b := slowBackend(t, "a"), slowBackend(t, "b")
	p1, p2 := freePort(t), freePort(t)
	inFlight := removeDuringRequest(t, rt, a, p1, p2, 500*time.Millisecond)
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p1), time.Second); err == nil {
		c.Close()
		t.Error("the removed port accepts connections after Apply returned")
	}
	// Added back while its last request drains, removed and added again
	// with no pause: each Apply binds the port the one before released.
	for i := range 20 {
		if err := rt.Apply(httpPortConfig(t, p1, "svc", b)); err != nil {
			t.Fatalf("adding the port back during its drain (%d): %v", i, err)
		}
		if i < 19 {
			if err := rt.Apply(httpPortConfig(t, p2, "svc", a)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, got := body(t, fmt.Sprintf("http://127.0.0.1:%d/", p1)); got != "b" {
		t.Errorf("port added back answers %q, want b", got)
	}
	if status, got := inFlight(); status != 200 || got != "a" {
		t.Errorf("in-flight request across the port's removal: %d %q", status, got)
	}
}

// removeDuringRequest serves port from on backend, sends a request that
// the backend answers after delay, and replaces the port by to while the
// request is at the backend. The returned function waits for its answer.
func removeDuringRequest(t *testing.T, rt *Runtime, backend string, from, to int, delay time.Duration) func() (int, string) {
	t.Helper()
	if err := rt.Apply(httpPortConfig(t, from, "svc", backend)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var status int
	var got string
	wg.Go(func() { status, got = body(t, fmt.Sprintf("http://127.0.0.1:%d/?delay=%s", from, delay)) })
	time.Sleep(100 * time.Millisecond) // the request is now at the backend
	if err := rt.Apply(httpPortConfig(t, to, "svc", backend)); err != nil {
		t.Fatal(err)
	}
	return func() (int, string) {
		wg.Wait()
		return status, got
	}
}

// TestShortHTTP1RequestOnH2CPort: the cleartext HTTP/2 sniffer must not wait
// for 24 bytes a short HTTP/1.0 request never sends.
func TestShortHTTP1RequestOnH2CPort(t *testing.T) {
	rt := newRuntime(t)
	a := slowBackend(t, "a")
	p := freePort(t)
	if err := rt.Apply(httpPortConfig(t, p, "svc", a)); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(c, "GET / HTTP/1.0\r\n\r\n") // 18 bytes
	resp, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("short request: %v", err)
	}
	if !strings.HasPrefix(string(resp), "HTTP/1.0 200") || !strings.HasSuffix(string(resp), "a") {
		t.Errorf("short request answered %q", resp)
	}
}

type observed struct {
	mu    sync.Mutex
	calls []string
}

func (o *observed) ObserveRequest(route string, code int, _ string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s %d", route, code))
}

func (o *observed) ObserveGRPC(route string, status int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s grpc-status %d", route, status))
}

// TestObserverSeesRouteAndStatus: metrics get the matched route and the
// status code actually sent, also for requests no route matched.
func TestObserverSeesRouteAndStatus(t *testing.T) {
	obs := &observed{}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.Observer = obs
	rt := New(opts, zaptest.NewLogger(t))
	defer rt.Close(context.Background()) //nolint:errcheck // test cleanup
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", slowBackend(t, "a"))
	cfg.Ports[0].Listeners = hostname.NewTable([]string{"a.example.com"}, cfg.Ports[0].All.Slice())
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d/", p), nil)
	req.Host = "a.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, _ := body(t, fmt.Sprintf("http://127.0.0.1:%d/", p)); code != 404 {
		t.Fatalf("unknown host: %d", code)
	}
	// A request is observed once its handler has returned, which can be
	// after the client has read the whole answer.
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		obs.mu.Lock()
		got = slices.Clone(obs.calls)
		obs.mu.Unlock()
		if len(got) >= 2 || time.Now().After(deadline) {
			break
		}
	}
	slices.Sort(got)
	want := []string{" 404", "ns/r 200"}
	if !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
}

// withEndpoints is t with k's endpoints set to e.
func withEndpoints(t config.EndpointTable, k config.BackendKey, e *config.Endpoints) config.EndpointTable {
	return t.With(map[config.BackendKey]*config.Endpoints{k: e})
}
