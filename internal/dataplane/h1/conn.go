package h1

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"portico.dev/portico/internal/dataplane/httpdate"
)

// conn is one connection being served, pooled with its buffers.
type conn struct {
	srv    *Server
	rwc    net.Conn
	remote string
	tls    *tls.ConnectionState
	base   context.Context
	state  atomic.Int32
	cr     connReader
	br     *bufio.Reader
	bw     *bufio.Writer
	// head holds the bytes of the request head being parsed; hdr the
	// response head being built; pre the start of a response body, held
	// until the handler returns or it outgrows it, so that a short
	// response gets a Content-Length instead of chunks.
	head, hdr, pre []byte
	// parsed is the head of the request being served; header the
	// response's header map, cleared for the next one.
	parsed request
	header http.Header
	date   httpdate.Cache
	// watcher arms the watch for the client going away (see watch);
	// watchArmed is set while it is set to fire, watchFrom is when the
	// current request may be watched (Unix ns).
	watcher    *time.Timer
	watchArmed atomic.Bool
	watchFrom  atomic.Int64
	// cur is the response being served, for the watch.
	cur      atomic.Pointer[response]
	hijacked atomic.Bool
	// readDeadline and writeDeadline are set when a handler set that
	// deadline of the connection, which is lifted once its response is
	// done (only that one: a lift costs as much as a set).
	readDeadline, writeDeadline atomic.Bool
	// idleSince is when the connection last went idle after a request
	// (Unix ns); 0 while it waits for its first one. Read with state by
	// the shedding of idle connections (Server.CloseIdleSince).
	idleSince atomic.Int64
	// headerTimeout is the connection's ReadHeaderTimeout, or what
	// Server.Timeouts gave it for its next request (ns).
	headerTimeout atomic.Int64
}

// headTimeout is the bound of reading the connection's next head.
func (c *conn) headTimeout() time.Duration { return time.Duration(c.headerTimeout.Load()) }

func (c *conn) reset() {
	c.rwc, c.base, c.tls = nil, nil, nil
	c.hijacked.Store(false)
	c.cr.reset()
	c.br.Reset(nil)
	c.bw.Reset(nil)
	c.head, c.hdr, c.pre = c.head[:0], c.hdr[:0], c.pre[:0]
}

// serve runs the connection's request loop; it reports whether the
// connection was hijacked, and otherwise has closed it.
func (c *conn) serve() (hijacked bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				c.srv.log().Error("panic serving a request", zap.String("remote", c.remote), zap.Any("panic", v), zap.ByteString("stack", buf))
			}
			w := c.cur.Swap(nil)
			if w != nil {
				w.ctx.Cancel(nil)
			}
			if hijacked = c.hijacked.Load(); !hijacked {
				c.rwc.Close()
				// A goroutine still reading the body (a transport) must
				// not read on once the connection is pooled: its reader
				// will serve another client. Closing the connection
				// first ends a read in progress, which Close waits for.
				if w != nil && w.body != nil {
					w.body.Close()
				}
				// The background read ends with the connection; it must
				// be over before the connection is pooled.
				c.unwatch()
			}
		}
	}()
	s := c.srv
	first := true
	// now is read once between requests: when the connection went idle,
	// and what the wait for the next request counts from.
	now := time.Now()
	for {
		if !c.awaitRequest(first, now) {
			c.rwc.Close()
			return false
		}
		first = false
		w, err := c.readRequest()
		if err != nil {
			c.refuse(err)
			return false
		}
		c.watchAfter(w, s.closeDetectDelay())
		if w.req.RequestURI == "*" {
			// No handler sets a deadline for this answer: a client that
			// never reads it (and pipelines more) would hold the
			// connection forever. Bounded like a head.
			if d := c.headTimeout(); d > 0 {
				_ = w.SetWriteDeadline(time.Now().Add(d))
			}
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(http.StatusOK)
		} else {
			s.Handler.ServeHTTP(w, w.req)
		}
		if w.hijacked {
			return true
		}
		c.cur.Store(nil)
		c.unwatch()
		keep := w.finish()
		w.ctx.Cancel(nil)
		c.cr.liftHandlers(c.readDeadline.Swap(false), c.writeDeadline.Swap(false))
		// Stored before the state turns idle: a shedding that sees the
		// connection idle sees when it went idle too.
		now = time.Now()
		c.idleSince.Store(now.UnixNano())
		if !keep || s.shutting.Load() || !c.state.CompareAndSwap(stateActive, stateIdle) {
			c.closeWrite()
			return false
		}
		s.signal()
	}
}

