package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/admin"
)

// poolBackend is a backend that closes connections idle for idle, as a
// backend's keep-alive timeout does: over TLS with cert when given one
// (HTTP/1.1 and HTTP/2 by ALPN), else in plain text, h2c included. It
// answers with the protocol it was spoken to in, echoes an Upgrade's
// connection, and reads a request's body whole.
func poolBackend(t *testing.T, cert *tls.Certificate, idle time.Duration) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !isUpgrade(r) {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "proto=%d body=%d", r.ProtoMajor, n)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		io.WriteString(brw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		if brw.Flush() == nil {
			_, _ = io.Copy(c, brw)
		}
	}))
	srv.Config.IdleTimeout = idle
	if cert == nil {
		srv.Config.Protocols = new(http.Protocols)
		srv.Config.Protocols.SetHTTP1(true)
		srv.Config.Protocols.SetUnencryptedHTTP2(true)
		srv.Start()
	} else {
		srv.EnableHTTP2 = true
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2", "http/1.1"}}
		srv.StartTLS()
	}
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// backendConns reads the pool metrics of backend ns/name:80 from a
// /metrics page: connections opened, and open now.
func backendConns(t *testing.T, page, name string) (opened, open int) {
	t.Helper()
	find := func(metric string) int {
		m := regexp.MustCompile(`(?m)^` + metric + `\{backend="ns/` + name + `:80"\} (\d+)$`).FindStringSubmatch(page)
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return find("portico_backend_connections_opened_total"), find("portico_backend_open_connections")
}

// TestPoolMetricsEveryPath: every forwarding path counts the connections
// it opens to a backend in /metrics, under that backend: a request with a
// body (Go's HTTP/1.1 transport), a TLS backend over HTTP/1.1 and over
// HTTP/2, an h2c backend, a WebSocket upgrade, and a request without a
// body (the direct pool), a mirrored copy. Each shows an open connection, and the count
// falls back to 0 when the backend closes it at its keep-alive timeout
// (or, for the direct pool, at the pool's own).
func TestPoolMetricsEveryPath(t *testing.T) {
	const idle = 300 * time.Millisecond
	ca := newTestCA(t)
	cert := ca.issue(t, []string{"backend.app.svc"})
	plain, secure := poolBackend(t, nil, idle), poolBackend(t, &cert, idle)
	policy := &config.BackendTLS{ID: "id", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}

	metrics := admin.NewMetrics()
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = time.Second
	opts.Backends = metrics
	rt := New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	scraper := httptest.NewServer((&admin.Server{Metrics: metrics}).Handler())
	t.Cleanup(scraper.Close)
	scrape := func() string {
		resp, err := http.Get(scraper.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	p := freePort(t)
	err := rt.Apply(servicesConfig(t, p,
		testService{name: "body", addr: plain},
		testService{name: "tls", addr: secure, tls: policy},
		testService{name: "tlsh2", appProtocol: appProtocolH2C, addr: secure, tls: policy},
		testService{name: "h2c", appProtocol: appProtocolH2C, addr: plain},
		testService{name: "ws", addr: plain},
		testService{name: "direct", addr: plain, mirrorTo: "mirror"},
		testService{name: "mirror", addr: plain},
	))
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d/", p)
	send := func(method, name, body, want string) {
		t.Helper()
		req, err := http.NewRequest(method, base+name, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s /%s: %v", method, name, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != want {
			t.Fatalf("%s /%s: %d %q, want 200 %q", method, name, resp.StatusCode, got, want)
		}
	}
	for range 2 { // the second request of each reuses the connection
		send("POST", "body", "hello", "proto=1 body=5")
		send("GET", "tls", "", "proto=1 body=0")
		send("GET", "tlsh2", "", "proto=2 body=0")
		send("GET", "h2c", "", "proto=2 body=0")
		send("GET", "direct", "", "proto=1 body=0")
	}

	// The upgraded connection stays open while the client holds its own.
	ws, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatal(err)
	}
	_ = ws.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(ws, "GET /ws HTTP/1.1\r\nHost: app.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	br := bufio.NewReader(ws)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	io.WriteString(ws, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("echo over the upgraded connection: %q, %v", line, err)
	}

	page := scrape()
	for _, name := range []string{"body", "tls", "tlsh2", "h2c", "ws", "direct"} {
		if opened, open := backendConns(t, page, name); opened != 1 || open != 1 {
			t.Errorf("backend %s: %d opened, %d open after its requests, want 1 and 1", name, opened, open)
		}
	}
	// Mirrored copies go out in goroutines of their own: the second may
	// find the first's connection still busy.
	if !waitFor(5*time.Second, func() bool {
		opened, open := backendConns(t, scrape(), "mirror")
		return opened >= 1 && open >= 1
	}) {
		opened, open := backendConns(t, scrape(), "mirror")
		t.Errorf("mirror backend: %d opened, %d open, want at least 1 each", opened, open)
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", page)
	}

	ws.Close()
	// The backend closes the idle connections of Go's transports, which
	// close them in turn; the direct pool finds its own at its sweep,
	// made here rather than waited for.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rt.fwd.pool.closeIdle(func(c *h1Conn) bool { return true })
		page = scrape()
		var still []string
		for _, name := range []string{"body", "tls", "tlsh2", "h2c", "ws", "direct", "mirror"} {
			if opened, open := backendConns(t, page, name); opened < 1 || open != 0 || name != "mirror" && opened != 1 {
				still = append(still, fmt.Sprintf("%s: %d opened, %d open", name, opened, open))
			}
		}
		if len(still) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the backends closed idle connections, want 1 opened (the mirror's: 1 or more) and 0 open each: %q", still)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
