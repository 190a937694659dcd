package proxy

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
)

// tcpBackend is one backendRef of a TCP listener's route: a Service name
// (port 9000), its weight and its endpoints.
type tcpBackend struct {
	svc    string
	weight int32
	addrs  []string
}

// tcpConfig is one TCP port whose listener serves route name with
// backends; name "" puts no route on the listener.
func tcpConfig(port int, name string, backends ...tcpBackend) *config.Config {
	l := &config.Listener{Key: "Gateway/ns/gw/tcp", Stream: config.StreamTCP}
	cfg := &config.Config{Ports: []*config.Port{{Number: int32(port), Protocol: config.TCP,
		Listeners: hostname.NewTable([]string{""}, []*config.Listener{l}), All: chunked.Of([]*config.Listener{l})}}}
	if name == "" {
		return cfg
	}
	r := &config.StreamRoute{Name: name}
	for _, b := range backends {
		key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: b.svc}, Port: 9000}
		r.Backends = append(r.Backends, config.StreamBackend{Key: key, Weight: b.weight})
		r.TotalWeight += b.weight
		cfg.Endpoints = withEndpoints(cfg.Endpoints, key, config.NewEndpoints(b.addrs...))
	}
	l.TCP = r
	return cfg
}

type streamRecord struct {
	route, mode, outcome string
	up, down             int64
}

type streamRecorder struct {
	mu  sync.Mutex
	got []streamRecord
}

func (r *streamRecorder) ObserveStream(route, mode, outcome string, up, down int64, _ time.Duration) {
	r.mu.Lock()
	r.got = append(r.got, streamRecord{route, mode, outcome, up, down})
	r.mu.Unlock()
}

