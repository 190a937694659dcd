// Package stream carries bytes both ways between two connections until both
// sides are done: the data plane of TLS passthrough and terminated TLS
// streams. Between two TCP sockets the copy is io.Copy's, which the kernel
// does with splice(2), and the idle timeout watches the sockets' own byte
// counters instead of wrapping every read.
package stream

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what one stream moved.
type Result struct {
	// Up is client to backend, Down backend to client, in bytes.
	Up, Down int64
	// Idle is set when the stream was cut by the idle timeout.
	Idle bool
}

// Pipe copies client to backend and backend to client. When one side ends
// its writes (EOF), the other side's writes are closed too (half-close)
// and the opposite direction goes on; when both are done, or one fails,
// or nothing moved either way for idle (0: no limit), both connections are
// closed. Pipe returns once both copies have returned.
func Pipe(client, backend net.Conn, idle time.Duration) Result {
	p := &pipe{conns: [2]net.Conn{client, backend}}
	var res Result
	if idle > 0 {
		w := p.watch(idle)
		defer w.Stop()
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res.Down = p.copy(client, backend, 1)
	}()
	res.Up = p.copy(backend, client, 0)
	wg.Wait()
	client.Close()
	backend.Close()
	res.Idle = p.idled.Load()
	return res
}

type pipe struct {
	conns [2]net.Conn
	// counted holds, per direction, the bytes moved, when the source is
	// not a TCP socket whose own counters the watchdog reads.
	counted [2]atomic.Int64
	failed  atomic.Bool
	idled   atomic.Bool
}

// copy moves src to dst until src ends, then half-closes dst; dir is 0 for
// up, 1 for down.
func (p *pipe) copy(dst, src net.Conn, dir int) int64 {
	var r io.Reader = unwrap(src)
	if _, tcp := r.(*net.TCPConn); !tcp || !kernelCounts {
		r = &countingReader{r: r, n: &p.counted[dir]}
	}
	n, err := io.Copy(unwrap(dst), r)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		p.fail()
		return n
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return n
		}
	}
	// A connection without half-close ends the stream.
	p.fail()
	return n
}

// fail closes both connections: a broken direction ends the stream.
func (p *pipe) fail() {
	if !p.failed.Swap(true) {
		p.conns[0].Close()
		p.conns[1].Close()
	}
}

// watch closes both connections once idle passes without a byte moving.
func (p *pipe) watch(idle time.Duration) *time.Timer {
	last := p.progress()
	var t *time.Timer
	t = time.AfterFunc(idle, func() {
		now := p.progress()
		if now != last {
			last = now
			t.Reset(idle)
			return
		}
		p.idled.Store(true)
		p.fail()
	})
	return t
}

// progress is a number that grows whenever a byte moves either way.
func (p *pipe) progress() uint64 {
	sum := uint64(p.counted[0].Load() + p.counted[1].Load())
	if kernelCounts {
		for _, c := range p.conns {
			if tc, ok := unwrap(c).(*net.TCPConn); ok {
				sum += received(tc)
			}
		}
	}
	return sum
}

// Wrapper is a connection that only tracks the one it wraps (its Close
// has to be called, its reads and writes are the inner one's): Pipe copies
// between the inner connections, so that two TCP sockets meet in io.Copy.
type Wrapper interface {
	Inner() net.Conn
}

func unwrap(c net.Conn) net.Conn {
	for {
		w, ok := c.(Wrapper)
		if !ok {
			return c
		}
		c = w.Inner()
	}
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}
