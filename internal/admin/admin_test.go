package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/buildinfo"
)

func scrape(t *testing.T, base, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// startServer serves s on a loopback port until the test ends.
func startServer(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func TestHealthAndReadiness(t *testing.T) {
	var ready atomic.Bool
	base := startServer(t, &Server{Ready: func() error {
		if !ready.Load() {
			return errors.New("no configuration applied yet")
		}
		return nil
	}})
	if code, _ := scrape(t, base, "/healthz"); code != 200 {
		t.Errorf("/healthz = %d before ready, want 200: liveness must not depend on readiness", code)
	}
	code, body := scrape(t, base, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no configuration applied yet") {
		t.Errorf("/readyz before ready = %d %q", code, body)
	}
	ready.Store(true)
	if code, _ := scrape(t, base, "/readyz"); code != 200 {
		t.Errorf("/readyz when ready = %d", code)
	}
	if code, _ := scrape(t, base, "/metrics"); code != http.StatusNotFound {
		t.Errorf("/metrics without Metrics = %d, want 404", code)
	}
}

func TestMetricsExposition(t *testing.T) {
	m := NewMetrics()
	base := startServer(t, &Server{Metrics: m})
	m.ObserveRequest("apps/r", 200, "complete", 3*time.Millisecond)
	m.ObserveRequest("apps/r", 200, "complete", 7*time.Millisecond)
	m.ObserveRequest("apps/r", 200, "backend_failed", 7*time.Millisecond)
	m.ObserveRequest("apps/r", 503, "complete", time.Millisecond)
	m.ObserveRequest("", 404, "client_gone", time.Millisecond)
	m.ConfigApplied(7, 20*time.Millisecond, time.Millisecond, 1200, nil)
	// A failed apply is counted but does not move what is served.
	m.ConfigApplied(8, 20*time.Millisecond, time.Millisecond, 1300, errors.New("bind: address in use"))
	m.SetLeader(true)
	m.StatusWritten("Gateway", "ok")
	m.StatusWritten("Gateway", "conflict")
	m.ObserveHandshakeFailure("443", "unknown_server_name")
	m.ObserveHandshakeFailure("443", "unknown_server_name")
	m.ObserveHandshakeFailure("10.0.0.1:8443", "not_tls")
	m.SetCertificatesExpiry(time.Unix(1900000000, 0))
	m.ObserveChangeApplied(30 * time.Millisecond)
	m.ObserveChangeApplied(0) // a rebuild no change asked for

	code, body := scrape(t, base, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`portico_http_requests_total{code="200",outcome="complete",route="apps/r"} 2`,
		`portico_http_requests_total{code="200",outcome="backend_failed",route="apps/r"} 1`,
		`portico_http_requests_total{code="503",outcome="complete",route="apps/r"} 1`,
		`portico_http_requests_total{code="404",outcome="client_gone",route=""} 1`,
		`portico_http_request_duration_seconds_count 5`,
		`portico_http_request_duration_seconds_bucket{le="0.005"} 3`,
		`portico_config_generation 7`,
		`portico_certificates_loaded 1200`,
		`portico_config_applies_total{result="ok"} 1`,
		`portico_config_applies_total{result="error"} 1`,
		`portico_translate_duration_seconds_count 2`,
		`portico_apply_duration_seconds_count 2`,
		`portico_leader 1`,
		`portico_status_writes_total{kind="Gateway",result="conflict"} 1`,
		`portico_status_writes_total{kind="HTTPRoute",result="error"} 0`,
		`portico_config_change_to_applied_seconds_count 1`,
		`portico_config_change_to_applied_seconds_bucket{le="0.04"} 1`,
		`portico_config_change_to_applied_seconds_bucket{le="0.02"} 0`,
		`portico_tls_handshake_failures_total{port="443",reason="unknown_server_name"} 2`,
		`portico_tls_handshake_failures_total{port="10.0.0.1:8443",reason="not_tls"} 1`,
		`portico_certificates_earliest_expiry_timestamp_seconds 1.9e+09`,
		`go_goroutines `,
		`process_open_fds `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if !strings.Contains(body, `portico_acme_events_total{event="renew_failed"} 0`) {
		t.Error("ACME events are not exported at 0 before the first one")
	}
	build := buildinfo.Read()
	if want := fmt.Sprintf(`portico_build_info{commit=%q,goversion=%q,version=%q} 1`, build.Commit, build.GoVersion, build.Version); !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %q", want)
	}
	m.SetLeader(false)
	m.SetCertificatesExpiry(time.Time{})
	_, body = scrape(t, base, "/metrics")
	if !strings.Contains(body, "portico_leader 0") {
		t.Error("leader gauge did not drop")
	}
	if !strings.Contains(body, "portico_certificates_earliest_expiry_timestamp_seconds 0") {
		t.Error("certificate expiry did not drop to 0 with no certificate loaded")
	}
}

func TestNilMetricsIsOff(t *testing.T) {
	var m *Metrics
	m.ObserveRequest("r", 200, "complete", time.Millisecond)
	m.ConfigApplied(1, 0, 0, 0, nil)
	m.SetLeader(true)
	m.StatusWritten("Gateway", "ok")
	m.ObserveHandshakeFailure("443", "closed")
	m.SetCertificatesExpiry(time.Now())
}

func BenchmarkObserveRequest(b *testing.B) {
	m := NewMetrics()
	routes := []string{"apps/a", "apps/b", "apps/c", "shop/cart"}
	codes := []int{200, 200, 200, 404, 503}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			m.ObserveRequest(routes[i%len(routes)], codes[i%len(codes)], "complete", time.Duration(i%50)*time.Millisecond)
			i++
		}
	})
}

