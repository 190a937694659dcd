package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"portico.dev/portico/internal/dataplane/h1"
	"portico.dev/portico/internal/dataplane/reqctx"
	"portico.dev/portico/internal/dataplane/sockio"
)

// Limits of the plain HTTP/1.1 backend pool, the same as the transport's
// that the other paths use: connections kept per endpoint and in all, how
// long one may wait idle, and how much of an answer may be headers.
const (
	h1MaxIdlePerHost    = 256
	h1MaxIdle           = 4096
	h1IdleTimeout       = 90 * time.Second
	h1MaxResponseHeader = 10 << 20
)

// h1Pool keeps idle HTTP/1.1 connections to plain-text backends, per
// endpoint address. A connection is used by one request at a time, read and
// written by the handler's own goroutine: no reader and writer goroutines
// per connection as http.Transport has, so a request costs no hand-offs
// between goroutines.
type h1Pool struct {
	dialer *sockio.Dialer
	mu     sync.Mutex
	idle   map[string][]*h1Conn // most recently used last
	nidle  int
	closed bool
	stop   chan struct{}
	// shunned are the endpoints caught sending bytes unasked, until when
	// each gets a connection per request (unasked.go); nshunned counts
	// them for a check without the lock.
	shunned  map[string]time.Time
	nshunned atomic.Int32
}

func newH1Pool(dialer *sockio.Dialer) *h1Pool {
	p := &h1Pool{dialer: dialer, idle: map[string][]*h1Conn{}, shunned: map[string]time.Time{}, stop: make(chan struct{})}
	go p.sweep()
	return p
}

// h1Conn is one backend connection with its buffers.
type h1Conn struct {
	pool *h1Pool
	addr string
	conn net.Conn
	raw  syscall.RawConn // nil when conn is not a TCP connection
	br   *bufio.Reader
	bw   *bufio.Writer
	// readLimit bounds what br may read from conn: the answer's headers
	// are bounded, its body not.
	readLimit int64
	// headDeadline is the read deadline left on conn for the wait of an
	// answer's head (Options.BackendResponseTimeout), in Unix
	// nanoseconds, 0 when none (see armHead); inBody is set once the
	// final answer's head was read; aborted once abort ran.
	headDeadline int64
	inBody       bool
	aborted      atomic.Bool
	// idleSince is when c went back to the pool, takenAt when the
	// request that has it took it.
	idleSince time.Time
	takenAt   time.Time
	reused    bool
	// maxIdle is how long c may wait idle and still be used, when a
	// BackendTrafficPolicy says (0: h1IdleTimeout).
	maxIdle time.Duration
	// The sending of a request's head (see Write and sendAndAwait):
	// wrote is set once a byte of the head went out, lastFlush for the
	// flush that ends it; out, sent and step are sendAndAwait's.
	wrote     bool
	lastFlush bool
	out       []byte
	sent      int
	step      sendStep
	sendErr   error
	// peekResult is what the last peek found (see peek); peekFn,
	// awaitFn, abortFn and unhookFn are made once so that using them
	// allocates nothing.
	peekResult int
	peekFn     func(fd uintptr) bool
	awaitFn    func(fd uintptr) bool
	abortFn    func()
	unhookFn   func() bool
	// hooked is the request context abortFn is hooked to (see
	// abortWhenDone).
	hooked *reqctx.Ctx
	// keys is scratch space for writing headers in order.
	keys []string
	// ans reads the answers, its header maps and body reader reused.
	ans h1.Answer
}

// Read reads from the connection within readLimit; the bufio.Reader reads
// through it.
func (c *h1Conn) Read(p []byte) (int, error) {
	if c.readLimit <= 0 {
		return 0, errResponseHeaderTooLarge
	}
	if int64(len(p)) > c.readLimit {
		p = p[:c.readLimit]
	}
	n, err := c.conn.Read(p)
	if err != nil && c.inBody && c.headDeadline != 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		// The head's deadline, left on the connection rather than lifted
		// on every answer (armHead), bounds no body: lifted, the read
		// goes on, unless the request's abort set it.
		c.liftHeadDeadline()
		if !c.aborted.Load() {
			n, err = c.conn.Read(p)
		}
	}
	c.readLimit -= int64(n)
	return n, err
}

