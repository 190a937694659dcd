package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
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
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/routing"
	"portico.dev/portico/sni"
)

// seenRequest is what a recording backend got.
type seenRequest struct {
	method, uri string
	header      http.Header
	body        string
	bodyErr     error
}

// recorder is a backend that keeps every request it gets. A request that
// asks to switch protocols is switched, whatever the protocol, and the
// connection then answers "TUNNEL": the backend a tunnel attack needs.
type recorder struct {
	mu   sync.Mutex
	seen []seenRequest
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	rec.mu.Lock()
	rec.seen = append(rec.seen, seenRequest{method: r.Method, uri: r.RequestURI, header: r.Header.Clone(), body: string(b), bodyErr: err})
	rec.mu.Unlock()
	if up := r.Header.Get("Upgrade"); up != "" {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\nTUNNEL", up)
		_ = brw.Flush()
		return
	}
	io.WriteString(w, "ok")
}

func (rec *recorder) requests() []seenRequest {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]seenRequest(nil), rec.seen...)
}

// recorderPort serves an HTTP port whose /svc route goes to a new recorder,
// and /mirrored to another one with a mirror to the third it returns.
func recorderPort(t *testing.T) (addr string, rec, mirrored, mirror *recorder) {
	t.Helper()
	rec, mirrored, mirror = &recorder{}, &recorder{}, &recorder{}
	rt := newRuntime(t)
	p := freePort(t)
	err := rt.Apply(servicesConfig(t, p,
		testService{name: "svc", addr: serveBackend(t, rec)},
		testService{name: "mirrored", addr: serveBackend(t, mirrored), mirrorTo: "mirror"},
		testService{name: "mirror", addr: serveBackend(t, mirror)},
	))
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p), rec, mirrored, mirror
}

// exchange1 writes raw to a new connection and reads one answer.
func exchange1(t *testing.T, addr, raw string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return exchangeOn(t, c, raw)
}

func exchangeOn(t *testing.T, c net.Conn, raw string) (*http.Response, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp, string(b)
}

// h2cUpgrades are ways to ask for an h2c upgrade.
var h2cUpgrades = []string{
	"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
	"Connection: Upgrade\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
	"Connection: upgrade\r\nUpgrade: H2C\r\n",
	"Connection: Upgrade\r\nUpgrade: websocket, h2c\r\n",
	"Connection: Upgrade\r\nUpgrade: h2c\r\nUpgrade: websocket\r\n",
	"Connection: Upgrade\r\nUpgrade: TLS/1.2\r\n",
}

// TestReliabilityH2CUpgrade: a backend that accepts any upgrade would give
// the client a tunnel past routing; only WebSocket upgrades reach it, over
// cleartext and TLS, and the h2c headers never do.
func TestReliabilityH2CUpgrade(t *testing.T) {
	addr, rec, _, _ := recorderPort(t)
	tlsAddr, roots := tlsRecorderPort(t, rec)
	dial := map[string]func() net.Conn{
		"cleartext": func() net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
		"TLS": func() net.Conn {
			c, err := tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: "app.example.com", RootCAs: roots, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			return c
		},
	}
	for name, dial := range dial {
		for _, up := range h2cUpgrades {
			c := dial()
			resp, body := exchangeOn(t, c, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n"+up+"\r\n")
			c.Close()
			if resp.StatusCode != http.StatusOK || body != "ok" {
				t.Errorf("%s %q: %d %q, want the plain answer 200 \"ok\"", name, up, resp.StatusCode, body)
			}
		}
		c := dial()
		resp, _ := exchangeOn(t, c, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		c.Close()
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Errorf("%s WebSocket upgrade: %d, want 101", name, resp.StatusCode)
		}
	}
	for _, r := range rec.requests() {
		if up := r.header.Get("Upgrade"); up != "" && up != "websocket" || r.header.Get("Http2-Settings") != "" {
			t.Errorf("backend got Upgrade %q, HTTP2-Settings %q", up, r.header.Get("Http2-Settings"))
		}
	}
}

// tlsRecorderPort serves an HTTPS port for app.example.com whose /svc
// route goes to rec; it returns the address and the roots to trust.
func tlsRecorderPort(t *testing.T, rec *recorder) (string, *x509.CertPool) {
	t.Helper()
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(snitest.ECDSA, 2, "app.example.com")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := sni.ParseKeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t)
	p := freePort(t)
	cfg := servicesConfig(t, p, testService{name: "svc", addr: serveBackend(t, rec)})
	port := cfg.Ports[0]
	port.Protocol = config.HTTPS
	port.All.At(0).Hostname = "app.example.com"
	port.Listeners = hostname.NewTable([]string{"app.example.com"}, port.All.Slice())
	port.SNI = sni.NewTable([]*sni.Entry{{Hostname: "app.example.com", Certificates: []*tls.Certificate{cert}, Value: port.All.At(0)}})
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p), ca.Pool
}

