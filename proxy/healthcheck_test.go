package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// healthCheckedConfig is one rule per route of routes (each an HTTPRoute
// on its own path prefix, "/" + name) over Service svc port 80, whose
// policy's active check is hc, with endpoints addrs; HealthChecks as
// translate gives them (routing's).
func healthCheckedConfig(t *testing.T, port int, hc *config.ActiveHealthCheck, addrs []string, routes ...string) *config.Config {
	t.Helper()
	p := gwv1.PortNumber(80)
	var rs []*gwv1.HTTPRoute
	for i, name := range routes {
		prefix := gwv1.PathMatchPathPrefix
		path := "/" + name
		rs = append(rs, &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Generation: 1, CreationTimestamp: metav1.NewTime(time.Unix(int64(i), 0))},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
				Rules: []gwv1.HTTPRouteRule{{
					Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: &path}}},
					BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
						BackendObjectReference: gwv1.BackendObjectReference{Name: "svc", Port: &p}}}}}},
			},
		})
	}
	in := oneListener(rs, httpService("svc", routing.Service{Active: hc}))
	// As translate: a traffic function exists once some policy won a
	// target (here the Service).
	in.Traffic = func(*routing.Listener, routing.RouteKind, types.NamespacedName, string) config.RuleTraffic {
		return config.RuleTraffic{}
	}
	out := compileOne(t, in)
	c := onePortConfig(port, out.Tables[0], nil, map[string][]string{"svc": addrs})
	c.HealthChecks = out.HealthChecks
	return c
}

// checkedBackend answers its name, except on /healthz, which answers 200
// while healthy is set and 503 otherwise; it counts the probes that
// failed since the last call of resetFails.
type checkedBackend struct {
	addr     string
	name     string
	healthy  atomic.Bool
	probes   atomic.Int64
	fails    atomic.Int64
	passes   atomic.Int64
	requests atomic.Int64
	host     atomic.Value // the Host of the last probe
}

func newCheckedBackend(t *testing.T, name string) *checkedBackend {
	b := &checkedBackend{name: name}
	b.healthy.Store(true)
	b.addr = serveBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			b.probes.Add(1)
			b.host.Store(r.Host)
			if b.healthy.Load() {
				b.passes.Add(1)
				return
			}
			b.fails.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b.requests.Add(1)
		io.WriteString(w, name)
	}))
	return b
}

// healthEvent is a transition a prober reported, with what its backend
// had counted of failed and passed probes when it came.
type healthEvent struct {
	addr          string
	healthy       bool
	fails, passes int64
}

// transitions receives the transitions of a runtime's probers.
type transitions struct {
	t    *testing.T
	ch   chan healthEvent
	seen []healthEvent
}

func watchTransitions(t *testing.T, h *healthChecks, backends ...*checkedBackend) *transitions {
	byAddr := map[string]*checkedBackend{}
	for _, b := range backends {
		byAddr[b.addr] = b
	}
	tr := &transitions{t: t, ch: make(chan healthEvent, 100)}
	h.onTransition = func(p *prober, healthy bool) {
		ev := healthEvent{addr: p.key.addr, healthy: healthy}
		if b := byAddr[p.key.addr]; b != nil {
			ev.fails, ev.passes = b.fails.Load(), b.passes.Load()
		}
		tr.ch <- ev
	}
	return tr
}

// wait returns the first transition of addr to healthy not returned yet.
func (tr *transitions) wait(addr string, healthy bool) healthEvent {
	tr.t.Helper()
	for i, ev := range tr.seen {
		if ev.addr == addr && ev.healthy == healthy {
			tr.seen = append(tr.seen[:i], tr.seen[i+1:]...)
			return ev
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-tr.ch:
			if ev.addr == addr && ev.healthy == healthy {
				return ev
			}
			tr.seen = append(tr.seen, ev)
		case <-deadline:
			tr.t.Fatalf("%s never became healthy=%v", addr, healthy)
		}
	}
}

