package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/grpctest"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/routing"
	"portico.dev/portico/sni"
)

// grpcBackend serves grpctest.EchoService as name under each of
// services, over h2c, or TLS with cert when given one. It returns its
// address.
func grpcBackend(t *testing.T, name string, cert *tls.Certificate, services ...string) string {
	t.Helper()
	var opts []grpc.ServerOption
	if cert != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12})))
	}
	opts = append(opts, grpc.ForceServerCodec(grpctest.RawCodec{})) //nolint:staticcheck // the raw codec has no V2 form
	srv := grpc.NewServer(opts...)
	for _, svc := range services {
		srv.RegisterService(grpctest.EchoService(svc, name), nil)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// grpcTestRoute is the GRPCRoute of the tests: service test.Echo goes to
// "a", except Echo calls of tenant b, which go to "b"; a method Fail of
// any other service goes to "b"; services matching tls\..* go to "tls";
// service broken.Svc to a Service that does not exist.
func grpcTestRoute() *gwv1.GRPCRoute {
	exact, regex := gwv1.GRPCMethodMatchExact, gwv1.GRPCMethodMatchRegularExpression
	str := func(s string) *string { return &s }
	port := gwv1.PortNumber(80)
	to := func(svc string) []gwv1.GRPCBackendRef {
		return []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
			Name: gwv1.ObjectName(svc), Port: &port,
		}}}}
	}
	return &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "g", Namespace: "ns", Generation: 1},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules: []gwv1.GRPCRouteRule{
				{Matches: []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Type: &exact, Method: str("Fail")}}}, BackendRefs: to("b")},
				{Matches: []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Service: str("test.Echo")}}}, BackendRefs: to("a")},
				{Matches: []gwv1.GRPCRouteMatch{{
					Method:  &gwv1.GRPCMethodMatch{Service: str("test.Echo"), Method: str("Echo")},
					Headers: []gwv1.GRPCHeaderMatch{{Name: "x-tenant", Value: "b"}},
				}}, BackendRefs: to("b")},
				{Matches: []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Type: &regex, Service: str(`tls\..*`)}}}, BackendRefs: to("tls")},
				{Matches: []gwv1.GRPCRouteMatch{{Method: &gwv1.GRPCMethodMatch{Service: str("broken.Svc")}}}, BackendRefs: to("missing")},
			},
		},
	}
}

// grpcTestConfig serves grpcTestRoute on an HTTP port, with backends "a"
// and "b" (h2c, Service ports without appProtocol: a GRPCRoute implies
// HTTP/2) and "tls" (a BackendTLSPolicy with the test CA).
func grpcTestConfig(t *testing.T, number int) *config.Config {
	t.Helper()
	ca := newTestCA(t)
	cert := ca.issue(t, []string{"backend.app.svc"})
	policy := &config.BackendTLS{ID: "id", Policy: "ns/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}
	addrs := map[string]string{
		"a":   grpcBackend(t, "a", nil, "test.Echo", "other.Svc"),
		"b":   grpcBackend(t, "b", nil, "test.Echo", "other.Svc"),
		"tls": grpcBackend(t, "tls", &cert, "tls.Echo"),
	}
	cfg := &config.Config{BackendTLSIDs: map[string]struct{}{"id": {}}}
	services := map[types.NamespacedName]routing.Service{}
	for name, addr := range addrs {
		key := types.NamespacedName{Namespace: "ns", Name: name}
		sp := routing.ServicePort{Name: "grpc", Port: 80}
		if name == "tls" {
			sp.TLS = policy
		}
		services[key] = routing.Service{Ports: []routing.ServicePort{sp}}
		cfg.Endpoints = withEndpoints(cfg.Endpoints, config.BackendKey{Service: config.NamespacedName(key), Port: 80}, config.NewEndpoints(addr))
	}
	same := gwv1.NamespacesFromSame
	out := routing.Compile(routing.Input{
		ControllerName: "portico.dev/gateway-controller",
		Listeners: []routing.Listener{{
			Gateway: types.NamespacedName{Namespace: "ns", Name: "gw"},
			Parent:  routing.Parent{Kind: "Gateway", Namespace: "ns", Name: "gw"},
			Name:    "http", Port: 80, Protocol: gwv1.HTTPProtocolType,
			AllowedRoutes:  gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &same}},
			SupportedKinds: []gwv1.RouteGroupKind{{Kind: "HTTPRoute"}, {Kind: "GRPCRoute"}},
			Accepted:       true,
		}},
		Parents:    map[routing.Parent]bool{{Kind: "Gateway", Namespace: "ns", Name: "gw"}: true},
		GRPCRoutes: []*gwv1.GRPCRoute{grpcTestRoute()},
		Services:   services,
	})
	if out.Tables[0] == nil {
		t.Fatalf("GRPCRoute did not attach: %+v", out.GRPCRouteParents)
	}
	l := &config.Listener{Key: "Gateway/ns/gw/http", Routes: out.Tables[0]}
	cfg.Ports = []*config.Port{{Number: int32(number), Protocol: config.HTTP, Listeners: hostname.NewTable([]string{""}, []*config.Listener{l}), All: chunked.Of([]*config.Listener{l})}}
	return cfg
}

