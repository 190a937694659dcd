package h2

import (
	"io"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// Frames on streams that are closed, or half-closed (remote), as RFC 9113,
// 5.1 and 6.1 ask (h2spec 5.1/8, 5.1/9, 5.1/11, 5.1/12, 6.1/2).

// closedStreamServer serves "/hold" until the test ends and answers
// anything else at once.
func closedStreamServer(t *testing.T) *testServer {
	t.Helper()
	release := make(chan struct{})
	ts := startServer(t, &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "answer")
	})}, false)
	// Registered after the server's: runs before its shutdown waits for
	// the handlers.
	t.Cleanup(func() { close(release) })
	return ts
}

// endedBothWays opens stream id with a GET and waits for its answer's
// END_STREAM: the stream is closed.
func endedBothWays(t *testing.T, rc *hostileConn, id uint32) {
	t.Helper()
	rc.get(id, "/", true)
	if _, ok := rc.wait(2*time.Second, func(f seenFrame) bool {
		return f.stream == id && f.flags.Has(http2.FlagDataEndStream) && (f.typ == http2.FrameData || f.typ == http2.FrameHeaders)
	}); !ok {
		t.Fatalf("stream %d: no END_STREAM", id)
	}
}

// wantAlive checks that the connection still answers a PING.
func wantAlive(t *testing.T, rc *hostileConn) {
	t.Helper()
	rc.do(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{7}) })
	f, ok := rc.wait(2*time.Second, func(f seenFrame) bool {
		return isGoAwayFrame(f) || f.typ == http2.FramePing && f.flags.Has(http2.FlagPingAck)
	})
	if !ok || f.typ != http2.FramePing {
		t.Fatalf("the connection did not live on: %v %v", f, ok)
	}
}

// TestDataAfterClientResetIsStreamClosed (h2spec 5.1/8): DATA on a stream
// the client reset is a stream error STREAM_CLOSED, whether the stream's
// handler still runs or is gone; the connection lives on.
func TestDataAfterClientResetIsStreamClosed(t *testing.T) {
	for _, path := range []string{"/hold", "/"} {
		t.Run(path, func(t *testing.T) {
			rc := dialHostile(t, closedStreamServer(t).addr, true)
			rc.headers(1, false, ":method", "POST", ":scheme", "http", ":path", path, ":authority", "a")
			rc.do(func(fr *http2.Framer) error { return fr.WriteRSTStream(1, http2.ErrCodeCancel) })
			if path == "/" {
				time.Sleep(50 * time.Millisecond) // the handler returns, the stream is forgotten
			}
			rc.do(func(fr *http2.Framer) error { return fr.WriteData(1, true, []byte("test")) })
			if f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return isRSTOn(1)(f) || isGoAwayFrame(f) }); !ok || f.typ != http2.FrameRSTStream || f.code != codeStreamClose {
				t.Fatalf("got %v %v, want RST_STREAM STREAM_CLOSED", f, ok)
			}
			wantAlive(t, rc)
		})
	}
}

// TestHeadersAfterClientResetIsStreamClosed (h2spec 5.1/9): a header block
// on a stream the client reset is STREAM_CLOSED: a stream error while the
// server still tracks the stream. Once it is forgotten, a request's block
// is a connection error PROTOCOL_ERROR (an id that did not grow, 5.1.1)
// and a trailer block one of STREAM_CLOSED.
func TestHeadersAfterClientResetIsStreamClosed(t *testing.T) {
	t.Run("tracked", func(t *testing.T) {
		rc := dialHostile(t, closedStreamServer(t).addr, true)
		rc.get(1, "/hold", false)
		rc.do(func(fr *http2.Framer) error { return fr.WriteRSTStream(1, http2.ErrCodeCancel) })
		rc.get(1, "/hold", true)
		if f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return isRSTOn(1)(f) || isGoAwayFrame(f) }); !ok || f.typ != http2.FrameRSTStream || f.code != codeStreamClose {
			t.Fatalf("got %v %v, want RST_STREAM STREAM_CLOSED", f, ok)
		}
		wantAlive(t, rc)
	})
	for _, tc := range []struct {
		name  string
		block []string
		code  http2.ErrCode
	}{
		{"forgotten request", []string{":method", "GET", ":scheme", "http", ":path", "/", ":authority", "a"}, codeProtocol},
		{"forgotten trailers", []string{"x-checksum", "1"}, codeStreamClose},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialHostile(t, closedStreamServer(t).addr, true)
			rc.get(1, "/", false)
			rc.do(func(fr *http2.Framer) error { return fr.WriteRSTStream(1, http2.ErrCodeCancel) })
			time.Sleep(50 * time.Millisecond)
			rc.headers(1, true, tc.block...)
			if f, ok := rc.wait(2*time.Second, isGoAwayFrame); !ok || f.code != tc.code {
				t.Fatalf("got %v %v, want GOAWAY %v", f, ok, tc.code)
			}
		})
	}
}