// BenchmarkObserveRequestManyRoutes is the per-request cost of the request metrics
// with many routes, each answered before (its counter cached).
func BenchmarkObserveRequestManyRoutes(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := NewMetrics()
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("ns-%d/route-%d", i, i)
				m.ObserveRequest(names[i], 200, "complete", time.Millisecond)
			}
			i := 0
			for b.Loop() {
				m.ObserveRequest(names[(i*7919)%n], 200, "complete", time.Millisecond)
				i++
			}
		})
	}
}

// TestConcurrentFirstRequestsCounted: many routes answered for the first
// time at once, from several goroutines whose copies of the counter
// cache's shards race (run it with -race), each count lands on its own
// route and code.
func TestConcurrentFirstRequestsCounted(t *testing.T) {
	m := NewMetrics()
	m.SetMaxRoutes(-1) // each of the 2,000 routes with a label of its own
	const routes, workers = 2000, 8
	answers := []struct {
		code    int
		outcome string
	}{{200, "complete"}, {200, "client_gone"}, {500, "complete"}, {404, "no_route"}}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range routes {
				r := (i*31 + w*257) % routes
				// Several codes and outcomes per route, first seen in
				// another order by each worker.
				for k := range answers {
					a := answers[(k+w+r)%len(answers)]
					m.ObserveRequest(fmt.Sprintf("ns/r%d", r), a.code+r%3, a.outcome, time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	for r := range routes {
		for _, a := range answers {
			var d dto.Metric
			if err := m.requests.WithLabelValues(fmt.Sprintf("ns/r%d", r), strconv.Itoa(a.code+r%3), a.outcome).Write(&d); err != nil {
				t.Fatal(err)
			}
			if got := d.GetCounter().GetValue(); got != workers {
				t.Fatalf("route ns/r%d, %d %s: %v requests counted, want %d", r, a.code+r%3, a.outcome, got, workers)
			}
		}
	}
}

// Profiles are served only when asked for, and then only to loopback
// clients; a CPU profile of a second completes despite the server's write
// timeout.
func TestPprofGuarded(t *testing.T) {
	if code, _ := scrape(t, startServer(t, &Server{}), "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without Pprof = %d, want 404", code)
	}
	base := startServer(t, &Server{Pprof: true})
	if code, body := scrape(t, base, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ = %d", code)
	}
	if code, body := scrape(t, base, "/debug/pprof/profile?seconds=1"); code != 200 || len(body) == 0 {
		t.Errorf("CPU profile = %d (%d bytes)", code, len(body))
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/debug/pprof/heap", nil)
	req.RemoteAddr = "192.0.2.7:40000"
	(&Server{Pprof: true}).Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("/debug/pprof/heap from another host = %d, want 403", rec.Code)
	}
}

// Requests sent to backends are counted by backend and result, with their
// retries, the retries a retry budget refused, and time; backends past the limit share the label "other".
func TestBackendMetrics(t *testing.T) {
	m := NewMetrics()
	m.SetMaxBackends(2)
	base := startServer(t, &Server{Metrics: m})
	key := func(name string) config.BackendKey {
		return config.BackendKey{Service: config.NamespacedName{Namespace: "apps", Name: name}, Port: 80}
	}
	m.ObserveBackend(key("a"), 200, "complete", 1, 2*time.Millisecond)
	m.ObserveBackend(key("a"), 200, "complete", 3, 2*time.Millisecond)
	m.ObserveBackend(key("a"), 502, "complete", 1, time.Millisecond)
	m.ObserveBackend(key("b"), 503, "complete", 0, time.Millisecond)
	m.ObserveBackend(key("b"), 200, "backend_failed", 1, time.Millisecond)
	m.ObserveBackend(key("b"), 503, "retry_budget", 1, time.Millisecond)
	m.ObserveBackend(key("c"), 504, "complete", 1, time.Millisecond)
	m.ObserveBackend(key("d"), 500, "complete", 1, time.Millisecond)
	m.ObserveEjection(key("a"))
	// Three endpoints probed, unhealthy until their first probe; two pass.
	m.ObserveHealth(key("a"), 0, 3)
	m.ObserveHealth(key("a"), 1, -1)
	m.ObserveHealth(key("a"), 1, -1)
	_, body := scrape(t, base, "/metrics")
	for _, want := range []string{
		`portico_backend_requests_total{backend="apps/a:80",result="ok"} 2`,
		`portico_backend_requests_total{backend="apps/a:80",result="bad_gateway"} 1`,
		`portico_backend_requests_total{backend="apps/b:80",result="unavailable"} 2`,
		`portico_backend_retries_refused_total{backend="apps/b:80"} 1`,
		`portico_backend_retries_refused_total{backend="apps/a:80"} 0`,
		`portico_backend_requests_total{backend="apps/b:80",result="cut"} 1`,
		`portico_backend_requests_total{backend="other",result="timeout"} 1`,
		`portico_backend_requests_total{backend="other",result="5xx"} 1`,
		`portico_backend_retries_total{backend="apps/a:80"} 2`,
		`portico_backend_endpoints_ejected_total{backend="apps/a:80"} 1`,
		`portico_backend_endpoints_health{backend="apps/a:80",state="healthy"} 2`,
		`portico_backend_endpoints_health{backend="apps/a:80",state="unhealthy"} 1`,
		`portico_backend_request_duration_seconds_count{backend="apps/a:80"} 3`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `backend="apps/c:80"`) {
		t.Error("a backend past the limit has series of its own")
	}
	none := NewMetrics()
	none.SetMaxBackends(0)
	none.ObserveBackend(key("a"), 200, "complete", 1, time.Millisecond)
	if _, body := scrape(t, startServer(t, &Server{Metrics: none}), "/metrics"); strings.Contains(body, `backend="apps/a:80"`) || !strings.Contains(body, `portico_backend_requests_total{backend="other",result="ok"} 1`) {
		t.Error("with a limit of 0, a backend has series of its own")
	}
}

func TestBackendResult(t *testing.T) {
	for _, c := range []struct {
		code    int
		outcome string
		want    string
	}{
		{200, "complete", "ok"}, {404, "complete", "ok"}, {500, "complete", "5xx"}, {502, "complete", "bad_gateway"},
		{503, "complete", "unavailable"}, {504, "complete", "timeout"}, {200, "timeout", "timeout"},
		{200, "backend_failed", "cut"}, {499, "client_gone", "client_gone"}, {200, "client_reset", "client_gone"},
	} {
		if got := backendResult(c.code, c.outcome); got != c.want {
			t.Errorf("%d %s: %s, want %s", c.code, c.outcome, got, c.want)
		}
	}
}

// BenchmarkObserveBackend is the per-request cost of the backend metrics,
// with as many backends as have series of their own and with more.
func BenchmarkObserveBackend(b *testing.B) {
	for _, n := range []int{10, DefaultMaxBackends, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			m := NewMetrics()
			keys := make([]config.BackendKey, n)
			for i := range keys {
				keys[i] = config.BackendKey{Service: config.NamespacedName{Namespace: fmt.Sprintf("ns-%d", i), Name: "svc"}, Port: 80}
				m.ObserveBackend(keys[i], 200, "complete", 1, time.Millisecond)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				m.ObserveBackend(keys[(i*7919)%n], 200, "complete", 1, time.Millisecond)
				i++
			}
		})
	}
}

