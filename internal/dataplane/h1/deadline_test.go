package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The read deadline of a kept-alive connection changes only when a read
// needs it to: the header deadline is armed when a head needs a second
// read, and the deadline of the wait and the head is lifted just before
// the connection is read again. These tests attack both shortcuts.

// keptAlive dials addr and has one request answered, so that the next
// one is a kept-alive connection's.
func keptAlive(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := dial(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	return c, br
}

// TestSlowlorisKeptAlive: the head of a kept-alive connection's second
// request, sent a byte at a time, is cut at the header timeout counted
// from its first byte, not let run to the (much longer) idle timeout that
// bounded the wait for it.
func TestSlowlorisKeptAlive(t *testing.T) {
	var hits atomic.Int64
	addr, _ := serve(t, okHandler(&hits), func(s *Server) {
		s.ReadHeaderTimeout = 300 * time.Millisecond
		s.IdleTimeout = 5 * time.Second
	})
	c, _ := keptAlive(t, addr)
	start := time.Now()
	cut := false
	// 70 bytes 30ms apart: 2.1s, well past the header timeout.
	for _, b := range []byte("GET / HTTP/1.1\r\nHost: a\r\nX-Slow: 01234567890123456789012345678901\r\n\r\n") {
		if _, err := c.Write([]byte{b}); err != nil {
			cut = true
			break
		}
		time.Sleep(30 * time.Millisecond)
	}
	if !cut && !closed(c, 100*time.Millisecond) {
		t.Fatalf("a slow second head was not cut after %v", time.Since(start))
	}
	if hits.Load() != 1 {
		t.Errorf("handler ran %d times, want 1 (the slow request must not reach it)", hits.Load())
	}
}

// TestSplitHeadKeptAlive: a second head that arrives in two parts is
// served when its end comes within the header timeout, and cut when it
// never comes, at the header timeout rather than the idle one.
func TestSplitHeadKeptAlive(t *testing.T) {
	var hits atomic.Int64
	addr, _ := serve(t, okHandler(&hits), func(s *Server) {
		s.ReadHeaderTimeout = 300 * time.Millisecond
		s.IdleTimeout = 5 * time.Second
	})
	c, br := keptAlive(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\n")
	time.Sleep(100 * time.Millisecond)
	io.WriteString(c, "Host: a\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("split head within the timeout: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)

	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n")
	start := time.Now()
	if !closed(c, 3*time.Second) {
		t.Fatal("a head that never ends was not cut")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a head that never ends cut after %v: header timeout 300ms, idle 5s", d)
	}
	if hits.Load() != 2 {
		t.Errorf("handler ran %d times, want 2", hits.Load())
	}
}

// TestNoDeadlineInHandler: a handler that runs past the idle and header
// timeouts of its kept-alive connection is not taken for a client gone
// by the background read, and reads a body that comes late.
func TestNoDeadlineInHandler(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			return
		}
		time.Sleep(500 * time.Millisecond)
		if err := r.Context().Err(); err != nil {
			http.Error(w, "cancelled: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, "got "+string(b))
	}, func(s *Server) {
		s.ReadHeaderTimeout = 200 * time.Millisecond
		s.IdleTimeout = 200 * time.Millisecond
		s.CloseDetectDelay = 20 * time.Millisecond
	})
	for _, tc := range []struct{ name, raw, late, want string }{
		{"no body", "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n", "", "got "},
		{"late body", "POST /slow HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", "hello", "got hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := keptAlive(t, addr)
			io.WriteString(c, tc.raw)
			if tc.late != "" {
				time.Sleep(400 * time.Millisecond)
				io.WriteString(c, tc.late)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || string(b) != tc.want {
				t.Errorf("got %d %q, want 200 %q", resp.StatusCode, b, tc.want)
			}
		})
	}
}

// TestHijackedWithoutDeadline: a connection hijacked after a kept-alive
// request carries no deadline of the server's: its new owner reads what
// comes after the idle and header timeouts.
func TestHijackedWithoutDeadline(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		// Read from the connection itself, as a hijacker that took
		// what was buffered (nothing here) goes on doing.
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			line = "error: " + err.Error() + "\n"
		}
		brw.WriteString(line)
		brw.Flush()
	}, func(s *Server) {
		s.ReadHeaderTimeout = 200 * time.Millisecond
		s.IdleTimeout = 200 * time.Millisecond
	})
	c, br := keptAlive(t, addr)
	io.WriteString(c, "GET /hijack HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(500 * time.Millisecond)
	io.WriteString(c, "late\n")
	line, err := br.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "late" {
		t.Errorf("hijacked connection echoed %q, %v; want %q", line, err, "late")
	}
}

// countingConn counts the changes of its read and write deadlines.
type countingConn struct {
	net.Conn
	reads, writes *atomic.Int64
}

func (c countingConn) SetDeadline(t time.Time) error {
	c.reads.Add(1)
	c.writes.Add(1)
	return c.Conn.SetDeadline(t)
}

func (c countingConn) SetReadDeadline(t time.Time) error {
	c.reads.Add(1)
	return c.Conn.SetReadDeadline(t)
}

func (c countingConn) SetWriteDeadline(t time.Time) error {
	c.writes.Add(1)
	return c.Conn.SetWriteDeadline(t)
}

// TestIdleDeadlineKept: requests that follow each other on a kept-alive
// connection leave the read deadline of the wait for the next one as it
// is (within idleSlack), and a handler's write deadline is lifted without
// touching it; yet the connection that then stays idle is still closed at
// the idle timeout, no earlier than idleSlack before it.
func TestIdleDeadlineKept(t *testing.T) {
	const idle = 640 * time.Millisecond
	var reads, writes atomic.Int64
	s := &Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As the proxy's pacing does for every answer.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Minute))
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: time.Second, IdleTimeout: idle, MaxHeaderBytes: 8 << 10}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.ServeConn(countingConn{Conn: c, reads: &reads, writes: &writes})
	}()
	defer s.Close()
	c := dial(t, ln.Addr().String())
	br := bufio.NewReader(c)
	const n = 50
	for i := range n {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	last := time.Now()
	// The first wait's deadline, the second's (the first counted the
	// header timeout), and a few more if the machine stalled past
	// idleSlack between two requests.
	if got := reads.Load(); got > 6 {
		t.Errorf("%d read deadline changes for %d requests, want the wait's deadline kept", got, n)
	}
	// The last answer's write deadline is lifted after its bytes left:
	// the client may read them first.
	for wait := time.Now().Add(time.Second); writes.Load() < 2*n && time.Now().Before(wait); {
		time.Sleep(time.Millisecond)
	}
	if got := writes.Load(); got != 2*n {
		t.Errorf("%d write deadline changes for %d requests, want %d (each set and lifted)", got, n, 2*n)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.Copy(io.Discard, br)
	if err != nil {
		t.Fatalf("waiting for the idle close: %v", err)
	}
	if d := time.Since(last); d < idle-idleSlack(idle)-5*time.Millisecond || d > idle+time.Second {
		t.Errorf("idle connection closed after %v, want about %v", d, idle)
	}
}
