// Package sockio reads and writes TCP sockets the way the runtime's own
// poller does: non-blocking system calls that do not tell the scheduler a
// system call is under way.
//
// A net.TCPConn enters every read(2) and write(2) through entersyscall.
// On a socket that is non-blocking (every socket of the net package is)
// such a call never sleeps in the kernel, so there is nothing for the
// scheduler to hand the processor on for; but the first entersyscall after
// every processor went idle also wakes the runtime's monitor thread from
// its deep sleep, and a monitor woken that way polls every 20 µs for the
// next millisecond. A proxy under load goes idle between bursts thousands
// of times a second, and that polling, with the thread switches it costs,
// took 7-13% of Portico's CPU. Conn makes the same calls with
// syscall.RawSyscall inside syscall.RawConn, which keeps the poller's
// waiting, deadlines and close semantics; under the race detector it makes
// them through the syscall package (sys_race.go). Keeper keeps the
// monitor's other duties, preemption above all, on time.
package sockio

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Conn is a TCP connection whose Read and Write go through RawConn with
// raw system calls. Everything else is the embedded *net.TCPConn's.
type Conn struct {
	*net.TCPConn
	rc syscall.RawConn

	// The state of the call in progress for each direction: RawConn runs
	// a function it is given, and a method value bound once costs no
	// allocation per call where a closure would. The mutexes keep two
	// concurrent reads (or writes), which net.Conn allows, apart.
	rmu     sync.Mutex
	rbuf    []byte
	rn      int
	rerr    syscall.Errno
	readFn  func(uintptr) bool
	wmu     sync.Mutex
	wbuf    []byte
	wn      int
	werr    error
	wwait   bool // the write in progress waited (see blocked)
	writeFn func(uintptr) bool

	// closed is what the Dialer's Track returned, run by the first
	// Close; closing makes it run once when Close is called again.
	closed  func()
	closing atomic.Bool

	// The write deadline is kept here and handed to the poller only when
	// a write is about to wait for the socket (see SetWriteDeadline).
	dmu sync.Mutex
	// want is the deadline asked for; applied is the poller's.
	want, applied time.Time
	// waiting is set while a write waits (or is about to wait) for the
	// socket: a deadline set then goes to the poller at once.
	waiting bool
	// eager: every deadline goes to the poller as it is set, once the
	// socket was handed out (Inner, SyscallConn) to writers that do not
	// look at want.
	eager bool
}

// Wrap returns c as a Conn, or c itself when it is not a *net.TCPConn or
// its socket is not non-blocking: a raw read(2) of a blocking socket
// would hold its processor, which the scheduler does not know is waiting,
// for as long as the peer sends nothing. Every socket of the net package
// is non-blocking; the check costs one fcntl(2) per connection.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	nonblocking := false
	err = rc.Control(func(fd uintptr) {
		flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		nonblocking = e == 0 && flags&syscall.O_NONBLOCK != 0
	})
	if err != nil || !nonblocking {
		return c
	}
	s := &Conn{TCPConn: tc, rc: rc}
	s.readFn = s.read
	s.writeFn = s.write
	return s
}

// Close closes the connection. The first Close tells the Dialer's Track
// that made it; a Close through Inner does not.
func (c *Conn) Close() error {
	err := c.TCPConn.Close()
	if c.closed != nil && c.closing.CompareAndSwap(false, true) {
		c.closed()
	}
	return err
}

// Inner is the TCP connection, for those that copy between sockets with
// the kernel's help (splice) or read its counters. Its writes are not
// Conn's: from then on the write deadline goes to the poller as it is
// set.
func (c *Conn) Inner() net.Conn {
	c.setEager()
	return c.TCPConn
}

// SyscallConn is the TCP connection's; as for Inner, the write deadline
// goes to the poller as it is set from then on.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	c.setEager()
	return c.TCPConn.SyscallConn()
}

func (c *Conn) setEager() {
	c.dmu.Lock()
	if !c.eager {
		c.eager = true
		c.applyLocked()
	}
	c.dmu.Unlock()
}

// SetWriteDeadline sets the write deadline as net.TCPConn's does, but
// hands it to the runtime's poller only when a write has to wait for the
// socket. A server sets one for every answer it writes (its client may
// stop reading), and most of those writes find room in the socket's
// buffer at once: setting the poller's timer, then lifting it, cost a lock
// of the poller and two timer changes each time. A write that does not
// wait is judged against the deadline as it starts, as the poller judges
// it: a deadline gone fails it. A write already waiting sees a new
// deadline at once, as it would on a TCPConn. On a closed connection it
// reports no error (a TCPConn's does): the next write does.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.want = t
	if c.eager || c.waiting {
		return c.applyLocked()
	}
	return nil
}

// SetDeadline sets both deadlines: the read one at once, the write one as
// SetWriteDeadline does.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.TCPConn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// applyLocked hands want to the poller; c.dmu is held.
func (c *Conn) applyLocked() error {
	if c.want.Equal(c.applied) {
		return nil
	}
	if err := c.TCPConn.SetWriteDeadline(c.want); err != nil {
		return err
	}
	c.applied = c.want
	return nil
}

// prepareWrite makes the poller's deadline right for a write that starts:
// the one wanted when it is gone (the write fails as on a TCPConn), or
// when the poller holds another one (an earlier deadline left from a
// write that waited would fail the write as gone).
func (c *Conn) prepareWrite() {
	c.dmu.Lock()
	if !c.eager && !(c.want.Equal(c.applied)) {
		if !c.applied.IsZero() || !c.want.IsZero() && time.Until(c.want) <= 0 {
			_ = c.applyLocked() // a closed connection fails the write
		}
	}
	c.dmu.Unlock()
}

