package sockio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The attacks below run every contract on a plain *net.TCPConn and on the
// *Conn wrapping one: a Conn has to behave as the connection it replaces,
// so each assertion is stated once and must hold for both.
var atkKinds = []struct {
	name string
	wrap bool
}{{"tcp", false}, {"sockio", true}}

// atkPair connects two loopback sockets; c is the dialed end, wrapped when
// wrap is set, peer the accepted end, always a plain *net.TCPConn.
func atkPair(t *testing.T, wrap bool) (c net.Conn, peer *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		d.Close()
		t.Fatal(err)
	}
	peer = a.(*net.TCPConn)
	c = d
	if wrap {
		c = Wrap(d)
		if _, ok := c.(*Conn); !ok {
			t.Fatalf("Wrap(%T) = %T, want *sockio.Conn", d, c)
		}
	}
	t.Cleanup(func() { c.Close(); peer.Close() })
	return c, peer
}

func atkEach(t *testing.T, f func(t *testing.T, wrap bool)) {
	for _, k := range atkKinds {
		t.Run(k.name, func(t *testing.T) { f(t, k.wrap) })
	}
}

// atkTimeout checks err is a deadline's, as the net package reports one.
func atkTimeout(t *testing.T, c net.Conn, op string, err error) {
	t.Helper()
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: %v, want os.ErrDeadlineExceeded", op, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("%s: %v is not a net.Error with Timeout()", op, err)
	}
	atkOpError(t, c, op, err)
}

// atkOpError checks err is the *net.OpError a TCPConn returns for op.
func atkOpError(t *testing.T, c net.Conn, op string, err error) {
	t.Helper()
	oe, ok := err.(*net.OpError)
	if !ok {
		t.Fatalf("%s: %T %v, want *net.OpError", op, err, err)
	}
	if oe.Op != op || oe.Net != "tcp" {
		t.Fatalf("%s: Op %q Net %q, want %q \"tcp\"", op, oe.Op, oe.Net, op)
	}
	if oe.Source == nil || oe.Source.String() != c.LocalAddr().String() {
		t.Fatalf("%s: Source %v, want %v", op, oe.Source, c.LocalAddr())
	}
	if oe.Addr == nil || oe.Addr.String() != c.RemoteAddr().String() {
		t.Fatalf("%s: Addr %v, want %v", op, oe.Addr, c.RemoteAddr())
	}
	if _, nested := oe.Err.(*net.OpError); nested {
		t.Fatalf("%s: OpError wraps another OpError: %v", op, err)
	}
}

// atkFill writes to c, whose peer does not read, until the kernel's
// buffers are full (a write deadline cuts the write that does not fit),
// and returns how many bytes went in.
func atkFill(t *testing.T, c net.Conn) int {
	t.Helper()
	if err := c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	total := 0
	chunk := make([]byte, 64<<10)
	for {
		n, err := c.Write(chunk)
		total += n
		if err != nil {
			atkTimeout(t, c, "write", err)
			break
		}
	}
	if err := c.SetWriteDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	return total
}

// atkSmallBuffers keeps the kernel's buffering small, so that writes of a
// MiB already wait for the reader (smaller still would have loopback
// stall on its window updates).
func atkSmallBuffers(t *testing.T, c net.Conn, peer *net.TCPConn) {
	t.Helper()
	if err := c.(interface{ SetWriteBuffer(int) error }).SetWriteBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	if err := peer.SetReadBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
}

func TestAttackDeadlinePast(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		// Data waiting does not matter: a deadline gone is a timeout.
		if _, err := peer.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		if err := c.SetDeadline(time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(make([]byte, 8))
		if n != 0 {
			t.Fatalf("read %d bytes past the deadline", n)
		}
		atkTimeout(t, c, "read", err)
		n, err = c.Write([]byte("y"))
		if n != 0 {
			t.Fatalf("wrote %d bytes past the deadline", n)
		}
		atkTimeout(t, c, "write", err)

		// A timeout does not break the connection: a later deadline
		// reads what waited and writes.
		if err := c.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 8)
		if n, err := c.Read(b); err != nil || string(b[:n]) != "x" {
			t.Fatalf("read after the deadline moved: %q %v", b[:n], err)
		}
		if _, err := c.Write([]byte("y")); err != nil {
			t.Fatal(err)
		}
		if n, err := peer.Read(b); err != nil || string(b[:n]) != "y" {
			t.Fatalf("peer read %q %v", b[:n], err)
		}
	})
}