// headSlack is how much earlier than its timeout the wait for a head may
// end (1/64 of it), so that a deadline set by a recent request on the
// same connection serves the next one without being set again.
func headSlack(timeout time.Duration) int64 { return int64(timeout / 64) }

// armHead makes the wait for the head of the answer to the request about
// to go out end after timeout (0: never), give or take headSlack. Setting
// a deadline costs a lock and a timer of the runtime's poller; lifting it
// as the head comes would cost as much again: the deadline stays on the
// connection instead, and a body read that meets it lifts it (Read).
func (c *h1Conn) armHead(now time.Time, timeout time.Duration) {
	if timeout <= 0 {
		if c.headDeadline != 0 {
			c.liftHeadDeadline()
		}
		return
	}
	want := now.UnixNano() + int64(timeout)
	if c.headDeadline != 0 && c.headDeadline >= want-headSlack(timeout) && c.headDeadline <= want {
		return
	}
	c.headDeadline = want
	_ = c.conn.SetReadDeadline(time.Unix(0, want)) // a closed connection fails the request's write
}

// liftHeadDeadline lifts the head's deadline; an abort that ran meanwhile
// set a deadline this one replaced: it is made again.
func (c *h1Conn) liftHeadDeadline() {
	c.headDeadline = 0
	_ = c.conn.SetReadDeadline(time.Time{})
	if c.aborted.Load() {
		c.abort()
	}
}

var errResponseHeaderTooLarge = errors.New("backend response headers exceed the limit")

// get returns an idle connection to addr, or dials one. Whether the
// backend left an idle connection usable is found out as the request is
// sent (Write): a stale one fails with errStaleConn before any byte of the
// request went out.
func (p *h1Pool) get(ctx context.Context, addr string) (*h1Conn, error) {
	now := time.Now()
	for {
		c := p.takeIdle(addr)
		if c == nil {
			break
		}
		if now.Sub(c.idleSince) < c.idleLimit() && c.br.Buffered() == 0 {
			c.reused, c.takenAt = true, now
			return c, nil
		}
		c.conn.Close()
	}
	conn, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &h1Conn{pool: p, addr: addr, conn: conn, takenAt: time.Now()}
	if x, ok := ctx.Value(exchangeKey{}).(*exchange); ok && x.backend != nil && x.backend.Conn != nil {
		c.maxIdle = x.backend.Conn.IdleTimeout
	}
	if tc, ok := conn.(syscall.Conn); ok {
		c.raw, _ = tc.SyscallConn() // a connection closed meanwhile fails at the first write
	}
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(c, 4<<10)
	c.peekFn = c.peek
	c.awaitFn = c.await
	c.abortFn = c.abort
	c.unhookFn = c.unhook
	return c, nil
}

// idleLimit is how long c may wait idle and still be used.
func (c *h1Conn) idleLimit() time.Duration {
	if c.maxIdle > 0 {
		return c.maxIdle
	}
	return h1IdleTimeout
}

func (p *h1Pool) takeIdle(addr string) *h1Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.idle[addr]
	if len(l) == 0 {
		return nil
	}
	c := l[len(l)-1]
	l[len(l)-1] = nil
	p.idle[addr] = l[:len(l)-1]
	p.nidle--
	return c
}

// put keeps c for the next request to its endpoint, or closes it when the
// pool is full or closed.
func (p *h1Pool) put(c *h1Conn) {
	c.idleSince = time.Now()
	p.mu.Lock()
	l := p.idle[c.addr]
	if p.closed || len(l) >= h1MaxIdlePerHost || p.nidle >= h1MaxIdle ||
		len(p.shunned) > 0 && p.shunnedLocked(c.addr, c.idleSince) {
		p.mu.Unlock()
		c.conn.Close()
		return
	}
	p.idle[c.addr] = append(l, c)
	p.nidle++
	p.mu.Unlock()
}