// connWriter is what the connection's buffered writer writes to. A write
// that fails cancels the request being served, as net/http's server
// cancels it: a handler told of no error by what it writes (a 1xx head:
// WriteHeader returns nothing) would otherwise go on for a client that is
// gone or was cut, and the backend request it relays with it.
type connWriter struct{ c *conn }

func (cw connWriter) Write(p []byte) (int, error) {
	c := cw.c
	n, err := c.rwc.Write(p)
	if err != nil && !c.hijacked.Load() {
		if w := c.cur.Load(); w != nil {
			w.ctx.Cancel(err)
		}
	}
	return n, err
}

// awaitRequest waits for the first byte of the next request and marks the
// connection active; false when the connection is to close instead. now is
// when the wait began.
func (c *conn) awaitRequest(first bool, now time.Time) bool {
	s := c.srv
	header, idle := s.ReadHeaderTimeout, s.IdleTimeout
	if s.Timeouts != nil {
		h, i := s.Timeouts(c.base)
		header, idle = cmp.Or(h, header), cmp.Or(i, idle)
	}
	c.headerTimeout.Store(int64(header))
	if c.br.Buffered() == 0 {
		// Waiting: the deadline is the idle timeout, or for the first
		// request the header timeout, counted from the connection's start.
		var d time.Duration
		if first {
			d = header
		} else {
			d = idle
		}
		if d > 0 {
			c.cr.armIdle(now.Add(d), d)
		} else {
			c.cr.lift(rdArmed, rdHead, rdStale)
		}
		if _, err := c.br.Peek(1); err != nil {
			return false
		}
	}
	if !c.state.CompareAndSwap(stateIdle, stateActive) {
		return false // Shutdown closed it while it waited
	}
	if !first && header > 0 {
		// The header deadline is armed only if the head needs another
		// read (see connReader.Read): most heads arrive whole with their
		// first byte and then need none.
		c.cr.mark(rdHead)
	}
	return true
}

// readRequest reads and parses the next request head and makes its
// request and response.
func (c *conn) readRequest() (*response, error) {
	var err error
	c.head, err = readHead(c.br, c.head[:0], c.srv.maxHeaderBytes())
	if err != nil {
		return nil, err
	}
	// The deadline that bounded the wait and the head is lifted only
	// before the connection is read again (see connReader.Read): a
	// request without a body is served without one more change.
	c.cr.mark(rdStale)
	p := &c.parsed
	if err := parseHead(c.head, p); err != nil {
		return nil, err
	}
	if c.header == nil {
		c.header = make(http.Header, 8)
	}
	clear(c.header)
	w := &response{c: c, contentLength: -1, header: c.header}
	w.ctx.Init(c.base)
	w.reqv = *(&http.Request{}).WithContext(&w.ctx)
	req := &w.reqv
	w.req = req
	u := &w.url
	if err := p.parseURL(u); err != nil {
		return nil, err
	}
	req.Method = p.method
	req.URL = u
	req.Proto, req.ProtoMajor, req.ProtoMinor = p.proto, p.major, p.minor
	req.Header = p.header
	req.ContentLength = p.contentLength
	req.Close = p.close
	req.Host = p.host
	if u.Host != "" {
		req.Host = u.Host // absolute-form: the target's authority wins
	}
	delete(req.Header, "Host")
	req.RemoteAddr = c.remote
	req.RequestURI = p.target
	req.TLS = c.tls
	w.isHEAD = p.method == http.MethodHead
	switch {
	case p.chunked:
		delete(req.Header, "Transfer-Encoding")
		req.TransferEncoding = chunkedOnly
		req.Trailer = p.trailer
		w.body = &body{br: c.br, chunked: true, first: true, maxTrailer: c.srv.maxHeaderBytes()}
		w.body.trailer = &req.Trailer
	case p.contentLength > 0:
		w.body = &body{br: c.br, remain: p.contentLength}
	}
	if w.body == nil {
		req.Body = http.NoBody
	} else {
		req.Body = w.body
		if p.expectContinue {
			w.expect = true
			w.canContinue.Store(true)
			w.body.beforeRead = w.sendContinue
		}
	}
	return w, nil
}

