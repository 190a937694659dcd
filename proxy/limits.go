package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/internal/dataplane/sockio"
)

// errClientTooSlow is what a request body read or response write returns
// when the client was cut for not keeping pace (see pacer).
var errClientTooSlow = errors.New("client too slow")

// pacer bounds how long one request waits on its client, by progress
// rather than in total, so that long uploads, downloads and streams live as
// long as they move:
//   - idle: a body read or a response write waiting on the client for
//     longer than this is cut (for a write, this plus its own bytes, and
//     those a server still buffers, at the minimum rate: bytes written
//     earlier, which the kernel may still hold for a client that stopped
//     reading, give a blocked write no more time);
//   - minimum rate: once the time spent waiting on the client adds up to a
//     window, the bytes moved during those waits must average the rate, or
//     the request is cut. A write is judged while it is blocked too: it is
//     cut at the moment its window would close below the rate even if it
//     then returned with all its bytes. Time the proxy spends waiting on the backend does
//     not count: an SSE stream that sends an event a minute waits on its
//     backend, not on its client. The rule applies to response writes and
//     to request bodies of a declared length; a body streamed without one
//     (chunked, gRPC) may pause for as long as the idle timeout allows.
//
// Cutting a read fails the body the backend request is reading, which
// aborts that request and closes its backend connection; cutting a write
// makes the forwarder give up the response and close the backend's. An
// HTTP/1 connection is closed, an HTTP/2 stream reset.
type pacer struct {
	rc http.ResponseController
	// conn is the client's connection when it serves only this request
	// (HTTP/1), nil for an HTTP/2 stream.
	conn   *trackedConn
	log    *zap.Logger
	remote string
	idle   time.Duration
	rate   int64
	window time.Duration

	read, write paceOp

	mu    sync.Mutex // guards timer, armed, fires, done and writeCut against the watchdog
	timer *time.Timer
	// armed is set while the timer is set to fire, at fires (Unix ns): a
	// pooled pacer's timer stays armed from one request to the next (see
	// start), so that pacing a request changes no timer.
	armed    bool
	fires    int64
	done     bool
	writeCut bool
	cut      atomic.Pointer[string] // why the request was first cut
	// bodyCut is set once the request body was cut.
	bodyCut atomic.Bool
}

// paceOp is one direction of a request: the deadline of the read or write
// in progress for the watchdog, and the accounting of the rate window,
// touched only by the goroutine doing the reads or writes.
type paceOp struct {
	deadline atomic.Int64 // UnixNano; 0 when nothing is in progress
	// byRate is set when the deadline is the rate's, not the idle one's.
	byRate atomic.Bool
	waited time.Duration
	moved  int64
}

func (o *paceOp) reset() {
	o.deadline.Store(0)
	o.waited, o.moved = 0, 0
}

// begin records an operation starting at now that may wait allowed on
// the client. With a rate, an operation that would count n bytes moved is
// given no longer than the moment its window would close below the rate
// even if it then moved all n (what end would judge): a write the client
// leaves blocked is judged by the rate while it waits, not only once it
// returns, which it may never do.
func (o *paceOp) begin(now time.Time, allowed time.Duration, n int, rate int64, window time.Duration) {
	byRate := false
	if rate > 0 {
		// In floating point: moved may pass what nanoseconds at the rate
		// hold in an int64 (a fast client moves gigabytes in little
		// waiting).
		due := max(window, time.Duration(float64(o.moved+int64(n))/float64(rate)*float64(time.Second))) - o.waited
		if due < allowed {
			allowed, byRate = due, true
		}
	}
	if o.byRate.Load() != byRate {
		o.byRate.Store(byRate)
	}
	o.deadline.Store(now.Add(allowed).UnixNano())
}

// end records an operation that started at start and moved n bytes; it
// reports whether the window closed below the rate (rate 0: no rule).
func (o *paceOp) end(start time.Time, n int, rate int64, window time.Duration) bool {
	o.deadline.Store(0)
	o.waited += time.Since(start)
	o.moved += int64(n)
	if o.waited < window {
		return false
	}
	slow := rate > 0 && float64(o.moved) < float64(rate)*o.waited.Seconds()
	o.waited, o.moved = 0, 0
	return slow
}

