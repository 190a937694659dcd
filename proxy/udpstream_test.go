package proxy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
)

// udpBackend is a UDP server on loopback that answers each datagram with
// what answer returns (nothing for nil), from one goroutine.
func udpBackend(t testing.TB, answer func(p []byte, from netip.AddrPort) []byte) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if out := answer(buf[:n], from); out != nil {
				_, _ = c.WriteToUDPAddrPort(out, from)
			}
		}
	}()
	return c.LocalAddr().String()
}

// echoUDP answers every datagram with itself.
func echoUDP(p []byte, _ netip.AddrPort) []byte { return bytes.Clone(p) }

// namedUDP answers every datagram with name and the address the datagram
// came from (Portico's socket of the session).
func namedUDP(name string) func([]byte, netip.AddrPort) []byte {
	return func(_ []byte, from netip.AddrPort) []byte { return []byte(name + " " + from.String()) }
}

// udpConfig is one UDP port whose listener serves route name with
// backends (Service names, port 9000, each with its endpoints); name ""
// puts no route on the listener.
func udpConfig(port int, name string, backends ...tcpBackend) *config.Config {
	l := &config.Listener{Key: "Gateway/ns/gw/udp", Stream: config.StreamUDP}
	cfg := &config.Config{Ports: []*config.Port{udpPort(port, l)}}
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
	l.UDP = r
	return cfg
}

func udpPort(port int, l *config.Listener) *config.Port {
	return &config.Port{Number: int32(port), Protocol: config.UDP,
		Listeners: hostname.NewTable([]string{""}, []*config.Listener{l}), All: chunked.Of([]*config.Listener{l})}
}

// freeUDPPort is a UDP port number free on loopback.
func freeUDPPort(t testing.TB) int {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port
}

func startUDP(t *testing.T, mutate func(*Options)) (*Runtime, int) {
	t.Helper()
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	if mutate != nil {
		mutate(&opts)
	}
	rt := New(opts, zaptest.NewLogger(t))
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	return rt, freeUDPPort(t)
}

// dialUDP is a client socket connected to Portico's UDP port, from its
// own source port.
func dialUDP(t testing.TB, port int) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// udpExchange sends p and returns the first answer, "" after wait without
// one.
func udpExchange(t testing.TB, c *net.UDPConn, p []byte, wait time.Duration) []byte {
	t.Helper()
	if _, err := c.Write(p); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

type udpRecord struct {
	route, outcome       string
	upN, downN, upB, dnB int64
}

type udpRecorder struct {
	mu    sync.Mutex
	got   []udpRecord
	drops map[string]int
}

func (r *udpRecorder) ObserveUDPSession(route, outcome string, upN, downN, upB, downB int64, _ time.Duration) {
	r.mu.Lock()
	r.got = append(r.got, udpRecord{route, outcome, upN, downN, upB, downB})
	r.mu.Unlock()
}

func (r *udpRecorder) ObserveUDPDrop(route, reason string) {
	r.mu.Lock()
	if r.drops == nil {
		r.drops = map[string]int{}
	}
	r.drops[route+" "+reason]++
	r.mu.Unlock()
}

func (r *udpRecorder) wait(t *testing.T, n int) []udpRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		got := append([]udpRecord(nil), r.got...)
		r.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *udpRecorder) dropped(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drops[key]
}

func udpServerOf(t *testing.T, rt *Runtime, port int) *udpServer {
	t.Helper()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	u := rt.udp[config.PortKey{Number: int32(port), UDP: true}]
	if u == nil {
		t.Fatalf("UDP port %d is not bound", port)
	}
	return u
}

// dnsQuery encodes a query for name, type A, with id (RFC 1035 4.1).
func dnsQuery(id uint16, name string) []byte {
	q := binary.BigEndian.AppendUint16(nil, id)
	q = append(q, 0x01, 0x00) // RD
	q = binary.BigEndian.AppendUint16(q, 1)
	q = append(q, 0, 0, 0, 0, 0, 0)
	for _, label := range strings.Split(name, ".") {
		q = append(q, byte(len(label)))
		q = append(q, label...)
	}
	q = append(q, 0)
	return append(q, 0, 1, 0, 1) // type A, class IN
}