func TestAttackDeadlineFutureExpires(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		const d = 50 * time.Millisecond
		start := time.Now()
		if err := c.SetReadDeadline(start.Add(d)); err != nil {
			t.Fatal(err)
		}
		_, err := c.Read(make([]byte, 8))
		if time.Since(start) < d {
			t.Fatalf("read returned %v before its deadline", time.Since(start))
		}
		atkTimeout(t, c, "read", err)

		atkSmallBuffers(t, c, peer)
		atkFill(t, c)
		start = time.Now()
		if err := c.SetWriteDeadline(start.Add(d)); err != nil {
			t.Fatal(err)
		}
		_, err = c.Write(make([]byte, 64<<10))
		if time.Since(start) < d {
			t.Fatalf("write returned %v before its deadline", time.Since(start))
		}
		atkTimeout(t, c, "write", err)
	})
}

// A deadline set by another goroutine wakes a Read or Write already
// waiting, and a deadline cleared while one waits no longer cuts it.
func TestAttackDeadlineChangedWhileBlocked(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		errc := make(chan error, 1)
		go func() {
			_, err := c.Read(make([]byte, 8))
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if err := c.SetReadDeadline(time.Now()); err != nil {
			t.Fatal(err)
		}
		atkTimeout(t, c, "read", <-errc)

		// Cleared: the read outlives the deadline it started with.
		if err := c.SetReadDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() {
			b := make([]byte, 8)
			n, err := c.Read(b)
			if err != nil {
				got <- err.Error()
				return
			}
			got <- string(b[:n])
		}()
		time.Sleep(20 * time.Millisecond)
		if err := c.SetReadDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(700 * time.Millisecond)
		if _, err := peer.Write([]byte("late")); err != nil {
			t.Fatal(err)
		}
		if s := <-got; s != "late" {
			t.Fatalf("read with its deadline cleared: %s", s)
		}

		// Extended: a write waiting on a full socket is cut at the new,
		// earlier deadline, not the later one it began with.
		atkSmallBuffers(t, c, peer)
		atkFill(t, c)
		if err := c.SetWriteDeadline(time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := c.Write(make([]byte, 256<<10))
			errc <- err
		}()
		time.Sleep(20 * time.Millisecond)
		if err := c.SetWriteDeadline(time.Now()); err != nil {
			t.Fatal(err)
		}
		atkTimeout(t, c, "write", <-errc)
	})
}

func TestAttackCloseWhileBlocked(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		atkSmallBuffers(t, c, peer)
		atkFill(t, c)
		// Two readers and two writers: the second of each waits its
		// turn behind the first and must be released by Close too.
		errs := make(chan error, 4)
		for range 2 {
			go func() {
				_, err := c.Read(make([]byte, 8))
				errs <- fmt.Errorf("read: %w", err)
			}()
			go func() {
				_, err := c.Write(make([]byte, 256<<10))
				errs <- fmt.Errorf("write: %w", err)
			}()
		}
		time.Sleep(50 * time.Millisecond)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			select {
			case err := <-errs:
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("%v, want net.ErrClosed", err)
				}
				op := strings.SplitN(err.Error(), ":", 2)[0]
				atkOpError(t, c, op, errors.Unwrap(err))
			case <-time.After(5 * time.Second):
				t.Fatal("a blocked Read or Write outlived Close")
			}
		}
		// And after Close, at once.
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close: %v", err)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("write after close: %v", err)
		}
		if err := c.Close(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("second close: %v", err)
		}
	})
}

