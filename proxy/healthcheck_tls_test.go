package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// TestActiveHealthProbesOverTLS: checks of a backend reached over TLS
// (ActiveHealthCheck.OverTLS, its BackendTLSPolicy) probe over TLS with
// the policy's SNI and validation: HTTP, TCP (a handshake, then send and
// expect) and the gRPC health protocol over h2 pass against backends
// whose certificate the policy trusts; the same checks in clear fail
// against them; and a backend presenting a certificate for another name,
// or from a CA the policy does not trust, fails every probe, as its
// traffic would.
func TestActiveHealthProbesOverTLS(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	good := ca.issue(t, []string{"backend.app.svc"})
	wrongName := ca.issue(t, []string{"elsewhere.app.svc"})
	untrusted := other.issue(t, []string{"backend.app.svc"})
	policy := &config.BackendTLS{ID: "id", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}

	httpsBackend := func(cert tls.Certificate) string {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS == nil || r.TLS.ServerName != "backend.app.svc" {
				w.WriteHeader(http.StatusMisdirectedRequest)
				return
			}
			io.WriteString(w, "ok")
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	tlsEcho := func(cert tls.Certificate) string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
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
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					buf := make([]byte, 4)
					if _, err := io.ReadFull(c, buf); err == nil && string(buf) == "PING" {
						io.WriteString(c, "PONG")
					}
				}()
			}
		}()
		return ln.Addr().String()
	}
	grpcTLS := func(cert tls.Certificate) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
		hs := health.NewServer()
		hs.SetServingStatus("api.Users", healthpb.HealthCheckResponse_SERVING)
		healthpb.RegisterHealthServer(srv, hs)
		go srv.Serve(ln) //nolint:errcheck // ends with Stop
		t.Cleanup(srv.Stop)
		return ln.Addr().String()
	}

	h := newHealthChecks(zap.NewNop(), nil)
	defer h.close()
	httpCheck := &config.ActiveHealthCheck{ID: "http", Type: config.HealthCheckHTTP, Method: http.MethodGet, Path: "/healthz", ExpectedStatuses: []config.StatusRange{{Start: 200, End: 299}}}
	tcpCheck := &config.ActiveHealthCheck{ID: "tcp", Type: config.HealthCheckTCP, Send: []byte("PING"), Expect: []byte("PONG")}
	grpcCheck := &config.ActiveHealthCheck{ID: "grpc", Type: config.HealthCheckGRPC, GRPCService: "api.Users"}
	for _, tc := range []struct {
		name string
		hc   *config.ActiveHealthCheck
		addr string
		pass bool
	}{
		{"http over TLS", httpCheck.OverTLS(policy), httpsBackend(good), true},
		{"http in clear to a TLS backend", httpCheck, httpsBackend(good), false},
		{"http, certificate for another name", httpCheck.OverTLS(policy), httpsBackend(wrongName), false},
		{"http, untrusted CA", httpCheck.OverTLS(policy), httpsBackend(untrusted), false},
		{"tcp over TLS", tcpCheck.OverTLS(policy), tlsEcho(good), true},
		{"tcp in clear to a TLS backend", tcpCheck, tlsEcho(good), false},
		{"tcp, untrusted CA", tcpCheck.OverTLS(policy), tlsEcho(untrusted), false},
		{"grpc over TLS", grpcCheck.OverTLS(policy), grpcTLS(good), true},
		{"grpc in clear to a TLS backend", grpcCheck, grpcTLS(good), false},
		{"grpc, certificate for another name", grpcCheck.OverTLS(policy), grpcTLS(wrongName), false},
		// A check's own tls (no BackendTLSPolicy) trusts the system's
		// roots: a certificate of a private CA is refused.
		{"check's own tls, private CA", &config.ActiveHealthCheck{ID: "own", Type: config.HealthCheckTCP,
			TLS: &config.BackendTLS{ID: "healthCheck.tls/backend.app.svc", ServerName: "backend.app.svc"}}, tlsEcho(good), false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := h.probe(ctx, tc.hc, tc.addr)
		cancel()
		if (err == nil) != tc.pass {
			t.Errorf("%s: %v, want pass=%v", tc.name, err, tc.pass)
		}
	}
	if a, b := httpCheck.OverTLS(policy).ID, httpCheck.ID; a == b {
		t.Errorf("a check over TLS has the ID of the one in clear (%q): one prober would serve both", a)
	}
}

// TestActiveHealthOverTLSOnSockets: a Service whose port has a
// BackendTLSPolicy and whose policy sets an HTTP check: routing gives the
// backend the check over TLS, the probers reach its two TLS endpoints
// with the policy's SNI, and the one whose /healthz fails takes no
// traffic while the healthy one takes it all (in clear, both would fail
// their probes and neither would be told apart).
func TestActiveHealthOverTLSOnSockets(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.issue(t, []string{"backend.app.svc"})
	policy := &config.BackendTLS{ID: "id", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}
	backend := func(name string, healthy bool) string {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" && (!healthy || r.TLS.ServerName != "backend.app.svc") {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			io.WriteString(w, name)
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	up, down := backend("up", true), backend("down", false)
	hc := &config.ActiveHealthCheck{Type: config.HealthCheckHTTP, Method: http.MethodGet, Path: "/healthz", Interval: 100 * time.Millisecond,
		Timeout: time.Second, HealthyThreshold: 1, UnhealthyThreshold: 1, ExpectedStatuses: []config.StatusRange{{Start: 200, End: 299}}}
	hc.MakeID()
	port := freePort(t)
	p := gwv1.PortNumber(80)
	route := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns", Generation: 1},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
				BackendObjectReference: gwv1.BackendObjectReference{Name: "svc", Port: &p}}}}}},
		},
	}
	in := oneListener([]*gwv1.HTTPRoute{route}, map[types.NamespacedName]routing.Service{
		{Namespace: "ns", Name: "svc"}: {Active: hc, Ports: []routing.ServicePort{{Name: "http", Port: 80, TLS: policy}}},
	})
	in.Traffic = func(*routing.Listener, routing.RouteKind, types.NamespacedName, string) config.RuleTraffic {
		return config.RuleTraffic{}
	}
	out := compileOne(t, in)
	if len(out.HealthChecks) != 1 || out.HealthChecks[0].Check.TLS != policy {
		t.Fatalf("health checks %+v, want the Service's check over its BackendTLSPolicy", out.HealthChecks)
	}
	cfg := onePortConfig(port, out.Tables[0], nil, map[string][]string{"svc": {up, down}})
	cfg.HealthChecks = out.HealthChecks
	cfg.BackendTLSIDs = map[string]struct{}{"id": {}}
	rt := newRuntime(t)
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	counts := map[string]int{}
	for range 20 {
		code, body := get(t, port, "/")
		counts[fmt.Sprintf("%d %s", code, body)]++
	}
	if counts["200 up"] != 20 {
		t.Errorf("answers %v, want all 20 from the healthy endpoint", counts)
	}
}
