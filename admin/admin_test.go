package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"portico.dev/portico/internal/buildinfo"
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
	m.ObserveRequest("apps/r", 200, 3*time.Millisecond)
	m.ObserveRequest("apps/r", 200, 7*time.Millisecond)
	m.ObserveRequest("apps/r", 503, time.Millisecond)
	m.ObserveRequest("", 404, time.Millisecond)
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

	code, body := scrape(t, base, "/metrics")
	if code != 200 {
		t.Fatalf("/metrics = %d", code)
	}
	for _, want := range []string{
		`portico_http_requests_total{code="200",route="apps/r"} 2`,
		`portico_http_requests_total{code="503",route="apps/r"} 1`,
		`portico_http_requests_total{code="404",route=""} 1`,
		`portico_http_request_duration_seconds_count 4`,
		`portico_http_request_duration_seconds_bucket{le="0.005"} 3`,
		`portico_config_generation 7`,
		`portico_certificates_loaded 1200`,
		`portico_config_applies_total{result="ok"} 1`,
		`portico_config_applies_total{result="error"} 1`,
		`portico_translate_duration_seconds_count 2`,
		`portico_apply_duration_seconds_count 2`,
		`portico_leader 1`,
		`portico_status_writes_total{kind="Gateway",result="conflict"} 1`,
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
	m.ObserveRequest("r", 200, time.Millisecond)
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
			m.ObserveRequest(routes[i%len(routes)], codes[i%len(codes)], time.Duration(i%50)*time.Millisecond)
			i++
		}
	})
}
