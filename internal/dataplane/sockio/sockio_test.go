package sockio

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// pair returns both ends of a loopback TCP connection, one as a Conn.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	c, peer := atkPair(t, true)
	return c.(*Conn), peer
}

func fd(t *testing.T, c *Conn) uintptr {
	t.Helper()
	var f uintptr
	if err := c.rc.Control(func(x uintptr) { f = x }); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRoundTripBothWays sends 8 MiB each way at once, more than the
// sockets hold, so that writes are cut short and wait, and reads get
// pieces: every byte arrives, in order, and Write reports all of it
// written. (Shrinking the buffers would make loopback TCP itself crawl.)
func TestRoundTripBothWays(t *testing.T) {
	c, peer := pair(t)
	out, in := make([]byte, 8<<20), make([]byte, 8<<20)
	rand.Read(out)
	rand.Read(in)
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	_ = peer.SetDeadline(time.Now().Add(20 * time.Second))

	errc := make(chan error, 3)
	go func() { // the peer echoes nothing: it writes in and reads out
		_, err := peer.Write(in)
		errc <- err
	}()
	gotAtPeer := make(chan []byte, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(peer, int64(len(out))))
		errc <- err
		gotAtPeer <- b
	}()
	go func() {
		n, err := c.Write(out)
		if err == nil && n != len(out) {
			err = io.ErrShortWrite
		}
		errc <- err
	}()
	got := make([]byte, len(in))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reading through Conn: %v", err)
	}
	for range 3 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, in) {
		t.Fatal("Conn read bytes other than those sent")
	}
	if !bytes.Equal(<-gotAtPeer, out) {
		t.Fatal("Conn wrote bytes other than those given")
	}
}

// TestReadEnds: the peer's close is a bare io.EOF, as net.TCPConn gives.
func TestReadEnds(t *testing.T) {
	c, peer := pair(t)
	peer.Write([]byte("last"))
	peer.Close()
	b, err := io.ReadAll(c)
	if string(b) != "last" || err != nil {
		t.Fatalf("ReadAll: %q %v", b, err)
	}
	if n, err := c.Read(make([]byte, 4)); n != 0 || err != io.EOF {
		t.Fatalf("read after the end: %d %v, want 0 io.EOF", n, err)
	}
}

// TestPeek: nothing waiting is EAGAIN, data is seen and left in place, the
// peer's close is 0.
func TestPeek(t *testing.T) {
	c, peer := pair(t)
	f := fd(t, c)
	if n, err := Peek(f); err != syscall.EAGAIN {
		t.Fatalf("peek of an empty socket: %d %v, want EAGAIN", n, err)
	}
	peer.Write([]byte("x"))
	waitFor(t, func() bool { n, err := Peek(f); return n == 1 && err == 0 })
	b := make([]byte, 2)
	if n, err := c.Read(b); n != 1 || err != nil || b[0] != 'x' {
		t.Fatalf("the peeked byte was taken: read %d %q %v", n, b[:n], err)
	}
	peer.Close()
	waitFor(t, func() bool { n, err := Peek(f); return n == 0 && err == 0 })
}

