package proxy

// Attacks on the writers of requests without a body, which a port pools
// with their pacer, watchdog timer and status writer, and hands to the
// next request of any client (see pacedWriter): nothing one request leaves
// in a pooled writer may reach another.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// deadlineRecorder is a response writer that records the deadlines a
// pacer sets on it: a cut is a deadline set to now.
type deadlineRecorder struct {
	http.ResponseWriter
	mu              sync.Mutex
	reads, writes   int
	lastRead, lastW time.Time
}

func (d *deadlineRecorder) SetReadDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reads++
	d.lastRead = t
	return nil
}

func (d *deadlineRecorder) SetWriteDeadline(t time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.writes++
	d.lastW = t
	return nil
}

func (d *deadlineRecorder) deadlines() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reads + d.writes
}

// reusedWriter returns a writer of ps's pool for w that is pw itself,
// as the pool hands one request's writer to the next (the pool may drop
// what it is given, under the race detector at random).
func reusedWriter(t *testing.T, ps *portServer, pw *pacedWriter, w http.ResponseWriter) {
	t.Helper()
	for range 1000 {
		if got := ps.pacedWriter(w, true); got == pw {
			return
		}
		ps.writers.Put(pw)
	}
	t.Fatal("the pool never handed the writer back")
}

// TestAttackPooledWriterLateWatch: the watchdog of request A fires while
// A's write overstayed its deadline, but runs only after A ended and its
// writer went to request B of another client. The late watch must cut
// neither A (over) nor B (whose write is on time).
func TestAttackPooledWriterLateWatch(t *testing.T) {
	ps := &portServer{log: zap.NewNop()}
	opts := &Options{ClientIdleTimeout: time.Hour, ClientMinRate: 1024, ClientRateWindow: time.Hour}
	a := &deadlineRecorder{ResponseWriter: httptest.NewRecorder()}
	pw := ps.pacedWriter(a, true)
	p := pw.p
	p.log = ps.log
	p.start(a, opts, time.Now())
	// A's write has been waiting on its client past its deadline.
	p.write.begin(time.Now().Add(-2*time.Hour), time.Hour, 0, 0, 0)
	ps.donePacing(pw, true)
	if pw.ResponseWriter != nil || p.conn != nil || pw.status.ResponseWriter != nil || p.rc != (http.ResponseController{}) {
		t.Fatal("a pooled writer still holds what its request answered through")
	}
	p.watch() // A's watch, late: A is over
	if n := a.deadlines(); n != 0 {
		t.Fatalf("a watch that ran after request A ended set %d deadlines on it", n)
	}

	ps.writers.Put(pw)
	b := &deadlineRecorder{ResponseWriter: httptest.NewRecorder()}
	reusedWriter(t, ps, pw, b)
	p.log = ps.log
	p.start(b, opts, time.Now())
	if pw.answered || pw.discard || pw.hijacked || pw.pending != 0 || p.cut.Load() != nil || p.bodyCut.Load() || p.writeCut || p.done {
		t.Fatal("request B's writer starts with state of request A")
	}
	p.watch() // A's watch, late, as B starts: B waits on nothing yet
	if n := b.deadlines(); n != 0 {
		t.Fatalf("request A's late watch set %d deadlines on request B before it wrote", n)
	}
	p.write.begin(time.Now(), time.Hour, 0, 0, 0) // B writes, well within its time
	p.watch()                                     // A's watch, later still
	if n := b.deadlines(); n != 0 {
		t.Fatalf("request A's late watch set %d deadlines on request B", n)
	}
	if n := a.deadlines(); n != 0 {
		t.Fatalf("request A got %d deadlines after it ended", n)
	}
	if why := p.cut.Load(); why != nil {
		t.Fatalf("request B was cut (%s)", *why)
	}
	// B's write does overstay: B's own watch cuts B, and only B.
	p.write.begin(time.Now().Add(-2*time.Hour), time.Hour, 0, 0, 0)
	p.watch()
	if b.writes != 1 || a.deadlines() != 0 {
		t.Fatalf("an overdue write of B: %d write deadlines on B, %d on A; want 1 and 0", b.writes, a.deadlines())
	}
	ps.donePacing(pw, true)
}

