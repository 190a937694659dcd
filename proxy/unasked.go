package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http/httptrace"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// Bytes a backend sends on a kept-alive HTTP/1.1 connection that no
// request asked for (a second answer to one request, the rest of an
// answer longer than its framing said) are found only when they arrive
// while the connection is idle: every reused connection is checked as its
// next request goes out (the peek of sendAndAwait on the direct path, the
// read loop of Go's transport), and bytes found then close it unread.
// Bytes that arrive after the next request went out are read as that
// request's answer: HTTP/1.1 gives nothing to tell them apart from the
// real one. What bounds that is the endpoint rule: an endpoint caught
// once sending bytes unasked (found on an idle connection, or past the end
// of an answer) has every connection used for one request only, for
// h1ShunFor (the direct path's pool keeps none of its connections; requests
// with a body go through forwarder.h1once, which keeps none either, so
// that Go's transport's connections busy when it was caught are not used
// again), and late unsolicited answers reach at most the requests already
// on reused connections when it was caught.

// h1ShunFor is how long an endpoint caught sending bytes unasked gets a
// new connection for every request.
const h1ShunFor = 10 * time.Minute

// errUnaskedBytes is errStaleConn when what was found on the reused
// connection is bytes (not its end).
var errUnaskedBytes = fmt.Errorf("%w: bytes waiting", errStaleConn)

// shun makes addr's connections single-use until now+h1ShunFor and closes
// its idle ones, which may hold late bytes. It reports whether addr was
// not shunned already.
func (p *h1Pool) shun(addr string, now time.Time) bool {
	p.mu.Lock()
	until, was := p.shunned[addr]
	was = was && now.Before(until)
	p.shunned[addr] = now.Add(h1ShunFor)
	p.nshunned.Store(int32(len(p.shunned)))
	l := p.idle[addr]
	delete(p.idle, addr)
	p.nidle -= len(l)
	p.mu.Unlock()
	for _, c := range l {
		c.conn.Close()
	}
	return !was
}

// isShunned reports whether addr's connections are single-use (see
// shun). It costs one atomic load while no endpoint is.
func (p *h1Pool) isShunned(addr string) bool {
	if p.nshunned.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.shunnedLocked(addr, time.Now())
}

func (p *h1Pool) shunnedLocked(addr string, now time.Time) bool {
	until, ok := p.shunned[addr]
	return ok && now.Before(until)
}

// forgetShunned drops the endpoints whose time is over; under p.mu.
func (p *h1Pool) forgetShunned(now time.Time) {
	for addr, until := range p.shunned {
		if !now.Before(until) {
			delete(p.shunned, addr)
		}
	}
	p.nshunned.Store(int32(len(p.shunned)))
}

// caughtUnasked applies the endpoint rule to addr, whose backend sent
// bytes unasked (how says where they were found).
func (f *forwarder) caughtUnasked(addr, how string) {
	if !f.pool.shun(addr, time.Now()) {
		return
	}
	// Go's transport may hold idle connections to addr with late bytes
	// on their way; which ones it cannot say, so all of its idle
	// connections go (this happens once per endpoint and h1ShunFor).
	f.h1.CloseIdleConnections()
	f.closeIdleByIdle(true)
	f.log.Warn("backend sent bytes no request asked for; each request to it gets a connection of its own for a while",
		zap.String("endpoint", addr), zap.String("found", how), zap.Duration("for", h1ShunFor))
}

// judgeStale applies the endpoint rule to c, a reused connection of the
// direct path found holding bytes as a request was to go out. A 408
// answer is what a backend sends as it closes an idle connection, and
// says nothing about its other answers: it is let go.
func (f *forwarder) judgeStale(c *h1Conn) {
	if c.raw == nil {
		return
	}
	b := make([]byte, len("HTTP/1.1 408"))
	n := 0
	_ = c.raw.Read(func(fd uintptr) bool {
		n, _, _ = syscall.Recvfrom(int(fd), b, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	if n > 0 && is408(b[:n]) {
		return
	}
	f.caughtUnasked(c.addr, "bytes on an idle connection")
}

// is408 reports whether b starts an HTTP/1.x 408 answer's status line.
func is408(b []byte) bool {
	return len(b) == len("HTTP/1.1 408") && bytes.HasPrefix(b, []byte("HTTP/1.")) && bytes.HasSuffix(b, []byte(" 408"))
}

// watchedConn is a connection of the plain HTTP/1.1 transport, watched
// for bytes that arrive while no request of the transport is on it (the
// transport's read loop reads an idle connection to find them; it closes
// the connection, and this applies the endpoint rule). A request is on
// it from the transport's GotConn until its answer's body ended
// (rpAttempt.claim and release).
type watchedConn struct {
	net.Conn
	f    *forwarder
	addr string
	// state is the claim's generation times two, plus connBusy while a
	// request is on the connection; connUnwatched once a request went
	// out without a claim (one not sent by ReverseProxy for the
	// forwarder), after which nothing read proves anything.
	state atomic.Uint64
}

const (
	connBusy      = 1
	connUnwatched = 2
	connGen       = 4
)

// Read reports bytes read while no request is on the connection, but for
// a 408 (see judgeStale).
func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && c.state.Load()&(connBusy|connUnwatched) == 0 {
		c.state.Or(connUnwatched) // once is enough: the transport closes it
		if !is408(p[:min(n, len("HTTP/1.1 408"))]) {
			c.f.caughtUnasked(c.addr, "bytes on an idle connection of the transport")
		}
	}
	return n, err
}

// Write marks the connection unwatched when a request goes out unclaimed.
func (c *watchedConn) Write(p []byte) (int, error) {
	if c.state.Load()&connBusy == 0 {
		c.state.Or(connUnwatched)
	}
	return c.Conn.Write(p)
}

// ReadFrom keeps the request body copy of the connection underneath.
func (c *watchedConn) ReadFrom(r io.Reader) (int64, error) {
	if c.state.Load()&connBusy == 0 {
		c.state.Or(connUnwatched)
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// claim marks a request on c and returns the claim, for release.
func (c *watchedConn) claim() uint64 {
	for {
		s := c.state.Load()
		next := (s+connGen)&^connBusy | connBusy
		if c.state.CompareAndSwap(s, next) {
			return next
		}
	}
}

// release ends claim, unless the connection was claimed again since
// (the transport hands it to the next request as the body's end is
// seen, before ReverseProxy sees it).
func (c *watchedConn) release(claim uint64) {
	c.state.CompareAndSwap(claim, claim&^connBusy)
}

// gotConn is the transport's trace hook that claims the
// connection a request got, for a.
func (a *rpAttempt) gotConn(info httptrace.GotConnInfo) {
	if wc, ok := info.Conn.(*watchedConn); ok {
		a.conn, a.claim = wc, wc.claim()
	}
}

// releasingBody is the body of an answer ReverseProxy closes unread (a
// status the rule retries): the claim ends once the close, which may
// drain the body and pool the connection, is done.
type releasingBody struct {
	io.ReadCloser
	rp *rpAttempt
}

func (b releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.rp.answerEnded()
	return err
}

// answerEnded releases the attempt's claim once its answer's body was
// read to its end.
func (a *rpAttempt) answerEnded() {
	if a.conn != nil {
		a.conn.release(a.claim)
		a.conn = nil
	}
}
