package proxy

// The reliability tests of the limits on connections, slow clients,
// HTTP/2 abuse and draining: each replays an attack on a port over real
// sockets, with the limits scaled down through Options so that it takes
// seconds, and asserts bounds on what it costs Portico: the requests that
// reach the backend, the process's open file descriptors, its resident
// memory and the time until the attacking connection is closed.
// hack/reliability.sh runs them with the rest of the TestReliability...
// tests.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/sni"
)

// relRuntime is a Runtime on loopback with opts changed by set.
func relRuntime(t *testing.T, set func(*Options)) *Runtime {
	t.Helper()
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 2 * time.Second
	if set != nil {
		set(&opts)
	}
	rt := New(opts, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	})
	return rt
}

// relBackend serves h on loopback and counts the requests that reach it.
func relBackend(t *testing.T, h http.HandlerFunc) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), &n
}

// relHTTPPort applies a plain HTTP port routing everything to backend.
func relHTTPPort(t *testing.T, rt *Runtime, backend string) string {
	t.Helper()
	p := freePort(t)
	if err := rt.Apply(httpPortConfig(t, p, "svc", backend)); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// relHostname is the name the HTTPS port of relHTTPSPort serves.
const relHostname = "app.example.com"

// relHTTPSPort applies an HTTPS port serving relHostname, routing
// everything to backend, and returns its address and a client config that
// trusts it.
func relHTTPSPort(t *testing.T, rt *Runtime, backend string) (string, *tls.Config) {
	t.Helper()
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(snitest.ECDSA, 2, relHostname)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := sni.ParseKeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	l := &config.Listener{Key: "Gateway/ns/gw/https", Hostname: relHostname, Routes: routeTable(t, "svc")}
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", backend)
	cfg.Ports[0].Protocol = config.HTTPS
	cfg.Ports[0].All = chunked.Of([]*config.Listener{l})
	cfg.Ports[0].Listeners = hostname.NewTable([]string{relHostname}, []*config.Listener{l})
	cfg.Ports[0].SNI = sni.NewTable([]*sni.Entry{{Hostname: relHostname, Certificates: []*tls.Certificate{cert}, Value: l}})
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p), &tls.Config{ServerName: relHostname, RootCAs: ca.Pool}
}

// relDial connects to addr, for as long as the test runs.
func relDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openFDs counts the file descriptors of the test process.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// rssBytes is the resident memory of the test process.
func rssBytes(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// resources is what an attack may cost the process: it is taken before
// the attack and checked after.
type resources struct {
	fds int
	rss int64
}

func takeResources(t *testing.T) resources { return resources{fds: openFDs(t), rss: rssBytes(t)} }

// check asserts that, within a few seconds, the process holds at most
// extraFDs more descriptors than before and grew by at most maxRSS.
func (r resources) check(t *testing.T, extraFDs int, maxRSS int64) {
	t.Helper()
	var fds int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fds = openFDs(t); fds <= r.fds+extraFDs || time.Now().After(deadline) {
			break
		}
	}
	if fds > r.fds+extraFDs {
		t.Errorf("file descriptors: %d after the attack, %d before (at most %d more allowed)", fds, r.fds, extraFDs)
	}
	if grown := rssBytes(t) - r.rss; grown > maxRSS {
		t.Errorf("resident memory grew by %d MiB (at most %d MiB allowed)", grown>>20, maxRSS>>20)
	}
}

// closedWithin reads c until it is closed by the other side and fails
// the test if that takes longer than limit. It returns what was read.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) string {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %d bytes)", limit, len(b))
	}
	return string(b)
}

// waitFor polls cond for up to limit and reports whether it held.
func waitFor(limit time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(limit); ; time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// pacedOptions are limits scaled down so that the pacing tests take a
// second or two: 500 ms idle, 64 KiB/s over 500 ms windows.
func pacedOptions(o *Options) {
	o.ClientIdleTimeout = 500 * time.Millisecond
	o.ClientMinRate = 64 << 10
	o.ClientRateWindow = 500 * time.Millisecond
}

// uncappedInformational is pacedOptions without the cap on relayed 1xx
// heads, for tests of how the heads themselves are paced.
func uncappedInformational(o *Options) {
	pacedOptions(o)
	o.MaxInformational = -1
}

// bodyReader is a backend that reads the whole request body and reports
// how that ended.
func bodyReader(t *testing.T) (string, *atomic.Int64, chan error) {
	ended := make(chan error, 16)
	addr, n := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		ended <- err
		if err == nil {
			io.WriteString(w, "got it")
		}
	})
	return addr, n, ended
}