// TestDataOnClosedStreamIsStreamClosed (h2spec 5.1/11, 6.1/2): DATA after
// the client's END_STREAM is a stream error STREAM_CLOSED, both on a stream
// half-closed (remote) and on one closed both ways and forgotten; the
// connection lives on.
func TestDataOnClosedStreamIsStreamClosed(t *testing.T) {
	t.Run("half-closed", func(t *testing.T) {
		rc := dialHostile(t, closedStreamServer(t).addr, true)
		rc.get(1, "/hold", true)
		rc.do(func(fr *http2.Framer) error { return fr.WriteData(1, true, []byte("test")) })
		if f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return isRSTOn(1)(f) || isGoAwayFrame(f) }); !ok || f.typ != http2.FrameRSTStream || f.code != codeStreamClose {
			t.Fatalf("got %v %v, want RST_STREAM STREAM_CLOSED", f, ok)
		}
		wantAlive(t, rc)
	})
	t.Run("closed", func(t *testing.T) {
		rc := dialHostile(t, closedStreamServer(t).addr, true)
		endedBothWays(t, rc, 1)
		time.Sleep(50 * time.Millisecond)
		rc.do(func(fr *http2.Framer) error { return fr.WriteData(1, true, []byte("test")) })
		if f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return isRSTOn(1)(f) || isGoAwayFrame(f) }); !ok || f.typ != http2.FrameRSTStream || f.code != codeStreamClose {
			t.Fatalf("got %v %v, want RST_STREAM STREAM_CLOSED", f, ok)
		}
		// The server sent RST_STREAM: more DATA in flight is ignored.
		rc.do(func(fr *http2.Framer) error { return fr.WriteData(1, true, []byte("more")) })
		if f, ok := rc.wait(200*time.Millisecond, func(f seenFrame) bool { return isRSTOn(1)(f) || isGoAwayFrame(f) }); ok {
			t.Fatalf("DATA after the server's RST_STREAM got %v, want it ignored", f)
		}
		wantAlive(t, rc)
	})
}

// TestHeadersOnClosedStreamIsConnectionError (h2spec 5.1/12): a header
// block on a stream closed by END_STREAM both ways is a connection error,
// also in the moment after the answer's END_STREAM left while its handler
// has not returned yet (it was a stream error then): STREAM_CLOSED while
// the stream is tracked (5.1), PROTOCOL_ERROR once it is forgotten, the
// block being a request's on an id that did not grow (5.1.1).
func TestHeadersOnClosedStreamIsConnectionError(t *testing.T) {
	ts := closedStreamServer(t)
	for range 20 {
		rc := dialHostile(t, ts.addr, true)
		endedBothWays(t, rc, 1)
		rc.get(1, "/", true)
		f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return isRSTOn(1)(f) || isGoAwayFrame(f) })
		if !ok || f.typ != http2.FrameGoAway || f.code != codeStreamClose && f.code != codeProtocol {
			t.Fatalf("got %v %v, want GOAWAY STREAM_CLOSED or PROTOCOL_ERROR", f, ok)
		}
		rc.nc.Close()
	}
}
