package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/routing"
)

// testCA issues backend certificates. snitest's CA cannot put URIs in a
// certificate, which the subjectAltNames tests need.
type testCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pool   *x509.CertPool
	serial atomic.Int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "backend test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{cert: cert, key: key, pool: x509.NewCertPool()}
	ca.pool.AddCert(cert)
	ca.serial.Store(1)
	return ca
}

// issue makes a server certificate for the given DNS names and URIs. Its
// subject common name is a DNS name the tests never ask for, so that
// nothing passes by the common name.
func (ca *testCA) issue(t *testing.T, dnsNames []string, uris ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial.Add(1)),
		Subject:      pkix.Name{CommonName: "common-name.invalid"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
	}
	for _, s := range uris {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsBackend serves cert on 127.0.0.1 with HTTP/2 and HTTP/1.1 (ALPN) and
// answers with what it saw: "sni=... host=... proto=N alpn=...". An
// Upgrade request is switched to an echo of the connection.
func tlsBackend(t *testing.T, cert tls.Certificate) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen := fmt.Sprintf("sni=%s host=%s proto=%d alpn=%s", r.TLS.ServerName, r.Host, r.ProtoMajor, r.TLS.NegotiatedProtocol)
		if !isUpgrade(r) {
			io.WriteString(w, seen)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nX-Seen: %s\r\n\r\n", seen)
		if brw.Flush() == nil {
			_, _ = io.Copy(c, brw)
		}
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// testService is one Service a test route sends requests to, at path
// "/"+name.
type testService struct {
	name        string
	appProtocol string
	tls         *config.BackendTLS
	addr        string
	// mirrorTo, when set, names a Service every request of this one is
	// mirrored to.
	mirrorTo string
	// conn is its BackendTrafficPolicy's timeouts (nil: none).
	conn *config.BackendConn
}

// servicesConfig serves an HTTP port whose one route sends each "/name"
// to the Service of that name, port 80.
func servicesConfig(t *testing.T, number int, svcs ...testService) *config.Config {
	t.Helper()
	port := gwv1.PortNumber(80)
	prefix := gwv1.PathMatchPathPrefix
	route := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Generation: 1},
		Spec:       gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}}},
	}
	cfg := &config.Config{BackendTLSIDs: map[string]struct{}{}}
	services := map[types.NamespacedName]routing.Service{}
	for _, s := range svcs {
		path := "/" + s.name
		rule := gwv1.HTTPRouteRule{
			Matches: []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: &path}}},
			BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
				BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(s.name), Port: &port},
			}}},
		}
		if s.mirrorTo != "" {
			rule.Filters = []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestMirror, RequestMirror: &gwv1.HTTPRequestMirrorFilter{
				BackendRef: gwv1.BackendObjectReference{Name: gwv1.ObjectName(s.mirrorTo), Port: &port},
			}}}
		}
		route.Spec.Rules = append(route.Spec.Rules, rule)
		key := types.NamespacedName{Namespace: "ns", Name: s.name}
		services[key] = routing.Service{Ports: []routing.ServicePort{{Name: "http", Port: 80, AppProtocol: s.appProtocol, TLS: s.tls}}, Conn: s.conn}
		cfg.Endpoints = withEndpoints(cfg.Endpoints, config.BackendKey{Service: config.NamespacedName(key), Port: 80}, config.NewEndpoints(s.addr))
		if s.tls != nil {
			cfg.BackendTLSIDs[s.tls.ID] = struct{}{}
		}
	}
	l := &config.Listener{Key: "Gateway/ns/gw/http", Routes: compileRoute(t, route, services)}
	cfg.Ports = []*config.Port{{Number: int32(number), Protocol: config.HTTP, Listeners: hostname.NewTable([]string{""}, []*config.Listener{l}), All: chunked.Of([]*config.Listener{l})}}
	return cfg
}

// get sends GET path with Host app.example.com to a Portico port.
func get(t *testing.T, port int, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "app.example.com"
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// observedRuntime is newRuntime with the warnings also kept for the test
// to read.
func observedRuntime(t *testing.T) (*Runtime, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.WarnLevel)
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	rt := New(opts, zaptest.NewLogger(t, zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, core)
	}))))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return rt, logs
}

