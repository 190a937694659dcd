package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"portico.dev/portico/h1"
	"portico.dev/portico/internal/reqctx"
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
	dialer *net.Dialer
	mu     sync.Mutex
	idle   map[string][]*h1Conn // most recently used last
	nidle  int
	closed bool
	stop   chan struct{}
}

func newH1Pool(dialer *net.Dialer) *h1Pool {
	p := &h1Pool{dialer: dialer, idle: map[string][]*h1Conn{}, stop: make(chan struct{})}
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
	idleSince time.Time
	reused    bool
	// peekResult is what the last peek found (see usable); peekFn,
	// abortFn and unhookFn are made once so that using them allocates
	// nothing.
	peekResult int
	peekFn     func(fd uintptr) bool
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
	c.readLimit -= int64(n)
	return n, err
}

var errResponseHeaderTooLarge = errors.New("backend response headers exceed the limit")

// get returns an idle connection to addr that is still open, or dials one.
func (p *h1Pool) get(ctx context.Context, addr string) (*h1Conn, error) {
	now := time.Now()
	for {
		c := p.takeIdle(addr)
		if c == nil {
			break
		}
		if now.Sub(c.idleSince) < h1IdleTimeout && c.usable() {
			c.reused = true
			return c, nil
		}
		c.conn.Close()
	}
	conn, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := &h1Conn{pool: p, addr: addr, conn: conn}
	if tc, ok := conn.(*net.TCPConn); ok {
		c.raw, _ = tc.SyscallConn() // fails only for a closed connection, which usable finds out
	}
	c.br = bufio.NewReaderSize(c, 4<<10)
	c.bw = bufio.NewWriterSize(conn, 4<<10)
	c.peekFn = c.peek
	c.abortFn = c.abort
	c.unhookFn = c.unhook
	return c, nil
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
	if p.closed || len(l) >= h1MaxIdlePerHost || p.nidle >= h1MaxIdle {
		p.mu.Unlock()
		c.conn.Close()
		return
	}
	p.idle[c.addr] = append(l, c)
	p.nidle++
	p.mu.Unlock()
}

// usable reports whether an idle connection can carry a request: the
// backend has not closed it nor sent anything unasked (an answer nobody
// waits for, such as a 408 before closing). http.Transport learns this from
// a reader goroutine blocked on every idle connection; here one
// non-blocking peek when the connection is taken does.
func (c *h1Conn) usable() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	if c.raw == nil {
		return true
	}
	c.peekResult = 0
	if err := c.raw.Read(c.peekFn); err != nil {
		return false
	}
	return c.peekResult < 0
}

// peek runs inside RawConn.Read: it sets peekResult to -1 when nothing is
// waiting on the socket, else to what recv said (0: closed, >0: data).
func (c *h1Conn) peek(fd uintptr) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == syscall.EAGAIN:
		c.peekResult = -1
	case err != nil:
		c.peekResult = 0
	default:
		c.peekResult = n
	}
	return true // never wait for readiness
}

// abort makes a blocked read or write of the connection return at once; it
// runs when the request's context ends.
func (c *h1Conn) abort() { c.conn.SetDeadline(aLongTimeAgo) } //nolint:errcheck // a closed connection fails anyway

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
			p.closeIdle(func(c *h1Conn) bool { return now.Sub(c.idleSince) >= h1IdleTimeout })
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