// TestReliabilitySlowBody: a request body that trickles in (slowhttptest
// -B, R-U-Dead-Yet) or stops is cut by pace, not held forever, and the
// backend's request is aborted with it.
func TestReliabilitySlowBody(t *testing.T) {
	cases := []struct {
		name string
		head string
		drip string // sent one byte every 100 ms, far below 1 KiB/s
	}{
		{"trickle with Content-Length", "Content-Length: 100000\r\n", strings.Repeat("x", 1000)},
		{"stalled with Content-Length", "Content-Length: 100000\r\n", ""},
		{"stalled chunked", "Transfer-Encoding: chunked\r\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt := relRuntime(t, pacedOptions)
			backend, _, ended := bodyReader(t)
			addr := relHTTPPort(t, rt, backend)
			before := takeResources(t)
			c := relDial(t, addr)
			fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: a\r\n%s\r\n", tc.head)
			if strings.Contains(tc.head, "chunked") {
				io.WriteString(c, "10\r\n0123456789abcdef\r\n") // one chunk, then nothing
			}
			go func() {
				for i := range len(tc.drip) {
					if _, err := c.Write([]byte{tc.drip[i]}); err != nil {
						return
					}
					time.Sleep(100 * time.Millisecond)
				}
			}()
			// Window or idle timeout (500 ms) plus the time the backend
			// request takes to fail, with room for a loaded machine.
			start := time.Now()
			answer := closedWithin(t, c, 3*time.Second)
			t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
			if !strings.HasPrefix(answer, "HTTP/1.1 408") {
				t.Errorf("answer %q, want 408", answer)
			}
			select {
			case err := <-ended:
				if err == nil {
					t.Error("the backend read the whole body")
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the backend request was not aborted")
			}
			c.Close()
			before.check(t, 2, 32<<20)
		})
	}
}

// TestReliabilitySlowRead: a client that never reads the answer to a large
// download (slowhttptest -X) is cut, and the backend's response is
// abandoned so its connection is freed.
func TestReliabilitySlowRead(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "h2c"} {
		t.Run(proto, func(t *testing.T) {
			rt := relRuntime(t, pacedOptions)
			// Over HTTP/2, several streams of one connection, each with a
			// backend request of its own.
			streams := 1
			if proto == "h2c" {
				streams = 20
			}
			ended := make(chan error, streams)
			backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
				chunk := make([]byte, 64<<10)
				for {
					if _, err := w.Write(chunk); err != nil {
						ended <- err
						return
					}
				}
			})
			addr := relHTTPPort(t, rt, backend)
			before := takeResources(t)
			c := relDial(t, addr)
			_ = c.(*net.TCPConn).SetReadBuffer(4096)
			if proto == "h2c" {
				h2Start(t, c, streams)
			} else {
				io.WriteString(c, "GET /download HTTP/1.1\r\nHost: a\r\n\r\n")
			}
			start := time.Now()
			for i := range streams {
				select {
				case <-ended:
				case <-time.After(5*time.Second - time.Since(start)):
					t.Fatalf("the backend is still sending %d of %d responses after 5s to a client that reads nothing", streams-i, streams)
				}
			}
			t.Logf("%d backend responses abandoned after %v", streams, time.Since(start).Round(time.Millisecond))
			if proto == "HTTP/1.1" {
				// Reset, not left to trickle out what the kernel buffers.
				closedWithin(t, c, 3*time.Second)
			}
			c.Close()
			before.check(t, 2, 64<<20)
		})
	}
}

// TestReliabilitySlowReadInformational: a backend that sends 1xx heads
// without end to a client that reads nothing fills the client's socket
// with heads alone. Each is a write bounded like any other: the request is
// cut and the backend's connection closed, not left blocked on the client,
// and not left relaying heads into a cut connection either, for a request
// without a body (the direct path) and one with a body (ReverseProxy).
// The cap on relayed 1xx heads is off: this is the pacer's test.
func TestReliabilitySlowReadInformational(t *testing.T) {
	rt := relRuntime(t, uncappedInformational)
	ended := make(chan struct{}, 1)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</"+strings.Repeat("x", 4000)+">; rel=preload")
		for r.Context().Err() == nil {
			w.WriteHeader(http.StatusEarlyHints)
		}
		ended <- struct{}{}
	})
	addr := relHTTPPort(t, rt, backend)
	for _, req := range []string{
		"GET /hints HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /hints HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
	} {
		c := relDial(t, addr)
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		io.WriteString(c, req)
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("%.20q: the backend is still sending 1xx heads after 5s to a client that reads nothing", req)
		}
		closedWithin(t, c, 3*time.Second)
	}
}

