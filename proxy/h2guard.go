package proxy

import (
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
)

// HTTP/2 frame types and flags the guard looks at (RFC 9113 section 6).
const (
	frameData         = 0x0
	frameHeaders      = 0x1
	framePriority     = 0x2
	frameRSTStream    = 0x3
	frameSettings     = 0x4
	framePushPromise  = 0x5
	framePing         = 0x6
	frameGoAway       = 0x7
	frameWindowUpdate = 0x8
	frameContinuation = 0x9

	flagEndStream = 0x1
	flagAck       = 0x1

	frameHeaderLen = 9
)

// h2Limits are the abuse limits of one HTTP/2 connection.
type h2Limits struct {
	// glitches is how many abusive frames a connection may send in a
	// burst; forgiven per second are forgotten again (a leaky bucket), so
	// a long-lived connection is judged by its recent behaviour.
	glitches   int
	forgiven   float64
	maxStreams uint32
}

// h2Guard sits between an HTTP/2 server connection and its socket. It
// parses the frame headers going both ways (no payloads, so it costs a
// few comparisons per frame) and counts what a well-behaved client does
// not do, as "glitches":
//   - a stream the client resets before any response header was sent
//     (Rapid Reset: each such stream started a request for nothing);
//   - a stream the server refused or reset before answering it, which
//     happens when the client breaks the protocol on that stream;
//   - SETTINGS after the first and DATA frames that are empty and do not
//     end their stream;
//   - frames that well-behaved clients send in proportion to something,
//     beyond that proportion (and a small allowance at the start):
//     WINDOW_UPDATEs beyond two per DATA frame and per 512 bytes the server
//     sent; PINGs beyond one per DATA frame the server sent (clients
//     measuring the bandwidth-delay product ping as data arrives; a
//     keep-alive ping now and then is forgiven with time); PRIORITY,
//     PRIORITY_UPDATE and frames of unknown types beyond two per stream
//     the client opened.
//
// Past the limit the next read fails with ENHANCE_YOUR_CALM as a
// connection error: the HTTP/2 server then sends GOAWAY itself, at a frame
// boundary of its own writes, and closes the connection, which cancels
// every request still running on it and so their backend requests.
//
// The guard cuts what the server reads at the frame that went over the
// limit, so no request arrives after it: the requests a connection can
// start and reset are bounded by the limit.
type h2Guard struct {
	net.Conn
	log    *zap.Logger
	limits h2Limits

	// Read side, used only by the server's reading goroutine.
	in       frameScanner
	settings int
	maxID    uint32
	// priorityCredit is how many PRIORITY, PRIORITY_UPDATE and unknown
	// frames the client may still send.
	priorityCredit int

	// tripped is set once the limit is passed; reads fail from then on.
	tripped atomic.Bool

	// Write side, used by the server's writing goroutine.
	out frameScanner

	mu sync.Mutex // guards what both sides share
	// unanswered are the client's streams that got no response header
	// yet; bounded by maxUnanswered.
	unanswered map[uint32]struct{}
	// windowCredit and pingCredit are how many WINDOW_UPDATEs and PINGs
	// the client may still send.
	windowCredit, pingCredit int
	score                    float64
	scoredAt                 time.Time
	reason                   string // what tripped the limit, for the log
}

// errEnhanceYourCalm is what a tripped guard's reads return; the HTTP/2
// server answers a ConnectionError with a GOAWAY carrying its code.
var errEnhanceYourCalm = http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)

// initialCredit covers what a client sends before any stream or DATA:
// WINDOW_UPDATEs enlarging the connection window, as browsers do at once,
// PRIORITY frames building a dependency tree of idle streams, as some
// browsers do, a ping to measure the round trip.
const initialCredit = 16

func newH2Guard(c net.Conn, limits h2Limits, log *zap.Logger) net.Conn {
	g := &h2Guard{Conn: c, log: log, limits: limits, windowCredit: initialCredit, pingCredit: initialCredit, priorityCredit: initialCredit}
	g.in.skip = len(http2.ClientPreface)
	if tc, ok := c.(*tls.Conn); ok {
		// The HTTP/2 server reads the TLS state (r.TLS, cipher checks)
		// through this method.
		return &h2GuardTLS{h2Guard: g, tc: tc}
	}
	return g
}

type h2GuardTLS struct {
	*h2Guard
	tc *tls.Conn
}

func (g *h2GuardTLS) ConnectionState() tls.ConnectionState { return g.tc.ConnectionState() }

func (g *h2Guard) Read(p []byte) (int, error) {
	if g.tripped.Load() {
		return 0, errEnhanceYourCalm
	}
	n, err := g.Conn.Read(p)
	if n > 0 {
		if cut, stop := g.in.scan(p[:n], g.inbound); stop {
			return cut, nil
		}
	}
	if err != nil && g.tripped.Load() {
		// Woken by trip's deadline: the limit was passed on the write
		// side.
		return n, errEnhanceYourCalm
	}
	return n, err
}

func (g *h2Guard) Write(p []byte) (int, error) {
	g.out.scan(p, g.outbound)
	return g.Conn.Write(p)
}