// accessEntry is what the access log said of one request.
type accessEntry struct {
	path   string
	status int64
	bytes  int64
}

func accessEntries(logs *observer.ObservedLogs) []accessEntry {
	var out []accessEntry
	for _, e := range logs.All() {
		m := e.ContextMap()
		out = append(out, accessEntry{path: fmt.Sprint(m["path"]), status: m["status"].(int64), bytes: m["bytes"].(int64)})
	}
	return out
}

// TestAttackPooledStatusNoLeak: the status writer of the access log and
// metrics is pooled with the paced writer. A request answered with an error
// and a large body, then one whose client leaves before it is answered,
// then others over HTTP/1 and HTTP/2 on other connections: each is logged
// with its own status and size, never those of the request before it.
func TestAttackPooledStatusNoLeak(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	rt := relRuntime(t, func(o *Options) {
		pacedOptions(o)
		o.AccessLog = zap.New(core)
	})
	big := strings.Repeat("x", 100<<10)
	arrived := make(chan struct{}, 16)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, big)
		case "/hang":
			arrived <- struct{}{}
			<-r.Context().Done()
		default:
			io.WriteString(w, "ok")
		}
	})
	addr := relHTTPPort(t, rt, backend)
	waitEntries := func(n int) []accessEntry {
		t.Helper()
		if !waitFor(10*time.Second, func() bool { return logs.Len() >= n }) {
			t.Fatalf("%d access log entries after 10s, want %d", logs.Len(), n)
		}
		return accessEntries(logs)
	}
	for round := range 5 {
		logs.TakeAll()
		// 1: an error with a large body, read whole.
		resp, err := http.Get("http://" + addr + "/big")
		if err != nil {
			t.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || n != int64(len(big)) {
			t.Fatalf("round %d: /big answered %d with %d bytes", round, resp.StatusCode, n)
		}
		waitEntries(1)
		// 2: the client leaves before the answer.
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET /hang HTTP/1.1\r\nHost: a\r\n\r\n")
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatal("the backend never got /hang")
		}
		c.Close()
		waitEntries(2)
		// 3: a small answer on a connection of its own, HTTP/1.1.
		c = relDial(t, addr)
		io.WriteString(c, "GET /small HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		resp, err = http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != http.StatusOK || string(b) != "ok" {
			t.Fatalf("round %d: /small answered %d %q", round, resp.StatusCode, b)
		}
		got := waitEntries(3)
		want := []accessEntry{
			{"/big", http.StatusServiceUnavailable, int64(len(big))},
			{"/hang", statusClientClosed, 0},
			{"/small", http.StatusOK, 2},
		}
		for i, w := range want {
			if got[i] != w {
				t.Errorf("round %d: request %d logged %+v, want %+v", round, i+1, got[i], w)
			}
		}
	}
}