// TestReliabilitySlowReadInformationalReading: 1xx heads count as bytes
// moved. A client that reads at 32 times the minimum rate while a
// backend sends large 103 (Early Hints) heads before its answer keeps pace
// and gets the answer: the time its socket holds up the heads is not taken
// for time in which nothing moved. The cap on relayed 1xx heads is off.
func TestReliabilitySlowReadInformationalReading(t *testing.T) {
	rt := relRuntime(t, uncappedInformational)
	const heads, link = 384, 16 << 10
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</"+strings.Repeat("x", link)+">; rel=preload")
		for range heads {
			w.WriteHeader(http.StatusEarlyHints)
		}
		w.Header().Del("Link")
		io.WriteString(w, "done")
	})
	addr := relHTTPPort(t, rt, backend)
	c := relDial(t, addr)
	_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
	io.WriteString(c, "GET /hints HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	// Read by the clock at 2 MiB/s: the 6 MiB of heads, more than the
	// kernel buffers, take 3 s, six windows of the 64 KiB/s minimum rate.
	const rate = 2 << 20
	var got bytes.Buffer
	buf := make([]byte, 4<<10)
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(15 * time.Second))
	for read := 0; ; {
		if ahead := time.Duration(float64(read) / rate * float64(time.Second)); ahead > time.Since(start) {
			time.Sleep(ahead - time.Since(start))
		}
		n, err := c.Read(buf)
		got.Write(buf[:n])
		read += n
		if err != nil {
			break
		}
	}
	s := got.String()
	if n := strings.Count(s, "HTTP/1.1 103 Early Hints\r\n"); n != heads || !strings.Contains(s, "HTTP/1.1 200 OK\r\n") || !strings.HasSuffix(s, "done") {
		t.Fatalf("a client reading at 32x the minimum rate got %d of %d heads and %d bytes in all, ending %q, after %v; want every head and the answer",
			n, heads, len(s), s[max(len(s)-60, 0):], time.Since(start).Round(time.Millisecond))
	}
	t.Logf("%d bytes in %v", len(s), time.Since(start).Round(time.Millisecond))
}

// TestReliabilitySlowReadKeptAlive: the pacer of an HTTP/1 connection
// serves its requests one after another. A client that sends a few quick
// requests and then stops reading a large answer on the same connection is
// still cut; a client that waits longer than the idle timeout between two
// requests is not cut by what the first one left behind.
func TestReliabilitySlowReadKeptAlive(t *testing.T) {
	rt := relRuntime(t, pacedOptions)
	ended := make(chan error, 1)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/download" {
			io.WriteString(w, "small")
			return
		}
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				ended <- err
				return
			}
		}
	})
	addr := relHTTPPort(t, rt, backend)
	c := relDial(t, addr)
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	br := bufio.NewReader(c)
	for i := range 3 {
		if i == 2 {
			// Past the idle timeout (500 ms) with nothing in progress.
			time.Sleep(800 * time.Millisecond)
		}
		io.WriteString(c, "GET /small HTTP/1.1\r\nHost: a\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(b) != "small" {
			t.Fatalf("request %d: status %d, body %q, %v", i+1, resp.StatusCode, b, err)
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	io.WriteString(c, "GET /download HTTP/1.1\r\nHost: a\r\n\r\n")
	start := time.Now()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend is still sending after 5s to a client that reads nothing")
	}
	t.Logf("backend response abandoned after %v", time.Since(start).Round(time.Millisecond))
	closedWithin(t, c, 3*time.Second)
}

// TestReliabilitySlowButProgressing: what moves is never cut, however long
// it lasts: an event stream whose backend pauses longer than the idle
// timeout, and an upload above the minimum rate lasting several windows.
func TestReliabilitySlowButProgressing(t *testing.T) {
	rt := relRuntime(t, pacedOptions)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			fmt.Fprintf(w, "%d", n)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 4 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			http.NewResponseController(w).Flush() //nolint:errcheck // test backend
			time.Sleep(700 * time.Millisecond)    // longer than the idle timeout
		}
	})
	addr := relHTTPPort(t, rt, backend)

	t.Run("event stream", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get("http://" + addr + "/events")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || strings.Count(string(b), "data: ") != 4 {
			t.Fatalf("stream cut: %q, %v", b, err)
		}
	})
	t.Run("keep-alive connection idle longer than the idle timeout", func(t *testing.T) {
		c := relDial(t, addr)
		br := bufio.NewReader(c)
		for i := range 2 {
			if i > 0 {
				time.Sleep(800 * time.Millisecond)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nab")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("request %d: %d", i, resp.StatusCode)
			}
		}
	})
	t.Run("upload at twice the minimum rate", func(t *testing.T) {
		const size = 256 << 10 // 2 s at 128 KiB/s: four windows
		c := relDial(t, addr)
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", size)
		// Paced by the clock, not by counting sleeps: on a busy machine a
		// sleep overshoots, and counted sleeps would fall below the minimum
		// rate the test claims to stay above.
		const rate = 256 << 10 // bytes per second
		chunk := make([]byte, 8<<10)
		for sent, start := 0, time.Now(); sent < size; time.Sleep(time.Second / 16) {
			due := min(int(time.Since(start).Seconds()*rate)+len(chunk), size)
			for sent < due {
				n, err := c.Write(chunk[:min(len(chunk), due-sent)])
				if err != nil {
					t.Fatalf("upload cut after %d bytes: %v", sent+n, err)
				}
				sent += n
			}
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(b) != strconv.Itoa(size) {
			t.Errorf("upload: %d %q", resp.StatusCode, b)
		}
	})
}