// TestSendStopsWhenFull: Send never waits; a socket that takes nothing
// more is EAGAIN, and Write then waits until the peer reads.
func TestSendStopsWhenFull(t *testing.T) {
	c, peer := pair(t)
	_ = c.SetWriteBuffer(4 << 10)
	_ = peer.(*net.TCPConn).SetReadBuffer(4 << 10)
	f := fd(t, c)
	chunk := make([]byte, 64<<10)
	sent := 0
	// Full is EAGAIN that lasts: the first may only mean that the peer's
	// kernel has not acknowledged yet.
	for refused := 0; refused < 3; {
		n, err := Send(f, chunk)
		switch {
		case err == syscall.EAGAIN:
			refused++
			time.Sleep(20 * time.Millisecond)
			continue
		case err != 0:
			t.Fatalf("send: %v", err)
		}
		refused = 0
		sent += n
		if sent > 64<<20 {
			t.Fatal("the socket never filled")
		}
	}
	done := make(chan error, 1)
	go func() { _, err := c.Write([]byte("end")); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("Write returned (%v) while the socket was full", err)
	case <-time.After(50 * time.Millisecond):
	}
	want := sent + 3
	got, err := io.ReadAll(io.LimitReader(peer, int64(want)))
	if err != nil || len(got) != want || string(got[sent:]) != "end" {
		t.Fatalf("peer read %d of %d bytes (%v)", len(got), want, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestReadFromCopiesThroughWrite: io.Copy from a reader the kernel cannot
// splice (a pipe of the io package, read in pieces) goes through Conn's
// ReadFrom and arrives whole and in order, and a LimitedReader's limit
// holds.
func TestReadFromCopiesThroughWrite(t *testing.T) {
	c, peer := pair(t)
	data := make([]byte, 3<<20)
	rand.Read(data)
	pr, pw := io.Pipe()
	go func() {
		for b := data; len(b) > 0; b = b[min(len(b), 10000):] {
			pw.Write(b[:min(len(b), 10000)])
		}
		pw.Close()
	}()
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(peer); got <- b }()
	limit := int64(len(data) - 5)
	n, err := c.ReadFrom(&io.LimitedReader{R: pr, N: limit})
	if err != nil || n != limit {
		t.Fatalf("ReadFrom: %d %v, want %d", n, err, limit)
	}
	c.CloseWrite()
	if b := <-got; !bytes.Equal(b, data[:limit]) {
		t.Fatalf("peer received %d bytes, want the first %d in order", len(b), limit)
	}
}

// TestWrapRefusesBlockingSocket: a socket someone switched to blocking
// mode is left a TCPConn, whose reads the scheduler knows may wait.
func TestWrapRefusesBlockingSocket(t *testing.T) {
	c, _ := atkPair(t, false)
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if w := Wrap(c); w != c {
		t.Fatalf("Wrap of a blocking socket = %T, want it unchanged", w)
	}
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), true) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if _, ok := Wrap(c).(*Conn); !ok {
		t.Fatal("Wrap of the same socket made non-blocking again is not a Conn")
	}
}

// TestDialer: a dialed connection is a Conn; a refused dial is the net
// package's error.
func TestDialer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := &Dialer{Dialer: net.Dialer{Timeout: time.Second}}
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*Conn); !ok {
		t.Fatalf("Dialer returned %T, want *Conn", c)
	}
	ln.Close()
	if _, err := d.DialContext(context.Background(), "tcp", ln.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial of a closed port: %v, want ECONNREFUSED", err)
	}
}

// TestDialerTrack: Track sees the dial's context and its function runs
// once, at the first Close, however many follow; a Track that returns nil
// leaves the connection untracked; a refused dial is not told.
func TestDialerTrack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type key struct{}
	var opened, closed []string
	d := &Dialer{Dialer: net.Dialer{Timeout: time.Second}, Track: func(ctx context.Context) func() {
		name, _ := ctx.Value(key{}).(string)
		if name == "" {
			return nil
		}
		opened = append(opened, name)
		return func() { closed = append(closed, name) }
	}}
	dial := func(name string) net.Conn {
		t.Helper()
		c, err := d.DialContext(context.WithValue(context.Background(), key{}, name), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b, none := dial("a"), dial("b"), dial("")
	if len(opened) != 2 || opened[0] != "a" || opened[1] != "b" || len(closed) != 0 {
		t.Fatalf("after three dials: opened %q, closed %q", opened, closed)
	}
	for range 3 {
		a.Close()
	}
	none.Close()
	if len(closed) != 1 || closed[0] != "a" {
		t.Fatalf("after a closed three times: closed %q, want [a]", closed)
	}
	b.Close()
	if len(closed) != 2 || closed[1] != "b" {
		t.Fatalf("closed %q, want [a b]", closed)
	}
	ln.Close()
	if _, err := d.DialContext(context.WithValue(context.Background(), key{}, "c"), "tcp", ln.Addr().String()); err == nil || len(opened) != 2 {
		t.Fatalf("refused dial: err %v, opened %q", err, opened)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("condition not met in 5s")
}

// BenchmarkPingPong: one byte each way on a kept connection, through Conn
// and through the net.TCPConn it wraps.
func BenchmarkPingPong(b *testing.B) {
	for _, raw := range []bool{true, false} {
		name := "sockio"
		if !raw {
			name = "net"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				if raw {
					c = Wrap(c)
				}
				defer c.Close()
				buf := make([]byte, 1)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			if raw {
				c = Wrap(c)
			}
			defer c.Close()
			buf := make([]byte, 1)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Read(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