// TestAttackPooledWriterCutThenReused: a client that stops reading is cut;
// the writer that paced it goes back to the pool and paces the next
// requests. A fast client after it gets its whole answer, and the next
// client that stops reading is cut too: what the first cut left in the
// writer (its cut, the watch it stopped) neither cuts nor spares another.
func TestAttackPooledWriterCutThenReused(t *testing.T) {
	rt := relRuntime(t, pacedOptions)
	ended := make(chan error, 1)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/download" {
			io.WriteString(w, "ok")
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
	for round := range 4 {
		c := relDial(t, addr)
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		io.WriteString(c, "GET /download HTTP/1.1\r\nHost: a\r\n\r\n")
		select {
		case <-ended:
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: a client that reads nothing was not cut in 15s", round)
		}
		closedWithin(t, c, 10*time.Second)
		c.Close()
		for i := range 3 {
			resp, err := http.Get("http://" + addr + "/small")
			if err != nil {
				t.Fatalf("round %d, request %d after the cut: %v", round, i, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(b) != "ok" {
				t.Fatalf("round %d, request %d after the cut: %d %q %v", round, i, resp.StatusCode, b, err)
			}
		}
	}
}

// TestAttackPooledWriterAfterAbortResetUpgrade: requests that end their
// writer the hard ways put it back in the pool all the same: an answer
// aborted mid-body (the handler panics with http.ErrAbortHandler), an
// HTTP/2 stream the client resets mid-answer, an upgraded connection
// (hijacked: its watch stopped). After each, the next requests get their
// whole answers and a client that stops reading is still cut.
func TestAttackPooledWriterAfterAbortResetUpgrade(t *testing.T) {
	rt := relRuntime(t, pacedOptions)
	ended := make(chan error, 8)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/download":
			chunk := make([]byte, 64<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					ended <- err
					return
				}
			}
		case "/broken":
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n0123456789")
			c.Close()
		case "/ws":
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			line, err := brw.ReadString('\n')
			if err == nil {
				io.WriteString(c, line)
			}
		default:
			io.WriteString(w, "ok")
		}
	})
	addr := relHTTPPort(t, rt, backend)
	healthy := func(round int, after string) {
		t.Helper()
		for i := range 3 {
			resp, err := http.Get("http://" + addr + "/small")
			if err != nil {
				t.Fatalf("round %d, after %s: %v", round, after, err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(b) != "ok" {
				t.Fatalf("round %d, after %s, request %d: %d %q %v", round, after, i, resp.StatusCode, b, err)
			}
		}
		c := relDial(t, addr)
		_ = c.(*net.TCPConn).SetReadBuffer(4096)
		io.WriteString(c, "GET /download HTTP/1.1\r\nHost: a\r\n\r\n")
		select {
		case <-ended:
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d, after %s: a client that reads nothing was not cut in 15s", round, after)
		}
		c.Close()
	}
	for round := range 3 {
		// An answer aborted mid-body.
		resp, err := http.Get("http://" + addr + "/broken")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err == nil {
			t.Fatalf("round %d: an answer cut short by its backend reached the client whole", round)
		}
		healthy(round, "an aborted answer")

		// An HTTP/2 stream reset by its client mid-answer.
		c := relDial(t, addr)
		h := newH2Client(t, c, "http")
		if err := h.get(1, "/download"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		for data := false; !data; {
			f, err := h.fr.ReadFrame()
			if err != nil {
				t.Fatalf("round %d: reading the stream: %v", round, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					h.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() }) //nolint:errcheck // test client
				}
			case *http2.DataFrame:
				data = true
			}
		}
		if err := h.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(1, http2.ErrCodeCancel) }); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ended:
		case <-time.After(15 * time.Second):
			t.Fatalf("round %d: the backend still sends to a stream reset 15s ago", round)
		}
		c.Close()
		healthy(round, "a reset stream")

		// An upgraded connection.
		c = relDial(t, addr)
		io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		br := bufio.NewReader(c)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		resp, err = http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("round %d: upgrade: %v %v", round, resp, err)
		}
		io.WriteString(c, "hello\n")
		if line, err := br.ReadString('\n'); err != nil || line != "hello\n" {
			t.Fatalf("round %d: echo %q %v", round, line, err)
		}
		c.Close()
		healthy(round, "an upgrade")
	}
}

// TestAttackH2BodyWithoutLengthKept: only an HTTP/2 stream that declared
// an empty body (or ended with its headers) is served as one without a
// body. A stream that sends DATA without a content-length, a GET's as a
// POST's, keeps its body: the backend gets it whole.
func TestAttackH2BodyWithoutLengthKept(t *testing.T) {
	rt := relRuntime(t, pacedOptions)
	bodies := make(chan string, 4)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- r.Method + " " + string(b)
		io.WriteString(w, "ok")
	})
	addr := relHTTPPort(t, rt, backend)
	for _, method := range []string{"POST", "GET"} {
		c := relDial(t, addr)
		h := newH2Client(t, c, "http")
		err := h.write(func(fr *http2.Framer) error {
			h.hbuf.Reset()
			for _, f := range [][2]string{{":method", method}, {":scheme", "http"}, {":authority", relHostname}, {":path", "/up"}} {
				h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) //nolint:errcheck // to a buffer
			}
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}); err != nil {
				return err
			}
			if err := fr.WriteData(1, false, []byte("hello, ")); err != nil {
				return err
			}
			return fr.WriteData(1, true, []byte("world"))
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-bodies:
			if want := method + " hello, world"; b != want {
				t.Errorf("the backend got %q, want %q", b, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the backend got nothing in 10s", method)
		}
		c.Close()
	}
}