func TestAttackEOF(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		if _, err := peer.Write([]byte("last")); err != nil {
			t.Fatal(err)
		}
		peer.Close()
		b, err := io.ReadAll(c)
		if err != nil || string(b) != "last" {
			t.Fatalf("ReadAll: %q %v", b, err)
		}
		for range 2 {
			// Bare io.EOF, every time: callers compare with ==.
			if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
				t.Fatalf("read at the end: %d %#v", n, err)
			}
		}
	})
}

func TestAttackPeerReset(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		if err := peer.SetLinger(0); err != nil {
			t.Fatal(err)
		}
		peer.Close()
		_, err := c.Read(make([]byte, 8))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after a reset: %v, want ECONNRESET", err)
		}
		atkOpError(t, c, "read", err)
		var se *os.SyscallError
		if !errors.As(err, &se) || se.Syscall != "read" {
			t.Fatalf("read after a reset: %v, want an os.SyscallError of read", err)
		}
	})
}

// A write to a peer that closed fails with EPIPE (or the reset that
// preceded it), as a TCPConn's does; the SIGPIPE that write(2) raises is
// ignored by the runtime for a socket, so the process lives on.
func TestAttackWriteToClosedPeer(t *testing.T) {
	c, peer := atkPair(t, true)
	peer.Close()
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = c.Write([]byte("after the close"))
		time.Sleep(time.Millisecond)
	}
	if !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("write to a closed peer: %v, want EPIPE or ECONNRESET", err)
	}
	atkOpError(t, c, "write", err)
	var se *os.SyscallError
	if !errors.As(err, &se) || se.Syscall != "write" {
		t.Fatalf("%v: want an os.SyscallError of write", err)
	}
	if _, err = c.Write([]byte("again")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("second write after the reset: %v, want EPIPE", err)
	}
}

func TestAttackSendAfterShutdown(t *testing.T) {
	c, peer := atkPair(t, false)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var e syscall.Errno
	if err := rc.Write(func(fd uintptr) bool { _, e = Send(fd, []byte("x")); return true }); err != nil {
		t.Fatal(err)
	}
	if e != syscall.EPIPE {
		t.Fatalf("Send after shutdown: %v, want EPIPE", e)
	}
	_ = peer
}

func TestAttackPeek(t *testing.T) {
	c, peer := atkPair(t, false)
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	peek := func() (int, syscall.Errno) {
		var n int
		var e syscall.Errno
		if err := rc.Read(func(fd uintptr) bool { n, e = Peek(fd); return true }); err != nil {
			t.Fatal(err)
		}
		return n, e
	}
	if n, e := peek(); e != syscall.EAGAIN {
		t.Fatalf("Peek of an empty socket: %d %v, want EAGAIN", n, e)
	}
	if _, err := peer.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if n, e := peek(); n != 1 || e != 0 {
		t.Fatalf("Peek with data waiting: %d %v", n, e)
	}
	peer.Close()
	time.Sleep(10 * time.Millisecond)
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "ab" {
		t.Fatalf("Peek took data: read %q %v", b, err)
	}
	if n, e := peek(); n != 0 || e != 0 {
		t.Fatalf("Peek at the end: %d %v", n, e)
	}
}

// atkPattern is the byte at offset i of a stream, so that a byte lost,
// doubled or reordered anywhere shows.
func atkPattern(i int) byte { return byte(i*7 + i>>10) }