// BenchmarkObserveConnection is what a backend connection costs the
// metrics over its life: its open and its close.
func BenchmarkObserveConnection(b *testing.B) {
	m := NewMetrics()
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	m.ObserveDial(key)
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveDial(key)
		m.ObserveClose(key)
	}
}

// Past the limit of routes, requests are counted under route="other";
// those of the routes before it, and of no route, keep their own label.
func TestRouteLabelBounded(t *testing.T) {
	m := NewMetrics()
	m.SetMaxRoutes(2)
	for _, r := range []string{"apps/a", "apps/b", "apps/c", "apps/d", "apps/a", ""} {
		m.ObserveRequest(r, 200, "complete", time.Millisecond)
		m.ObserveGRPC(r, 0)
	}
	_, body := scrape(t, startServer(t, &Server{Metrics: m}), "/metrics")
	for _, want := range []string{
		`portico_http_requests_total{code="200",outcome="complete",route="apps/a"} 2`,
		`portico_http_requests_total{code="200",outcome="complete",route="apps/b"} 1`,
		`portico_http_requests_total{code="200",outcome="complete",route="other"} 2`,
		`portico_http_requests_total{code="200",outcome="complete",route=""} 1`,
		`portico_grpc_requests_total{grpc_status="0",route="other"} 2`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `route="apps/c"`) {
		t.Error("a route past the limit has a label of its own")
	}
}