// TestReliabilityForwardingHeaders: no forwarding header a client sends
// reaches a backend, whatever its spelling, on forwarded requests and
// mirrored copies; Portico sets the ones it knows.
func TestReliabilityForwardingHeaders(t *testing.T) {
	addr, rec, mirrored, mirror := recorderPort(t)
	_, port, _ := net.SplitHostPort(addr)
	forged := []string{
		"Forwarded: for=203.0.113.9;proto=https", "X-Forwarded-For: 203.0.113.9", "X-Forwarded-Host: evil.example",
		"X-Forwarded-Proto: https", "X-Forwarded-Port: 443", "X-Forwarded-Prefix: /admin", "X-Forwarded-Ssl: on",
		"X-Forwarded-Scheme: https", "X-Forwarded-Server: evil", "X-Forwarded: for=203.0.113.9", "X-Real-IP: 203.0.113.9",
		"x-real-ip: 203.0.113.9", "X_Forwarded_For: 203.0.113.9", "x_forwarded_host: evil.example", "X_Real_IP: 203.0.113.9",
		"X-Forwarded_Proto: https", "X-Forwarded-Client-Cert: Hash=forged", "X_Forwarded_Client_Cert: Hash=forged",
		"X_Request_Id: forged",
	}
	for _, path := range []string{"/svc", "/mirrored"} {
		resp, _ := exchange1(t, addr, "GET "+path+" HTTP/1.1\r\nHost: app.example.com\r\n"+strings.Join(forged, "\r\n")+"\r\nX-Kept: yes\r\n\r\n")
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	want := map[string]string{"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Host": "app.example.com", "X-Forwarded-Proto": "http", "X-Forwarded-Port": port}
	check := func(who string, got []seenRequest) {
		if len(got) != 1 {
			t.Errorf("%s got %d requests, want 1", who, len(got))
			return
		}
		h := got[0].header
		for name, vs := range h {
			if isForwardingHeader(name) || strings.EqualFold(strings.ReplaceAll(name, "_", "-"), "X-Request-Id") {
				if w, ok := want[name]; !ok || len(vs) != 1 || vs[0] != w {
					t.Errorf("%s got %s: %q", who, name, vs)
				}
			}
		}
		for name, w := range want {
			if h.Get(name) != w {
				t.Errorf("%s got %s %q, want %q", who, name, h.Get(name), w)
			}
		}
		if h.Get("X-Kept") != "yes" {
			t.Errorf("%s lost X-Kept", who)
		}
	}
	check("backend", rec.requests())
	check("mirrored backend", mirrored.requests())
	for deadline := time.Now().Add(5 * time.Second); len(mirror.requests()) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	check("mirror", mirror.requests())
}

// TestReliabilityHeaderCount: a request with more header fields than
// allowed is refused with 431 before anything reaches a backend; up to the
// limit, it passes. Host counts as the field it is (HTTP/2's :authority
// too): 100 other fields and a Host used to pass a limit of 100.
func TestReliabilityHeaderCount(t *testing.T) {
	addr, rec, _, _ := recorderPort(t)
	many := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "X-%d: v\r\n", i)
		}
		return b.String()
	}
	resp, body := exchange1(t, addr, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n"+many(5000)+"\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || len(rec.requests()) != 0 {
		t.Fatalf("5,000 headers: %d %q, %d forwarded; want 431 and none", resp.StatusCode, body, len(rec.requests()))
	}
	resp, _ = exchange1(t, addr, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n"+strings.Repeat("X-Same: v\r\n", 101)+"\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("101 fields of one name: %d, want 431", resp.StatusCode)
	}
	max := DefaultOptions().MaxHeaderCount
	resp, _ = exchange1(t, addr, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n"+many(max)+"\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || len(rec.requests()) != 0 {
		t.Errorf("Host and %d fields: %d, %d forwarded; want 431 and none", max, resp.StatusCode, len(rec.requests()))
	}
	resp, _ = exchange1(t, addr, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n"+many(max-1)+"\r\n")
	if resp.StatusCode != http.StatusOK || len(rec.requests()) != 1 {
		t.Errorf("headers up to the limit: %d, %d forwarded; want 200 and 1", resp.StatusCode, len(rec.requests()))
	}
	h2Fields := func(n int) [][2]string {
		f := [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.example.com"}, {":path", "/svc"}}
		for i := range n {
			f = append(f, [2]string{fmt.Sprintf("x-%d", i), "v"})
		}
		return f
	}
	if status := h2Status(t, addr, h2Fields(max)); status != "431" {
		t.Errorf("HTTP/2, :authority and %d fields: %q, want 431", max, status)
	}
	if status := h2Status(t, addr, h2Fields(max-1)); status != "200" || len(rec.requests()) != 2 {
		t.Errorf("HTTP/2, fields up to the limit: %q, %d forwarded; want 200 and 2", status, len(rec.requests()))
	}
}

// readAllAnswers reads answers from br until the connection ends, and
// returns their status codes.
func readAllAnswers(br *bufio.Reader) []int {
	var codes []int
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return codes
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
}

// TestReliabilitySmuggling: framings that two parsers could read
// differently are refused, and a chunked body is read one way with the
// connection closed after the answer, so bytes a proxy in front took for a
// body never become a request of their own.
func TestReliabilitySmuggling(t *testing.T) {
	const host = "Host: app.example.com\r\n"
	const smuggled = "GET /svc/smuggled HTTP/1.1\r\n" + host + "\r\n"
	for _, c := range []struct {
		name  string
		raw   string
		codes []int  // answers before the connection ends
		body  string // the body the backend got, when it got the request
	}{
		{"Content-Length and Transfer-Encoding", "POST /svc HTTP/1.1\r\n" + host + "Content-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + smuggled, []int{400}, ""},
		{"Transfer-Encoding then Content-Length", "POST /svc HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n" + smuggled, []int{400}, ""},
		{"chunked alone", "POST /svc HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + smuggled, []int{200}, "abc"},
		{"HTTP/1.0 with Transfer-Encoding", "POST /svc HTTP/1.0\r\n" + host + "Connection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabc" + smuggled, []int{400}, ""},
		{"two different Content-Lengths", "POST /svc HTTP/1.1\r\n" + host + "Content-Length: 3\r\nContent-Length: 5\r\n\r\nabcde" + smuggled, []int{400}, ""},
		{"two equal Content-Lengths", "POST /svc HTTP/1.1\r\n" + host + "Content-Length: 3\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc" + smuggled, []int{400}, ""},
		{"signed Content-Length", "POST /svc HTTP/1.1\r\n" + host + "Content-Length: +3\r\n\r\nabc" + smuggled, []int{400}, ""},
		{"chunked not last", "POST /svc HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n" + smuggled, []int{501}, ""},
		{"another coding before chunked", "POST /svc HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{501}, ""},
		{"gzip alone", "POST /svc HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip\r\n\r\n0\r\n\r\n" + smuggled, []int{501}, ""},
		{"two Transfer-Encoding fields", "POST /svc HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, []int{400}, ""},
		{"space before the colon", "POST /svc HTTP/1.1\r\n" + host + "Transfer-Encoding : chunked\r\nContent-Length: 3\r\n\r\nabc" + smuggled, []int{400}, ""},
		{"chunk size overflow", "POST /svc HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\n\r\n10000000000000003\r\nabc\r\n0\r\n\r\n" + smuggled, []int{400}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			addr, rec, _, _ := recorderPort(t)
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(conn, c.raw)
			codes := readAllAnswers(bufio.NewReader(conn))
			if fmt.Sprint(codes) != fmt.Sprint(c.codes) {
				t.Errorf("answers %v before the connection ended, want %v", codes, c.codes)
			}
			got := rec.requests()
			for _, r := range got {
				if r.uri != "/svc" || r.body != c.body {
					t.Errorf("backend got %s %s with body %q, want only /svc with %q", r.method, r.uri, r.body, c.body)
				}
			}
			if c.codes[0] == 200 && len(got) != 1 {
				t.Errorf("backend got %d requests, want 1", len(got))
			}
		})
	}
}

// TestReliabilityLenientFraming: an obs-fold and bare LF line ends, which
// a lenient parser accepts and could read otherwise than the backend does,
// are refused (400) and nothing reaches the backend.
func TestReliabilityLenientFraming(t *testing.T) {
	addr, rec, _, _ := recorderPort(t)
	resp, _ := exchange1(t, addr, "POST /svc HTTP/1.1\r\nHost: app.example.com\r\nX-Folded: a\r\n Transfer-Encoding: chunked\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
	resp2, _ := exchange1(t, addr, "POST /svc HTTP/1.1\nHost: app.example.com\nContent-Length: 5\nConnection: close\n\nhello")
	got := rec.requests()
	if resp.StatusCode != 400 || resp2.StatusCode != 400 || len(got) != 0 {
		t.Fatalf("answers %d, %d; backend got %d requests; want 400, 400 and none", resp.StatusCode, resp2.StatusCode, len(got))
	}
}

// TestReliabilityErrorBodies: a rule that cannot be served answers 500
// with a body that names nothing internal (namespaces, Services,
// ReferenceGrants); the reason goes to the log.
func TestReliabilityErrorBodies(t *testing.T) {
	rt, logs := observedRuntime(t)
	p := freePort(t)
	prefix := gwv1.PathMatchPathPrefix
	port := gwv1.PortNumber(80)
	other := gwv1.Namespace("other")
	pathOf := func(s string) *gwv1.HTTPPathMatch { return &gwv1.HTTPPathMatch{Type: &prefix, Value: &s} }
	cfg := servicesConfig(t, p, testService{name: "svc", addr: serveBackend(t, &recorder{})})
	route := routeWithRules(
		gwv1.HTTPRouteRule{
			Matches: []gwv1.HTTPRouteMatch{{Path: pathOf("/cross")}},
			BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
				Name: "svc-x", Namespace: &other, Port: &port,
			}}}},
		},
		gwv1.HTTPRouteRule{
			Matches: []gwv1.HTTPRouteMatch{{Path: pathOf("/ext")}},
			Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterExtensionRef, ExtensionRef: &gwv1.LocalObjectReference{Group: "example.com", Kind: "Filter", Name: "internal-filter"}}},
			BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{
				Name: "svc", Port: &port,
			}}}},
		},
	)
	cfg.Ports[0].All.At(0).Routes = compileRoute(t, route, map[types.NamespacedName]routing.Service{
		{Namespace: "ns", Name: "svc"}: {Ports: []routing.ServicePort{{Name: "http", Port: 80}}},
	})
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/cross", "/ext"} {
		code, body := get(t, p, path)
		if code != 500 || body != "Internal Server Error\n" {
			t.Errorf("%s: %d %q, want 500 with the generic body", path, code, body)
		}
	}
	if n := logs.FilterMessageSnippet("request refused").Len(); n != 2 {
		t.Errorf("%d refusals logged, want 2 (one per rule)", n)
	}
}