// A write of many MiB to a reader that takes small bites slowly goes in
// many partial send(2)s and waits for room between them; it must still
// report all of it written, once, in order.
func TestAttackLargeWriteSlowReader(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		atkSmallBuffers(t, c, peer)
		const size = 16 << 20
		src := make([]byte, size)
		for i := range src {
			src[i] = atkPattern(i)
		}
		done := make(chan error, 1)
		go func() {
			b := make([]byte, 3001)
			off := 0
			for off < size {
				n, err := peer.Read(b)
				for i := range n {
					if b[i] != atkPattern(off+i) {
						done <- fmt.Errorf("byte %d is %d, want %d", off+i, b[i], atkPattern(off+i))
						return
					}
				}
				off += n
				if err != nil {
					done <- fmt.Errorf("after %d bytes: %w", off, err)
					return
				}
				if off%(256<<10) < n {
					time.Sleep(2 * time.Millisecond)
				}
			}
			done <- nil
		}()
		n, err := c.Write(src)
		if err != nil || n != size {
			t.Fatalf("write: %d %v, want %d", n, err, size)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// n of a write cut by its deadline is what the kernel took: the peer
// receives exactly the bytes that every Write reported, no more.
func TestAttackWriteCountOnError(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		atkSmallBuffers(t, c, peer)
		total := 0
		var got []byte
		for range 3 {
			src := make([]byte, 4<<20)
			for i := range src {
				src[i] = atkPattern(total + i)
			}
			// The deadline is set once the bytes are made: making them
			// takes longer than it under the race detector on a busy
			// machine, and a write that starts past it takes nothing.
			if err := c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			n, err := c.Write(src)
			if n == 0 || n == len(src) {
				t.Fatalf("write of %d to a peer not reading: %d %v, want a partial write", len(src), n, err)
			}
			atkTimeout(t, c, "write", err)
			total += n
			// The peer takes what waits, so that the next write goes on
			// from where this one stopped.
			got = append(got, atkDrain(t, peer)...)
		}
		if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(peer)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rest...)
		if len(got) != total {
			t.Fatalf("peer received %d bytes, writes reported %d", len(got), total)
		}
		for i, b := range got {
			if b != atkPattern(i) {
				t.Fatalf("byte %d is %d, want %d", i, b, atkPattern(i))
			}
		}
	})
}

// atkDrain reads what peer has until nothing comes for a while.
func atkDrain(t *testing.T, peer *net.TCPConn) []byte {
	t.Helper()
	var got []byte
	b := make([]byte, 64<<10)
	for {
		peer.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		n, err := peer.Read(b)
		got = append(got, b[:n]...)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			peer.SetReadDeadline(time.Time{})
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Zero-length reads and writes on an open connection do nothing, and take
// nothing waiting.
func TestAttackZeroLength(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		if _, err := peer.Write([]byte("z")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
		if n, err := c.Read(nil); n != 0 || err != nil {
			t.Fatalf("Read(nil): %d %v", n, err)
		}
		if n, err := c.Write(nil); n != 0 || err != nil {
			t.Fatalf("Write(nil): %d %v", n, err)
		}
		b := make([]byte, 4)
		if n, err := c.Read(b); err != nil || string(b[:n]) != "z" {
			t.Fatalf("read after Read(nil): %q %v", b[:n], err)
		}
		// An empty write is not an end: the peer sees nothing.
		if err := peer.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if n, err := peer.Read(b); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("peer read after Write(nil): %d %v", n, err)
		}
	})
}

// A zero-length Read or Write of a closed connection reports the close, as
// on a TCPConn (which takes the descriptor's lock before it looks at the
// length); a caller probing with an empty write learns the connection is
// gone. A TCPConn's empty write also reports a deadline gone, and a
// socket shut for writing.
func TestAttackZeroLengthClosed(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, _ := atkPair(t, wrap)
		c.SetWriteDeadline(time.Now().Add(-time.Second))
		if _, err := c.Write(nil); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Write(nil) past the write deadline: %v, want os.ErrDeadlineExceeded", err)
		}
		c.SetWriteDeadline(time.Time{})
		c.(interface{ CloseWrite() error }).CloseWrite()
		if _, err := c.Write(nil); !errors.Is(err, syscall.EPIPE) {
			t.Errorf("Write(nil) after CloseWrite: %v, want EPIPE", err)
		}
		c.Close()
		if _, err := c.Read(nil); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read(nil) of a closed connection: %v, want net.ErrClosed", err)
		}
		if _, err := c.Write(nil); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Write(nil) of a closed connection: %v, want net.ErrClosed", err)
		}
	})
}

