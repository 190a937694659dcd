package proxy

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// connPolicyProxy serves one rule over Service svc, endpoints addrs, with
// conn as its policy's timeouts and keepalive (nil: none).
func connPolicyProxy(t *testing.T, conn *config.BackendConn, addrs ...string) (*Runtime, string) {
	t.Helper()
	rt := newRuntime(t)
	port := freePort(t)
	if err := rt.Apply(serviceConfig(t, port, routing.Service{Conn: conn}, false, addrs)); err != nil {
		t.Fatal(err)
	}
	return rt, fmt.Sprintf("http://127.0.0.1:%d", port)
}

func statusOf(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 20 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestBackendConnectTimeout: an endpoint whose accept queue is full (its
// SYNs dropped, so a connect hangs) fails within the policy's connect
// timeout (200ms), far below the flag's 5s.
func TestBackendConnectTimeout(t *testing.T) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue: past it, connects hang.
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			break
		}
		defer c.Close()
	}
	if c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond); err == nil {
		c.Close()
		t.Skip("the accept queue does not fill on this kernel")
	}
	_, url := connPolicyProxy(t, &config.BackendConn{ConnectTimeout: 200 * time.Millisecond}, addr)
	start := time.Now()
	status := statusOf(t, url+"/")
	if took := time.Since(start); status < 500 || took > 2*time.Second {
		t.Errorf("answered %d after %s, want a 5xx well within the flag's 5s", status, took)
	}
}

// TestBackendResponseHeaderTimeout: a backend that waits 3s before its
// answer's head gets 504 under the policy's 100ms, where the flag's 60s
// would wait; a quick answer is unaffected.
func TestBackendResponseHeaderTimeout(t *testing.T) {
	addr := slowBackend(t, "slow")
	_, url := connPolicyProxy(t, &config.BackendConn{ResponseHeaderTimeout: 100 * time.Millisecond}, addr)
	if s := statusOf(t, url+"/?delay=3s"); s != http.StatusGatewayTimeout {
		t.Errorf("slow answer: %d, want 504", s)
	}
	if s := statusOf(t, url+"/"); s != 200 {
		t.Errorf("quick answer: %d", s)
	}
}

// TestBackendIdleTimeout: with the policy's idle timeout of 1s, a pooled
// connection idle for longer is not used again (the backend sees a second
// connection); without a policy the same pause reuses it.
func TestBackendIdleTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conn  *config.BackendConn
		conns int32
	}{{"policy", &config.BackendConn{IdleTimeout: time.Second}, 2}, {"flags", nil, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			var conns atomic.Int32
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "ok")
			}), ConnState: func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}}
			go srv.Serve(ln) //nolint:errcheck // ends with Close
			t.Cleanup(func() { srv.Close() })
			_, url := connPolicyProxy(t, tc.conn, ln.Addr().String())
			statusOf(t, url+"/")
			time.Sleep(1200 * time.Millisecond)
			statusOf(t, url+"/")
			if n := conns.Load(); n != tc.conns {
				t.Errorf("%d backend connections for two requests 1.2s apart, want %d", n, tc.conns)
			}
		})
	}
}

// TestBackendTCPKeepalive: the connection the pool opened for a backend
// under the policy carries its keepalive settings.
func TestBackendTCPKeepalive(t *testing.T) {
	addr := slowBackend(t, "ka")
	rt, url := connPolicyProxy(t, &config.BackendConn{KeepAlive: &config.TCPKeepalive{Idle: 42 * time.Second, Interval: 7 * time.Second, Probes: 4}}, addr)
	if s := statusOf(t, url+"/"); s != 200 {
		t.Fatalf("status %d", s)
	}
	p := rt.fwd.pool
	p.mu.Lock()
	idle := p.idle[addr]
	p.mu.Unlock()
	if len(idle) != 1 || idle[0].raw == nil {
		t.Fatalf("%d idle connections to the backend, want 1", len(idle))
	}
	got := map[string]int{}
	err := idle[0].raw.Control(func(fd uintptr) {
		for name, opt := range map[string][2]int{"keepalive": {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE},
			"idle": {syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE}, "interval": {syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL},
			"probes": {syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT}} {
			v, err := syscall.GetsockoptInt(int(fd), opt[0], opt[1])
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
			got[name] = v
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got["keepalive"] != 1 || got["idle"] != 42 || got["interval"] != 7 || got["probes"] != 4 {
		t.Errorf("socket options %v, want keepalive 1, idle 42, interval 7, probes 4", got)
	}
}

// TestBackendConnectTimeoutBoundsTLSHandshake: connecting to a TLS
// backend is the TCP connect and the handshake; an endpoint that accepts
// but never answers the ClientHello fails within the policy's connect
// timeout (300ms), not the flag's 5s, over HTTP/1.1 and HTTP/2.
func TestBackendConnectTimeoutBoundsTLSHandshake(t *testing.T) {
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
			t.Cleanup(func() { c.Close() }) // held open, silent
		}
	}()
	ca := newTestCA(t)
	conn := &config.BackendConn{ConnectTimeout: 300 * time.Millisecond}
	svcs := []testService{
		{name: "tlsh1", tls: &config.BackendTLS{ID: "h1", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}, addr: ln.Addr().String(), conn: conn},
		{name: "tlsh2", appProtocol: appProtocolH2C, tls: &config.BackendTLS{ID: "h2", Policy: "app/policy", ServerName: "backend.app.svc", RootCAs: ca.pool}, addr: ln.Addr().String(), conn: conn},
	}
	rt := newRuntime(t)
	p := freePort(t)
	if err := rt.Apply(servicesConfig(t, p, svcs...)); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 20 * time.Second}
	for _, s := range svcs {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/%s", p, s.name), nil)
		req.Host = "app.example.com"
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode < 500 || took > 2*time.Second {
			t.Errorf("%s: answered %d after %s, want a 5xx well within the flag's 5s", s.name, resp.StatusCode, took)
		}
	}
}