// grpcClient connects to a Portico port with prior-knowledge h2c.
func grpcClient(t *testing.T, port int) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithAuthority("grpc.example.com"),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(grpctest.RawCodec{}))) //nolint:staticcheck // the raw codec has no V2 form
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestGRPCRouting: calls are routed by service, method and header with
// GRPCRoute's precedence, over h2c from the client and to h2c and TLS
// backends; a call no rule matches is UNIMPLEMENTED and one whose backend
// does not exist UNAVAILABLE, in gRPC's own form.
func TestGRPCRouting(t *testing.T) {
	rt := newRuntime(t)
	p := freePort(t)
	if err := rt.Apply(grpcTestConfig(t, p)); err != nil {
		t.Fatal(err)
	}
	cc := grpcClient(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		name, method string
		md           []string
		want         string
		code         codes.Code
	}{
		{"service match", "/test.Echo/Echo", nil, "a:hi:", codes.OK},
		{"service, method and header beat service", "/test.Echo/Echo", []string{"x-tenant", "b"}, "b:hi:b", codes.OK},
		{"header must match", "/test.Echo/Echo", []string{"x-tenant", "c"}, "a:hi:c", codes.OK},
		{"service beats method only", "/test.Echo/Fail", nil, "a", codes.NotFound},
		{"method only", "/other.Svc/Fail", nil, "b", codes.NotFound},
		{"regular expression, TLS backend", "/tls.Echo/Echo", nil, "tls:hi:", codes.OK},
		{"no rule", "/other.Svc/Echo", nil, "", codes.Unimplemented},
		{"backend missing", "/broken.Svc/Echo", nil, "", codes.Unavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := grpctest.Unary(ctx, cc, c.method, "hi", c.md...)
			st := status.Convert(err)
			if st.Code() != c.code {
				t.Fatalf("%s: code %v (%v), want %v", c.method, st.Code(), err, c.code)
			}
			if c.code == codes.OK && got != c.want {
				t.Errorf("%s: %q, want %q", c.method, got, c.want)
			}
			if c.code == codes.NotFound && st.Message() != c.want {
				t.Errorf("%s: answered by %q, want %q", c.method, st.Message(), c.want)
			}
		})
	}
}

// TestGRPCStreaming: client, server and bidirectional streams pass
// through a GRPCRoute, to an h2c backend and to a TLS one; the bidi stream
// gets each answer before it sends the next message, so nothing is
// buffered on the way.
func TestGRPCStreaming(t *testing.T) {
	rt := newRuntime(t)
	p := freePort(t)
	if err := rt.Apply(grpcTestConfig(t, p)); err != nil {
		t.Fatal(err)
	}
	cc := grpcClient(t, p)
	for _, svc := range []struct{ service, name string }{{"test.Echo", "a"}, {"tls.Echo", "tls"}} {
		t.Run(svc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			send := func(s grpc.ClientStream, m string) {
				t.Helper()
				b := []byte(m)
				if err := s.SendMsg(&b); err != nil {
					t.Fatalf("send %q: %v", m, err)
				}
			}
			recv := func(s grpc.ClientStream) (string, error) {
				var b []byte
				err := s.RecvMsg(&b)
				return string(b), err
			}

			sum, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/"+svc.service+"/Sum")
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"1", "2", "3"} {
				send(sum, m)
			}
			if err := sum.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if got, err := recv(sum); err != nil || got != svc.name+":1+2+3" {
				t.Errorf("client stream: %q, %v", got, err)
			}

			count, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/"+svc.service+"/Count")
			if err != nil {
				t.Fatal(err)
			}
			send(count, "50")
			if err := count.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var got []string
			for {
				m, err := recv(count)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("server stream after %d messages: %v", len(got), err)
				}
				got = append(got, m)
			}
			if len(got) != 50 || got[0] != svc.name+":1" || got[49] != svc.name+":50" {
				t.Errorf("server stream: %d messages, first %q", len(got), got[:min(1, len(got))])
			}

			chat, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/"+svc.service+"/Chat")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 20 {
				m := strconv.Itoa(i)
				send(chat, m)
				if got, err := recv(chat); err != nil || got != svc.name+":"+m {
					t.Fatalf("bidi message %d: %q, %v", i, got, err)
				}
			}
			if err := chat.CloseSend(); err != nil {
				t.Fatal(err)
			}
			if _, err := recv(chat); !errors.Is(err, io.EOF) {
				t.Errorf("bidi end: %v, want EOF", err)
			}
		})
	}
}

