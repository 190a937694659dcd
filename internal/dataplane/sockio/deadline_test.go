package sockio

import (
	"net"
	"testing"
	"time"
)

// The write deadline reaches the poller only when a write waits (see
// SetWriteDeadline); these attacks aim at the states that laziness adds,
// each on a TCPConn and on a Conn.

// A deadline that passed while no write was in progress fails the next
// write, even one the socket has room for.
func TestAttackLazyDeadlinePassedBetweenWrites(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, _ := atkPair(t, wrap)
		if err := c.SetWriteDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("before")); err != nil {
			t.Fatalf("write before the deadline: %v", err)
		}
		time.Sleep(40 * time.Millisecond)
		n, err := c.Write([]byte("after"))
		if n != 0 {
			t.Fatalf("wrote %d bytes past the deadline", n)
		}
		atkTimeout(t, c, "write", err)
	})
}

// A write that waited left its deadline with the poller; a later deadline,
// set while nothing waits, must replace it: once the first one passed, a
// write before the second must not fail.
func TestAttackLazyDeadlineMovedAfterWait(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		atkSmallBuffers(t, c, peer)
		// Fills the buffers: the last write waits with the deadline
		// handed over, and fails at it.
		if err := c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				atkTimeout(t, c, "write", err)
				break
			}
		}
		// The peer drains everything; the old deadline is long gone.
		done := make(chan struct{})
		go func() {
			defer close(done)
			buf := make([]byte, 64<<10)
			for {
				if err := peer.SetReadDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
					return
				}
				if _, err := peer.Read(buf); err != nil {
					return
				}
			}
		}()
		if err := c.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("later")); err != nil {
			t.Fatalf("write under the later deadline: %v", err)
		}
		// And a deadline lifted while nothing waits lets a write that
		// waits wait on.
		if err := c.SetWriteDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(make([]byte, 1<<20)); err != nil {
			t.Fatalf("write without a deadline: %v", err)
		}
		<-done
	})
}

// Past a deadline set with SetDeadline, reads and writes both fail; lifted
// with SetDeadline, both work again.
func TestAttackLazySetDeadlineBothWays(t *testing.T) {
	atkEach(t, func(t *testing.T, wrap bool) {
		c, peer := atkPair(t, wrap)
		if err := c.SetDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
		_, err := c.Write([]byte("x"))
		atkTimeout(t, c, "write", err)
		_, err = c.Read(make([]byte, 1))
		atkTimeout(t, c, "read", err)
		if err := c.SetDeadline(time.Time{}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("y")); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := peer.Read(b); err != nil || b[0] != 'y' {
			t.Fatalf("peer read %q %v", b, err)
		}
	})
}

// Once the socket is handed out (Inner), a deadline set on the Conn
// bounds writes made on the inner connection too.
func TestAttackLazyDeadlineAfterInner(t *testing.T) {
	c, peer := atkPair(t, true)
	atkSmallBuffers(t, c, peer)
	inner := c.(*Conn).Inner().(*net.TCPConn)
	if err := c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		if _, err := inner.Write(make([]byte, 64<<10)); err != nil {
			atkTimeout(t, inner, "write", err)
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("the inner connection's writes ignored the Conn's deadline")
		}
	}
}