// dnsResponder answers an A query for any name with addr, and drops what
// is not a query of one question.
func dnsResponder(addr netip.Addr) func([]byte, netip.AddrPort) []byte {
	return func(q []byte, _ netip.AddrPort) []byte {
		if len(q) < 12 || q[2]&0x80 != 0 || binary.BigEndian.Uint16(q[4:]) != 1 {
			return nil
		}
		end := 12
		for end < len(q) && q[end] != 0 {
			end += int(q[end]) + 1
		}
		end += 5 // the root label, type and class
		if end > len(q) {
			return nil
		}
		a := append([]byte(nil), q[:end]...)
		a[2], a[3] = 0x81, 0x80                  // QR, RD, RA; NOERROR
		binary.BigEndian.PutUint16(a[6:], 1)     // one answer
		a = append(a, 0xc0, 12, 0, 1, 0, 1)      // name: pointer to the question; A, IN
		a = binary.BigEndian.AppendUint32(a, 60) // TTL
		a = append(a, 0, 4)
		ip := addr.As4()
		return append(a, ip[:]...)
	}
}

// TestUDPDNSThroughPortico: DNS queries over UDP reach a DNS server through
// a UDP listener and their answers come back to the client that asked,
// for clients asking at once from their own ports.
func TestUDPDNSThroughPortico(t *testing.T) {
	want := netip.MustParseAddr("192.0.2.53")
	dns := udpBackend(t, dnsResponder(want))
	rec := &udpRecorder{}
	rt, port := startUDP(t, func(o *Options) { o.UDP = rec; o.UDPIdleTimeout = 100 * time.Millisecond })
	if err := rt.Apply(udpConfig(port, "ns/dns", tcpBackend{"dns", 1, []string{dns}})); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			c := dialUDP(t, port)
			for j := range 5 {
				id := uint16(i<<8 | j)
				a := udpExchange(t, c, dnsQuery(id, fmt.Sprintf("host%d.example.test", i)), 5*time.Second)
				if len(a) < 16 || binary.BigEndian.Uint16(a) != id || a[3]&0x0f != 0 || binary.BigEndian.Uint16(a[6:]) != 1 {
					t.Errorf("client %d query %d: answer % x", i, j, a)
					return
				}
				if got, _ := netip.AddrFromSlice(a[len(a)-4:]); got != want {
					t.Errorf("client %d: A %s, want %s", i, got, want)
				}
			}
		})
	}
	wg.Wait()
	got := rec.wait(t, 8)
	if len(got) != 8 {
		t.Fatalf("%d sessions recorded, want 8 (one per client)", len(got))
	}
	for _, r := range got {
		if r.route != "ns/dns" || r.outcome != UDPIdle || r.upN != 5 || r.downN != 5 {
			t.Errorf("session %+v, want ns/dns idle with 5 datagrams each way", r)
		}
	}
}

// TestUDPLargeDatagrams: datagrams up to the largest UDP payload (65,507
// bytes) go through whole, both ways.
func TestUDPLargeDatagrams(t *testing.T) {
	echo := udpBackend(t, echoUDP)
	rt, port := startUDP(t, nil)
	if err := rt.Apply(udpConfig(port, "ns/echo", tcpBackend{"echo", 1, []string{echo}})); err != nil {
		t.Fatal(err)
	}
	c := dialUDP(t, port)
	_ = c.SetWriteBuffer(1 << 20)
	_ = c.SetReadBuffer(1 << 20)
	for _, size := range []int{1, 512, 1472, 9000, 32768, 65507} {
		p := bytes.Repeat([]byte{byte(size)}, size)
		p[0], p[size-1] = 'a', 'z'
		if got := udpExchange(t, c, p, 5*time.Second); !bytes.Equal(got, p) {
			t.Fatalf("%d bytes: got %d bytes back", size, len(got))
		}
	}
}

// TestUDPOrderKept: the datagrams of one session reach the backend, and
// its answers the client, in the order they were sent.
func TestUDPOrderKept(t *testing.T) {
	var mu sync.Mutex
	var seen []uint32
	backend := udpBackend(t, func(p []byte, _ netip.AddrPort) []byte {
		mu.Lock()
		seen = append(seen, binary.BigEndian.Uint32(p))
		mu.Unlock()
		return bytes.Clone(p)
	})
	rt, port := startUDP(t, nil)
	if err := rt.Apply(udpConfig(port, "ns/seq", tcpBackend{"seq", 1, []string{backend}})); err != nil {
		t.Fatal(err)
	}
	c := dialUDP(t, port)
	const n = 2000
	done := make(chan []uint32)
	go func() {
		var got []uint32
		buf := make([]byte, 64)
		for {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			k, err := c.Read(buf)
			if err != nil {
				done <- got
				return
			}
			got = append(got, binary.BigEndian.Uint32(buf[:k]))
		}
	}()
	for i := range n {
		if _, err := c.Write(binary.BigEndian.AppendUint32(nil, uint32(i))); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			time.Sleep(2 * time.Millisecond) // stay within the sockets' buffers
		}
	}
	back := <-done
	mu.Lock()
	defer mu.Unlock()
	for name, got := range map[string][]uint32{"backend": seen, "client": back} {
		// UDP may drop under load; what arrives must be in order.
		if len(got) < n/2 {
			t.Errorf("%s received %d of %d datagrams", name, len(got), n)
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("%s: datagram %d after %d", name, got[i], got[i-1])
			}
		}
	}
}