func (r *streamRecorder) wait(t *testing.T, n int) []streamRecord {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := append([]streamRecord(nil), r.got...)
		r.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startTCP(t *testing.T, mutate func(*Options)) (*Runtime, int) {
	t.Helper()
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	if mutate != nil {
		mutate(&opts)
	}
	rt := New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	return rt, freePort(t)
}

func dialTCP(t *testing.T, port int) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

// readPrefix reads the n bytes a backend of echoBackend greets with.
func readPrefix(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
	return string(b)
}

// refused reports whether the proxy closed c without a byte.
func refused(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	return n == 0 && err != nil && !isTimeout(err)
}

// refusedAt reports whether a new connection to port is refused: reset
// before the dial returns, or closed without a byte after.
func refusedAt(t *testing.T, port int) bool {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return true
	}
	defer c.Close()
	return refused(c)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestTCPBytesBothWaysAndHalfClose: what the client sends reaches the
// backend and back; the client's half-close reaches the backend, whose
// answer after it still reaches the client; the stream is recorded with
// its route, mode and bytes.
func TestTCPBytesBothWaysAndHalfClose(t *testing.T) {
	rec := &streamRecorder{}
	rt, port := startTCP(t, func(o *Options) { o.Streams = rec })
	if err := rt.Apply(tcpConfig(port, "ns/db", tcpBackend{"a", 1, []string{echoBackend(t, "a")}})); err != nil {
		t.Fatal(err)
	}
	c := dialTCP(t, port)
	payload := strings.Repeat("0123456789", 100_000) // 1 MB each way
	go func() {
		_, _ = io.WriteString(c, payload)
		_ = c.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a:" + payload + ":bye"; string(got) != want {
		t.Fatalf("read %d bytes, want %d (prefix %q)", len(got), len(want), got[:min(len(got), 20)])
	}
	c.Close()
	recs := rec.wait(t, 1)
	if len(recs) != 1 {
		t.Fatalf("streams recorded: %+v", recs)
	}
	r := recs[0]
	if r.route != "ns/db" || r.mode != StreamTCP || r.outcome != StreamDone || r.up != int64(len(payload)) || r.down != int64(len(got)) {
		t.Fatalf("recorded %+v, want ns/db tcp done up %d down %d", r, len(payload), len(got))
	}
}

// TestTCPWeights: 10,000 connections through a route weighted 3:1 go 75%
// and 25% to its backends, within 5 points.
func TestTCPWeights(t *testing.T) {
	rt, port := startTCP(t, nil)
	if err := rt.Apply(tcpConfig(port, "ns/db",
		tcpBackend{"a", 3, []string{echoBackend(t, "a")}},
		tcpBackend{"b", 1, []string{echoBackend(t, "b")}},
		tcpBackend{"zero", 0, []string{echoBackend(t, "z")}})); err != nil {
		t.Fatal(err)
	}
	const total, workers = 10_000, 8
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range total / workers {
				c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
				if err != nil {
					errs <- err
					return
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				b := make([]byte, 2)
				_, err = io.ReadFull(c, b)
				c.Close()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				counts[string(b[:1])]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	share := func(k string) float64 { return 100 * float64(counts[k]) / total }
	if a, b := share("a"), share("b"); a < 70 || a > 80 || b < 20 || b > 30 || counts["z"] != 0 {
		t.Fatalf("shares: a %.1f%% (want 75±5), b %.1f%% (want 25±5), zero-weight backend %d connections", a, b, counts["z"])
	}
	t.Logf("a %d, b %d", counts["a"], counts["b"])
}

// TestTCPReloadKeepsConnections: a connection outlives a configuration
// change that keeps its route (its backends changed); when a later change
// removes the route, it is closed once the drain timeout has passed, not
// before, and new connections are refused at once.
func TestTCPReloadKeepsConnections(t *testing.T) {
	const drain = 500 * time.Millisecond
	rt, port := startTCP(t, func(o *Options) { o.DrainTimeout = drain })
	a, b := echoBackend(t, "a"), echoBackend(t, "b")
	if err := rt.Apply(tcpConfig(port, "ns/db", tcpBackend{"a", 1, []string{a}})); err != nil {
		t.Fatal(err)
	}
	c := dialTCP(t, port)
	if got := readPrefix(t, c, 2); got != "a:" {
		t.Fatalf("greeting %q", got)
	}
	exchange := func(msg string) error {
		if _, err := io.WriteString(c, msg); err != nil {
			return err
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != msg {
			return fmt.Errorf("echoed %q, want %q", buf, msg)
		}
		return nil
	}
	for i := range 5 {
		cfg := tcpConfig(port, "ns/db", tcpBackend{"b", 1, []string{b}})
		cfg.Generation = int64(i + 2)
		if err := rt.Apply(cfg); err != nil {
			t.Fatal(err)
		}
		if err := exchange(fmt.Sprintf("after reload %d", i)); err != nil {
			t.Fatalf("connection cut by a reload that kept its route: %v", err)
		}
	}
	// New connections take the new backend.
	if got := readPrefix(t, dialTCP(t, port), 2); got != "b:" {
		t.Fatalf("new connection greeted with %q, want b:", got)
	}

	if err := rt.Apply(tcpConfig(port, "")); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	if !refusedAt(t, port) {
		t.Fatal("a new connection was served after its route was removed")
	}
	if err := exchange("while draining"); err != nil {
		t.Fatalf("connection cut before the drain timeout: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("connection not closed after the drain: %v", err)
	}
	if d := time.Since(removed); d < drain {
		t.Fatalf("connection closed %v after its route was removed, before the drain timeout %v", d, drain)
	}
}

// TestTCPEndpointDownFailsOver: an endpoint that refuses connections is
// left out, and each connection goes to the backend's other endpoint.
func TestTCPEndpointDownFailsOver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	rt, port := startTCP(t, nil)
	if err := rt.Apply(tcpConfig(port, "ns/db", tcpBackend{"a", 1, []string{dead, echoBackend(t, "up")}})); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if got := readPrefix(t, dialTCP(t, port), 3); got != "up:" {
			t.Fatalf("connection %d greeted with %q", i, got)
		}
	}
}

// TestTCPRefusals: a connection to a route whose backend is invalid, or
// has no endpoint, is reset, and recorded as no_backend; one to a
// listener without a route as no_route.
func TestTCPRefusals(t *testing.T) {
	rec := &streamRecorder{}
	rt, port := startTCP(t, func(o *Options) { o.Streams = rec })
	cfg := tcpConfig(port, "ns/db", tcpBackend{"a", 1, nil})
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if !refusedAt(t, port) {
		t.Fatal("served without an endpoint")
	}
	cfg = tcpConfig(port, "ns/db", tcpBackend{"a", 1, []string{echoBackend(t, "a")}})
	cfg.Ports[0].All.At(0).TCP.Backends[0].Invalid = "backend ns/a: Service not found"
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if !refusedAt(t, port) {
		t.Fatal("served an invalid backend")
	}
	if err := rt.Apply(tcpConfig(port, "")); err != nil {
		t.Fatal(err)
	}
	if !refusedAt(t, port) {
		t.Fatal("served without a route")
	}
	recs := rec.wait(t, 3)
	want := []string{StreamNoBackend, StreamNoBackend, StreamNoRoute}
	if len(recs) != 3 {
		t.Fatalf("recorded %+v", recs)
	}
	for i, r := range recs {
		if r.outcome != want[i] || r.mode != StreamTCP {
			t.Fatalf("stream %d recorded %+v, want outcome %s", i, r, want[i])
		}
	}
}

// TestTCPIdleTimeout: a connection that moves no byte for the idle
// timeout is closed and recorded as idle; one that keeps talking is not.
func TestTCPIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	rec := &streamRecorder{}
	rt, port := startTCP(t, func(o *Options) { o.StreamIdleTimeout = idle; o.Streams = rec })
	if err := rt.Apply(tcpConfig(port, "ns/db", tcpBackend{"a", 1, []string{echoBackend(t, "a")}})); err != nil {
		t.Fatal(err)
	}
	busy, quiet := dialTCP(t, port), dialTCP(t, port)
	readPrefix(t, busy, 2)
	readPrefix(t, quiet, 2)
	start := time.Now()
	for time.Since(start) < 3*idle {
		if _, err := io.WriteString(busy, "x"); err != nil {
			t.Fatalf("busy connection cut: %v", err)
		}
		readPrefix(t, busy, 1)
		time.Sleep(idle / 6)
	}
	if !refused(quiet) {
		t.Fatal("quiet connection still open after three idle timeouts")
	}
	recs := rec.wait(t, 1)
	if len(recs) != 1 || recs[0].outcome != StreamIdle {
		t.Fatalf("recorded %+v, want one idle stream", recs)
	}
}

// TestTCPConnectionCap: past MaxConnsPerPort open connections, a new one
// is reset; once one closes, the next is served.
func TestTCPConnectionCap(t *testing.T) {
	rt, port := startTCP(t, func(o *Options) { o.MaxConnsPerPort = 2; o.MaxConnsPerClient = 2 })
	if err := rt.Apply(tcpConfig(port, "ns/db", tcpBackend{"a", 1, []string{echoBackend(t, "a")}})); err != nil {
		t.Fatal(err)
	}
	first, second := dialTCP(t, port), dialTCP(t, port)
	readPrefix(t, first, 2)
	readPrefix(t, second, 2)
	if !refusedAt(t, port) {
		t.Fatal("a third connection was served past a cap of 2")
	}
	first.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := dialTCP(t, port)
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		b := make([]byte, 2)
		if _, err := io.ReadFull(c, b); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection served after one of the two closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTCPWeightsPerRoute: each route spreads its own connections by its
// weights, whatever the connections of other routes in between: two
// routes weighted 1:1, whose connections alternate, each reach both of
// their backends equally.
func TestTCPWeightsPerRoute(t *testing.T) {
	rt, p1 := startTCP(t, nil)
	p2 := freePort(t)
	cfg := tcpConfig(p1, "ns/one", tcpBackend{"a", 1, []string{echoBackend(t, "a")}}, tcpBackend{"b", 1, []string{echoBackend(t, "b")}})
	other := tcpConfig(p2, "ns/two", tcpBackend{"c", 1, []string{echoBackend(t, "c")}}, tcpBackend{"d", 1, []string{echoBackend(t, "d")}})
	cfg.Ports = append(cfg.Ports, other.Ports...)
	for k, e := range other.Endpoints.All() {
		cfg.Endpoints = withEndpoints(cfg.Endpoints, k, e)
	}
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for range 100 {
		for _, port := range []int{p1, p2} {
			c := dialTCP(t, port)
			counts[readPrefix(t, c, 1)]++
			c.Close()
		}
	}
	for _, name := range []string{"a", "b", "c", "d"} {
		if counts[name] != 50 {
			t.Fatalf("connections per backend %v, want 50 each", counts)
		}
	}
}
