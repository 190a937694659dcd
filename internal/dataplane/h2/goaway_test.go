package h2

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestClientGoAwayUnknownCode (h2spec 7/1): a GOAWAY from the client with
// an error code RFC 9113 does not define triggers nothing special (section
// 7): it is a GOAWAY NO_ERROR, and a PING after it is answered.
func TestClientGoAwayUnknownCode(t *testing.T) {
	ts := startServer(t, &Server{Handler: http.NotFoundHandler()}, false)
	rc := dialHostile(t, ts.addr, true)
	rc.do(func(fr *http2.Framer) error { return fr.WriteGoAway(0, http2.ErrCode(0xff), nil) })
	rc.do(func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) })
	f, ok := rc.wait(2*time.Second, func(f seenFrame) bool {
		return f.typ == http2.FramePing && f.flags.Has(http2.FlagPingAck) || isGoAwayFrame(f) && f.code != codeNo
	})
	if !ok || f.typ != http2.FramePing {
		t.Fatalf("got %v %v, want the PING answered", f, ok)
	}
}

// TestClientGoAwayErrorClosesCleanly: a GOAWAY from the client with an
// error ends the connection, but the frames it sent after it must not make
// the close a reset (the client's last reads would fail).
func TestClientGoAwayErrorClosesCleanly(t *testing.T) {
	ts := startServer(t, &Server{Handler: http.NotFoundHandler()}, false)
	// A few tries: the reset came when the PING arrived before the close.
	for range 3 {
		rc := dialHostile(t, ts.addr, false)
		rc.do(func(fr *http2.Framer) error {
			if err := fr.WriteGoAway(0, http2.ErrCodeInternal, nil); err != nil {
				return err
			}
			return fr.WritePing(false, [8]byte{1})
		})
		_ = rc.nc.SetReadDeadline(time.Now().Add(3 * time.Second))
		var err error
		for err == nil {
			_, err = rc.fr.ReadFrame()
		}
		if errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "reset by peer") {
			t.Fatalf("the connection was reset: %v", err)
		}
		rc.nc.Close()
	}
}

// TestHeadersOverMaxFrameSize (h2spec 4.2/3): a HEADERS frame larger than
// the server's SETTINGS_MAX_FRAME_SIZE is a connection error
// FRAME_SIZE_ERROR (RFC 9113, 4.2), not a request.
func TestHeadersOverMaxFrameSize(t *testing.T) {
	var served atomic.Bool
	ts := startServer(t, &Server{MaxReadFrameSize: 16 << 10, Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Store(true) })}, false)
	rc := dialHostile(t, ts.addr, true)
	// Huffman-coded, 8000 bytes take 5000: the block is about 25 kB.
	big := strings.Repeat("d", 8000)
	rc.get(1, "/", true, "x-d1", big, "x-d2", big, "x-d3", big, "x-d4", big, "x-d5", big)

	f, ok := rc.wait(2*time.Second, func(f seenFrame) bool { return isGoAwayFrame(f) || f.stream == 1 })
	if !ok || f.typ != http2.FrameGoAway || f.code != codeFrameSize {
		t.Fatalf("got %v %v, want GOAWAY FRAME_SIZE_ERROR", f, ok)
	}
	if served.Load() {
		t.Error("the request was served")
	}
}