// Writes from several goroutines at once each arrive whole (net.Conn's
// writes do not interleave), and reads from several goroutines at once
// together take every byte once; with -race, the Conn's per-call state
// must show no race.
func TestAttackConcurrentReadsAndWrites(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		atkSmallBuffers(t, c, peer)
		const writers, records, recSize = 4, 16, 200 << 10
		// Every goroutine is waited for before the test ends, failed or
		// not, so none reports into a finished test.
		var wg sync.WaitGroup
		defer wg.Wait()
		defer c.Close()
		defer peer.Close()
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := range records {
					rec := bytes.Repeat([]byte{byte(w*records + r)}, recSize)
					if n, err := c.Write(rec); err != nil || n != recSize {
						t.Errorf("writer %d: %d %v", w, n, err)
						return
					}
				}
			}()
		}
		// Meanwhile the peer sends to c, which four goroutines read.
		const upSize = 8 << 20
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 64<<10)
			for sent := 0; sent < upSize; sent += len(b) {
				if _, err := peer.Write(b); err != nil {
					t.Errorf("peer write: %v", err)
					return
				}
			}
			peer.CloseWrite()
		}()
		var readers sync.WaitGroup
		var got sync.Mutex
		received := 0
		for range 4 {
			wg.Add(1)
			readers.Add(1)
			go func() {
				defer wg.Done()
				defer readers.Done()
				b := make([]byte, 5000)
				for {
					n, err := c.Read(b)
					got.Lock()
					received += n
					got.Unlock()
					if err == io.EOF {
						return
					}
					if err != nil {
						t.Errorf("read: %v", err)
						return
					}
				}
			}()
		}
		seen := map[byte]bool{}
		buf := make([]byte, recSize)
		for range writers * records {
			if _, err := io.ReadFull(peer, buf); err != nil {
				t.Errorf("peer read: %v", err)
				return
			}
			id := buf[0]
			if seen[id] || bytes.Count(buf, []byte{id}) != recSize {
				t.Errorf("record %d arrived interleaved with another, or twice", id)
				return
			}
			seen[id] = true
		}
		readers.Wait()
		if received != upSize {
			t.Errorf("concurrent readers took %d bytes, peer sent %d", received, upSize)
		}
	})
}

// Close, deadlines and reads race against each other without a crash or a
// hang, and every call ends once the connection is closed.
func TestAttackCloseRacesCalls(t *testing.T) {
	for range 20 {
		c, peer := atkPair(t, true)
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := make([]byte, 1024)
				for {
					var err error
					switch i % 3 {
					case 0:
						_, err = c.Read(b)
					case 1:
						_, err = c.Write(b)
					default:
						err = c.SetDeadline(time.Now().Add(time.Millisecond))
						time.Sleep(100 * time.Microsecond)
						c.SetDeadline(time.Time{})
					}
					if errors.Is(err, net.ErrClosed) {
						return
					}
				}
			}()
		}
		go io.Copy(io.Discard, peer)
		time.Sleep(5 * time.Millisecond)
		c.Close()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("calls outlived Close")
		}
	}
}