// TestUDPWeights: over 10,000 sessions on real sockets each backend gets
// its weight's share, within 5 points; the choice is per session: every
// datagram of a session goes to the same backend.
func TestUDPWeights(t *testing.T) {
	a, b, c := udpBackend(t, namedUDP("a")), udpBackend(t, namedUDP("b")), udpBackend(t, namedUDP("c"))
	rt, port := startUDP(t, func(o *Options) { o.MaxUDPSessionsPerPort = 256 })
	if err := rt.Apply(udpConfig(port, "ns/w", tcpBackend{"a", 1, []string{a}}, tcpBackend{"b", 3, []string{b}}, tcpBackend{"c", 6, []string{c}})); err != nil {
		t.Fatal(err)
	}
	const sessions = 10000
	counts := map[string]int{}
	for i := range sessions {
		conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		first := string(udpExchange(t, conn, []byte("1"), 5*time.Second))
		if i%100 == 0 {
			if again := string(udpExchange(t, conn, []byte("2"), 5*time.Second)); again != first {
				t.Fatalf("session %d: second datagram answered by %q, first by %q", i, again, first)
			}
		}
		conn.Close()
		name, _, _ := strings.Cut(first, " ")
		counts[name]++
	}
	for name, weight := range map[string]int{"a": 10, "b": 30, "c": 60} {
		share := counts[name] * 100 / sessions
		if share < weight-5 || share > weight+5 {
			t.Errorf("backend %s: %d%% of sessions, want %d%% ± 5 (%v)", name, share, weight, counts)
		}
	}
	if n := udpServerOf(t, rt, port).sessionCount(); n > 256 {
		t.Errorf("%d sessions open, cap 256", n)
	}
}

// TestUDPBackendNeverAnswers: a session whose backend never answers ends
// at the idle timeout, leaves the table and is logged once.
func TestUDPBackendNeverAnswers(t *testing.T) {
	silent := udpBackend(t, func([]byte, netip.AddrPort) []byte { return nil })
	rec := &udpRecorder{}
	core, logs := observer.New(zap.InfoLevel)
	rt, port := startUDP(t, func(o *Options) {
		o.UDP, o.AccessLog, o.UDPIdleTimeout = rec, zap.New(core), 150*time.Millisecond
	})
	if err := rt.Apply(udpConfig(port, "ns/silent", tcpBackend{"silent", 1, []string{silent}})); err != nil {
		t.Fatal(err)
	}
	c := dialUDP(t, port)
	if a := udpExchange(t, c, []byte("hello?"), 50*time.Millisecond); a != nil {
		t.Fatalf("answer %q from a silent backend", a)
	}
	got := rec.wait(t, 1)
	if len(got) != 1 || got[0] != (udpRecord{"ns/silent", UDPIdle, 1, 0, 6, 0}) {
		t.Fatalf("sessions %+v, want one idle with 1 datagram up", got)
	}
	if n := udpServerOf(t, rt, port).sessionCount(); n != 0 {
		t.Errorf("%d sessions left after expiry", n)
	}
	entries := logs.FilterMessage("stream").AllUntimed()
	if len(entries) != 1 {
		t.Fatalf("%d access log entries, want 1", len(entries))
	}
	fields := entries[0].ContextMap()
	if fields["mode"] != StreamUDP || fields["route"] != "ns/silent" || fields["outcome"] != UDPIdle || fields["datagrams_up"] != int64(1) {
		t.Errorf("access log entry %v", fields)
	}
}