// errStaleConn says that a reused connection was found closed by the
// backend, or holding bytes nobody asked for (such as a 408 sent before
// closing), before any byte of the request went out on it: the request
// goes to another connection whatever its method.
var errStaleConn = errors.New("idle backend connection closed or sent bytes unasked")

// errSpokeFirst says that a new connection held bytes (or its end) before
// the first byte of its first request went out: whatever the backend is,
// it does not speak HTTP/1.1 there, and what it sent answers no request.
var errSpokeFirst = errors.New("backend sent bytes before the request")

// beginRequest readies c for writing a request's head into bw.
func (c *h1Conn) beginRequest() { c.wrote, c.lastFlush, c.inBody = false, false, false }

// Write is where bw flushes to. The first write of a request checks that
// nothing waits on the connection: on a reused one, that the backend did
// not close it or send bytes unasked while it sat idle (http.Transport
// learns that from a reader goroutine blocked on every idle connection;
// here one non-blocking peek does). The flush that ends a request's head
// goes through sendAndAwait, which does that peek, the write and the wait
// for the answer in one.
func (c *h1Conn) Write(p []byte) (int, error) {
	first := !c.wrote
	c.wrote = true
	if c.raw == nil {
		return c.conn.Write(p)
	}
	if c.lastFlush {
		return c.sendAndAwait(p, first)
	}
	if first {
		c.peekResult = 0
		if err := c.raw.Read(c.peekFn); err != nil || c.peekResult >= 0 {
			return 0, c.spoken()
		}
	}
	return c.conn.Write(p)
}

// spoken is the error for bytes or an end found on the connection before
// a request's first byte went out.
func (c *h1Conn) spoken() error {
	if c.reused {
		if c.peekResult > 0 {
			return errUnaskedBytes
		}
		return errStaleConn
	}
	return errSpokeFirst
}

// peek runs inside RawConn.Read: it sets peekResult to -1 when nothing is
// waiting on the socket, else to what recv said (0: closed, >0: data).
func (c *h1Conn) peek(fd uintptr) bool {
	n, err := sockio.Peek(fd)
	switch {
	case err == syscall.EAGAIN:
		c.peekResult = -1
	case err != 0:
		c.peekResult = 0
	default:
		c.peekResult = n
	}
	return true // never wait for readiness
}

// sendStep is where sendAndAwait is.
type sendStep uint8

const (
	stepCheck    sendStep = iota // peek, then write
	stepWait                     // written: waiting for the answer
	stepStale                    // bytes or an end found before anything was written
	stepFallback                 // the rest goes through conn.Write, the answer through the usual read
	stepFailed                   // write(2) failed: sendErr
)

// sendAndAwait writes p, the end of a request's head, and returns once the
// answer can be read, saving the read that would find nothing yet.
//
// Go's poller gives no way to wait for readability without reading
// first: RawConn.Read clears the socket's readiness before it calls
// await, so data that arrived before would never wake a wait. await
// therefore peeks first, after that clearing: finding nothing proves that
// any later data will wake the wait (the poller is edge-triggered). On a
// reused connection that peek is also the check that the backend left it
// usable (when p is the whole head: nothing of the request sent yet), so the
// request costs one system call fewer than a peek, a write, a read that
// finds nothing and the read of the answer. Deadlines (the abort of
// abortWhenDone) end the wait as they end a read.
func (c *h1Conn) sendAndAwait(p []byte, whole bool) (int, error) {
	c.out, c.sent, c.step = p, 0, stepCheck
	err := c.raw.Read(c.awaitFn)
	sent, step, sendErr := c.sent, c.step, c.sendErr
	c.out, c.sendErr = nil, nil
	switch {
	case step == stepStale && whole:
		return 0, c.spoken()
	case step == stepFailed:
		return sent, sendErr
	case err != nil:
		return sent, err
	case step == stepStale, step == stepFallback:
		// The backend answered a head that went out in parts before all
		// of it did, or the socket took only part of p: the rest is
		// written, and the answer read, as usual.
		n, err := c.conn.Write(p[sent:])
		return sent + n, err
	}
	return len(p), nil
}