// TestBackendTLS: the backend sees the policy's SNI and the client's Host
// over HTTP/1.1; each way a certificate can fail the policy's checks is a
// 502, logged with the policy's name, and each way it can pass is a 200.
func TestBackendTLS(t *testing.T) {
	ca, otherCA := newTestCA(t), newTestCA(t)
	const spiffe = "spiffe://cluster.local/ns/app/sa/backend"
	for _, tc := range []struct {
		name   string
		cert   tls.Certificate
		policy config.BackendTLS
		want   int
		errMsg string // in the logged error of a 502
	}{{
		name:   "valid for server name",
		cert:   ca.issue(t, []string{"backend.app.svc"}),
		policy: config.BackendTLS{ServerName: "backend.app.svc", RootCAs: ca.pool},
		want:   200,
	}, {
		name:   "wildcard certificate for server name",
		cert:   ca.issue(t, []string{"*.app.svc"}),
		policy: config.BackendTLS{ServerName: "backend.app.svc", RootCAs: ca.pool},
		want:   200,
	}, {
		name:   "signed by a CA not in RootCAs",
		cert:   otherCA.issue(t, []string{"backend.app.svc"}),
		policy: config.BackendTLS{ServerName: "backend.app.svc", RootCAs: ca.pool},
		want:   502,
		errMsg: "certificate chain is not trusted",
	}, {
		name:   "system roots do not trust a private CA",
		cert:   ca.issue(t, []string{"backend.app.svc"}),
		policy: config.BackendTLS{ServerName: "backend.app.svc"},
		want:   502,
		errMsg: "certificate chain is not trusted",
	}, {
		name:   "not valid for server name",
		cert:   ca.issue(t, []string{"other.app.svc"}),
		policy: config.BackendTLS{ServerName: "backend.app.svc", RootCAs: ca.pool},
		want:   502,
		errMsg: `not valid for server name "backend.app.svc"`,
	}, {
		name:   "subject alt name hostname instead of server name",
		cert:   ca.issue(t, []string{"identity.app.svc"}),
		policy: config.BackendTLS{ServerName: "backend.app.svc", RootCAs: ca.pool, SANHostnames: []string{"nope.app.svc", "identity.app.svc"}},
		want:   200,
	}, {
		name:   "subject alt name hostname under a wildcard",
		cert:   ca.issue(t, []string{"*.identity.svc"}),
		policy: config.BackendTLS{ServerName: "backend.app.svc", RootCAs: ca.pool, SANHostnames: []string{"a.identity.svc"}},
		want:   200,
	}, {
		name:   "subject alt names replace server name",
		cert:   ca.issue(t, []string{"backend.app.svc"}),
		policy: config.BackendTLS{ServerName: "backend.app.svc", RootCAs: ca.pool, SANHostnames: []string{"identity.app.svc"}},
		want:   502,
		errMsg: "none of the subject alt names",
	}, {
		name:   "subject alt name URI",
		cert:   ca.issue(t, []string{"backend.app.svc"}, spiffe),
		policy: config.BackendTLS{ServerName: "other.app.svc", RootCAs: ca.pool, SANHostnames: []string{"nope.app.svc"}, SANURIs: []string{spiffe}},
		want:   200,
	}, {
		name:   "other URI",
		cert:   ca.issue(t, nil, spiffe+"-2"),
		policy: config.BackendTLS{ServerName: "backend.app.svc", RootCAs: ca.pool, SANURIs: []string{spiffe}},
		want:   502,
		errMsg: "none of the subject alt names",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rt, logs := observedRuntime(t)
			p := freePort(t)
			policy := tc.policy
			policy.ID, policy.Policy = "id", "app/policy"
			if err := rt.Apply(servicesConfig(t, p, testService{name: "svc", tls: &policy, addr: tlsBackend(t, tc.cert)})); err != nil {
				t.Fatal(err)
			}
			code, got := get(t, p, "/svc")
			if code != tc.want {
				t.Fatalf("status %d (%q), want %d", code, got, tc.want)
			}
			if code == 200 {
				if want := "sni=" + policy.ServerName + " host=app.example.com proto=1 alpn=http/1.1"; got != want {
					t.Errorf("backend saw %q, want %q", got, want)
				}
				return
			}
			entries := logs.FilterMessage("backend request failed").All()
			if len(entries) != 1 {
				t.Fatalf("logged %d failures, want 1", len(entries))
			}
			fields := entries[0].ContextMap()
			if fields["backendTLSPolicy"] != "app/policy" {
				t.Errorf("failure logged with fields %v, want backendTLSPolicy app/policy", fields)
			}
			if msg, _ := fields["error"].(string); !strings.Contains(msg, tc.errMsg) {
				t.Errorf("logged error %q, want it to say %q", msg, tc.errMsg)
			}
		})
	}
}

