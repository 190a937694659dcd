package h2

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawClient speaks HTTP/2 frame by frame, as an abusive client would.
type rawClient struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

// dialRaw connects to ts and sends the preface and empty SETTINGS.
func dialRaw(t *testing.T, ts *testServer) *rawClient {
	t.Helper()
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(65536, nil)
	rc.enc = hpack.NewEncoder(&rc.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := rc.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return rc
}

// ackSettings reads up to the server's SETTINGS and acknowledges them.
func (rc *rawClient) ackSettings() {
	rc.t.Helper()
	if _, err := rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.SettingsFrame); return ok }); err != nil {
		rc.t.Fatal(err)
	}
	if err := rc.fr.WriteSettingsAck(); err != nil {
		rc.t.Fatal(err)
	}
}

// block encodes fields, name value pairs, for a header block.
func (rc *rawClient) block(fields ...string) []byte {
	rc.hbuf.Reset()
	for i := 0; i < len(fields); i += 2 {
		_ = rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(rc.hbuf.Bytes())
}

// request opens stream id with a request; extra are more fields.
func (rc *rawClient) request(id uint32, method string, end bool, extra ...string) {
	rc.t.Helper()
	fields := append([]string{":method", method, ":scheme", "http", ":authority", "example.com", ":path", "/"}, extra...)
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block(fields...), EndHeaders: true, EndStream: end}); err != nil {
		rc.t.Fatal(err)
	}
}

// readUntil reads frames until match takes one; the error when the
// connection ends first.
func (rc *rawClient) readUntil(match func(http2.Frame) bool) (http2.Frame, error) {
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if match(f) {
			return f, nil
		}
	}
}

// wantGoAway reads up to a GOAWAY with code, then the connection's end.
func (rc *rawClient) wantGoAway(code http2.ErrCode) {
	rc.t.Helper()
	f, err := rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if err != nil {
		rc.t.Fatalf("no GOAWAY %v: %v", code, err)
	}
	if ga := f.(*http2.GoAwayFrame); ga.ErrCode != code {
		rc.t.Fatalf("GOAWAY %v, want %v", ga.ErrCode, code)
	}
	if _, err := rc.readUntil(func(http2.Frame) bool { return false }); err == nil || errors.Is(err, context.DeadlineExceeded) {
		rc.t.Fatalf("connection not closed after GOAWAY: %v", err)
	}
}

// wantReset reads up to RST_STREAM of stream id and checks its code.
func (rc *rawClient) wantReset(id uint32, code http2.ErrCode) {
	rc.t.Helper()
	f, err := rc.readUntil(func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == id
	})
	if err != nil {
		rc.t.Fatalf("no RST_STREAM %d: %v", id, err)
	}
	if r := f.(*http2.RSTStreamFrame); r.ErrCode != code {
		rc.t.Fatalf("RST_STREAM %d %v, want %v", id, r.ErrCode, code)
	}
}

// wantStatus reads up to the HEADERS of stream id and checks :status.
func (rc *rawClient) wantStatus(id uint32, status string) {
	rc.t.Helper()
	f, err := rc.readUntil(func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		return ok && h.StreamID == id
	})
	if err != nil {
		rc.t.Fatalf("no HEADERS on stream %d: %v", id, err)
	}
	if got := f.(*http2.MetaHeadersFrame).PseudoValue("status"); got != status {
		rc.t.Fatalf("stream %d status %s, want %s", id, got, status)
	}
}

// blocking is a handler that waits until the test ends; served counts
// the requests that reached it.
func blocking(t *testing.T, served *atomic.Int32) http.Handler {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		select {
		case <-done:
		case <-r.Context().Done():
		}
	})
}