// routeWithRules is HTTPRoute ns/r on Gateway ns/gw with rules.
func routeWithRules(rules ...gwv1.HTTPRouteRule) *gwv1.HTTPRoute {
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Generation: 1},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules:           rules,
		},
	}
}

// TestRefusalsLoggedOncePerInterval: a broken rule logs its reason once per
// interval, not once per request.
func TestRefusalsLoggedOncePerInterval(t *testing.T) {
	var l logLimiter
	now := time.Now()
	if !l.first("a", now) || l.first("a", now.Add(time.Second)) || !l.first("b", now) {
		t.Fatal("a key is let through once, other keys too")
	}
	if !l.first("a", now.Add(refuseLogEvery)) {
		t.Error("a key is let through again after the interval")
	}
}

// TestReliabilityClientBodyErrors: a client that sends a malformed chunked
// body gets 400 and one that leaves mid-upload is counted as 499, whether
// the body is streamed or kept for a mirror; neither is a backend failure
// (502 and a warning) in the metrics or the log.
func TestReliabilityClientBodyErrors(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	obs := &observed{}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.Observer = obs
	rt := New(opts, zaptest.NewLogger(t, zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, core)
	}))))
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	p := freePort(t)
	err := rt.Apply(servicesConfig(t, p,
		testService{name: "svc", addr: serveBackend(t, &recorder{})},
		testService{name: "mirrored", addr: serveBackend(t, &recorder{}), mirrorTo: "mirror"},
		testService{name: "mirror", addr: serveBackend(t, &recorder{})},
	))
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	for _, path := range []string{"/svc", "/mirrored"} {
		resp, _ := exchange1(t, addr, "POST "+path+" HTTP/1.1\r\nHost: app.example.com\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\nzz\r\n")
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s malformed chunked body: %d, want 400", path, resp.StatusCode)
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 100\r\n\r\n0123456789")
		_ = c.(*net.TCPConn).CloseWrite()
		if b, _ := io.ReadAll(c); len(b) != 0 {
			t.Errorf("%s aborted upload answered %q", path, b)
		}
		c.Close()
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		obs.mu.Lock()
		got = slices.Clone(obs.calls)
		obs.mu.Unlock()
		if len(got) >= 4 || time.Now().After(deadline) {
			break
		}
	}
	slices.Sort(got)
	if want := []string{"ns/r 400", "ns/r 400", "ns/r 499", "ns/r 499"}; !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
	if n := logs.FilterMessage("backend request failed").Len(); n != 0 {
		t.Errorf("%d client body errors logged as backend failures", n)
	}
}