// TestReliabilityConnectionCap: at the cap of a port, a new connection is
// reset at once, not queued; the connections already open go on working,
// and a place freed is taken again.
func TestReliabilityConnectionCap(t *testing.T) {
	const limit = 4
	rt := relRuntime(t, func(o *Options) { o.MaxConnsPerPort = limit })
	backend, hits := relBackend(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	addr := relHTTPPort(t, rt, backend)
	get := func(c net.Conn, br *bufio.Reader) error {
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	type conn struct {
		net.Conn
		br *bufio.Reader
	}
	var open []conn
	for range limit {
		c := relDial(t, addr)
		open = append(open, conn{c, bufio.NewReader(c)})
		if err := get(c, open[len(open)-1].br); err != nil {
			t.Fatalf("connection under the cap: %v", err)
		}
	}
	before := hits.Load()
	start := time.Now()
	for range 20 {
		extra, err := net.Dial("tcp", addr)
		if err != nil {
			continue // refused outright is fine too
		}
		if err := get(extra, bufio.NewReader(extra)); err == nil {
			t.Fatal("a connection over the cap was served")
		}
		extra.Close()
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("20 connections over the cap took %v to be turned away", d)
	}
	if hits.Load() != before {
		t.Errorf("%d requests over the cap reached the backend", hits.Load()-before)
	}
	for i, c := range open {
		if err := get(c, c.br); err != nil {
			t.Errorf("connection %d under the cap, after the refusals: %v", i, err)
		}
	}
	open[0].Close()
	if !waitFor(3*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		return get(c, bufio.NewReader(c)) == nil
	}) {
		t.Error("a place freed under the cap was not taken again")
	}
}

// h2Client speaks HTTP/2 frame by frame, as an attacker would.
type h2Client struct {
	c      net.Conn
	fr     *http2.Framer
	scheme string
	mu     sync.Mutex // serializes writes
	hbuf   bytes.Buffer
	enc    *hpack.Encoder
}

// newH2Client sends the preface and SETTINGS on c.
func newH2Client(t *testing.T, c net.Conn, scheme string, settings ...http2.Setting) *h2Client {
	t.Helper()
	h := &h2Client{c: c, fr: http2.NewFramer(c, c), scheme: scheme}
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return h
}

// get opens stream id with a GET of path.
func (h *h2Client) get(id uint32, path string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hbuf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", h.scheme}, {":authority", relHostname}, {":path", path}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) //nolint:errcheck // writes to a buffer
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndStream: true, EndHeaders: true})
}

func (h *h2Client) write(f func(*http2.Framer) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f(h.fr)
}

// h2Outcome is how the server ended an HTTP/2 connection.
type h2Outcome struct {
	goAway *http2.GoAwayFrame // nil: none received
	closed time.Time          // when reading failed
}

// readUntilClosed reads frames (acknowledging SETTINGS) until the
// connection fails, and reports the GOAWAY it saw.
func (h *h2Client) readUntilClosed() <-chan h2Outcome {
	out := make(chan h2Outcome, 1)
	go func() {
		var o h2Outcome
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				o.closed = time.Now()
				out <- o
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					h.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() }) //nolint:errcheck // the server may be gone
				}
			case *http2.GoAwayFrame:
				if o.goAway == nil {
					o.goAway = f
				}
			}
		}
	}()
	return out
}

// h2Start opens a cleartext HTTP/2 connection on c with n GETs of a large
// download, whose answers are never read: the client's windows stay shut.
func h2Start(t *testing.T, c net.Conn, n int) {
	t.Helper()
	h := newH2Client(t, c, "http")
	for i := range n {
		if err := h.get(uint32(2*i+1), "/download"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReliabilityH2RapidReset: paced HEADERS+RST_STREAM pairs (50 every
// 5 ms, as in CVE-2023-44487) end with GOAWAY(ENHANCE_YOUR_CALM) and a
// closed connection, over TLS and cleartext, and only a bounded number of
// the requests reach the backend.
func TestReliabilityH2RapidReset(t *testing.T) {
	const maxGlitches = 100
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			rt := relRuntime(t, func(o *Options) { o.H2MaxGlitches = maxGlitches })
			backend, hits := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
				select { // some work, so a reset arrives before the answer
				case <-time.After(50 * time.Millisecond):
				case <-r.Context().Done():
				}
			})
			before := takeResources(t)
			var c net.Conn
			var err error
			if scheme == "http" {
				c, err = net.Dial("tcp", relHTTPPort(t, rt, backend))
			} else {
				addr, cfg := relHTTPSPort(t, rt, backend)
				cfg.NextProtos = []string{"h2"}
				c, err = tls.Dial("tcp", addr, cfg)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			h := newH2Client(t, c, scheme)
			outcome := h.readUntilClosed()
			start := time.Now()
			id, sent := uint32(1), 0
			var o h2Outcome
		attack:
			for time.Since(start) < 5*time.Second {
				for range 50 {
					if h.get(id, "/") != nil || h.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(id, http2.ErrCodeCancel) }) != nil {
						break
					}
					id += 2
					sent++
				}
				select {
				case o = <-outcome:
					break attack
				case <-time.After(5 * time.Millisecond):
				}
			}
			if o.closed.IsZero() {
				select {
				case o = <-outcome:
				case <-time.After(3 * time.Second):
					t.Fatalf("connection still open after %d reset streams", sent)
				}
			}
			t.Logf("%d streams sent and reset, %d reached the backend, closed after %v", sent, hits.Load(), o.closed.Sub(start).Round(time.Millisecond))
			if o.goAway == nil || o.goAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %+v, want ENHANCE_YOUR_CALM", o.goAway)
			}
			// The requests started before the limit, and those the
			// server read in the same chunk as the one that passed it.
			if n := hits.Load(); n > maxGlitches+20 {
				t.Errorf("%d requests reached the backend, want at most %d", n, maxGlitches+20)
			}
			if d := o.closed.Sub(start); d > 3*time.Second {
				t.Errorf("closed after %v", d)
			}
			c.Close()
			before.check(t, 4, 64<<20)
		})
	}
}