func TestAttackStreamsBeyondMax(t *testing.T) {
	var served atomic.Int32
	ts := startServer(t, &Server{MaxConcurrentStreams: 2, Handler: blocking(t, &served)}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	for _, id := range []uint32{1, 3, 5} {
		rc.request(id, "GET", true)
	}
	rc.wantReset(5, http2.ErrCodeRefusedStream)
	if n := served.Load(); n > 2 {
		t.Fatalf("%d streams served, limit 2", n)
	}
}

func TestAttackDataBeyondStreamWindow(t *testing.T) {
	var served atomic.Int32
	ts := startServer(t, &Server{MaxUploadBufferPerStream: 16 << 10, Handler: blocking(t, &served)}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.request(1, "POST", false)
	if err := rc.fr.WriteData(1, false, make([]byte, 20<<10)); err != nil {
		t.Fatal(err)
	}
	rc.wantReset(1, http2.ErrCodeFlowControl)
}

func TestAttackDataBeyondConnWindow(t *testing.T) {
	var served atomic.Int32
	ts := startServer(t, &Server{MaxUploadBufferPerConnection: 96 << 10, MaxUploadBufferPerStream: 64 << 10,
		Handler: blocking(t, &served)}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.request(1, "POST", false)
	rc.request(3, "POST", false)
	// Each within its stream's window; together past the connection's.
	for _, id := range []uint32{1, 3} {
		if err := rc.fr.WriteData(id, false, make([]byte, 60<<10)); err != nil {
			t.Fatal(err)
		}
	}
	rc.wantGoAway(http2.ErrCodeFlowControl)
}

func TestAttackContinuationFlood(t *testing.T) {
	var served atomic.Int32
	ts := startServer(t, &Server{MaxHeaderBytes: 16 << 10, Handler: blocking(t, &served)}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/")}); err != nil {
		t.Fatal(err)
	}
	// Endless CONTINUATION frames: the server must give up on the block
	// long before the 64 MiB sent here.
	go func() {
		frag := rc.block("x-filler", strings.Repeat("a", 8000))
		for range 8000 {
			if rc.fr.WriteContinuation(1, false, frag) != nil {
				return
			}
		}
	}()
	rc.wantGoAway(http2.ErrCodeProtocol)
	if served.Load() != 0 {
		t.Fatal("the flooded request reached the handler")
	}
}

// TestAttackHPACKBomb references one large dynamic table entry again and
// again: a few bytes on the wire, a header list far past the bound.
func TestAttackHPACKBomb(t *testing.T) {
	var served atomic.Int32
	ts := startServer(t, &Server{MaxHeaderBytes: 16 << 10, Handler: blocking(t, &served)}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	block := rc.block(":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/", "x-bomb", strings.Repeat("b", 3000))
	// 0xbe: indexed field 62, the entry just added, 10,000 times.
	block = append(block, bytes.Repeat([]byte{0xbe}, 10000)...)
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	rc.wantStatus(1, "431")
	if served.Load() != 0 {
		t.Fatal("the bomb reached the handler")
	}
	// A dynamic table larger than the server allows (4096) is a
	// compression error.
	rc.hbuf.Reset()
	rc.enc.SetMaxDynamicTableSizeLimit(1 << 20)
	rc.enc.SetMaxDynamicTableSize(1 << 20)
	block = rc.block(":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/")
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block, EndHeaders: true, EndStream: true}); err != nil {
		t.Fatal(err)
	}
	rc.wantGoAway(http2.ErrCodeCompression)
}

func TestAttackBadPreface(t *testing.T) {
	ts := startServer(t, &Server{Handler: http.NotFoundHandler()}, false)
	c, err := net.Dial("tcp", ts.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("connection not closed: %v", err)
	}
	if bytes.Contains(b, []byte("HTTP/1.1")) {
		t.Fatalf("answered a bad preface: %q", b)
	}
}

func TestAttackProtocolErrors(t *testing.T) {
	cases := []struct {
		name string
		send func(rc *rawClient)
		code http2.ErrCode
	}{
		{"data on stream 0", func(rc *rawClient) {
			// The framer refuses to write it: by hand.
			rc.c.Write([]byte{0, 0, 1, byte(http2.FrameData), 0, 0, 0, 0, 0, 'x'})
		}, http2.ErrCodeProtocol},
		{"even stream id", func(rc *rawClient) { rc.request(2, "GET", true) }, http2.ErrCodeProtocol},
		{"decreasing stream id", func(rc *rawClient) {
			rc.request(5, "GET", true)
			rc.request(3, "GET", true)
		}, http2.ErrCodeProtocol},
		{"window overflow", func(rc *rawClient) {
			rc.fr.WriteWindowUpdate(0, 1<<31-1)
		}, http2.ErrCodeFlowControl},
		{"push promise", func(rc *rawClient) {
			rc.fr.WritePushPromise(http2.PushPromiseParam{StreamID: 1, PromiseID: 2, BlockFragment: rc.block(":method", "GET"), EndHeaders: true})
		}, http2.ErrCodeProtocol},
		{"frame over max size", func(rc *rawClient) {
			rc.request(1, "POST", false)
			rc.fr.WriteData(1, false, make([]byte, 20<<10))
		}, http2.ErrCodeFrameSize},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var served atomic.Int32
			ts := startServer(t, &Server{MaxReadFrameSize: 16 << 10, Handler: blocking(t, &served)}, false)
			rc := dialRaw(t, ts)
			rc.ackSettings()
			tc.send(rc)
			rc.wantGoAway(tc.code)
		})
	}
}