var chunkedOnly = []string{"chunked"}

// refuse answers a request that could not be read, unless the client went
// away or timed out, and closes the connection.
func (c *conn) refuse(err error) {
	var pe *parseError
	if !errors.As(err, &pe) {
		c.srv.log().Debug("request not read", zap.String("remote", c.remote), zap.Error(err))
		c.rwc.Close()
		return
	}
	c.srv.log().Debug("malformed request", zap.String("remote", c.remote), zap.Int("status", pe.status), zap.String("why", pe.why))
	text := fmt.Sprintf("%d %s", pe.status, http.StatusText(pe.status))
	_ = c.rwc.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c.bw, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", text, len(text), text)
	_ = c.bw.Flush()
	c.closeWrite()
}

// lingerMax bounds the wait for a client to read its last response after
// the connection was half-closed.
const (
	lingerMax   = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

// closeWrite closes a connection whose response may have been followed by
// bytes the client sent that nothing read (a body left unread, a pipelined
// request): closing at once would make the kernel send a reset, which can
// destroy the response before the client read it. So the write side is
// shut first, and what the client still sends is read and dropped, briefly,
// until it closes too.
func (c *conn) closeWrite() {
	if cw, ok := c.rwc.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err == nil {
			_ = c.rwc.SetReadDeadline(time.Now().Add(lingerMax))
			_, _ = io.CopyN(io.Discard, c.rwc, lingerBytes)
		}
	}
	c.rwc.Close()
}

// The watch for a client going away. net/http keeps a read pending on the
// connection during every request to notice a client that closed: a
// syscall (and a goroutine switch) per request, which most requests, done
// before the client could have left, never needed. Here the read starts
// only when a handler still runs after CloseDetectDelay and its request's
// body was read to the end (before that, the handler's body reads see the
// client leave). A byte it reads is the start of the next, pipelined
// request and is kept for it.

//
// The timer is not set and stopped for each request: it stays armed while
// requests follow each other, and when it fires early for the request then
// current it sleeps on until that request's delay is over. A timer that
// finds no request disarms; the next request arms it again.

// watchAfter makes w the current request, to be watched once it ran for
// d. The time goes first: a watch that finds w current finds its time.
// It reads the clock once for the request: when it was received (see
// response.Received).
func (c *conn) watchAfter(w *response, d time.Duration) {
	w.received = time.Now()
	c.watchFrom.Store(w.received.Add(d).UnixNano())
	c.cur.Store(w)
	if c.watcher == nil {
		c.watchArmed.Store(true)
		c.watcher = time.AfterFunc(d, c.watch)
		return
	}
	if c.watchArmed.CompareAndSwap(false, true) {
		c.watcher.Reset(d)
	}
}

// unwatch ends the watch of the request that was current: a background
// read in progress is aborted; the timer stays as it is (see watch).
func (c *conn) unwatch() {
	c.cr.abortPending()
}

// watch runs on the timer: it starts the background read, now or once the
// body has been read, for a request that ran for the delay.
func (c *conn) watch() {
	w := c.cur.Load()
	if w == nil {
		// Between requests, or the connection is gone.
		c.disarmWatch(nil)
		return
	}
	if left := c.watchFrom.Load() - time.Now().UnixNano(); left > 0 {
		// Armed for an earlier request: this one has not run for the
		// delay yet.
		c.watcher.Reset(time.Duration(left))
		return
	}
	// The timer's work for this request is done.
	c.disarmWatch(w)
	if w.body != nil {
		if unread, _ := w.body.unread(); unread {
			w.body.mu.Lock()
			if !w.body.done && w.body.err == nil && !w.body.closed {
				w.body.onDone = func() { c.cr.startBackground(w) }
				w.body.mu.Unlock()
				return
			}
			w.body.mu.Unlock()
		}
	}
	c.cr.startBackground(w)
}