// TestRogueSwitchIsRefused: a backend that switches protocols although no
// upgrade reached it gives the client a 502, not a tunnel.
func TestRogueSwitchIsRefused(t *testing.T) {
	rogue := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\nTUNNEL")
		_ = brw.Flush()
	})
	rt := newRuntime(t)
	p := freePort(t)
	if err := rt.Apply(servicesConfig(t, p, testService{name: "svc", addr: serveBackend(t, rogue)})); err != nil {
		t.Fatal(err)
	}
	resp, body := exchange1(t, fmt.Sprintf("127.0.0.1:%d", p), "GET /svc HTTP/1.1\r\nHost: app.example.com\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(body, "TUNNEL") {
		t.Errorf("answer %d %q, want 502 and no tunnel", resp.StatusCode, body)
	}
}

// TestReliabilityOversizeHeaders: a request whose header bytes pass the
// limit gets 431 and nothing reaches a backend (Go's server enforces
// Options.MaxHeaderBytes; this replays it).
func TestReliabilityOversizeHeaders(t *testing.T) {
	addr, rec, _, _ := recorderPort(t)
	// Go's server reads 4 KiB past the limit before it gives up.
	big := strings.Repeat("a", DefaultOptions().MaxHeaderBytes+8<<10)
	resp, _ := exchange1(t, addr, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\nX-Big: "+big+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || len(rec.requests()) != 0 {
		t.Errorf("%d bytes of headers: %d, %d forwarded; want 431 and none", len(big), resp.StatusCode, len(rec.requests()))
	}
}