// TestBackendTLSPoolPerID: two policies for the same endpoint address never
// share a connection. The backend's certificate passes the first policy's
// checks only; were the kept-alive connection made for it reused for the
// second, the second would wrongly succeed.
func TestBackendTLSPoolPerID(t *testing.T) {
	ca, otherCA := newTestCA(t), newTestCA(t)
	addr := tlsBackend(t, ca.issue(t, []string{"a.app.svc", "b.app.svc"}))
	rt := newRuntime(t)
	p := freePort(t)
	err := rt.Apply(servicesConfig(t, p,
		testService{name: "a", addr: addr, tls: &config.BackendTLS{ID: "a", Policy: "app/a", ServerName: "a.app.svc", RootCAs: ca.pool}},
		testService{name: "b", addr: addr, tls: &config.BackendTLS{ID: "b", Policy: "app/b", ServerName: "b.app.svc", RootCAs: otherCA.pool}},
		testService{name: "c", addr: addr, tls: &config.BackendTLS{ID: "c", Policy: "app/c", ServerName: "b.app.svc", RootCAs: ca.pool}},
	))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second request reuses the first one's connection
		if code, got := get(t, p, "/a"); code != 200 || !strings.HasPrefix(got, "sni=a.app.svc ") {
			t.Fatalf("via policy a: %d %q", code, got)
		}
	}
	if code, got := get(t, p, "/b"); code != 502 {
		t.Errorf("via policy b, whose CA did not sign the backend's certificate: %d %q, want 502", code, got)
	}
	// A third ID that trusts the certificate gets its own connection, with
	// its own SNI.
	if code, got := get(t, p, "/c"); code != 200 || !strings.HasPrefix(got, "sni=b.app.svc ") {
		t.Errorf("via policy c: %d %q", code, got)
	}
}