// blocked runs inside a write that found the socket full, before it waits:
// from now on deadlines go to the poller at once, the one wanted first.
func (c *Conn) blocked() {
	c.dmu.Lock()
	c.waiting = true
	_ = c.applyLocked()
	c.dmu.Unlock()
}

func (c *Conn) unblocked() {
	c.dmu.Lock()
	c.waiting = false
	c.dmu.Unlock()
}

// Read reads like net.TCPConn.Read: io.EOF at the end, *net.OpError
// otherwise.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		// As a TCPConn: nothing read, but a closed connection says so.
		if err := c.rc.Control(func(uintptr) {}); err != nil {
			return 0, c.opError("read", err)
		}
		return 0, nil
	}
	c.rmu.Lock()
	c.rbuf, c.rn, c.rerr = p, 0, 0
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerr
	c.rbuf = nil
	c.rmu.Unlock()
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *Conn) read(fd uintptr) bool {
	for {
		n, e := sysRead(fd, c.rbuf)
		switch e {
		case 0:
			c.rn = n
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		c.rerr = e
		return true
	}
}

// Write writes all of p, waiting for the socket to take more when it is
// full, like net.TCPConn.Write. An empty p is still written (a write of
// nothing), so that a passed deadline, a closed connection or a shut
// socket are reported as a TCPConn reports them.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	c.prepareWrite()
	c.wbuf, c.wn, c.werr, c.wwait = p, 0, nil, false
	err := c.rc.Write(c.writeFn)
	n, werr := c.wn, c.werr
	c.wbuf, c.werr = nil, nil
	if c.wwait {
		c.unblocked()
	}
	c.wmu.Unlock()
	switch {
	case err != nil:
		return n, c.opError("write", err)
	case werr != nil:
		return n, c.opError("write", werr)
	}
	return n, nil
}

func (c *Conn) write(fd uintptr) bool {
	for {
		n, e := Send(fd, c.wbuf[c.wn:])
		switch e {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			if !c.wwait {
				c.wwait = true
				c.blocked()
			}
			return false
		default:
			c.werr = os.NewSyscallError("write", e)
			return true
		}
		c.wn += n
		if c.wn == len(c.wbuf) {
			return true
		}
		if n == 0 {
			// A socket that takes nothing without an error would
			// make this loop spin; TCPConn reports it so too.
			c.werr = io.ErrUnexpectedEOF
			return true
		}
	}
}

// ReadFrom leaves to the TCPConn what the kernel copies by itself (from
// another socket by splice, from a file by sendfile) and copies anything
// else through Write, so that those writes too are made the raw way (a
// request body that http.Transport sends, say).
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	src := r
	if lr, ok := r.(*io.LimitedReader); ok {
		src = lr.R
	}
	switch src.(type) {
	case *net.TCPConn, *net.UnixConn, *os.File:
		// The kernel writes without Conn's check of the deadline.
		c.setEager()
		return c.TCPConn.ReadFrom(r)
	}
	return io.Copy(writerOnly{c}, r)
}

// writerOnly hides Conn's ReadFrom from io.Copy, which would call it again.
type writerOnly struct{ io.Writer }

// opError wraps err as net.TCPConn does, with the operation's name rather
// than RawConn's ("raw-read"), so that logs and errors.Is see the same.
func (c *Conn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// Send makes one write(2) of b on the non-blocking socket fd, as a
// TCPConn's Write does (a peer gone is EPIPE; the runtime ignores the
// SIGPIPE of a socket unless the program asked for it).
func Send(fd uintptr, b []byte) (int, syscall.Errno) { return sysWrite(fd, b) }

// Peek reports, without waiting or taking anything, whether the socket fd
// holds data: 1 when it does, 0 at its end, and EAGAIN when nothing is
// there yet.
func Peek(fd uintptr) (int, syscall.Errno) {
	var b [1]byte
	r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1, syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return int(r), e
}

// Dialer dials TCP connections as Conns.
type Dialer struct {
	net.Dialer
	// Track, when set, is told of each connection made, with the context
	// of its dial (its values say what the connection is for); the
	// function it returns, when not nil, runs once, when the connection
	// is first closed. It lets a pool count its connections at no cost
	// per read or write: the Conn closes and counts in one call.
	Track func(ctx context.Context) (closed func())
	// Conn, when set, may give a dial, by its context, a connect timeout
	// (0: Timeout) and a TCP keepalive (nil: KeepAlive's) of its own.
	Conn func(ctx context.Context) (connectTimeout time.Duration, keepAlive *net.KeepAliveConfig)
}

// DialContext is net.Dialer's, with the connection wrapped.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	nd := &d.Dialer
	if d.Conn != nil {
		if timeout, ka := d.Conn(ctx); timeout > 0 || ka != nil {
			own := *nd
			if timeout > 0 {
				own.Timeout = timeout
			}
			if ka != nil {
				own.KeepAlive, own.KeepAliveConfig = ka.Idle, *ka
			}
			nd = &own
		}
	}
	c, err := nd.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	w := Wrap(c)
	if d.Track == nil {
		return w, nil
	}
	closed := d.Track(ctx)
	if closed == nil {
		return w, nil
	}
	if sc, ok := w.(*Conn); ok {
		sc.closed = closed
		return sc, nil
	}
	return &trackedConn{Conn: w, closed: closed}, nil
}

// trackedConn runs closed at its first Close: Track for the connections
// Wrap leaves as they are.
type trackedConn struct {
	net.Conn
	closed  func()
	closing atomic.Bool
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	if c.closing.CompareAndSwap(false, true) {
		c.closed()
	}
	return err
}
