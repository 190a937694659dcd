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