// await runs inside RawConn.Read for sendAndAwait: it returns false to wait
// for readability once p is written, true when done.
func (c *h1Conn) await(fd uintptr) bool {
	if c.step == stepWait {
		return true // readable: the answer, or the end of the connection
	}
	if c.peek(fd); c.peekResult >= 0 {
		c.step = stepStale
		return true
	}
	for c.sent < len(c.out) {
		n, err := sockio.Send(fd, c.out[c.sent:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			c.step = stepFallback
			return true
		case err != 0:
			c.step, c.sendErr = stepFailed, fmt.Errorf("writing to the backend: %w", err)
			return true
		case n == 0:
			// A socket that takes nothing without an error: conn.Write
			// reports it rather than this loop spinning.
			c.step = stepFallback
			return true
		}
		c.sent += n
	}
	c.step = stepWait
	return false
}

// abort makes a blocked read or write of the connection return at once; it
// runs when the request's context ends.
func (c *h1Conn) abort() {
	c.aborted.Store(true)
	c.conn.SetDeadline(aLongTimeAgo) //nolint:errcheck // a closed connection fails anyway
}

var aLongTimeAgo = time.Unix(1, 0)

// abortWhenDone makes the end of ctx, the context of an attempt of x, abort
// c's blocked reads and writes. The function it returns undoes that and
// reports whether ctx had not ended (the stop function of
// context.AfterFunc). When the attempt's context is the exchange itself
// (no backend timeout) over a request context of Portico's own servers,
// the abort is that context's hook, which allocates nothing; otherwise it
// is a context.AfterFunc.
func (c *h1Conn) abortWhenDone(ctx context.Context, x *exchange) func() bool {
	if ax, ok := ctx.(*exchange); ok && ax == x {
		if rc, ok := x.Context.(*reqctx.Ctx); ok && rc.Hook(c.abortFn) {
			c.hooked = rc
			return c.unhookFn
		}
	}
	return context.AfterFunc(ctx, c.abortFn)
}

// unhook may run twice for one hook, as AfterFunc's stop may: the second
// time it reports false.
func (c *h1Conn) unhook() bool {
	rc := c.hooked
	if rc == nil {
		return false
	}
	c.hooked = nil
	return rc.Unhook()
}

// sweep closes connections idle for longer than h1IdleTimeout, so that a
// backend nobody sends to any more does not keep sockets open.
func (p *h1Pool) sweep() {
	t := time.NewTicker(h1IdleTimeout / 3)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			p.closeIdle(func(c *h1Conn) bool { return now.Sub(c.idleSince) >= c.idleLimit() })
			p.mu.Lock()
			p.forgetShunned(now)
			p.mu.Unlock()
		}
	}
}

// closeIdle closes the idle connections for which which is true.
func (p *h1Pool) closeIdle(which func(*h1Conn) bool) {
	p.mu.Lock()
	var gone []*h1Conn
	for addr, l := range p.idle {
		kept := l[:0]
		for _, c := range l {
			if which(c) {
				gone = append(gone, c)
			} else {
				kept = append(kept, c)
			}
		}
		clear(l[len(kept):])
		if len(kept) == 0 {
			delete(p.idle, addr)
		} else {
			p.idle[addr] = kept
		}
	}
	p.nidle -= len(gone)
	p.mu.Unlock()
	for _, c := range gone {
		c.conn.Close()
	}
}

// close closes every idle connection and those given back later.
func (p *h1Pool) close() {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
	p.mu.Unlock()
	p.closeIdle(func(*h1Conn) bool { return true })
}