// inbound looks at one frame header from the client; it reports whether
// the connection is over its limit.
func (g *h2Guard) inbound(typ, flags byte, length int, id uint32) bool {
	switch typ {
	case frameData:
		if length == 0 && flags&flagEndStream == 0 {
			return g.glitch("empty DATA frames")
		}
	case frameHeaders:
		if id > g.maxID && id%2 == 1 {
			g.maxID = id
			g.priorityCredit = min(g.priorityCredit+2, 1<<20)
			return g.opened(id)
		}
	case frameRSTStream:
		return g.reset(id, "streams reset before their response")
	case frameSettings:
		if flags&flagAck == 0 {
			if g.settings++; g.settings > 1 {
				return g.glitch("SETTINGS frames")
			}
		}
	case framePing:
		if flags&flagAck == 0 && !g.spend(&g.pingCredit) {
			return g.glitch("PING frames")
		}
	case frameWindowUpdate:
		if !g.spend(&g.windowCredit) {
			return g.glitch("WINDOW_UPDATE frames")
		}
	case frameContinuation, frameGoAway, framePushPromise:
		// The server bounds header blocks itself; a GOAWAY ends the
		// connection; a client's PUSH_PROMISE is a protocol error.
	default: // PRIORITY, PRIORITY_UPDATE (RFC 9218, 0x10), unknown types
		if g.priorityCredit == 0 {
			return g.glitch("PRIORITY and unknown frames")
		}
		g.priorityCredit--
	}
	return false
}

// outbound looks at one frame header the server sends.
func (g *h2Guard) outbound(typ, _ byte, length int, id uint32) bool {
	switch typ {
	case frameData:
		// Clients return window as they consume, in steps as small as a
		// few KiB, for the stream and the connection each: two updates
		// per 512 bytes sent is generous and still ties them to data.
		g.mu.Lock()
		g.windowCredit = min(g.windowCredit+2+length/256, 1<<20)
		g.pingCredit = min(g.pingCredit+1, 1<<20)
		g.mu.Unlock()
	case frameHeaders:
		g.mu.Lock()
		delete(g.unanswered, id)
		g.mu.Unlock()
	case frameRSTStream:
		if g.reset(id, "streams refused or reset by the server before their response") {
			g.trip()
		}
	}
	return false
}

// spend takes one from a credit shared with the write side; it reports
// false when there was none.
func (g *h2Guard) spend(credit *int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if *credit == 0 {
		return false
	}
	*credit--
	return true
}

// opened records a new stream of the client.
func (g *h2Guard) opened(id uint32) bool {
	g.mu.Lock()
	if g.unanswered == nil {
		g.unanswered = map[uint32]struct{}{}
	}
	full := len(g.unanswered) >= 4*int(g.limits.maxStreams)+16
	if !full {
		g.unanswered[id] = struct{}{}
	}
	g.mu.Unlock()
	if full {
		// More streams waiting than the server runs at once.
		return g.glitch("streams opened and not answered")
	}
	return false
}

// reset counts a stream that ended before its response started.
func (g *h2Guard) reset(id uint32, reason string) bool {
	g.mu.Lock()
	_, premature := g.unanswered[id]
	delete(g.unanswered, id)
	g.mu.Unlock()
	return premature && g.glitch(reason)
}

// glitch adds one to the connection's score and reports whether it is
// over the limit.
func (g *h2Guard) glitch(reason string) bool {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.scoredAt.IsZero() {
		g.score = max(0, g.score-now.Sub(g.scoredAt).Seconds()*g.limits.forgiven)
	}
	g.scoredAt = now
	g.score++
	if g.score <= float64(g.limits.glitches) || g.reason != "" {
		return g.reason != ""
	}
	g.reason = reason
	g.tripped.Store(true)
	g.log.Debug("HTTP/2 connection over its limit of abusive frames, sending GOAWAY",
		zap.Stringer("remote", g.RemoteAddr()), zap.String("reason", reason), zap.Int("limit", g.limits.glitches))
	return true
}

// trip makes a read that waits for the client end now, so the server
// learns of a limit passed on the write side.
func (g *h2Guard) trip() {
	_ = g.Conn.SetReadDeadline(time.Now())
}

// frameScanner follows the frame boundaries of one direction of an HTTP/2
// connection across the arbitrary chunks it is read or written in.
type frameScanner struct {
	skip int // bytes of the current frame's payload (or the preface) left
	hdr  [frameHeaderLen]byte
	nhdr int
}

// scan passes over p calling fn for every complete frame header. When fn
// reports true scan stops and returns the offset just past that frame's
// bytes in p (the whole of p when its payload goes on).
func (s *frameScanner) scan(p []byte, fn func(typ, flags byte, length int, id uint32) bool) (int, bool) {
	i := 0
	for i < len(p) {
		if s.skip > 0 {
			k := min(s.skip, len(p)-i)
			s.skip -= k
			i += k
			continue
		}
		k := copy(s.hdr[s.nhdr:], p[i:])
		s.nhdr += k
		i += k
		if s.nhdr < frameHeaderLen {
			break
		}
		s.nhdr = 0
		h := s.hdr
		length := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		s.skip = length
		if fn(h[3], h[4], length, binary.BigEndian.Uint32(h[5:])&(1<<31-1)) {
			return min(i+length, len(p)), true
		}
	}
	return len(p), false
}