// TestUDPBackendRefuses: a backend endpoint that does not listen refuses
// the session's datagram (ICMP port unreachable): the session ends at
// once rather than at the idle timeout.
func TestUDPBackendRefuses(t *testing.T) {
	closed := fmt.Sprintf("127.0.0.1:%d", freeUDPPort(t))
	rec := &udpRecorder{}
	rt, port := startUDP(t, func(o *Options) { o.UDP = rec; o.UDPIdleTimeout = time.Hour })
	if err := rt.Apply(udpConfig(port, "ns/gone", tcpBackend{"gone", 1, []string{closed}})); err != nil {
		t.Fatal(err)
	}
	c := dialUDP(t, port)
	_, _ = c.Write([]byte("anyone?"))
	if got := rec.wait(t, 1); len(got) != 1 || got[0].outcome != UDPRefused {
		t.Fatalf("sessions %+v, want one refused", got)
	}
}

// TestUDPFloodOfSourcePorts attacks a UDP port from thousands of source
// ports: the table never holds more than its cap, a session in use
// (more than one datagram) survives the flood on the same backend socket,
// and a new client is still served once the flood is over. When every
// session is in use, a new client is dropped rather than evicting one.
func TestUDPFloodOfSourcePorts(t *testing.T) {
	backend := udpBackend(t, namedUDP("b"))
	rec := &udpRecorder{}
	const limit = 64
	rt, port := startUDP(t, func(o *Options) { o.UDP = rec; o.MaxUDPSessionsPerPort = limit })
	if err := rt.Apply(udpConfig(port, "ns/f", tcpBackend{"b", 1, []string{backend}})); err != nil {
		t.Fatal(err)
	}
	u := udpServerOf(t, rt, port)
	inUse := dialUDP(t, port)
	before := string(udpExchange(t, inUse, []byte("1"), 5*time.Second))
	if again := string(udpExchange(t, inUse, []byte("2"), 5*time.Second)); again != before || before == "" {
		t.Fatalf("answers %q then %q", before, again)
	}
	// The flood: each source sends one datagram and goes.
	for i := range 3000 {
		c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("flood"))
		c.Close()
		if i%100 == 0 {
			time.Sleep(time.Millisecond)
			if n := u.sessionCount(); n > limit {
				t.Fatalf("%d sessions after %d flood sources, cap %d", n, i, limit)
			}
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := u.sessionCount(); n > limit {
		t.Fatalf("%d sessions after the flood, cap %d", n, limit)
	}
	if after := string(udpExchange(t, inUse, []byte("3"), 5*time.Second)); after != before {
		t.Fatalf("the session in use answered %q after the flood, %q before: it was not kept", after, before)
	}
	if a := udpExchange(t, dialUDP(t, port), []byte("new"), 5*time.Second); a == nil {
		t.Fatal("a new client after the flood got no answer")
	}
	// The kernel drops some of the flood before Portico reads it (more so
	// on a busy machine): what it read went through the table.
	evicted := 0
	for _, r := range rec.wait(t, limit) {
		if r.outcome == UDPEvicted {
			evicted++
		}
	}
	if evicted < limit {
		t.Errorf("%d sessions evicted by a flood of 3000 sources on a table of %d", evicted, limit)
	}

	// Fill the table with sessions in use, each evicting one of the
	// flood's (a few of which are in use too: a closed source's port may
	// come again), until a new client is dropped.
	dropped := false
	for range 2 * limit {
		c := dialUDP(t, port)
		if udpExchange(t, c, []byte("1"), 300*time.Millisecond) == nil {
			dropped = true
			break
		}
		udpExchange(t, c, []byte("2"), 5*time.Second)
	}
	if !dropped {
		t.Fatalf("%d new clients served past a table of %d", 2*limit, limit)
	}
	if n := u.sessionCount(); n != limit {
		t.Errorf("%d sessions in a full table, want %d", n, limit)
	}
	if rec.dropped("ns/f "+UDPDropFull) == 0 {
		t.Error("no datagram counted as dropped for a full table")
	}
	if after := string(udpExchange(t, inUse, []byte("4"), 5*time.Second)); after != before {
		t.Fatalf("the first session answered %q, want %q", after, before)
	}
}

// TestUDPBesideTCP: a UDP and a TCP port of the same number are bound and
// served at once, and removing one leaves the other.
func TestUDPBesideTCP(t *testing.T) {
	udpEcho := udpBackend(t, echoUDP)
	tcpEcho := echoBackend(t, "tcp")
	rt, port := startTCP(t, nil)
	cfg := tcpConfig(port, "ns/t", tcpBackend{"t", 1, []string{tcpEcho}})
	both := udpConfig(port, "ns/u", tcpBackend{"u", 1, []string{udpEcho}})
	both.Ports = append(both.Ports, cfg.Ports...)
	both.Endpoints = withEndpoints(both.Endpoints, cfg.Ports[0].All.At(0).TCP.Backends[0].Key, config.NewEndpoints(tcpEcho))
	if err := rt.Apply(both); err != nil {
		t.Fatal(err)
	}
	if got := string(udpExchange(t, dialUDP(t, port), []byte("u"), 5*time.Second)); got != "u" {
		t.Fatalf("UDP answer %q", got)
	}
	if got := readPrefix(t, dialTCP(t, port), 4); got != "tcp:" {
		t.Fatalf("TCP greeting %q", got)
	}
	if rt.PortAddr(config.PortKey{Number: int32(port), UDP: true}) == nil || rt.PortAddr(config.PortKey{Number: int32(port)}) == nil {
		t.Fatal("PortAddr does not tell both ports")
	}
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	if got := readPrefix(t, dialTCP(t, port), 4); got != "tcp:" {
		t.Fatalf("TCP greeting after the UDP port went: %q", got)
	}
	if rt.PortAddr(config.PortKey{Number: int32(port), UDP: true}) != nil {
		t.Fatal("the removed UDP port still reports an address")
	}
}

// TestUDPReload: a configuration that keeps a listener's route keeps its
// sessions (same backend socket); one that changes the route ends them
// after the drain timeout, and the client's next datagram opens a session
// of the new route; a port removed and added back within the drain keeps
// its socket and sessions.
func TestUDPReload(t *testing.T) {
	one, two := udpBackend(t, namedUDP("one")), udpBackend(t, namedUDP("two"))
	rec := &udpRecorder{}
	rt, port := startUDP(t, func(o *Options) { o.UDP = rec; o.DrainTimeout = 300 * time.Millisecond })
	apply := func(cfg *config.Config) {
		t.Helper()
		if err := rt.Apply(cfg); err != nil {
			t.Fatal(err)
		}
	}
	apply(udpConfig(port, "ns/r1", tcpBackend{"one", 1, []string{one}}))
	c := dialUDP(t, port)
	first := string(udpExchange(t, c, []byte("x"), 5*time.Second))
	if !strings.HasPrefix(first, "one ") {
		t.Fatalf("answer %q", first)
	}
	// The same route again, and the port removed then back: nothing ends.
	apply(udpConfig(port, "ns/r1", tcpBackend{"one", 1, []string{one}}))
	apply(&config.Config{})
	apply(udpConfig(port, "ns/r1", tcpBackend{"one", 1, []string{one}}))
	if got := string(udpExchange(t, c, []byte("x"), 5*time.Second)); got != first {
		t.Fatalf("after reloads: %q, want the same session's %q", got, first)
	}
	// Another route: the session drains, then ends.
	apply(udpConfig(port, "ns/r2", tcpBackend{"two", 1, []string{two}}))
	if got := string(udpExchange(t, c, []byte("x"), 5*time.Second)); got != first {
		t.Fatalf("while draining: %q, want %q", got, first)
	}
	if got := rec.wait(t, 1); len(got) != 1 || got[0].route != "ns/r1" || got[0].outcome != UDPDrained {
		t.Fatalf("sessions %+v, want ns/r1 drained", got)
	}
	if got := string(udpExchange(t, c, []byte("x"), 5*time.Second)); !strings.HasPrefix(got, "two ") {
		t.Fatalf("after the drain: %q, want backend two", got)
	}
	// The port removed for good: closed after the drain, then free to bind.
	apply(&config.Config{})
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		if err == nil {
			l.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the removed port is still bound: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUDPNoRoute: a UDP listener without a route drops datagrams and
// counts them.
func TestUDPNoRoute(t *testing.T) {
	rec := &udpRecorder{}
	rt, port := startUDP(t, func(o *Options) { o.UDP = rec })
	if err := rt.Apply(udpConfig(port, "")); err != nil {
		t.Fatal(err)
	}
	if a := udpExchange(t, dialUDP(t, port), []byte("x"), 100*time.Millisecond); a != nil {
		t.Fatalf("answer %q without a route", a)
	}
	if rec.dropped(" "+UDPDropNoRoute) != 1 {
		t.Errorf("drops %v", rec.drops)
	}
}
