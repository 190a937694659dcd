package proxy

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/proxyproto"
)

// seenHeader is what a PROXY-reading backend got on one connection: the
// header, or the error reading it, and the bytes that followed.
type seenHeader struct {
	h    proxyproto.Header
	err  error
	rest string
}

// headerBackend accepts TCP on loopback and reads a PROXY header first on
// each connection, as a backend that takes one does; then serve has the
// connection (the bytes after the header first) and returns what it read
// of the client's, which is reported with the header.
func headerBackend(t *testing.T, serve func(net.Conn) string) (string, <-chan seenHeader) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	seen := make(chan seenHeader, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				h, rest, err := proxyproto.Read(c)
				if err != nil {
					seen <- seenHeader{err: err}
					return
				}
				seen <- seenHeader{h: h, rest: serve(&prefixConn{Conn: c, pending: rest})}
			}()
		}
	}()
	return ln.Addr().String(), seen
}

// echoLine answers "ok:" and the first line the client sends.
func echoLine(c net.Conn) string {
	line, _ := bufio.NewReader(c).ReadString('\n')
	io.WriteString(c, "ok:"+line)
	return line
}

func nextSeen(t *testing.T, seen <-chan seenHeader) seenHeader {
	t.Helper()
	select {
	case s := <-seen:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("the backend got no connection")
		return seenHeader{}
	}
}

// tcpProxyConfig is tcpConfig with backend "a" at addr sending header
// version v (0: none), and the port reading incoming headers as in.
func tcpProxyConfig(port int, addr string, v int, in *config.ProxyProtocol) *config.Config {
	cfg := tcpConfig(port, "ns/db", tcpBackend{"a", 1, []string{addr}})
	if v != 0 {
		cfg.Ports[0].All.At(0).TCP.Backends[0].ProxyProtocol = &config.BackendProxyProtocol{Version: v, Policy: "ns/pp"}
	}
	cfg.Ports[0].ProxyProtocol = in
	return cfg
}

// lineExchange sends pre and a line on c and returns the answer's line.
func lineExchange(t *testing.T, c net.Conn, pre []byte, line string) string {
	t.Helper()
	if _, err := c.Write(append(append([]byte{}, pre...), line+"\n"...)); err != nil {
		t.Fatal(err)
	}
	got, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the answer: %v (got %q)", err, got)
	}
	return got
}

// TestBackendProxyHeaderTCP: on real sockets, a TCPRoute's backend that
// takes a v1 or a v2 header reads the client's true address and port,
// and the address it reached Portico at, before the client's first byte;
// the client's bytes follow unchanged.
func TestBackendProxyHeaderTCP(t *testing.T) {
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			addr, seen := headerBackend(t, echoLine)
			rt, port := startTCP(t, nil)
			if err := rt.Apply(tcpProxyConfig(port, addr, v, nil)); err != nil {
				t.Fatal(err)
			}
			c := dialTCP(t, port)
			if got := lineExchange(t, c, nil, "ping"); got != "ok:ping\n" {
				t.Fatalf("answer %q", got)
			}
			s := nextSeen(t, seen)
			want := proxyproto.Header{Version: v, Source: c.LocalAddr().(*net.TCPAddr).AddrPort(), Dest: c.RemoteAddr().(*net.TCPAddr).AddrPort()}
			if s.err != nil || s.h != want || s.rest != "ping\n" {
				t.Fatalf("backend saw %+v (%v) then %q, want %+v then ping", s.h, s.err, s.rest, want)
			}
		})
	}
}

// TestBackendProxyHeaderIPv6: a client over IPv6 is sent as a TCP6 line
// (v1) or an AF_INET6 block (v2).
func TestBackendProxyHeaderIPv6(t *testing.T) {
	probe, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	probe.Close()
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			addr, seen := headerBackend(t, echoLine)
			rt, port := startTCP(t, func(o *Options) { o.BindAddress = "::1" })
			if err := rt.Apply(tcpProxyConfig(port, addr, v, nil)); err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp6", fmt.Sprintf("[::1]:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if got := lineExchange(t, c, nil, "ping"); got != "ok:ping\n" {
				t.Fatalf("answer %q", got)
			}
			s := nextSeen(t, seen)
			src := c.LocalAddr().(*net.TCPAddr).AddrPort()
			if s.err != nil || s.h.Source != src || !s.h.Source.Addr().Is6() || s.h.Dest.Addr() != netip.IPv6Loopback() {
				t.Fatalf("backend saw %+v (%v), want source %s over IPv6", s.h, s.err, src)
			}
		})
	}
}