func TestAttackStreamWindowOverflow(t *testing.T) {
	var served atomic.Int32
	ts := startServer(t, &Server{Handler: blocking(t, &served)}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.request(1, "GET", true)
	rc.fr.WriteWindowUpdate(1, 1<<31-1)
	rc.wantReset(1, http2.ErrCodeFlowControl)
}

func TestAttackMalformedRequests(t *testing.T) {
	cases := []struct {
		name   string
		fields []string
	}{
		{"uppercase name", []string{"X-Upper", "v"}},
		{"connection field", []string{"connection", "keep-alive"}},
		{"transfer-encoding", []string{"transfer-encoding", "chunked"}},
		{"te not trailers", []string{"te", "gzip"}},
	}
	var served atomic.Int32
	ts := startServer(t, &Server{Handler: blocking(t, &served)}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	id := uint32(1)
	for _, tc := range cases {
		rc.request(id, "GET", true, tc.fields...)
		rc.wantReset(id, http2.ErrCodeProtocol)
		id += 2
	}
	// Missing and bad pseudo fields.
	for _, fields := range [][]string{
		{":method", "GET", ":scheme", "http", ":authority", "a"},
		{":method", "GET", ":scheme", "http", ":path", "nope"},
		{":method", "CONNECT", ":authority", "a:443", ":path", "/"},
		{":method", "GET", ":scheme", "http", ":path", "/", ":bogus", "x"},
	} {
		if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block(fields...), EndHeaders: true, EndStream: true}); err != nil {
			t.Fatal(err)
		}
		rc.wantReset(id, http2.ErrCodeProtocol)
		id += 2
	}
	if n := served.Load(); n != 0 {
		t.Fatalf("%d malformed requests reached the handler", n)
	}
}

func TestAttackContentLengthMismatch(t *testing.T) {
	bodyErr := make(chan error, 4)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		bodyErr <- err
	})}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	// Short of its content-length.
	rc.request(1, "POST", false, "content-length", "10")
	rc.fr.WriteData(1, true, []byte("12345"))
	rc.wantReset(1, http2.ErrCodeProtocol)
	// The handler learns that the server reset the stream for what the
	// client sent, not that the client reset it (which a proxy logs as
	// a client going away).
	serverReset := func(err error, what string) {
		t.Helper()
		if err == nil {
			t.Fatalf("a %s body read as whole", what)
		}
		if errors.Is(err, errStreamReset) || !strings.Contains(err.Error(), "reset by the server") {
			t.Errorf("a %s body: %v, want a reset by the server", what, err)
		}
	}
	serverReset(<-bodyErr, "short")
	// Past it.
	rc.request(3, "POST", false, "content-length", "2")
	rc.fr.WriteData(3, false, []byte("12345"))
	rc.wantReset(3, http2.ErrCodeProtocol)
	serverReset(<-bodyErr, "long")
}

// TestAttackClientNeverReads opens the windows wide and reads nothing:
// the server's writes stall, and WriteByteTimeout closes the connection.
func TestAttackClientNeverReads(t *testing.T) {
	writeErr := make(chan error, 1)
	ts := startServer(t, &Server{WriteByteTimeout: 300 * time.Millisecond, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				writeErr <- err
				return
			}
		}
	})}, false)
	rc := dialRaw(t, ts)
	rc.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	rc.fr.WriteWindowUpdate(0, 1<<31-1-65535)
	rc.request(1, "GET", true)
	select {
	case err := <-writeErr:
		t.Logf("handler's write failed: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("a client that never reads still holds the connection")
	}
}