// TestBackendTLSH2: an h2c Service port with a BackendTLSPolicy is spoken
// to in HTTP/2 over TLS, negotiated with ALPN.
func TestBackendTLSH2(t *testing.T) {
	ca := newTestCA(t)
	rt := newRuntime(t)
	p := freePort(t)
	err := rt.Apply(servicesConfig(t, p, testService{
		name: "svc", appProtocol: appProtocolH2C, addr: tlsBackend(t, ca.issue(t, []string{"backend.app.svc"})),
		tls: &config.BackendTLS{ID: "id", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if code, got := get(t, p, "/svc"); code != 200 || got != "sni=backend.app.svc host=app.example.com proto=2 alpn=h2" {
		t.Errorf("got %d %q, want HTTP/2 over TLS", code, got)
	}
}

// TestBackendTLSUpgrade: a WebSocket upgrade reaches a TLS backend over
// HTTP/1.1 (Go's transport offers no ALPN for it, so that it cannot end up
// on HTTP/2) and the switched connection carries bytes both ways, also
// when the backend otherwise speaks HTTP/2.
func TestBackendTLSUpgrade(t *testing.T) {
	ca := newTestCA(t)
	addr := tlsBackend(t, ca.issue(t, []string{"backend.app.svc"}))
	rt := newRuntime(t)
	p := freePort(t)
	policy := &config.BackendTLS{ID: "id", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}
	err := rt.Apply(servicesConfig(t, p,
		testService{name: "h1", addr: addr, tls: policy},
		testService{name: "h2", appProtocol: appProtocolH2C, addr: addr, tls: policy},
	))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/h1", "/h2"} {
		t.Run(path, func(t *testing.T) {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: app.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", path)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("status %d, want 101", resp.StatusCode)
			}
			if got, want := resp.Header.Get("X-Seen"), "sni=backend.app.svc host=app.example.com proto=1 alpn="; got != want {
				t.Errorf("backend saw %q, want %q", got, want)
			}
			io.WriteString(c, "ping\n")
			if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
				t.Errorf("echo over the upgraded connection: %q, %v", line, err)
			}
		})
	}
}

// TestBackendTLSMirror: a mirror to a TLS backend is sent over TLS with its
// policy's SNI.
func TestBackendTLSMirror(t *testing.T) {
	ca := newTestCA(t)
	seen := make(chan string, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		seen <- fmt.Sprintf("sni=%s host=%s", r.TLS.ServerName, r.Host)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.issue(t, []string{"mirror.app.svc"})}}
	srv.StartTLS()
	defer srv.Close()
	rt := newRuntime(t)
	p := freePort(t)
	err := rt.Apply(servicesConfig(t, p,
		testService{name: "main", addr: slowBackend(t, "main"), mirrorTo: "mirror"},
		testService{name: "mirror", addr: srv.Listener.Addr().String(), tls: &config.BackendTLS{ID: "m", Policy: "app/m", ServerName: "mirror.app.svc", RootCAs: ca.pool}},
	))
	if err != nil {
		t.Fatal(err)
	}
	if code, got := get(t, p, "/main"); code != 200 || got != "main" {
		t.Fatalf("got %d %q", code, got)
	}
	select {
	case got := <-seen:
		if want := "sni=mirror.app.svc host=app.example.com"; got != want {
			t.Errorf("mirror saw %q, want %q", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the mirror got no request")
	}
}

// TestBackendTLSTransportsPruned: a Config that still uses an ID keeps its
// pool and connections; one that does not closes it.
func TestBackendTLSTransportsPruned(t *testing.T) {
	ca := newTestCA(t)
	addr := tlsBackend(t, ca.issue(t, []string{"backend.app.svc"}))
	rt := newRuntime(t)
	p := freePort(t)
	withTLS := servicesConfig(t, p, testService{name: "svc", addr: addr, tls: &config.BackendTLS{ID: "id", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}})
	if err := rt.Apply(withTLS); err != nil {
		t.Fatal(err)
	}
	if n := rt.fwd.tls.count(); n != 0 {
		t.Fatalf("%d TLS transports before any request, want none", n)
	}
	if code, _ := get(t, p, "/svc"); code != 200 {
		t.Fatalf("status %d", code)
	}
	first, _ := rt.fwd.tls.byID.Load(poolKey{tls: "id"})
	// The same settings in a new Config, as translation makes them.
	again := servicesConfig(t, p, testService{name: "svc", addr: addr, tls: &config.BackendTLS{ID: "id", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}})
	if err := rt.Apply(again); err != nil {
		t.Fatal(err)
	}
	if kept, _ := rt.fwd.tls.byID.Load(poolKey{tls: "id"}); kept != first || first == nil {
		t.Fatal("a Config using the same ID replaced its transport")
	}
	if err := rt.Apply(servicesConfig(t, p, testService{name: "svc", addr: slowBackend(t, "plain")})); err != nil {
		t.Fatal(err)
	}
	if n := rt.fwd.tls.count(); n != 0 {
		t.Errorf("%d TLS transports after a Config without TLS backends, want none", n)
	}
	if code, got := get(t, p, "/svc"); code != 200 || got != "plain" {
		t.Errorf("plain backend: %d %q", code, got)
	}
}

// count is the number of TLS transports kept.
func (ts *backendTLSTransports) count() int {
	n := 0
	ts.byID.Range(func(_, _ any) bool {
		n++
		return true
	})
	return n
}

// TestBackendClientCertificate: a listener's BackendClientCert is
// presented to TLS backends, and connections made with it are never used
// for requests that should present none (or another).
func TestBackendClientCertificate(t *testing.T) {
	ca := newTestCA(t)
	clients, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := clients.IssueClient(1, "gateway-client")
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "client="+r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.issue(t, []string{"backend.app.svc"})},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients.Pool}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	rt := newRuntime(t)
	p := freePort(t)
	settings := &config.BackendTLS{ID: "id", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}
	configWith := func(cc *config.BackendClientCert) *config.Config {
		cfg := servicesConfig(t, p, testService{name: "svc", addr: srv.Listener.Addr().String(), tls: settings})
		cfg.Ports[0].All.At(0).BackendClientCert = cc
		cfg.BackendClientCertIDs = map[string]struct{}{}
		if cc != nil {
			cfg.BackendClientCertIDs[cc.ID] = struct{}{}
		}
		return cfg
	}
	if err := rt.Apply(configWith(&config.BackendClientCert{ID: "cert", Cert: &clientCert})); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second reuses the pooled connection
		if code, body := get(t, p, "/svc"); code != 200 || body != "client=gateway-client" {
			t.Fatalf("with the client certificate: %d %q", code, body)
		}
	}
	if err := rt.Apply(configWith(nil)); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, p, "/svc"); code != http.StatusBadGateway {
		t.Errorf("without a client certificate: %d, want 502 (a connection made with the certificate was reused)", code)
	}
	if n := rt.fwd.tls.count(); n != 1 {
		t.Errorf("%d pools after the certificate went, want only the one without", n)
	}
}