// disarmWatch marks the timer idle, the watch of done (nil: none) over; a
// request made current meanwhile, whose watchAfter found the timer still
// armed, has it armed again here.
func (c *conn) disarmWatch(done *response) {
	c.watchArmed.Store(false)
	if cur := c.cur.Load(); cur != nil && cur != done && c.watchArmed.CompareAndSwap(false, true) {
		c.watcher.Reset(time.Duration(max(c.watchFrom.Load()-time.Now().UnixNano(), 0)))
	}
}

// connReader is what the connection's bufio.Reader reads: the socket, and
// first the byte the background read took from it, if any.
type connReader struct {
	c       *conn
	mu      sync.Mutex
	cond    *sync.Cond
	pending bool // a background read is in progress
	aborted bool // it was aborted with a past deadline
	has     bool // byte holds a byte read by it
	byte    [1]byte
	// gone is set when the background read found the client gone.
	gone bool
	// rd says what the connection's read deadline is for, so that it
	// changes only when a read needs it to (see readDeadline).
	rd readDeadline
	// idleAt is the deadline armIdle set, while it is still the
	// connection's (zero once any other was set or it was lifted).
	idleAt time.Time
}

// readDeadline is the state of a connection's read deadline. Setting one
// costs a timer change in the runtime's poller; three per request (idle,
// header, lifted) were a visible part of a kept-alive request's cost.
type readDeadline uint8

const (
	// rdNone: no deadline set by the server (a handler's may be on).
	rdNone readDeadline = iota
	// rdArmed: a deadline bounds the read in progress (idle wait, head,
	// body drain).
	rdArmed
	// rdHead: a head is being read and its deadline is not armed yet:
	// the next read of the socket arms it. The parse of what is
	// buffered in between waits for nothing, so the deadline counts
	// from the head's first byte but for that parse.
	rdHead
	// rdStale: a deadline is on that no longer bounds anything: it is
	// lifted before the next read of the socket, the handler's or the
	// background one, which would take its expiry for a client gone.
	rdStale
)

// prepareRead makes the read deadline right for a read of the socket
// that is about to start; r.mu is held.
func (r *connReader) prepareRead() {
	switch r.rd {
	case rdHead:
		_ = r.c.rwc.SetReadDeadline(time.Now().Add(r.c.headTimeout()))
		r.rd, r.idleAt = rdArmed, time.Time{}
	case rdStale:
		_ = r.c.rwc.SetReadDeadline(time.Time{})
		r.rd, r.idleAt = rdNone, time.Time{}
	}
}

// mark records what the deadline is for without changing it: rdHead (the
// next read arms it), or rdStale (the next read lifts whatever the server
// set; nothing when it set none).
func (r *connReader) mark(rd readDeadline) {
	r.mu.Lock()
	if rd != rdStale || r.rd != rdNone {
		r.rd = rd
	}
	r.mu.Unlock()
}

// reset runs as the connection is pooled; a watch of its last request
// whose timer fired as it ended may still look at r, under the lock.
func (r *connReader) reset() {
	r.mu.Lock()
	r.pending, r.aborted, r.has, r.gone = false, false, false, false
	r.rd, r.idleAt = rdNone, time.Time{}
	r.mu.Unlock()
}

func (r *connReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	if r.pending {
		r.mu.Unlock()
		// Only the background read reads while the handler runs;
		// reaching here means a handler reads the connection after its
		// body ended, which the body does not do.
		return 0, errors.New("concurrent read")
	}
	if r.has {
		r.has = false
		r.mu.Unlock()
		if len(p) == 0 {
			return 0, nil
		}
		p[0] = r.byte[0]
		return 1, nil
	}
	gone := r.gone
	if !gone {
		r.prepareRead()
	}
	r.mu.Unlock()
	if gone {
		return 0, io.EOF
	}
	return r.c.rwc.Read(p)
}