// Connections opened and open now are counted by backend, under the same
// labels (past the limit, "other"); a close brings the open count down.
func TestBackendPoolMetrics(t *testing.T) {
	m := NewMetrics()
	m.SetMaxBackends(1)
	base := startServer(t, &Server{Metrics: m})
	key := func(name string) config.BackendKey {
		return config.BackendKey{Service: config.NamespacedName{Namespace: "apps", Name: name}, Port: 80}
	}
	if _, body := scrape(t, base, "/metrics"); !strings.Contains(body, `portico_backend_open_connections{backend="other"} 0`) {
		t.Errorf("no open connections series before any backend:\n%s", body)
	}
	m.ObserveDial(key("a"))
	m.ObserveDial(key("a"))
	m.ObserveDial(key("b"))
	m.ObserveDial(key("c"))
	m.ObserveClose(key("a"))
	m.ObserveClose(key("c"))
	_, body := scrape(t, base, "/metrics")
	for _, want := range []string{
		`portico_backend_connections_opened_total{backend="apps/a:80"} 2`,
		`portico_backend_connections_opened_total{backend="other"} 2`,
		`portico_backend_open_connections{backend="apps/a:80"} 1`,
		`portico_backend_open_connections{backend="other"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	m.ObserveClose(key("a"))
	m.ObserveClose(key("b"))
	if _, body := scrape(t, base, "/metrics"); !strings.Contains(body, `portico_backend_open_connections{backend="apps/a:80"} 0`) ||
		!strings.Contains(body, `portico_backend_open_connections{backend="other"} 0`) {
		t.Errorf("open connections not down to 0 once all closed:\n%s", body)
	}
}

// Data-plane lag is exported per Gateway, with the longest always there.
func TestDataPlaneLagMetrics(t *testing.T) {
	m := NewMetrics()
	base := startServer(t, &Server{Metrics: m})
	_, body := scrape(t, base, "/metrics")
	if !strings.Contains(body, "portico_dataplanes_oldest_unacknowledged_seconds 0") || strings.Contains(body, "portico_dataplane_unacknowledged_seconds{") {
		t.Errorf("without data planes:\n%s", body)
	}
	m.SetDataPlaneLag(func() map[string]time.Duration {
		return map[string]time.Duration{"apps/a": 0, "apps/b": 90 * time.Second, "apps/c": 30 * time.Second}
	})
	_, body = scrape(t, base, "/metrics")
	for _, want := range []string{
		`portico_dataplane_unacknowledged_seconds{gateway="apps/a"} 0`,
		`portico_dataplane_unacknowledged_seconds{gateway="apps/b"} 90`,
		`portico_dataplanes_oldest_unacknowledged_seconds 90`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
