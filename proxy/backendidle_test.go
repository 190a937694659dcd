package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"portico.dev/portico/config"
)

// countedBackend answers "ok" and counts the connections made to it.
// kind: "h1", "h2c" (cleartext HTTP/2 with prior knowledge), or "tls"
// (HTTP/1.1 and h2 by ALPN, with cert).
func countedBackend(t *testing.T, kind string, cert tls.Certificate) (string, *atomic.Int32) {
	t.Helper()
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	srv.Config.ReadHeaderTimeout = 5 * time.Second
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	switch kind {
	case "h2c":
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Config.Protocols = &p
		srv.Start()
	case "tls":
		srv.EnableHTTP2 = true
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
		srv.StartTLS()
	default:
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), &conns
}

// TestBackendIdleTimeoutEveryTransport: a BackendTrafficPolicy's idle
// timeout (1s) holds on every transport toward backends, not only the
// direct HTTP/1.1 path: requests with a body (ReverseProxy over Go's
// HTTP/1.1 transport), cleartext HTTP/2 (h2c), and TLS backends over
// HTTP/1.1 and HTTP/2. Two requests 1.5s apart take two connections under
// the policy; without it, one.
func TestBackendIdleTimeoutEveryTransport(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.issue(t, []string{"backend.app.svc"})
	tlsOf := func(id string) *config.BackendTLS {
		return &config.BackendTLS{ID: id, Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}
	}
	for _, tc := range []struct {
		name  string
		conn  *config.BackendConn
		conns int32
	}{{"policy", &config.BackendConn{IdleTimeout: time.Second}, 2}, {"flags", nil, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			type backend struct {
				svc   testService
				body  bool
				conns *atomic.Int32
			}
			var bs []backend
			add := func(name, kind, appProtocol string, b *config.BackendTLS, body bool) {
				addr, n := countedBackend(t, kind, cert)
				bs = append(bs, backend{testService{name: name, appProtocol: appProtocol, tls: b, addr: addr, conn: tc.conn}, body, n})
			}
			add("body", "h1", "", nil, true)
			add("h2c", "h2c", appProtocolH2C, nil, false)
			add("tlsh1", "tls", "", tlsOf("one"), false)
			add("tlsh2", "tls", appProtocolH2C, tlsOf("two"), false)
			svcs := make([]testService, len(bs))
			for i, b := range bs {
				svcs[i] = b.svc
			}
			rt := newRuntime(t)
			p := freePort(t)
			if err := rt.Apply(servicesConfig(t, p, svcs...)); err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Timeout: 5 * time.Second}
			send := func(b backend) {
				t.Helper()
				var body io.Reader
				method := http.MethodGet
				if b.body {
					method, body = http.MethodPost, strings.NewReader("payload")
				}
				req, _ := http.NewRequest(method, fmt.Sprintf("http://127.0.0.1:%d/%s", p, b.svc.name), body)
				req.Host = "app.example.com"
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("%s: %v", b.svc.name, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("%s: %d", b.svc.name, resp.StatusCode)
				}
			}
			for _, b := range bs {
				send(b)
			}
			time.Sleep(1500 * time.Millisecond)
			for _, b := range bs {
				send(b)
				if n := b.conns.Load(); n != tc.conns {
					t.Errorf("%s: %d backend connections for two requests 1.5s apart, want %d", b.svc.name, n, tc.conns)
				}
			}
		})
	}
}

// TestBackendIdleTimeoutWebSocket: an upgraded connection (WebSocket)
// to a backend whose policy sets an idle timeout (500ms) is closed after
// that long without a byte either way, the client's side too; bytes
// keep it open; without the policy the same silence keeps it.
func TestBackendIdleTimeoutWebSocket(t *testing.T) {
	for _, tc := range []struct {
		name   string
		conn   *config.BackendConn
		closed bool
	}{{"policy", &config.BackendConn{IdleTimeout: 500 * time.Millisecond}, true}, {"flags", nil, false}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := echoUpgradeBackend(t)
			rt := newRuntime(t)
			p := freePort(t)
			if err := rt.Apply(servicesConfig(t, p, testService{name: "ws", addr: addr, conn: tc.conn})); err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: app.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
				t.Fatalf("upgrade: %v %v", resp, err)
			}
			// Talking every 200ms for 1s: under the idle timeout, kept.
			for i := range 5 {
				time.Sleep(200 * time.Millisecond)
				fmt.Fprintf(c, "ping %d\n", i)
				if line, err := br.ReadString('\n'); err != nil || line != fmt.Sprintf("ping %d\n", i) {
					t.Fatalf("echo %d: %q %v", i, line, err)
				}
			}
			// Silent: closed within the timeout and some slack, or kept.
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = br.ReadByte()
			gotClosed := err != nil && !isTimeout(err)
			if gotClosed != tc.closed {
				t.Errorf("silent for 2s: closed %v (%v), want %v", gotClosed, err, tc.closed)
			}
		})
	}
}

// echoUpgradeBackend switches protocols on every request and echoes what
// it reads.
func echoUpgradeBackend(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		if brw.Flush() == nil {
			_, _ = io.Copy(c, brw)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}