// start begins pacing the request answered through w, at now. A pooled
// pacer that paced an earlier request starts afresh and keeps its watchdog
// timer: no timer is made per request.
func (p *pacer) start(w http.ResponseWriter, opts *Options, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rc = *http.NewResponseController(w)
	p.idle, p.window = opts.ClientIdleTimeout, opts.ClientRateWindow
	p.rate = 0
	if opts.ClientMinRate > 0 && p.window > 0 {
		p.rate = int64(opts.ClientMinRate)
	}
	p.read.reset()
	p.write.reset()
	p.done, p.writeCut = false, false
	p.cut.Store(nil)
	p.bodyCut.Store(false)
	switch {
	case p.idle <= 0:
		if p.armed {
			p.timer.Stop()
			p.armed = false
		}
	case p.timer == nil:
		p.timer = time.AfterFunc(p.idle, p.watch)
		p.armed, p.fires = true, now.Add(p.idle).UnixNano()
	default:
		// A timer still armed from an earlier request fires within idle
		// of now (unless idle shrank since): before any deadline of this
		// request, which the watch it runs then sleeps until. A watch of
		// an earlier request that runs late finds this request's
		// deadlines, none of them due: it only re-arms.
		if !p.armed || p.fires > now.Add(p.idle).UnixNano() {
			p.timer.Reset(p.idle)
			p.armed, p.fires = true, now.Add(p.idle).UnixNano()
		}
	}
}

// watch runs on a timer: it cuts the operation that overstayed its
// deadline, or sleeps until the next one could.
func (p *pacer) watch() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || p.idle <= 0 {
		// Between requests: the next one arms the timer again.
		p.armed = false
		return
	}
	now := time.Now()
	next := now.Add(p.idle)
	for _, op := range [...]struct {
		o    *paceOp
		read bool
	}{{&p.read, true}, {&p.write, false}} {
		d := op.o.deadline.Load()
		if d == 0 {
			continue
		}
		if now.UnixNano() >= d {
			// The other direction stays watched: the answer to a cut
			// body is written under the same rules.
			why := "idle"
			if op.o.byRate.Load() {
				why = "below the minimum rate"
			}
			p.cutLocked(op.read, why)
			continue
		}
		if t := time.Unix(0, d); t.Before(next) {
			next = t
		}
	}
	p.timer.Reset(next.Sub(now))
	p.fires = next.UnixNano()
}

// cutLocked makes the read or write waiting on the client fail now.
func (p *pacer) cutLocked(read bool, why string) {
	if p.done {
		return
	}
	p.cut.CompareAndSwap(nil, &why)
	dir := "response"
	if read {
		dir = "request body"
	}
	p.log.Debug("client too slow, cutting the request", zap.String("remote", p.remote), zap.String("direction", dir), zap.String("why", why))
	now := time.Now()
	if read {
		if !p.bodyCut.Swap(true) {
			_ = p.rc.SetReadDeadline(now)
		}
		return
	}
	if p.writeCut {
		return
	}
	p.writeCut = true
	if p.conn != nil {
		// What the kernel still buffers for a client that does not read
		// is dropped with a reset when the connection closes, instead of
		// trickling out to it at its pace.
		if tc, ok := p.conn.Conn.(interface{ SetLinger(int) error }); ok {
			_ = tc.SetLinger(0)
		}
	}
	_ = p.rc.SetWriteDeadline(now)
}

func (p *pacer) cutNow(read bool, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutLocked(read, why)
}

// stop ends the watch; the handler is about to return or hand the
// connection over (upgrade). The timer is left armed for a pooled pacer's
// next request (a watch that fires before it finds the pacer done and
// lets the timer be); release stops it.
func (p *pacer) stop() {
	p.mu.Lock()
	p.done = true
	p.mu.Unlock()
}

// release stops the timer of a pacer that is not pooled: left armed, it
// would keep the pacer until it fired, and a timer per recent request
// would wait in the runtime's heap.
func (p *pacer) release() {
	p.mu.Lock()
	if p.armed {
		p.timer.Stop()
		p.armed = false
	}
	p.mu.Unlock()
}