// The promoted TCPConn methods act on the same socket.
func TestAttackPromotedMethods(t *testing.T) {
	c, peer := atkPair(t, true)
	sc := c.(*Conn)
	if sc.Inner() != net.Conn(sc.TCPConn) {
		t.Fatal("Inner is not the wrapped TCPConn")
	}
	if _, ok := sc.Inner().(*net.TCPConn); !ok {
		t.Fatalf("Inner is %T", sc.Inner())
	}

	if err := sc.SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var rcvbuf int
	var gerr error
	rc.Control(func(fd uintptr) { rcvbuf, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) })
	if gerr != nil || rcvbuf != 64<<10 { // Linux doubles what is set
		t.Fatalf("SO_RCVBUF after SetReadBuffer(32 KiB): %d %v", rcvbuf, gerr)
	}

	// CloseWrite: the peer sees the end, the other direction still works.
	if _, err := sc.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := sc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(peer)
	if err != nil || string(b) != "bye" {
		t.Fatalf("peer after CloseWrite: %q %v", b, err)
	}
	if _, err := peer.Write([]byte("back")); err != nil {
		t.Fatal(err)
	}
	b = make([]byte, 8)
	if n, err := sc.Read(b); err != nil || string(b[:n]) != "back" {
		t.Fatalf("read after CloseWrite: %q %v", b[:n], err)
	}
	if _, err := sc.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after CloseWrite: %v, want EPIPE", err)
	}

	// SetLinger(0): Close resets.
	c2, peer2 := atkPair(t, true)
	if err := c2.(*Conn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if _, err := peer2.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("peer after SetLinger(0) and Close: %v, want ECONNRESET", err)
	}
}

// io.Copy and net.Buffers take the TCPConn's own fast paths through the
// promoted ReadFrom, WriteTo and writev; the bytes still arrive in order.
func TestAttackPromotedCopyPaths(t *testing.T) {
	c, peer := atkPair(t, true)
	src, srcPeer := atkPair(t, false)
	const size = 4 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = atkPattern(i)
	}
	go func() {
		srcPeer.Write(data)
		srcPeer.Close()
	}()
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(peer); got <- b }()
	n, err := io.Copy(c, src) // ReadFrom: splice from src
	if err != nil || n != size {
		t.Fatalf("io.Copy into a Conn: %d %v", n, err)
	}
	bufs := net.Buffers{[]byte("one,"), []byte("two,"), []byte("three")}
	if _, err := bufs.WriteTo(c); err != nil {
		t.Fatal(err)
	}
	c.(*Conn).CloseWrite()
	want := append(append([]byte{}, data...), "one,two,three"...)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer received %d bytes, want %d in order", len(b), len(want))
	}
}

func TestAttackWrapOthersUnchanged(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if w := Wrap(a); w != a {
		t.Fatalf("Wrap(net.Pipe) = %T, want it unchanged", w)
	}

	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	u, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if w := Wrap(u); w != u {
		t.Fatalf("Wrap(unix) = %T, want it unchanged", w)
	}

	// A Conn wrapped again is not wrapped twice.
	c, _ := atkPair(t, true)
	if w := Wrap(c); w != c {
		t.Fatalf("Wrap(*Conn) = %T, want it unchanged", w)
	}
}

// Same failure, same error: a timeout, a close and a reset read the same
// from a TCPConn and a Conn, but for the addresses.
func TestAttackErrorTextMatchesTCPConn(t *testing.T) {
	texts := map[bool][]string{}
	for _, k := range atkKinds {
		c, peer := atkPair(t, k.wrap)
		addrs := strings.NewReplacer(c.LocalAddr().String(), "L", c.RemoteAddr().String(), "R")
		c.SetDeadline(time.Now().Add(-time.Second))
		_, rerr := c.Read(make([]byte, 1))
		_, werr := c.Write([]byte("x"))
		c.SetDeadline(time.Time{})
		peer.SetLinger(0)
		peer.Close()
		time.Sleep(10 * time.Millisecond)
		_, reset := c.Read(make([]byte, 1))
		c.Close()
		_, cerr := c.Read(make([]byte, 1))
		for _, err := range []error{rerr, werr, reset, cerr} {
			texts[k.wrap] = append(texts[k.wrap], addrs.Replace(err.Error()))
		}
	}
	for i := range texts[false] {
		if texts[false][i] != texts[true][i] {
			t.Errorf("TCPConn: %q\nsockio:  %q", texts[false][i], texts[true][i])
		}
	}
}

// The race detector sees a TCPConn's Read write into its buffer and its
// Write read from it (syscall.Read and Write annotate them), and it orders
// a write to a socket before the read that gets its bytes (a global
// release and acquire in the same two calls). The attacks below run in a
// child process of the race-enabled test binary, as a race report fails
// the test it happens in; the parent reads whether the child saw a race.

