package h2

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestHeaderTooLargeStopsUpload: a request refused with 431 before its
// body came must be reset NO_ERROR after the answer, so that the client
// does not upload a body nobody reads (RFC 9113, 8.1).
func TestHeaderTooLargeStopsUpload(t *testing.T) {
	ts := startServer(t, &Server{MaxHeaderBytes: 4 << 10, Handler: http.NotFoundHandler()}, false)
	rc := dialHostile(t, ts.addr, true)
	rc.headers(1, false, ":method", "POST", ":scheme", "http", ":path", "/", ":authority", "a", "x-a", strings.Repeat("b", 2<<10), "x-b", strings.Repeat("b", 2<<10), "x-c", strings.Repeat("b", 2<<10))
	f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return f.stream == 1 })
	if !ok || f.typ != http2.FrameHeaders || !f.flags.Has(http2.FlagHeadersEndStream) {
		t.Fatalf("got %v %v, want the 431 HEADERS ending the stream", f, ok)
	}
	if f, ok := rc.wait(2*time.Second, isRSTOn(1)); !ok || f.code != codeNo {
		t.Fatalf("after the 431: got %v %v, want RST_STREAM NO_ERROR", f, ok)
	}
	// The body and trailers in flight are ignored; the connection lives.
	rc.do(func(fr *http2.Framer) error { return fr.WriteData(1, false, []byte("body")) })
	rc.headers(1, true, "x-checksum", "abc")
	rc.get(3, "/", true)
	if f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return f.stream == 3 || isGoAwayFrame(f) }); !ok || f.typ != http2.FrameHeaders {
		t.Fatalf("the next stream: got %v %v, want its answer", f, ok)
	}
}

// TestNoDataPastShrunkWindowAfterSettingsAck: once the server
// acknowledged a SETTINGS frame that shrank INITIAL_WINDOW_SIZE to zero,
// it must send no DATA that the old window allowed (RFC 9113, 6.9.2: the
// client holds the server to the new window from the ACK on). A frame
// sized before the SETTINGS but written after its ACK broke that.
func TestNoDataPastShrunkWindowAfterSettingsAck(t *testing.T) {
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1024)
		for {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})}
	ts := startServer(t, srv, false)
	for trial := range 100 {
		rc := dialHostile(t, ts.addr, true, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
		rc.do(func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1<<30) })
		for id := uint32(1); id <= 7; id += 2 {
			rc.get(id, "/", true)
		}
		isData := func(f seenFrame) bool { return f.typ == http2.FrameData && f.n > 0 }
		if _, ok := rc.wait(2*time.Second, isData); !ok {
			t.Fatal("no DATA")
		}
		// The ACK of the first SETTINGS went before any DATA: the next
		// one is this frame's.
		rc.do(func(fr *http2.Framer) error {
			return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		})
		isAck := func(f seenFrame) bool { return f.typ == http2.FrameSettings && f.flags.Has(http2.FlagSettingsAck) }
		if _, ok := rc.wait(2*time.Second, isAck); !ok {
			t.Fatal("no SETTINGS ACK")
		}
		if f, ok := rc.wait(50*time.Millisecond, isData); ok {
			t.Fatalf("trial %d: %v after the ACK of a SETTINGS that closed every stream window", trial, f)
		}
		rc.nc.Close()
	}
}

// TestSettingsAckBeforeReleasedData: a SETTINGS frame that opens stream
// windows closed until then is acknowledged before any DATA it releases
// (as h2spec 6.9.2/1 reads it): a client that reads up to the ACK and
// then waits for the DATA must find it after the ACK, not skipped before.
// An answer waiting for window was woken by the new value and could take
// the connection's writer ahead of the ACK.
func TestSettingsAckBeforeReleasedData(t *testing.T) {
	wrote := make(chan struct{}, 1)
	srv := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		wrote <- struct{}{}
		_, _ = w.Write([]byte("hello"))
	})}
	ts := startServer(t, srv, false)
	isAck := func(f seenFrame) bool { return f.typ == http2.FrameSettings && f.flags.Has(http2.FlagSettingsAck) }
	for trial := range 200 {
		rc := dialHostile(t, ts.addr, true, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		if _, ok := rc.wait(2*time.Second, isAck); !ok {
			t.Fatal("no ACK of the first SETTINGS")
		}
		rc.get(1, "/", true)
		if _, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return f.typ == http2.FrameHeaders && f.stream == 1 }); !ok {
			t.Fatal("no HEADERS")
		}
		<-wrote
		// The handler's write now waits for window, or is about to.
		rc.do(func(fr *http2.Framer) error {
			return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
		})
		f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return isAck(f) || f.typ == http2.FrameData })
		if !ok {
			t.Fatalf("trial %d: neither the ACK nor DATA", trial)
		}
		if !isAck(f) {
			t.Fatalf("trial %d: %v before the ACK of the SETTINGS that released it", trial, f)
		}
		if f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return f.typ == http2.FrameData }); !ok || f.n != 1 {
			t.Fatalf("trial %d: got %v %v after the ACK, want DATA of the 1 byte the window allows", trial, f, ok)
		}
		rc.nc.Close()
	}
}