// TestActiveHealthHTTPOnSockets: three endpoints, checked every 30ms.
// Each becomes healthy after its first probe passes; one whose /healthz
// starts failing is left out after exactly unhealthyThreshold (3) failed
// probes, gets none of 300 requests while out, and is back after exactly
// healthyThreshold (2) passing probes, then gets its share again. The
// probes carry the Host the check names.
func TestActiveHealthHTTPOnSockets(t *testing.T) {
	var bs []*checkedBackend
	var addrs []string
	for i := range 3 {
		b := newCheckedBackend(t, "e"+strconv.Itoa(i))
		bs = append(bs, b)
		addrs = append(addrs, b.addr)
	}
	hc := &config.ActiveHealthCheck{Type: config.HealthCheckHTTP, Interval: 30 * time.Millisecond, Timeout: 25 * time.Millisecond,
		HealthyThreshold: 2, UnhealthyThreshold: 3, Path: "/healthz", Method: http.MethodGet, Host: "health.example",
		ExpectedStatuses: []config.StatusRange{{Start: 200, End: 299}}, Policy: "ns/p"}
	hc.MakeID()
	rt := newRuntime(t)
	events := watchTransitions(t, rt.fwd.health, bs...)
	port := freePort(t)
	if err := rt.Apply(healthCheckedConfig(t, port, hc, addrs, "a")); err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if ev := events.wait(b.addr, true); ev.passes < 1 {
			t.Errorf("%s healthy before a probe passed", b.name)
		}
	}
	if h, _ := bs[0].host.Load().(string); h != "health.example" {
		t.Errorf("probe Host %q, want health.example", h)
	}
	c := keptAliveClient()
	url := fmt.Sprintf("http://127.0.0.1:%d/a", port)
	get := func() string {
		resp, err := c.Get(url)
		if err != nil {
			t.Fatalf("GET: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET: %d %s", resp.StatusCode, body)
		}
		return string(body)
	}

	bad := bs[1]
	bad.fails.Store(0)
	bad.healthy.Store(false)
	if ev := events.wait(bad.addr, false); ev.fails != 3 {
		t.Errorf("left out after %d failed probes, want 3", ev.fails)
	}
	before := bad.requests.Load()
	for range 300 {
		get()
	}
	if n := bad.requests.Load() - before; n != 0 {
		t.Errorf("the unhealthy endpoint got %d of 300 requests", n)
	}

	bad.passes.Store(0)
	bad.healthy.Store(true)
	if ev := events.wait(bad.addr, true); ev.passes != 2 {
		t.Errorf("back after %d passing probes, want 2", ev.passes)
	}
	before = bad.requests.Load()
	for range 300 {
		get()
	}
	if n := bad.requests.Load() - before; n < 50 {
		t.Errorf("the endpoint healthy again got %d of 300 requests, want about 100", n)
	}

	// Every endpoint unhealthy: requests go to all of them (panic mode)
	// rather than none.
	for _, b := range bs {
		b.healthy.Store(false)
	}
	for _, b := range bs {
		events.wait(b.addr, false)
	}
	got := map[string]int{}
	for range 90 {
		got[get()]++
	}
	if len(got) != 3 {
		t.Errorf("with every endpoint unhealthy, requests went to %v, want all three", got)
	}
}

// TestActiveHealthProbersShared: two routes over the same Service with
// the same check make one prober per endpoint, not one per route; a
// Config that drops an endpoint stops its prober alone and keeps the
// state of the others (no transition, no new probe start); a Config
// without checks stops every prober, and their goroutines end.
func TestActiveHealthProbersShared(t *testing.T) {
	var bs []*checkedBackend
	var addrs []string
	for i := range 3 {
		b := newCheckedBackend(t, "e"+strconv.Itoa(i))
		bs = append(bs, b)
		addrs = append(addrs, b.addr)
	}
	hc := &config.ActiveHealthCheck{Type: config.HealthCheckHTTP, Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond,
		HealthyThreshold: 1, UnhealthyThreshold: 1, Path: "/healthz", Method: http.MethodGet,
		ExpectedStatuses: []config.StatusRange{{Start: 200, End: 200}}}
	hc.MakeID()
	rt := newRuntime(t)
	h := rt.fwd.health
	events := watchTransitions(t, h, bs...)
	port := freePort(t)
	if err := rt.Apply(healthCheckedConfig(t, port, nil, addrs, "a")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	base := runtime.NumGoroutine()
	if err := rt.Apply(healthCheckedConfig(t, port, hc, addrs, "a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	if n := h.size(); n != 3 {
		t.Fatalf("%d probers for 3 endpoints of one Service behind 3 routes, want 3", n)
	}
	for _, b := range bs {
		events.wait(b.addr, true)
	}
	kept := h.probers[hcKey{hc.ID, addrs[0]}]

	// The same check made anew (another policy, another Config): the
	// same ID, the same probers.
	again := *hc
	again.Policy = "other/q"
	if err := rt.Apply(healthCheckedConfig(t, port, &again, addrs[:2], "a", "b")); err != nil {
		t.Fatal(err)
	}
	if n := h.size(); n != 2 {
		t.Fatalf("%d probers after an endpoint went away, want 2", n)
	}
	if h.probers[hcKey{hc.ID, addrs[0]}] != kept || !kept.state.healthy.Load() {
		t.Error("the prober of an endpoint that stayed was replaced or lost its state")
	}
	select {
	case ev := <-events.ch:
		t.Errorf("a transition after a reload that kept the endpoint: %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}

	if err := rt.Apply(healthCheckedConfig(t, port, nil, addrs, "a")); err != nil {
		t.Fatal(err)
	}
	if n := h.size(); n != 0 {
		t.Fatalf("%d probers after the check went away", n)
	}
	if h.any() {
		t.Error("an endpoint is still counted unhealthy after every prober stopped")
	}
	// Probes stop: the counts stay.
	n := bs[0].probes.Load()
	time.Sleep(100 * time.Millisecond)
	if m := bs[0].probes.Load(); m != n {
		t.Errorf("%d probes after the probers stopped", m-n)
	}
	// The probers' goroutines, their connections' and the backends'
	// goroutines serving those connections end.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := runtime.NumGoroutine(); g > base {
		t.Errorf("%d goroutines after the probers stopped, %d before the test", g, base)
	}
}

// TestActiveHealthProbeTCP: a connect check passes on a listening port
// and fails on a closed one; a send/expect check passes when the answer
// holds the expected bytes, and fails on a wrong answer and on silence
// (within its timeout).
func TestActiveHealthProbeTCP(t *testing.T) {
	serve := func(answer func(req []byte) []byte) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					buf := make([]byte, 64)
					n, _ := c.Read(buf)
					if a := answer(buf[:n]); a != nil {
						c.Write(a)
					}
					io.Copy(io.Discard, c)
				}()
			}
		}()
		return ln.Addr().String()
	}
	pong := serve(func(req []byte) []byte {
		if string(req) == "PING" {
			return []byte("+PONG\r\n")
		}
		return []byte("-ERR\r\n")
	})
	silent := serve(func([]byte) []byte { return nil })
	closedLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := closedLn.Addr().String()
	closedLn.Close()

	h := newHealthChecks(zap.NewNop(), nil)
	defer h.close()
	probe := func(hc *config.ActiveHealthCheck, addr string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		return h.probe(ctx, hc, addr)
	}
	connect := &config.ActiveHealthCheck{Type: config.HealthCheckTCP}
	ping := &config.ActiveHealthCheck{Type: config.HealthCheckTCP, Send: []byte("PING"), Expect: []byte("PONG")}
	wrong := &config.ActiveHealthCheck{Type: config.HealthCheckTCP, Send: []byte("HELLO"), Expect: []byte("PONG")}
	for _, tc := range []struct {
		name string
		hc   *config.ActiveHealthCheck
		addr string
		pass bool
	}{
		{"connect", connect, silent, true},
		{"connect refused", connect, closed, false},
		{"send and expect", ping, pong, true},
		{"wrong answer", wrong, pong, false},
		{"silence", ping, silent, false},
	} {
		if err := probe(tc.hc, tc.addr); (err == nil) != tc.pass {
			t.Errorf("%s: %v, want pass=%v", tc.name, err, tc.pass)
		}
	}
}