const atkRaceChild = "SOCKIO_ATTACK_RACE_CHILD"

func atkRaceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// atkRaceRun runs test (one of the TestAttackRaceChild ones) in a child
// with wrap, and reports whether the race detector reported anything.
func atkRaceRun(t *testing.T, test string, wrap bool) bool {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), atkRaceChild+"="+fmt.Sprint(wrap), "GORACE=halt_on_error=0")
	out, err := cmd.CombinedOutput()
	raced := bytes.Contains(out, []byte("WARNING: DATA RACE"))
	if err != nil && !raced {
		t.Fatalf("child %s: %v\n%s", test, err, out)
	}
	return raced
}

func atkRaceParent(t *testing.T, test string, wantRace bool) {
	if os.Getenv(atkRaceChild) != "" {
		return
	}
	if !atkRaceEnabled() {
		t.Skip("needs -race")
	}
	for _, k := range atkKinds {
		if got := atkRaceRun(t, test, k.wrap); got != wantRace {
			t.Errorf("%s: race reported %v, want %v (as a TCPConn)", k.name, got, wantRace)
		}
	}
}

func atkRaceChildWrap(t *testing.T) bool {
	v := os.Getenv(atkRaceChild)
	if v == "" {
		t.Skip("runs as the child of another test")
	}
	return v == "true"
}

// A goroutine changing a buffer while a Write sends it is a race that
// -race must report: the bytes on the wire are unspecified.
func TestAttackRaceWriteBufferSeen(t *testing.T) {
	atkRaceParent(t, "TestAttackRaceChildWriteBuffer", true)
}

func TestAttackRaceChildWriteBuffer(t *testing.T) {
	wrap := atkRaceChildWrap(t)
	c, peer := atkPair(t, wrap)
	go io.Copy(io.Discard, peer)
	buf := make([]byte, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); buf[0] = 1 }()
	if _, err := c.Write(buf); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}

// A goroutine reading a buffer that a Read fills is a race as well.
func TestAttackRaceReadBufferSeen(t *testing.T) {
	atkRaceParent(t, "TestAttackRaceChildReadBuffer", true)
}

func TestAttackRaceChildReadBuffer(t *testing.T) {
	wrap := atkRaceChildWrap(t)
	c, peer := atkPair(t, wrap)
	if _, err := peer.Write(make([]byte, 64)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	var wg sync.WaitGroup
	wg.Add(1)
	var seen byte
	go func() { defer wg.Done(); seen = buf[0] }()
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	_ = seen
}

// What one goroutine stored before writing to a socket is seen, without a
// report, by a goroutine that read those bytes from the other end: the
// detector's model of sockets, which tests of the proxy rely on when a
// handler's state is checked after its response arrived. Both directions:
// the Conn writes, a TCPConn reads; a TCPConn writes, the Conn reads.
func TestAttackRaceSocketOrdersWrite(t *testing.T) {
	atkRaceParent(t, "TestAttackRaceChildOrdersWrite", false)
}

func TestAttackRaceChildOrdersWrite(t *testing.T) {
	c, peer := atkPair(t, atkRaceChildWrap(t))
	atkOrders(t, c, peer)
}

func TestAttackRaceSocketOrdersRead(t *testing.T) {
	atkRaceParent(t, "TestAttackRaceChildOrdersRead", false)
}

func TestAttackRaceChildOrdersRead(t *testing.T) {
	c, peer := atkPair(t, atkRaceChildWrap(t))
	atkOrders(t, peer, c)
}

// atkOrders stores state, writes a byte to w on another goroutine, reads
// it from r and then the state.
func atkOrders(t *testing.T, w io.Writer, r io.Reader) {
	state := new(int)
	go func() {
		*state = 1
		w.Write([]byte{1})
	}()
	if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if *state != 1 {
		t.Fatal("state not seen")
	}
}