// TestReliabilityH2ControlFlood: a connection that sends nothing but
// PINGs, SETTINGS or empty DATA frames gets GOAWAY(ENHANCE_YOUR_CALM).
func TestReliabilityH2ControlFlood(t *testing.T) {
	floods := map[string]func(*http2.Framer) error{
		"PING":     func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) },
		"SETTINGS": func(fr *http2.Framer) error { return fr.WriteSettings() },
		"PRIORITY": func(fr *http2.Framer) error {
			return fr.WritePriority(3, http2.PriorityParam{StreamDep: 1, Weight: 1})
		},
		"WINDOW_UPDATE": func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1) },
	}
	rt := relRuntime(t, func(o *Options) { o.H2MaxGlitches = 100 })
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {})
	addr := relHTTPPort(t, rt, backend)
	for name, flood := range floods {
		t.Run(name, func(t *testing.T) {
			c := relDial(t, addr)
			h := newH2Client(t, c, "http")
			outcome := h.readUntilClosed()
			var o h2Outcome
		flood:
			for range 1000 {
				for range 10 {
					if h.write(flood) != nil {
						break
					}
				}
				select {
				case o = <-outcome:
					break flood
				case <-time.After(time.Millisecond):
				}
			}
			if o.closed.IsZero() {
				select {
				case o = <-outcome:
				case <-time.After(3 * time.Second):
					t.Fatal("connection still open after 10,000 frames")
				}
			}
			if o.goAway == nil || o.goAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %+v, want ENHANCE_YOUR_CALM", o.goAway)
			}
		})
	}
}

// TestReliabilityWebSocketDrains: an upgraded connection open when the
// runtime shuts down keeps working until the drain deadline, is closed
// then (and its backend connection with it), and a shutdown does not wait
// longer than the upgraded connections last.
func TestReliabilityWebSocketDrains(t *testing.T) {
	backendClosed := make(chan struct{}, 4)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "upgrade only", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				backendClosed <- struct{}{}
				return
			}
			io.WriteString(c, line)
		}
	})
	open := func(t *testing.T, addr string) (net.Conn, func(string) error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		br := bufio.NewReader(c)
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %v %v", resp, err)
		}
		echo := func(s string) error {
			_ = c.SetDeadline(time.Now().Add(time.Second))
			if _, err := io.WriteString(c, s+"\n"); err != nil {
				return err
			}
			line, err := br.ReadString('\n')
			if err == nil && line != s+"\n" {
				err = fmt.Errorf("echo %q, want %q", line, s)
			}
			return err
		}
		if err := echo("hello"); err != nil {
			t.Fatal(err)
		}
		return c, echo
	}
	close := func(rt *Runtime, d time.Duration) <-chan time.Duration {
		done := make(chan time.Duration, 1)
		start := time.Now()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			_ = rt.Close(ctx)
			done <- time.Since(start)
		}()
		return done
	}

	t.Run("cut at the deadline", func(t *testing.T) {
		rt := relRuntime(t, nil)
		c, echo := open(t, relHTTPPort(t, rt, backend))
		closed := close(rt, 1500*time.Millisecond)
		time.Sleep(800 * time.Millisecond)
		if err := echo("still there"); err != nil {
			t.Fatalf("WebSocket cut %v into a 1.5s drain: %v", 800*time.Millisecond, err)
		}
		select {
		case d := <-closed:
			t.Fatalf("shutdown returned after %v with a WebSocket open", d)
		default:
		}
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("WebSocket not closed at the deadline: %v", err)
		}
		select {
		case d := <-closed:
			// The drain's last tenth is kept for closing: within it.
			if d < 1300*time.Millisecond || d > 1600*time.Millisecond {
				t.Errorf("shutdown took %v, want about the 1.5s drain, never more", d)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("shutdown did not return")
		}
		select {
		case <-backendClosed:
		case <-time.After(2 * time.Second):
			t.Error("the backend's side of the WebSocket stayed open")
		}
	})
	t.Run("done before the deadline", func(t *testing.T) {
		rt := relRuntime(t, nil)
		c, _ := open(t, relHTTPPort(t, rt, backend))
		closed := close(rt, 5*time.Second)
		time.Sleep(300 * time.Millisecond)
		c.Close()
		select {
		case d := <-closed:
			if d > 2*time.Second {
				t.Errorf("shutdown took %v after the last WebSocket closed at 300ms", d)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("shutdown still waiting after the WebSocket closed")
		}
	})
}