// startBackground starts the background read for w's request, unless the
// next request's bytes are already buffered or the connection is done.
func (r *connReader) startBackground(w *response) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The watch runs on a timer's goroutine: it reads only what is safe
	// there (hijacked, not w.hijacked, which the handler writes).
	if r.pending || r.has || r.gone || w.c.cur.Load() != w || w.c.hijacked.Load() {
		return
	}
	if r.c.br.Buffered() > 0 {
		return
	}
	r.prepareRead()
	r.pending, r.aborted = true, false
	go r.backgroundRead(w)
}

func (r *connReader) backgroundRead(w *response) {
	n, err := r.c.rwc.Read(r.byte[:])
	r.mu.Lock()
	if n == 1 {
		r.has = true
	}
	var ne net.Error
	aborted := r.aborted && errors.As(err, &ne) && ne.Timeout()
	if err != nil && !aborted {
		// The client closed (or reset) the connection: the request is
		// cancelled, its backend request with it.
		r.gone = true
		w.ctx.Cancel(errClientGone)
	}
	r.pending = false
	if r.cond != nil {
		r.cond.Broadcast()
	}
	r.mu.Unlock()
}

// abortPending ends a background read in progress and waits for it.
func (r *connReader) abortPending() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.pending {
		return
	}
	r.aborted = true
	_ = r.c.rwc.SetReadDeadline(aLongTimeAgo)
	if r.cond == nil {
		r.cond = sync.NewCond(&r.mu)
	}
	for r.pending {
		r.cond.Wait()
	}
	_ = r.c.rwc.SetReadDeadline(time.Time{})
	r.rd, r.idleAt = rdNone, time.Time{}
}

var aLongTimeAgo = time.Unix(1, 0)

// setReadDeadline sets the connection's read deadline to t for what rd
// says. A handler's deadline is rdNone: the server does not lift it until
// the response is done.
func (r *connReader) setReadDeadline(t time.Time, rd readDeadline) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rd, r.idleAt = rd, time.Time{}
	return r.c.rwc.SetReadDeadline(t)
}

// idleSlack is how much earlier than asked the wait for a kept-alive
// connection's next request may end (1/64 of the timeout), so that the
// deadline the last wait set serves the next one without a change.
func idleSlack(d time.Duration) time.Duration { return d / 64 }

// armIdle sets the read deadline t, that of a wait of d for the next
// request. Setting a deadline costs a lock and a timer change of the
// runtime's poller: when the deadline of the previous wait is still on
// (no read lifted it, no handler set another) and ends at most
// idleSlack(d) before t, it is kept, and the wait ends that little
// earlier.
func (r *connReader) armIdle(t time.Time, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := !r.idleAt.IsZero() && (r.rd == rdStale || r.rd == rdArmed) &&
		!r.idleAt.After(t) && r.idleAt.After(t.Add(-idleSlack(d)))
	r.rd = rdArmed
	if keep {
		return
	}
	r.idleAt = t
	if err := r.c.rwc.SetReadDeadline(t); err != nil {
		r.idleAt = time.Time{}
	}
}

// liftHandlers lifts the deadlines a handler set (read, write or both, in
// one change), once its response is done.
func (r *connReader) liftHandlers(read, write bool) {
	if !read && !write {
		return
	}
	r.mu.Lock()
	switch {
	case read && write:
		_ = r.c.rwc.SetDeadline(time.Time{})
	case read:
		_ = r.c.rwc.SetReadDeadline(time.Time{})
	default:
		_ = r.c.rwc.SetWriteDeadline(time.Time{})
	}
	if read {
		r.rd, r.idleAt = rdNone, time.Time{}
	}
	r.mu.Unlock()
}

// lift lifts the server's read deadline when it is for one of what.
func (r *connReader) lift(what ...readDeadline) {
	r.mu.Lock()
	if slices.Contains(what, r.rd) {
		_ = r.c.rwc.SetReadDeadline(time.Time{})
		r.rd, r.idleAt = rdNone, time.Time{}
	}
	r.mu.Unlock()
}