func TestIdleTimeout(t *testing.T) {
	ts := startServer(t, &Server{IdleTimeout: 200 * time.Millisecond, Handler: http.NotFoundHandler()}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.request(1, "GET", true)
	rc.wantStatus(1, "404")
	rc.wantGoAway(http2.ErrCodeNo)
}

func TestPingAndUnknownFrames(t *testing.T) {
	ts := startServer(t, &Server{Handler: http.NotFoundHandler()}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.fr.WriteRawFrame(0xfa, 0, 0, []byte("unknown"))
	rc.fr.WritePriority(1, http2.PriorityParam{StreamDep: 0, Weight: 10})
	rc.fr.WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	f, err := rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok })
	if err != nil {
		t.Fatal(err)
	}
	if p := f.(*http2.PingFrame); !p.IsAck() || p.Data != [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
		t.Fatalf("ping answer %+v", p)
	}
	rc.request(1, "GET", true)
	rc.wantStatus(1, "404")
}

func TestHandlerPanics(t *testing.T) {
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/abort":
			panic(http.ErrAbortHandler)
		case "/panic":
			panic("boom")
		}
		io.WriteString(w, "ok")
	})}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.request(1, "GET", true, "x-unused", "1")
	rc.wantStatus(1, "200")
	// In order: stream ids must grow (a map's order sent 5 before 3 now
	// and then, a connection error).
	for _, s := range []struct {
		id   uint32
		path string
	}{{3, "/abort"}, {5, "/panic"}} {
		id := s.id
		rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.block(":method", "GET", ":scheme", "http", ":authority", "a", ":path", s.path), EndHeaders: true, EndStream: true})
		code := http2.ErrCodeInternal
		rc.wantReset(id, code)
	}
	rc.request(7, "GET", true)
	rc.wantStatus(7, "200") // the connection lives on
}

// TestShutdownGraceful: a running stream completes after GOAWAY, a new
// one is not served, and the connection closes once the stream is done.
func TestShutdownGraceful(t *testing.T) {
	release := make(chan struct{})
	var served atomic.Int32
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		<-release
		io.WriteString(w, "finished")
	})}
	ts := startServer(t, srv, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.request(1, "GET", true)
	for served.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	f, err := rc.readUntil(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if err != nil {
		t.Fatal(err)
	}
	if ga := f.(*http2.GoAwayFrame); ga.LastStreamID != 1 || ga.ErrCode != http2.ErrCodeNo {
		t.Fatalf("GOAWAY last %d code %v", ga.LastStreamID, ga.ErrCode)
	}
	rc.request(3, "GET", true)
	close(release)
	var body []byte
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			body = append(body, f.Data()...)
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				t.Fatalf("answered stream %d after GOAWAY", f.StreamID)
			}
		}
	}
	if string(body) != "finished" || served.Load() != 1 {
		t.Fatalf("body %q, %d served", body, served.Load())
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

func TestExpectContinue(t *testing.T) {
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	})}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.request(1, "POST", false, "expect", "100-continue", "content-length", "4")
	rc.wantStatus(1, "100")
	rc.fr.WriteData(1, true, []byte("body"))
	rc.wantStatus(1, "200")
}

// TestDeadlinesResetOneStream: a write deadline in the past fails the
// stream's blocked write and resets it alone.
func TestDeadlinesResetOneStream(t *testing.T) {
	writeErr := make(chan error, 1)
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			io.WriteString(w, "ok")
			return
		}
		rc := http.NewResponseController(w)
		go func() {
			time.Sleep(100 * time.Millisecond)
			rc.SetWriteDeadline(time.Now().Add(-time.Second))
		}()
		// The client's window is 65535: this blocks on it.
		_, err := w.Write(make([]byte, 1<<20))
		writeErr <- err
	})}, false)
	rc := dialRaw(t, ts)
	rc.ackSettings()
	rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: rc.block(":method", "GET", ":scheme", "http", ":authority", "a", ":path", "/slow"), EndHeaders: true, EndStream: true})
	if err := <-writeErr; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blocked write returned %v", err)
	}
	rc.wantReset(1, http2.ErrCodeInternal)
	rc.fr.WriteWindowUpdate(0, 1<<20)
	rc.request(3, "GET", true)
	rc.wantStatus(3, "200")
}