// pathRecorder is a backend that remembers the paths it was asked for.
func pathRecorder(t *testing.T) (string, *atomic.Int64, func() []string) {
	var mu sync.Mutex
	var paths []string
	addr, n := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	return addr, n, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(paths)
	}
}

// TestReliabilitySlowlorisHeaders: connections that send their headers a
// byte at a time are closed at the read-header timeout, and none of them
// reaches the backend.
func TestReliabilitySlowlorisHeaders(t *testing.T) {
	const conns = 50
	rt := relRuntime(t, func(o *Options) { o.ReadHeaderTimeout = 500 * time.Millisecond })
	backend, hits, _ := pathRecorder(t)
	addr := relHTTPPort(t, rt, backend)
	before := takeResources(t)
	var wg sync.WaitGroup
	start := time.Now()
	var late atomic.Int64
	for range conns {
		c := relDial(t, addr)
		wg.Go(func() {
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n")
			for _, b := range []byte("X-Slow: 0123456789012345678901234567890123456789\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			late.Add(1) // sent everything without being cut
		})
	}
	wg.Wait()
	t.Logf("%d connections cut after %v", conns, time.Since(start).Round(time.Millisecond))
	if late.Load() > 0 {
		t.Errorf("%d slow connections were never closed", late.Load())
	}
	if hits.Load() != 0 {
		t.Errorf("%d slow requests reached the backend", hits.Load())
	}
	before.check(t, conns+2, 32<<20)
}

// TestReliabilityStalledClientHello: TLS connections that send nothing, or
// the first bytes of a ClientHello and no more, are closed at the
// handshake timeout (the read-header timeout).
func TestReliabilityStalledClientHello(t *testing.T) {
	const conns = 50
	rt := relRuntime(t, func(o *Options) { o.ReadHeaderTimeout = 500 * time.Millisecond })
	backend, hits, _ := pathRecorder(t)
	addr, _ := relHTTPSPort(t, rt, backend)
	before := takeResources(t)
	var cs []net.Conn
	for i := range conns {
		c := relDial(t, addr)
		if i%2 == 1 {
			c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // a record header and one byte of 512
		}
		cs = append(cs, c)
	}
	start := time.Now()
	for _, c := range cs {
		closedWithin(t, c, 3*time.Second)
	}
	t.Logf("%d stalled handshakes closed after %v", conns, time.Since(start).Round(time.Millisecond))
	if hits.Load() != 0 {
		t.Errorf("%d requests reached the backend", hits.Load())
	}
	before.check(t, conns+2, 32<<20)
}

// TestReliabilityUnknownSNIFlood: handshakes for names no listener serves
// fail at once with unrecognized_name, leave nothing behind, and the
// served name goes on working. (ACME is not part of the proxy package:
// certificates are looked up in the port's SNI table and a name missing
// there never reaches an ACME manager, so the flood is the same with ACME
// on.)
func TestReliabilityUnknownSNIFlood(t *testing.T) {
	const handshakes = 400
	rt := relRuntime(t, nil)
	backend, hits, _ := pathRecorder(t)
	addr, cfg := relHTTPSPort(t, rt, backend)
	before := takeResources(t)
	var wg sync.WaitGroup
	var accepted atomic.Int64
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				c := cfg.Clone()
				c.ServerName = fmt.Sprintf("nobody-%d.example.com", i)
				conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 3 * time.Second}, "tcp", addr, c)
				if err == nil {
					accepted.Add(1)
					conn.Close()
				} else if !strings.Contains(err.Error(), "unrecognized name") {
					t.Errorf("handshake %d: %v, want unrecognized name", i, err)
				}
			}
		})
	}
	for i := range handshakes {
		work <- i
	}
	close(work)
	wg.Wait()
	if accepted.Load() != 0 {
		t.Errorf("%d handshakes for unknown names succeeded", accepted.Load())
	}
	before.check(t, 4, 64<<20)
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
	req.Host = relHostname
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("served name after the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || hits.Load() != 1 {
		t.Errorf("served name after the flood: %d, %d requests at the backend", resp.StatusCode, hits.Load())
	}
}