// TestBackendProxyHeaderRelaysIncoming: on a port that reads PROXY
// headers from a trusted balancer, the backend's header carries the
// client the balancer named, not the balancer, in either version; a
// header from a peer the port does not trust is refused and the backend
// never hears of the connection.
func TestBackendProxyHeaderRelaysIncoming(t *testing.T) {
	client := netip.MustParseAddrPort("203.0.113.7:4242")
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			addr, seen := headerBackend(t, echoLine)
			rt, port := startTCP(t, nil)
			in := &config.ProxyProtocol{Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, Timeout: 5 * time.Second}
			if err := rt.Apply(tcpProxyConfig(port, addr, v, in)); err != nil {
				t.Fatal(err)
			}
			c := dialTCP(t, port)
			incoming := v2Header(1, client, netip.MustParseAddrPort("192.0.2.1:5432"), []byte{0x04, 0, 1, 'x'})
			if got := lineExchange(t, c, incoming, "ping"); got != "ok:ping\n" {
				t.Fatalf("answer %q", got)
			}
			s := nextSeen(t, seen)
			if s.err != nil || s.h.Source != client || s.h.Version != v || s.rest != "ping\n" {
				t.Fatalf("backend saw %+v (%v) then %q, want source %s", s.h, s.err, s.rest, client)
			}
		})
	}
	t.Run("untrusted", func(t *testing.T) {
		addr, seen := headerBackend(t, echoLine)
		rt, port := startTCP(t, nil)
		in := &config.ProxyProtocol{Trusted: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, Timeout: 5 * time.Second}
		if err := rt.Apply(tcpProxyConfig(port, addr, 2, in)); err != nil {
			t.Fatal(err)
		}
		// The peer is refused at once: the reset may come before the
		// dial returns.
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			defer c.Close()
			_, _ = c.Write(v2Header(1, client, netip.MustParseAddrPort("192.0.2.1:5432"), nil))
			if !refused(c) {
				t.Fatal("a header from an untrusted peer was served")
			}
		}
		select {
		case s := <-seen:
			t.Fatalf("the backend got a connection: %+v", s)
		case <-time.After(200 * time.Millisecond):
		}
	})
}

// TestBackendProxyHeaderSpoofed: a client that writes a PROXY header of
// its own, naming someone else, on a port that reads none, cannot pass
// for them: the backend reads Portico's header first, with the true
// address, and the forged one arrives as the client's data.
func TestBackendProxyHeaderSpoofed(t *testing.T) {
	addr, seen := headerBackend(t, echoLine)
	rt, port := startTCP(t, nil)
	if err := rt.Apply(tcpProxyConfig(port, addr, 1, nil)); err != nil {
		t.Fatal(err)
	}
	c := dialTCP(t, port)
	forged := "PROXY TCP4 6.6.6.6 192.0.2.1 6666 5432\r"
	if got := lineExchange(t, c, nil, forged); got != "ok:"+forged+"\n" {
		t.Fatalf("answer %q", got)
	}
	s := nextSeen(t, seen)
	if s.err != nil || s.h.Source != c.LocalAddr().(*net.TCPAddr).AddrPort() || s.rest != forged+"\n" {
		t.Fatalf("backend saw %+v (%v) then %q", s.h, s.err, s.rest)
	}
}

// TestBackendProxyHeaderTLSPassthrough: a passthrough TLSRoute's backend
// reads the header, then the client's own TLS session (whose SNI picked
// the route) is the backend's, with no byte of it lost.
func TestBackendProxyHeaderTLSPassthrough(t *testing.T) {
	ca := newTestCA(t)
	leaf := ca.issue(t, []string{"a.pass.test"})
	addr, seen := headerBackend(t, func(c net.Conn) string {
		tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{leaf}})
		if err := tc.Handshake(); err != nil {
			return "handshake: " + err.Error()
		}
		return tc.ConnectionState().ServerName + " " + echoLine(tc)
	})
	for _, v := range []int{1, 2} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			p := tlsPort{pass: map[string]string{"a.pass.test": "a"}, endpoints: map[string]string{"a": addr},
				cert: ca.issue(t, []string{"*.term.test"})}
			rt, port := startTCP(t, nil)
			cfg := p.config(port)
			route := cfg.Ports[0].All.At(0).Streams.Lookup("a.pass.test")
			route.Backends[0].ProxyProtocol = &config.BackendProxyProtocol{Version: v, Policy: "ns/pp"}
			if err := rt.Apply(cfg); err != nil {
				t.Fatal(err)
			}
			c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{ServerName: "a.pass.test", RootCAs: ca.pool})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if got := lineExchange(t, c, nil, "ping"); got != "ok:ping\n" {
				t.Fatalf("answer %q", got)
			}
			s := nextSeen(t, seen)
			src := c.LocalAddr().(*net.TCPAddr).AddrPort()
			if s.err != nil || s.h.Version != v || s.h.Source != src || s.rest != "a.pass.test ping\n" {
				t.Fatalf("backend saw %+v (%v) then %q, want source %s then the session", s.h, s.err, s.rest, src)
			}
		})
	}
}