// failed turns the error of a cut operation into errClientTooSlow.
func (p *pacer) failed(err error) error {
	if err == nil {
		return nil
	}
	if why := p.cut.Load(); why != nil {
		return fmt.Errorf("%w (%s): %w", errClientTooSlow, *why, err)
	}
	return err
}

// pacedBody is a request body read under a pacer.
type pacedBody struct {
	io.ReadCloser
	p    *pacer
	rate int64 // 0 for a body of unknown length
}

func (b *pacedBody) Read(buf []byte) (int, error) {
	start := time.Now()
	b.p.read.begin(start, b.p.idle, 0, 0, 0)
	n, err := b.ReadCloser.Read(buf)
	if b.p.read.end(start, n, b.rate, b.p.window) && err == nil {
		b.p.cutNow(true, "below the minimum rate")
		return n, b.p.failed(os.ErrDeadlineExceeded)
	}
	return n, b.p.failed(err)
}

// pacedWriter is a response written under a pacer. It also tracks the
// connection of an upgraded request, which it hands over when hijacked.
type pacedWriter struct {
	http.ResponseWriter
	p  *pacer
	ps *portServer
	// pacer is p, allocated with the writer; status is what serveHTTP
	// records of the answer for metrics and the access log.
	pacer  pacer
	status statusWriter
	// received is when the server received the request: its clock read,
	// shared by the pacer and the request's metrics (see requestReceived).
	received time.Time
	// pending are the bytes written since the last flush, of which the
	// server may still hold up to serverBuffered: what a write or flush
	// may wait on the client to take besides its own.
	pending int
	// answered is set once a final status was written; discard when the
	// client is told 408 instead of what was being answered.
	answered, discard bool
	h1, hijacked      bool
	// http10: the client speaks HTTP/1.0, which takes any head for the
	// final one. closeConn: the connection closes after this request
	// (closesConnection).
	http10, closeConn bool
}