// TestReliabilityContinuationFlood: an HTTP/2 header block that never ends
// (CONTINUATION frames without END_HEADERS, CVE-2024-27316) is refused
// once it passes the header size limit; it neither reaches the backend nor
// makes the process grow.
func TestReliabilityContinuationFlood(t *testing.T) {
	rt := relRuntime(t, nil)
	backend, hits, _ := pathRecorder(t)
	addr := relHTTPPort(t, rt, backend)
	before := takeResources(t)
	c := relDial(t, addr)
	h := newH2Client(t, c, "http")
	outcome := h.readUntilClosed()
	var field bytes.Buffer
	enc := hpack.NewEncoder(&field)
	// Never indexed: every copy is decoded again, none shrinks to an index.
	enc.WriteField(hpack.HeaderField{Name: "x-flood", Value: strings.Repeat("a", 4000), Sensitive: true}) //nolint:errcheck // to a buffer
	block := bytes.Repeat(field.Bytes(), 4)
	start := time.Now()
	sent := 0
	err := h.write(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true})
	})
	var o h2Outcome
flood:
	for err == nil && sent < 64<<20 {
		err = h.write(func(fr *http2.Framer) error { return fr.WriteContinuation(1, false, block) })
		sent += len(block)
		select {
		case o = <-outcome:
			break flood
		default:
		}
	}
	if o.closed.IsZero() {
		select {
		case o = <-outcome:
		case <-time.After(3 * time.Second):
			t.Fatalf("connection still open after %d MiB of header block", sent>>20)
		}
	}
	t.Logf("closed after %d KiB of header block, %v", sent>>10, o.closed.Sub(start).Round(time.Millisecond))
	// What the kernel buffers on both sides, a few MiB, is written
	// whether the server reads it or not.
	if sent > 16<<20 {
		t.Errorf("%d MiB of one header block were taken before the connection closed", sent>>20)
	}
	if hits.Load() != 0 {
		t.Errorf("%d requests reached the backend", hits.Load())
	}
	c.Close()
	before.check(t, 2, 32<<20)
}

// TestReliabilityBodyFramings: malformed chunked bodies and Content-Length
// values, which could make the proxy and a backend disagree on where a
// request ends, are refused or end the connection, so the request hidden
// in the body never reaches the backend (TestReliabilitySmuggling replays
// the header combinations).
func TestReliabilityBodyFramings(t *testing.T) {
	const hidden = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
	cases := map[string]string{
		"invalid chunk size":         "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + hidden,
		"chunk size overflow":        "Transfer-Encoding: chunked\r\n\r\n10000000000000000" + strings.Repeat("0", 8) + "5\r\nhello\r\n0\r\n\r\n" + hidden,
		"chunk without CRLF":         "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloX0\r\n\r\n" + hidden,
		"Content-Length list":        "Content-Length: 0, 37\r\n\r\n" + hidden,
		"negative Content-Length":    "Content-Length: -1\r\n\r\n" + hidden,
		"unknown transfer coding":    "Transfer-Encoding: identity\r\n\r\n" + hidden,
		"bare LF in chunk extension": "Transfer-Encoding: chunked\r\n\r\n0;a\nb\r\n\r\n" + hidden,
	}
	rt := relRuntime(t, nil)
	backend, _, paths := pathRecorder(t)
	addr := relHTTPPort(t, rt, backend)
	before := takeResources(t)
	for name, rest := range cases {
		t.Run(name, func(t *testing.T) {
			c := relDial(t, addr)
			io.WriteString(c, "POST /front HTTP/1.1\r\nHost: a\r\n"+rest)
			answer := closedWithin(t, c, 3*time.Second)
			if n := strings.Count(answer, "HTTP/1.1 "); n > 1 {
				t.Errorf("%d answers on the connection: %q", n, answer)
			}
		})
	}
	if got := paths(); slices.Contains(got, "/smuggled") {
		t.Errorf("a hidden request reached the backend: %q", got)
	}
	before.check(t, 2, 32<<20)
}

