package h1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// These attack the read deadline a kept-alive connection leaves on after
// its head ("stale", lifted before the next read) or arms only when a
// head needs a second read, where the tests of deadline_test.go do not.

// TestHandlerReadDeadlineKept: a deadline a handler sets through
// http.ResponseController bounds its body reads on a kept-alive
// connection: the server lifts its own stale deadline before a read, and
// must not take the handler's for it. A body that never comes ends the
// read at the handler's deadline; one that comes after the server's
// timeouts but before the handler's is read.
func TestHandlerReadDeadlineKept(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			return
		}
		d := 150 * time.Millisecond
		if r.URL.Path == "/long" {
			d = 3 * time.Second
		}
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(d)); err != nil {
			t.Error(err)
		}
		b, err := io.ReadAll(r.Body)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			io.WriteString(w, "deadline")
		case err != nil:
			io.WriteString(w, "error: "+err.Error())
		default:
			io.WriteString(w, "got "+string(b))
		}
	}, func(s *Server) {
		s.ReadHeaderTimeout = 100 * time.Millisecond
		s.IdleTimeout = 100 * time.Millisecond
	})
	for _, tc := range []struct{ name, path, late, want string }{
		{"body never sent", "/short", "", "deadline"},
		{"body after the server's timeouts", "/long", "hello", "got hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := keptAlive(t, addr)
			defer c.Close()
			// Sent in two parts so that the head needs a second read,
			// which arms the header deadline: the stale one is then the
			// header's, not the idle wait's.
			io.WriteString(c, "POST "+tc.path+" HTTP/1.1\r\n")
			time.Sleep(20 * time.Millisecond)
			io.WriteString(c, "Host: a\r\nContent-Length: 5\r\n\r\n")
			if tc.late != "" {
				time.Sleep(400 * time.Millisecond)
				io.WriteString(c, tc.late)
			}
			start := time.Now()
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if string(b) != tc.want {
				t.Errorf("handler's read: %q, want %q", b, tc.want)
			}
			if tc.late == "" && time.Since(start) > 2*time.Second {
				t.Errorf("a body read under a 150ms deadline ended after %v", time.Since(start))
			}
		})
	}
}

// TestNextHeadByteWhileHandling: the first byte of the next head, sent
// while a slow handler runs, is taken by the background read; the rest of
// that head is still bounded by the header timeout (not the much longer
// idle one), and served when it comes in time.
func TestNextHeadByteWhileHandling(t *testing.T) {
	var hits atomic.Int64
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/slow" {
			time.Sleep(300 * time.Millisecond)
		}
		io.WriteString(w, r.URL.Path)
	}, func(s *Server) {
		s.ReadHeaderTimeout = 300 * time.Millisecond
		s.IdleTimeout = 10 * time.Second
		s.CloseDetectDelay = 10 * time.Millisecond
	})
	for _, rest := range []bool{true, false} {
		t.Run(fmt.Sprintf("rest sent %v", rest), func(t *testing.T) {
			hits.Store(0)
			c, br := keptAlive(t, addr)
			defer c.Close()
			io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
			time.Sleep(100 * time.Millisecond) // the background read waits
			io.WriteString(c, "G")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(resp.Body); string(b) != "/slow" {
				t.Fatalf("slow request: %d %q", resp.StatusCode, b)
			}
			if rest {
				time.Sleep(100 * time.Millisecond)
				io.WriteString(c, "ET /next HTTP/1.1\r\nHost: a\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := io.ReadAll(resp.Body); string(b) != "/next" {
					t.Errorf("next request: %d %q", resp.StatusCode, b)
				}
				return
			}
			start := time.Now()
			if !closed(c, 5*time.Second) {
				t.Fatal("a head cut after its first byte was never closed")
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("a head cut after its first byte closed after %v: header timeout 300ms, idle 10s", d)
			}
			if hits.Load() != 2 {
				t.Errorf("handler ran %d times, want 2", hits.Load())
			}
		})
	}
}

// TestPipelinedPartialHead: the start of the next head, sent in one write
// with the request before it, is bounded by the header timeout, not the
// idle one: after a request without a body (the deadline on is the stale
// one of the idle wait, the next read must arm the header's) and after a
// body, whatever way it is framed or read (the drain's deadline).
func TestPipelinedPartialHead(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/unread" {
			return
		}
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}, func(s *Server) {
		s.ReadHeaderTimeout = 300 * time.Millisecond
		s.IdleTimeout = 10 * time.Second
	})
	for _, raw := range []string{
		"GET /read HTTP/1.1\r\nHost: a\r\n\r\nGET / HT",
		"GET /unread HTTP/1.1\r\nHost: a\r\n\r\nG",
		"POST /read HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HT",
		"POST /read HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nG",
		"POST /unread HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n",
		"POST /unread HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET",
	} {
		c, br := keptAlive(t, addr)
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%.30q: %v", raw, err)
		}
		io.Copy(io.Discard, resp.Body)
		start := time.Now()
		if !closed(c, 5*time.Second) {
			t.Errorf("%.30q: the next head's rest never came and the connection stayed open", raw)
		} else if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%.30q: closed after %v: header timeout 300ms, idle 10s", raw, d)
		}
		c.Close()
	}
}

// TestIdleTimeoutAfterManyRequests: requests of every shape (no body, a
// body read or left unread, framed by length or chunks, a head in one
// part or two) move the read deadline through each of its states; the
// idle timeout must still close the connection after them.
func TestIdleTimeoutAfterManyRequests(t *testing.T) {
	var hits atomic.Int64
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if !strings.HasPrefix(r.URL.Path, "/unread") {
			io.Copy(io.Discard, r.Body)
		}
	}, func(s *Server) {
		s.ReadHeaderTimeout = 200 * time.Millisecond
		s.IdleTimeout = 300 * time.Millisecond
	})
	c := dial(t, addr)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	shapes := []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /read HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"POST /unread HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"POST /read HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /unread HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
	}
	n := 0
	for range 4 {
		for _, raw := range shapes {
			for _, split := range []bool{false, true} {
				if split {
					io.WriteString(c, raw[:10])
					time.Sleep(2 * time.Millisecond)
					io.WriteString(c, raw[10:])
				} else {
					io.WriteString(c, raw)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("request %d (%.20q): %v", n, raw, err)
				}
				io.Copy(io.Discard, resp.Body)
				n++
			}
		}
	}
	start := time.Now()
	if !closed(c, 3*time.Second) {
		t.Fatalf("idle connection never closed after %d requests", n)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("closed after %v, idle timeout 300ms", d)
	}
	if int(hits.Load()) != n {
		t.Errorf("handler ran %d times, want %d", hits.Load(), n)
	}
}