// WriteHeader answers 408 to a request whose body was cut, whatever the
// backend made of the truncated request (usually the forwarder's 502, or
// a backend's own answer when it gave up on the body first).
func (w *pacedWriter) WriteHeader(code int) {
	if w.answered {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified {
		// These answers have no content (RFC 9110 sections 6.4.1 and 8.6:
		// no Content-Length in a 1xx or 204; none in a 304 either, as
		// HTTP/1 servers commonly do). Over HTTP/2 a backend's Content-Length would be sent
		// on a stream without DATA, which clients read as a body cut short.
		delete(w.Header(), "Content-Length")
	}
	if code < 200 && w.http10 && code != http.StatusSwitchingProtocols {
		// No 1xx goes to an HTTP/1.0 client (RFC 9110, section 15.2): it
		// would read it as the answer, and the answer as the next one.
		// Package h1 holds to this as well; the check keeps the rule
		// whichever writer is underneath.
		return
	}
	if code < 200 {
		// A 1xx head is written and flushed at once: a wait on the client
		// like any write, which a backend sending heads without end to a
		// client that reads nothing would otherwise make endless. Its
		// bytes count as moved: a client taking large heads at a good
		// pace is not one that stalled. The backend's connection's own
		// fields go, as from its final answer: over HTTP/2 they would
		// make the head malformed.
		removeHopByHop(w.Header())
		n := headSize(w.Header())
		start := time.Now()
		w.p.write.begin(start, w.allowed(w.buffered()+n), n, w.p.rate, w.p.window)
		w.ResponseWriter.WriteHeader(code)
		_ = w.ended(start, n, nil)
		return
	}
	w.answered = true
	if !w.p.bodyCut.Load() || code == http.StatusRequestTimeout {
		if w.closeConn {
			// Set on the final answer, not before the request is
			// forwarded: a forwarder clears the header map after each
			// 1xx it relays.
			w.Header().Set("Connection", "close")
		}
		w.ResponseWriter.WriteHeader(code)
		return
	}
	w.discard = true
	h := w.Header()
	clear(h)
	if w.h1 { // the rest of the body is not on the connection
		h.Set("Connection", "close")
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.ResponseWriter.WriteHeader(http.StatusRequestTimeout)
	_, _ = io.WriteString(w.ResponseWriter, "request body too slow\n")
}

// headSize is about the bytes of an HTTP/1.1 head carrying h (HTTP/2
// compresses it: fewer).
func headSize(h http.Header) int {
	n := len("HTTP/1.1 103 Early Hints\r\n\r\n")
	for k, vv := range h {
		for _, v := range vv {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return n
}

// serverBuffered is the most of an answer the servers hold before they
// hand it to the connection: package h2's write buffer (16 KiB; package
// h1 keeps 4 KiB). Whatever was written before that
// is in the kernel's buffers, or the client's flow-control window, and
// a write waits for it no longer than for bytes the client takes.
const serverBuffered = 16 << 10

// buffered is what of the bytes written since the last flush the server
// may still hold.
func (w *pacedWriter) buffered() int { return min(w.pending, serverBuffered) }

// allowed is how long a write that may hand n bytes to the connection may
// wait on the client: the idle timeout, plus n at the minimum rate.
func (w *pacedWriter) allowed(n int) time.Duration {
	d := w.p.idle
	if w.p.rate > 0 {
		d += time.Duration(int64(n) * int64(time.Second) / w.p.rate)
	}
	return d
}

func (w *pacedWriter) Write(b []byte) (int, error) {
	if !w.answered {
		w.WriteHeader(http.StatusOK)
	}
	if w.discard {
		return len(b), nil
	}
	start := time.Now()
	w.p.write.begin(start, w.allowed(w.buffered()+len(b)), len(b), w.p.rate, w.p.window)
	w.pending += len(b)
	n, err := w.ResponseWriter.Write(b)
	return n, w.ended(start, n, err)
}

func (w *pacedWriter) FlushError() error {
	start := time.Now()
	w.p.write.begin(start, w.allowed(w.buffered()), 0, w.p.rate, w.p.window)
	err := w.p.rc.Flush()
	w.pending = 0
	return w.ended(start, 0, err)
}

// Flush is for handlers that look for http.Flusher rather than using a
// ResponseController.
func (w *pacedWriter) Flush() { _ = w.FlushError() }

func (w *pacedWriter) ended(start time.Time, n int, err error) error {
	if w.p.write.end(start, n, w.p.rate, w.p.window) && err == nil {
		w.p.cutNow(false, "below the minimum rate")
		return w.p.failed(os.ErrDeadlineExceeded)
	}
	return w.p.failed(err)
}

func (w *pacedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection of an upgraded request (a WebSocket) over.
// From then on no pacing applies: an open WebSocket may be silent for as
// long as its application likes, and only the connection cap of the port
// bounds how many there are. The connection is tracked so that a port
// shutting down waits for it and closes it at the drain deadline.
func (w *pacedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.p.rc.Hijack()
	if err != nil {
		return nil, nil, err // HTTP/2: the request goes on, still paced
	}
	// A cut the watchdog made in between is undone with the deadlines.
	w.p.stop()
	w.hijacked = true
	_ = c.SetDeadline(time.Time{})
	return w.ps.untracked.add(c), brw, nil
}

// serveLimited serves a request under the port's pacing limits.
func (ps *portServer) serveLimited(w http.ResponseWriter, r *http.Request) {
	opts := &ps.rt.opts
	if isUpgrade(r) {
		// Counted from the start, not from the hijack, so that a shutdown
		// beginning in between waits for it.
		ps.untracked.begin()
		defer ps.untracked.end()
	}
	h1 := r.ProtoMajor == 1
	if !h1 && r.ContentLength == 0 {
		// An HTTP/2 stream that ended with its headers (or declared an
		// empty body): nothing reads its body, the backend request has
		// none, so it is paced as a request without one.
		r.Body = http.NoBody
	}
	bodyless := r.Body == nil || r.Body == http.NoBody
	pw := ps.pacedWriter(w, bodyless)
	defer ps.donePacing(pw, bodyless)
	p := pw.p
	p.log, p.remote = ps.log, r.RemoteAddr
	if h1 {
		pw.h1 = true
		pw.http10 = r.ProtoMinor == 0
		pw.closeConn = closesConnection(r)
		p.conn, _ = r.Context().Value(connKey{}).(*trackedConn)
	}
	pw.received = requestReceived(w)
	p.start(w, opts, pw.received)
	if !bodyless {
		b := &pacedBody{ReadCloser: r.Body, p: p}
		if r.ContentLength > 0 {
			b.rate = p.rate
		}
		r.Body = b
	}
	ps.serveHTTP(pw, r)
	if !pw.answered && !pw.hijacked && p.bodyCut.Load() {
		// Whatever gave up on the cut body without answering, the client
		// is told why; net/http would send a 200.
		pw.WriteHeader(http.StatusRequestTimeout)
	}
	if h1 && p.idle > 0 {
		// net/http writes the end of the response after the handler
		// returns; a client that stopped reading must not hold it forever.
		// net/http lifts the deadline once it has finished the response.
		p.mu.Lock()
		if !p.done && !p.writeCut {
			_ = p.rc.SetWriteDeadline(time.Now().Add(p.idle))
		}
		p.mu.Unlock()
	}
}

// requestReceived is when the server that answers through w received the
// request, as it read the clock for it (package h1's Received); now for a
// server that does not say.
func requestReceived(w http.ResponseWriter) time.Time {
	if rw, ok := w.(interface{ Received() time.Time }); ok {
		if t := rw.Received(); !t.IsZero() {
			return t
		}
	}
	return time.Now()
}

// closesConnection reports whether r's connection must close after its
// answer. RFC 9112 section 6.1: after a request with both Content-Length
// and Transfer-Encoding, or an HTTP/1.0 request with Transfer-Encoding,
// the connection must not carry another request: a proxy in front may
// have framed the body differently, and the bytes it thought were body
// would be read as the next request. Go's server removes both headers
// before a handler runs, so the two cannot be told apart from a plain
// chunked (or HTTP/1.0) request: every such request closes its
// connection.
func closesConnection(r *http.Request) bool {
	return r.ProtoMajor == 1 && (r.ProtoMinor == 0 || len(r.TransferEncoding) > 0)
}

// pacedWriter returns the writer to pace a request answered through w.
// Writers of requests without a body are pooled, pacer and watchdog timer
// included: none is made per request. A request with a body gets a writer
// of its own, since a transport may still read the body through its pacer
// after the handler returned.
func (ps *portServer) pacedWriter(w http.ResponseWriter, bodyless bool) *pacedWriter {
	var pw *pacedWriter
	if bodyless {
		pw, _ = ps.writers.Get().(*pacedWriter)
	}
	if pw == nil {
		pw = &pacedWriter{ps: ps}
		pw.p = &pw.pacer
	}
	pw.ResponseWriter = w
	pw.pending = 0
	pw.answered, pw.discard, pw.h1, pw.hijacked = false, false, false, false
	pw.http10, pw.closeConn = false, false
	return pw
}

// donePacing stops pw's watch and drops what it holds of the request, so
// that a pooled writer keeps none of it alive, then pools it. A watch
// still running late for this request finds it stopped, or the next
// request's deadlines, none of them due.
func (ps *portServer) donePacing(pw *pacedWriter, bodyless bool) {
	p := pw.p
	p.stop()
	p.mu.Lock()
	p.rc = http.ResponseController{}
	p.conn = nil
	p.mu.Unlock()
	pw.ResponseWriter = nil
	pw.status = statusWriter{}
	if bodyless {
		ps.writers.Put(pw)
	} else {
		p.release()
	}
}

// untrackedConns are the connections of a port that its http.Server does
// not track: cleartext HTTP/2 connections and hijacked (upgraded) ones. A
// shutdown waits for them until its deadline, then closes them.
type untrackedConns struct {
	mu sync.Mutex
	// active counts what is being served: cleartext HTTP/2 connections
	// and the handlers of upgraded requests.
	active int
	conns  map[*untrackedConn]struct{}
	// reading are connections read before they are served (a
	// ClientHello), which closeAll closes too: a client that sends
	// nothing must not hold a shutdown past its deadline.
	reading map[net.Conn]struct{}
}

// read tracks c while it is read before being served, until done is
// called.
func (s *untrackedConns) read(c net.Conn) (done func()) {
	s.mu.Lock()
	if s.reading == nil {
		s.reading = map[net.Conn]struct{}{}
	}
	s.reading[c] = struct{}{}
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.reading, c)
		s.mu.Unlock()
	}
}

func (s *untrackedConns) begin() {
	s.mu.Lock()
	s.active++
	s.mu.Unlock()
}

func (s *untrackedConns) end() {
	s.mu.Lock()
	s.active--
	s.mu.Unlock()
}

// wait reports whether everything ended before ctx did.
func (s *untrackedConns) wait(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := s.active
		s.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

type untrackedConn struct {
	net.Conn
	set  *untrackedConns
	once sync.Once
}

// Inner is the connection tracked, which streams copy to and from.
func (c *untrackedConn) Inner() net.Conn { return c.Conn }

func (c *untrackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.conns, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// add tracks c until it is closed.
func (s *untrackedConns) add(c net.Conn) *untrackedConn {
	uc := &untrackedConn{Conn: c, set: s}
	s.mu.Lock()
	if s.conns == nil {
		s.conns = map[*untrackedConn]struct{}{}
	}
	s.conns[uc] = struct{}{}
	s.mu.Unlock()
	return uc
}

// closeAll closes every tracked connection, and those still read before
// being served, and returns how many.
func (s *untrackedConns) closeAll() int {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.conns)+len(s.reading))
	for c := range s.conns {
		conns = append(conns, c)
	}
	for c := range s.reading {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

// connLimit caps the open connections of a port, and those of each
// client address on it. Past a cap a new connection is closed at once
// (with a reset): the client fails fast, and the kernel's accept queue does
// not fill with connections nobody serves, while established connections
// go on as before.
type connLimit struct {
	// max is the cap (<= 0: none); Apply may change it while the port
	// serves (Options.FitConnCaps).
	max    atomic.Int64
	open   atomic.Int64
	logged atomic.Int64 // UnixNano of the last log of a refusal
	log    *zap.Logger
	keeper *sockio.Keeper // counts the connections of every port

	// perClient is each client address's share of the port (<= 0: no
	// cap); clients counts the open connections of each address that has
	// any, so it holds at most as many entries as the port has
	// connections.
	perClient     int64
	mu            sync.Mutex
	clients       map[netip.Addr]int64
	clientsLogged atomic.Int64 // UnixNano of the last log of a refusal
}

// connLimitLogEvery spaces the warnings of a port at its cap.
const connLimitLogEvery = 5 * time.Second

// admit reports whether a new connection from client may be served; if
// so, release must be called once, with the same client, when it closes.
func (l *connLimit) admit(client netip.Addr) bool {
	if max := l.max.Load(); l.open.Add(1) > max && max > 0 {
		l.open.Add(-1)
		l.warn(&l.logged, "connection cap of the port reached; refusing new connections", zap.Int64("max", max))
		return false
	}
	if !l.admitClient(client) {
		l.open.Add(-1)
		l.warn(&l.clientsLogged, "a client reached its share of the port's connections (--max-connections-per-client); refusing its new connections",
			zap.Int64("max", l.perClient), zap.Stringer("client", client))
		return false
	}
	l.keeper.Opened()
	return true
}

func (l *connLimit) admitClient(client netip.Addr) bool {
	if l.perClient <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.clients[client]
	if n >= l.perClient {
		return false
	}
	if l.clients == nil {
		l.clients = map[netip.Addr]int64{}
	}
	l.clients[client] = n + 1
	return true
}

// warn logs msg at most every connLimitLogEvery, as last records.
func (l *connLimit) warn(last *atomic.Int64, msg string, fields ...zap.Field) {
	now := time.Now().UnixNano()
	if prev := last.Load(); now-prev >= int64(connLimitLogEvery) && last.CompareAndSwap(prev, now) {
		l.log.Warn(msg, fields...)
	}
}

func (l *connLimit) release(client netip.Addr) {
	l.releaseClient(client)
	l.open.Add(-1)
	l.keeper.Closed()
}

// releaseClient gives back a connection of client's share.
func (l *connLimit) releaseClient(client netip.Addr) {
	if l.perClient <= 0 {
		return
	}
	l.mu.Lock()
	if n := l.clients[client] - 1; n > 0 {
		l.clients[client] = n
	} else {
		delete(l.clients, client)
	}
	l.mu.Unlock()
}

// clientAddr is the address a connection counts against for
// MaxConnsPerClient: its peer's IP, an IPv4-mapped address as IPv4.
func clientAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}