// TestReliabilityOversizeHeadersFlood: many connections at once sending
// headers far beyond MaxHeaderBytes are each answered 431 without reaching
// the backend, and leave nothing behind.
func TestReliabilityOversizeHeadersFlood(t *testing.T) {
	const conns = 20
	rt := relRuntime(t, func(o *Options) { o.MaxHeaderBytes = 16 << 10 })
	backend, hits, _ := pathRecorder(t)
	addr := relHTTPPort(t, rt, backend)
	before := takeResources(t)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			go func() {
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n")
				for range 64 { // 1 MiB of headers
					if _, err := fmt.Fprintf(c, "X-Big: %s\r\n", strings.Repeat("b", 16<<10)); err != nil {
						return
					}
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Errorf("oversize headers: %v", err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("oversize headers: %d, want 431", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	if hits.Load() != 0 {
		t.Errorf("%d requests reached the backend", hits.Load())
	}
	before.check(t, 2, 32<<20)
}

// TestReliabilityH2SlowBody: over HTTP/2 a request body that trickles in
// is cut as over HTTP/1: the stream is answered 408, the backend request
// aborted, and the connection serves on.
func TestReliabilityH2SlowBody(t *testing.T) {
	rt := relRuntime(t, pacedOptions)
	backend, _, ended := bodyReader(t)
	addr := relHTTPPort(t, rt, backend)
	c := relDial(t, addr)
	h := newH2Client(t, c, "http")
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	statuses := make(chan string, 4)
	go func() {
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				close(statuses)
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					h.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() }) //nolint:errcheck // test client
				}
			case *http2.MetaHeadersFrame:
				statuses <- fmt.Sprintf("%d %s", f.StreamID, f.PseudoValue("status"))
			}
		}
	}()
	post := func(id uint32) error {
		return h.write(func(fr *http2.Framer) error {
			h.hbuf.Reset()
			for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", relHostname}, {":path", "/upload"}, {"content-length", "100000"}} {
				h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) //nolint:errcheck // to a buffer
			}
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(), EndHeaders: true})
		})
	}
	if err := post(1); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if h.write(func(fr *http2.Framer) error { return fr.WriteData(1, false, []byte{'x'}) }) != nil {
				return
			}
		}
	}()
	select {
	case s := <-statuses:
		t.Logf("answered %q after %v", s, time.Since(start).Round(time.Millisecond))
		if s != "1 408" {
			t.Errorf("stream answered %q, want 1 408", s)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a trickling stream is still open after 3s")
	}
	select {
	case err := <-ended:
		if err == nil {
			t.Error("the backend read the whole body")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the backend request was not aborted")
	}
	// The connection is fine: another stream gets its answer.
	if err := h.get(3, "/"); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-statuses:
		if s != "3 200" {
			t.Errorf("next stream answered %q", s)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no answer to the next stream")
	}
}

// TestReliabilityH2EmptyBodySmuggled: an HTTP/2 stream that declares an
// empty body (content-length: 0) keeps its stream open and then sends
// bytes anyway, as if a body followed. Those bytes never reach the backend,
// whose request has no body, and the connection serves on.
func TestReliabilityH2EmptyBodySmuggled(t *testing.T) {
	rt := relRuntime(t, pacedOptions)
	bodies := make(chan string, 4)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		io.WriteString(w, "ok")
	})
	addr := relHTTPPort(t, rt, backend)
	c := relDial(t, addr)
	h := newH2Client(t, c, "http")
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	statuses := make(chan string, 4)
	go func() {
		for {
			f, err := h.fr.ReadFrame()
			if err != nil {
				close(statuses)
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					h.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() }) //nolint:errcheck // test client
				}
			case *http2.MetaHeadersFrame:
				statuses <- fmt.Sprintf("%d %s", f.StreamID, f.PseudoValue("status"))
			case *http2.RSTStreamFrame:
				statuses <- fmt.Sprintf("%d reset", f.StreamID)
			}
		}
	}()
	err := h.write(func(fr *http2.Framer) error {
		h.hbuf.Reset()
		for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", relHostname}, {":path", "/upload"}, {"content-length", "0"}} {
			h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) //nolint:errcheck // to a buffer
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		return fr.WriteData(1, true, []byte("GET /admin HTTP/1.1\r\nHost: internal\r\n\r\n"))
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-statuses:
		// Answered before the bytes arrived, or reset for them: either
		// way the stream is over.
		if s != "1 200" && s != "1 reset" {
			t.Errorf("stream answered %q", s)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no answer to the stream")
	}
	select {
	case b := <-bodies:
		if b != "" {
			t.Errorf("the backend received the body %q", b)
		}
	case <-time.After(time.Second):
		// Reset before it was forwarded: the backend saw nothing at all.
	}
	if err := h.get(3, "/"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(3 * time.Second)
	for {
		select {
		case s := <-statuses:
			if s == "3 200" {
				return
			}
			if strings.HasPrefix(s, "3 ") {
				t.Fatalf("next stream answered %q", s)
			}
		case <-deadline:
			t.Fatal("no answer to the next stream")
		}
	}
}

// TestReliabilityH2RefusedStreams: a client that opens streams far beyond
// the concurrency the server advertised gets them refused, and past the
// abuse limit GOAWAY(ENHANCE_YOUR_CALM); only the streams the server
// accepted reach the backend.
func TestReliabilityH2RefusedStreams(t *testing.T) {
	const streams = 10
	rt := relRuntime(t, func(o *Options) { o.MaxConcurrentStreams = streams; o.H2MaxGlitches = 50 })
	backend, hits := relBackend(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	addr := relHTTPPort(t, rt, backend)
	c := relDial(t, addr)
	h := newH2Client(t, c, "http")
	outcome := h.readUntilClosed()
	time.Sleep(50 * time.Millisecond) // the server's SETTINGS are acknowledged
	for i := range 500 {
		if h.get(uint32(2*i+1), "/") != nil {
			break
		}
	}
	var o h2Outcome
	select {
	case o = <-outcome:
	case <-time.After(3 * time.Second):
		t.Fatal("connection still open after 500 streams over a limit of 10")
	}
	if o.goAway == nil || o.goAway.ErrCode != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %+v, want ENHANCE_YOUR_CALM", o.goAway)
	}
	if n := hits.Load(); n > streams {
		t.Errorf("%d requests reached the backend over a connection allowed %d at once", n, streams)
	}
}