// TestActiveHealthProbeGRPC: against a real gRPC health server, the
// whole server SERVING passes, a service NOT_SERVING fails, an unknown
// service (NotFound) fails, and an HTTP/1.1-only port fails.
func TestActiveHealthProbeGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("api.Users", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("api.Orders", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	addr := ln.Addr().String()
	h1 := slowBackend(t, "h1")

	h := newHealthChecks(zap.NewNop(), nil)
	defer h.close()
	for _, tc := range []struct {
		service string
		addr    string
		pass    bool
	}{
		{"", addr, true},
		{"api.Users", addr, true},
		{"api.Orders", addr, false},
		{"api.Unknown", addr, false},
		{"", h1, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := h.probe(ctx, &config.ActiveHealthCheck{Type: config.HealthCheckGRPC, GRPCService: tc.service}, tc.addr)
		cancel()
		if (err == nil) != tc.pass {
			t.Errorf("service %q at %s: %v, want pass=%v", tc.service, tc.addr, err, tc.pass)
		}
	}
}

// TestActiveAndPassiveCombined: an endpoint is picked while neither check
// leaves it out. Of three, one unhealthy by its active check and one
// ejected by the passive check, every pick is the third; with the third
// refusing connections too, picks go on (to any of them) rather than
// fail.
func TestActiveAndPassiveCombined(t *testing.T) {
	addrs := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}
	eps := config.NewEndpoints(addrs...)
	hc := &config.ActiveHealthCheck{ID: "check"}
	od := &config.OutlierDetection{ConsecutiveLocalOriginFailures: 1, BaseEjectionTime: time.Minute, MaxEjectionPercent: 100}
	health := newHealthChecks(zap.NewNop(), nil)
	view := map[hcKey]*endpointHealth{}
	for i, a := range addrs {
		st := &endpointHealth{}
		st.healthy.Store(i != 0)
		view[hcKey{hc.ID, a}] = st
	}
	health.view.Store(&view)
	health.unhealthy.Store(1)
	var outliers outlierSet
	now := time.Now()
	if d := outliers.observe(od, eps, addrs[1], attemptLocal, now); d == 0 {
		t.Fatal("the passive check did not eject")
	}
	var down downSet
	bal := &balancing{active: hc, outlier: od, held: -1}
	for range 100 {
		if a, _ := down.pickWith(eps, bal, &outliers, health, now); a != addrs[2] {
			t.Fatalf("picked %s, want %s, the only endpoint neither check leaves out", a, addrs[2])
		}
	}
	down.mark(addrs[2], now)
	for range 10 {
		if a, _ := down.pickWith(eps, bal, &outliers, health, now); a == "" {
			t.Fatal("no endpoint picked with every one left out")
		}
	}
}