// TestGRPCStatusObserved: metrics and the access log get the gRPC status
// of a gRPC call: the backend's (from its trailers, or its headers for an
// answer without a body) or Portico's own.
func TestGRPCStatusObserved(t *testing.T) {
	obs := &observed{}
	core, logs := observer.New(zapcore.InfoLevel)
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.Observer = obs
	opts.AccessLog = zap.New(core)
	opts.DrainTimeout = 5 * time.Second
	rt := New(opts, zaptest.NewLogger(t))
	// A cleanup, so that it runs after the client's (cleanups run last
	// first): an open client connection would hold the drain.
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	p := freePort(t)
	if err := rt.Apply(grpcTestConfig(t, p)); err != nil {
		t.Fatal(err)
	}
	cc := grpcClient(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range []string{"/test.Echo/Echo", "/test.Echo/Fail", "/other.Svc/Echo", "/broken.Svc/Echo"} {
		_, _ = grpctest.Unary(ctx, cc, m, "hi")
	}
	count, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Echo/Count")
	if err != nil {
		t.Fatal(err)
	}
	b := []byte("3")
	if err := count.SendMsg(&b); err != nil {
		t.Fatal(err)
	}
	_ = count.CloseSend()
	for count.RecvMsg(&b) == nil {
	}

	// The access log entry is written once the handler returns, which
	// may be just after the client saw the end of the call.
	deadline := time.Now().Add(5 * time.Second)
	for logs.Len() < 5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var logged []string
	for _, e := range logs.All() {
		f := e.ContextMap()
		logged = append(logged, fmt.Sprintf("%s %v %v", f["path"], f["status"], f["grpc_status"]))
	}
	slices.Sort(logged)
	want := []string{
		"/broken.Svc/Echo 200 14",
		"/other.Svc/Echo 200 12",
		"/test.Echo/Count 200 0",
		"/test.Echo/Echo 200 0",
		"/test.Echo/Fail 200 5",
	}
	if !slices.Equal(logged, want) {
		t.Errorf("access log:\n%s\nwant:\n%s", strings.Join(logged, "\n"), strings.Join(want, "\n"))
	}

	obs.mu.Lock()
	calls := slices.Clone(obs.calls)
	obs.mu.Unlock()
	slices.Sort(calls)
	wantCalls := []string{
		" 200", " grpc-status 12",
		"ns/g 200", "ns/g 200", "ns/g 200", "ns/g 200",
		"ns/g grpc-status 0", "ns/g grpc-status 0", "ns/g grpc-status 14", "ns/g grpc-status 5",
	}
	if !slices.Equal(calls, wantCalls) {
		t.Errorf("observed %q, want %q", calls, wantCalls)
	}
}

// TestGRPCOverHTTPS: on an HTTPS listener a gRPC client negotiates HTTP/2
// with ALPN and its calls, unary and bidirectional, are routed as on h2c.
func TestGRPCOverHTTPS(t *testing.T) {
	const host = "grpc.example.com"
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(snitest.ECDSA, 2, host)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := sni.ParseKeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t)
	p := freePort(t)
	cfg := grpcTestConfig(t, p)
	port := cfg.Ports[0]
	l := port.All.At(0)
	l.Hostname = host
	port.Protocol = config.HTTPS
	port.Listeners = hostname.NewTable([]string{host}, []*config.Listener{l})
	port.SNI = sni.NewTable([]*sni.Entry{{Hostname: host, Certificates: []*tls.Certificate{cert}, Value: l}})
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", p),
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{ServerName: host, RootCAs: ca.Pool, MinVersion: tls.VersionTLS12})),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(grpctest.RawCodec{}))) //nolint:staticcheck // RawCodec has no V2 form
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := grpctest.Unary(ctx, cc, "/test.Echo/Echo", "hi", "x-tenant", "b"); err != nil || got != "b:hi:b" {
		t.Fatalf("unary over TLS: %q, %v", got, err)
	}
	chat, err := cc.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/tls.Echo/Chat")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		b := []byte(strconv.Itoa(i))
		if err := chat.SendMsg(&b); err != nil {
			t.Fatal(err)
		}
		if err := chat.RecvMsg(&b); err != nil || string(b) != "tls:"+strconv.Itoa(i) {
			t.Fatalf("bidi message %d: %q, %v", i, b, err)
		}
	}
	_ = chat.CloseSend()
}
