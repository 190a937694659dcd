package proxy

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/sni"
)

// tlsPort is an HTTPS port with one passthrough listener (*.pass.test)
// and one terminating TLS listener (*.term.test, serving cert), each with
// the routes given, hostname -> Service name (port 443).
type tlsPort struct {
	pass, term map[string]string
	cert       tls.Certificate
	endpoints  map[string]string // Service name -> address
}

func (p tlsPort) config(number int) *config.Config {
	table := func(routes map[string]string) *config.StreamTable {
		var hosts []string
		var rs []*config.StreamRoute
		for h, svc := range routes {
			hosts = append(hosts, h)
			rs = append(rs, &config.StreamRoute{Name: "ns/" + svc, TotalWeight: 1, Backends: []config.StreamBackend{
				{Key: config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: svc}, Port: 443}, Weight: 1}}})
		}
		return config.NewStreamTable(hosts, rs)
	}
	pass := &config.Listener{Key: "Gateway/ns/gw/pass", Hostname: "*.pass.test", Stream: config.StreamPassthrough, Streams: table(p.pass)}
	term := &config.Listener{Key: "Gateway/ns/gw/term", Hostname: "*.term.test", Stream: config.StreamTerminate, Streams: table(p.term)}
	cert := p.cert
	entries := []*sni.Entry{
		{Hostname: "*.pass.test", Value: pass},
		{Hostname: "*.term.test", Value: term, Certificates: []*tls.Certificate{&cert}},
	}
	cfg := &config.Config{
		Ports: []*config.Port{{Number: int32(number), Protocol: config.HTTPS,
			Listeners: hostname.NewTable([]string{"*.pass.test", "*.term.test"}, []*config.Listener{pass, term}),
			All:       chunked.Of([]*config.Listener{pass, term}), SNI: sni.NewTable(entries), Streams: true}},
	}
	for svc, addr := range p.endpoints {
		cfg.Endpoints = withEndpoints(cfg.Endpoints, config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: svc}, Port: 443}, config.NewEndpoints(addr))
	}
	return cfg
}

// echoBackend accepts plain TCP on loopback; each connection gets name
// and what it read until EOF, then "bye" once the client's writes ended.
func echoBackend(t *testing.T, name string) string {
	t.Helper()
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
			go func() {
				defer c.Close()
				io.WriteString(c, name+":")
				_, _ = io.Copy(c, c)
				io.WriteString(c, ":bye")
			}()
		}
	}()
	return ln.Addr().String()
}

func startTLSPort(t *testing.T, p tlsPort, mutate func(*Options)) int {
	t.Helper()
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	if mutate != nil {
		mutate(&opts)
	}
	rt := New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	port := freePort(t)
	if err := rt.Apply(p.config(port)); err != nil {
		t.Fatal(err)
	}
	return port
}

// TestTLSPassthroughSeesBackendCertificate: the client's session is the
// backend's own: it sees the backend's leaf certificate, and the backend
// sees the client's SNI.
func TestTLSPassthroughSeesBackendCertificate(t *testing.T) {
	ca := newTestCA(t)
	leaf := ca.issue(t, []string{"a.pass.test"})
	port := startTLSPort(t, tlsPort{
		pass:      map[string]string{"a.pass.test": "a"},
		endpoints: map[string]string{"a": tlsBackend(t, leaf)},
		cert:      ca.issue(t, []string{"*.term.test"}),
	}, nil)
	c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{ServerName: "a.pass.test", RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.ConnectionState().PeerCertificates[0].Raw; !bytes.Equal(got, leaf.Certificate[0]) {
		t.Fatal("client did not see the backend's leaf certificate")
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a.pass.test\r\nConnection: close\r\n\r\n")
	body, _ := io.ReadAll(c)
	if !strings.Contains(string(body), "sni=a.pass.test") {
		t.Fatalf("backend answered %q", body)
	}
}

// TestTLSTerminateHalfClose: a terminated stream reaches the plain backend,
// and the client's end of writes reaches it as EOF while the answer still
// comes back.
func TestTLSTerminateHalfClose(t *testing.T) {
	ca := newTestCA(t)
	port := startTLSPort(t, tlsPort{
		term:      map[string]string{"x.term.test": "x"},
		endpoints: map[string]string{"x": echoBackend(t, "x")},
		cert:      ca.issue(t, []string{"*.term.test"}),
	}, nil)
	c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{ServerName: "x.term.test", RootCAs: ca.pool, NextProtos: []string{"h2", "http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "" {
		t.Errorf("the terminated stream agreed to %q on the backend's behalf", p)
	}
	io.WriteString(c, "ping")
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, _ := io.ReadAll(c)
	if string(got) != "x:ping:bye" {
		t.Fatalf("got %q, want x:ping:bye", got)
	}
}

// TestTLSUnknownNameRefused: on a port with TLS listeners, a server name
// that no listener or route serves, or whose backend is missing, is refused
// before any handshake by closing the connection (what the conformance
// suite asks of TLS listeners), not served and not left hanging.
func TestTLSUnknownNameRefused(t *testing.T) {
	ca := newTestCA(t)
	port := startTLSPort(t, tlsPort{
		pass:      map[string]string{"a.pass.test": "a", "gone.pass.test": "gone"},
		term:      map[string]string{"x.term.test": "x", "gone.term.test": "gone"},
		endpoints: map[string]string{"a": echoBackend(t, "a"), "x": echoBackend(t, "x")},
		cert:      ca.issue(t, []string{"*.term.test"}),
	}, nil)
	for _, name := range []string{"nothing.test", "b.pass.test", "y.term.test", "gone.pass.test", "gone.term.test"} {
		d := net.Dialer{Timeout: 5 * time.Second, Deadline: time.Now().Add(10 * time.Second)}
		c, err := tls.DialWithDialer(&d, "tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{ServerName: name, RootCAs: ca.pool})
		if err == nil {
			c.Close()
			t.Errorf("%s: handshake completed", name)
			continue
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: %v, want the connection closed or reset", name, err)
		}
	}
}

func errTimeout(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	return errors.New("not a timeout")
}

// fragmenter splits the first record written (the ClientHello) into
// records of at most size bytes of handshake data.
type fragmenter struct {
	net.Conn
	size int
	done bool
}

func (f *fragmenter) Write(p []byte) (int, error) {
	if f.done || len(p) < 5 || p[0] != 22 {
		return f.Conn.Write(p)
	}
	f.done = true
	n := int(p[3])<<8 | int(p[4])
	body, rest := p[5:5+n], p[5+n:]
	var out []byte
	for len(body) > 0 {
		k := min(f.size, len(body))
		out = append(out, 22, p[1], p[2], byte(k>>8), byte(k))
		out = append(out, body[:k]...)
		body = body[k:]
	}
	out = append(out, rest...)
	if _, err := f.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// TestTLSFragmentedClientHello: a ClientHello split over many records is
// routed by its SNI, in both modes.
func TestTLSFragmentedClientHello(t *testing.T) {
	ca := newTestCA(t)
	port := startTLSPort(t, tlsPort{
		pass:      map[string]string{"a.pass.test": "a"},
		term:      map[string]string{"x.term.test": "x"},
		endpoints: map[string]string{"a": tlsBackend(t, ca.issue(t, []string{"a.pass.test"})), "x": echoBackend(t, "x")},
		cert:      ca.issue(t, []string{"*.term.test"}),
	}, nil)
	for _, name := range []string{"a.pass.test", "x.term.test"} {
		raw, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			t.Fatal(err)
		}
		c := tls.Client(&fragmenter{Conn: raw, size: 7}, &tls.Config{ServerName: name, RootCAs: ca.pool})
		if err := c.Handshake(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c.Close()
	}
}

// TestTLSStalledClientHello: a client that starts a ClientHello and stops
// is closed once ReadHeaderTimeout passes.
func TestTLSStalledClientHello(t *testing.T) {
	ca := newTestCA(t)
	port := startTLSPort(t, tlsPort{cert: ca.issue(t, []string{"*.term.test"})}, func(o *Options) {
		o.ReadHeaderTimeout = 200 * time.Millisecond
	})
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{22, 3, 1, 0, 200, 1, 0}) // a record that never completes
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if errTimeout(err) == err {
		t.Fatal("a stalled ClientHello was not closed")
	}
}

// TestTLSTenThousandHostnamesEach: 10,000 passthrough and 10,000
// terminated hostnames on one port, each with a route of its own; every
// name picks its own route, and connections to a sample of them reach the
// backend of their route (passthrough: its certificate; terminated: its
// greeting).
func TestTLSTenThousandHostnamesEach(t *testing.T) {
	const n, backends, sample = 10000, 4, 150
	ca := newTestCA(t)
	p := tlsPort{pass: map[string]string{}, term: map[string]string{}, endpoints: map[string]string{},
		cert: ca.issue(t, []string{"*.term.test"})}
	passAddrs, termAddrs := make([]string, backends), make([]string, backends)
	passLeaves := make([][]byte, backends)
	for b := range backends {
		leaf := ca.issue(t, []string{"*.pass.test"})
		passLeaves[b] = leaf.Certificate[0]
		passAddrs[b] = tlsBackend(t, leaf)
		termAddrs[b] = echoBackend(t, fmt.Sprintf("backend-%d", b))
	}
	for i := range n {
		p.pass[fmt.Sprintf("h%d.pass.test", i)] = fmt.Sprintf("p%d", i)
		p.term[fmt.Sprintf("h%d.term.test", i)] = fmt.Sprintf("t%d", i)
		p.endpoints[fmt.Sprintf("p%d", i)] = passAddrs[i%backends]
		p.endpoints[fmt.Sprintf("t%d", i)] = termAddrs[i%backends]
	}
	cfg := p.config(freePort(t))
	port := cfg.Ports[0]
	for i := range n {
		for _, mode := range []string{"pass", "term"} {
			name := fmt.Sprintf("h%d.%s.test", i, mode)
			e := port.SNI.Lookup(name)
			l, _ := e.Value.(*config.Listener)
			r := l.Streams.Lookup(name)
			if want := fmt.Sprintf("ns/%s%d", mode[:1], i); r == nil || r.Name != want {
				t.Fatalf("%s: route %v, want %s", name, r, want)
			}
		}
	}

	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	rt := New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port.Number)
	for k := range sample {
		i := (k * 7919) % n
		name := fmt.Sprintf("h%d.pass.test", i)
		c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: name, RootCAs: ca.pool})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(c.ConnectionState().PeerCertificates[0].Raw, passLeaves[i%backends]) {
			t.Fatalf("%s: reached another backend", name)
		}
		c.Close()

		name = fmt.Sprintf("h%d.term.test", i)
		c, err = tls.Dial("tcp", addr, &tls.Config{ServerName: name, RootCAs: ca.pool})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, _ := io.ReadAll(c)
		if want := fmt.Sprintf("backend-%d::bye", i%backends); string(got) != want {
			t.Fatalf("%s: got %q, want %q", name, got, want)
		}
		c.Close()
	}
}

// TestTLSStreamDrains: when its port is removed, an open stream goes on
// until the drain timeout, then is closed; new connections are refused.
func TestTLSStreamDrains(t *testing.T) {
	ca := newTestCA(t)
	p := tlsPort{
		term:      map[string]string{"x.term.test": "x"},
		endpoints: map[string]string{"x": echoBackend(t, "x")},
		cert:      ca.issue(t, []string{"*.term.test"}),
	}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 700 * time.Millisecond
	rt := New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	port := freePort(t)
	if err := rt.Apply(p.config(port)); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "x.term.test", RootCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo := func(msg string) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
		got := make([]byte, len(msg))
		_, err := io.ReadFull(c, got)
		if err == nil && string(got) != msg {
			err = fmt.Errorf("echoed %q", got)
		}
		return err
	}
	greeting := make([]byte, 2)
	if _, err := io.ReadFull(c, greeting); err != nil || string(greeting) != "x:" {
		t.Fatalf("greeting %q: %v", greeting, err)
	}
	if err := echo("before"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	if err := rt.Apply(&config.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := echo("draining"); err != nil {
		t.Fatalf("stream cut at once by the port's removal: %v", err)
	}
	if nc, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		nc.Close()
		t.Error("the removed port still accepts connections")
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Read(make([]byte, 1)); errTimeout(err) == err {
		t.Fatal("stream not closed after the drain timeout")
	}
	if d := time.Since(removed); d < 500*time.Millisecond {
		t.Errorf("stream closed %v after the removal, before the drain timeout", d)
	}
}
