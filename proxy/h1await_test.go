package proxy

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"portico.dev/portico/internal/dataplane/sockio"
)

// TestDirectStaleConnectionReplaced: a pooled connection the backend closed
// while it sat idle, or wrote an unasked answer on before closing, is found
// out before any byte of the next request goes out on it, so even a request
// that may not be sent twice (a POST without a body) goes to a new
// connection and gets its own answer, sent once. With heads that fit the
// write buffer (checked in the write that sends them and waits) and heads
// that do not (checked before their first part goes out).
func TestDirectStaleConnectionReplaced(t *testing.T) {
	for _, idle := range []string{"closed", "unasked 408"} {
		for _, headSize := range []int{0, 20 << 10} {
			t.Run(fmt.Sprintf("%s/head+%d", idle, headSize), func(t *testing.T) {
				var mu sync.Mutex
				seen := map[string]int{}
				backend, accepted := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
					for n := 0; ; n++ {
						head, err := readHead(br)
						if err != nil {
							return
						}
						path := targetOf(head)
						mu.Lock()
						seen[path]++
						mu.Unlock()
						io.WriteString(c, pathAnswer(path))
						if n == 0 && path == "/svc/first" {
							if idle == "unasked 408" {
								io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 7\r\nConnection: close\r\n\r\ntimeout")
							}
							return // closes the connection
						}
					}
				})
				addr := directPort(t, backend)
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if resp, body := exchangeOn(t, c, "GET /svc/first HTTP/1.1\r\nHost: app.example.com\r\n\r\n"); resp.StatusCode != 200 || body != "/svc/first" {
					t.Fatalf("first: %d %q", resp.StatusCode, body)
				}
				// The close (and the 408) reach Portico's side of the pooled
				// connection before the next request is sent.
				time.Sleep(50 * time.Millisecond)
				big := ""
				if headSize > 0 {
					big = "X-Big: " + strings.Repeat("b", headSize) + "\r\n"
				}
				resp, body := exchangeOn(t, c, "POST /svc/second HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 0\r\n"+big+"\r\n")
				if resp.StatusCode != 200 || body != "/svc/second" {
					t.Fatalf("POST after a stale connection: %d %q, want 200 and its own answer", resp.StatusCode, body)
				}
				mu.Lock()
				n := seen["/svc/second"]
				mu.Unlock()
				if n != 1 {
					t.Errorf("the POST reached the backend %d times, want once", n)
				}
				if got := accepted(); got != 2 {
					t.Errorf("backend accepted %d connections, want 2", got)
				}
			})
		}
	}
}

// TestDirectSendWhenBackendReadsLate: a head larger than the connection's
// write buffer goes out in parts (the first checked for a stale
// connection, the last written in the call that waits for the answer) to a
// backend with a small receive window that reads nothing for a while.
func TestDirectSendWhenBackendReadsLate(t *testing.T) {
	// Set on the listener, so that accepted connections start with a
	// small window.
	lc := net.ListenConfig{Control: smallBuffer(syscall.SO_RCVBUF)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				time.Sleep(200 * time.Millisecond)
				br := bufio.NewReader(c)
				for {
					head, err := readHead(br)
					if err != nil {
						return
					}
					path := targetOf(head)
					io.WriteString(c, pathAnswer(path))
				}
			}()
		}
	}()
	addr := directPort(t, ln.Addr().String())
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var fields strings.Builder
	for i := range 60 {
		fmt.Fprintf(&fields, "X-F%d: %s\r\n", i, strings.Repeat("v", 1000))
	}
	for _, path := range []string{"/svc/one", "/svc/two"} {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: app.example.com\r\n"+fields.String()+"\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != path {
			t.Fatalf("GET %s: %d %q", path, resp.StatusCode, b)
		}
	}
}

// smallBuffer is a socket Control function that sets the buffer opt
// (SO_RCVBUF, SO_SNDBUF) to 4 KiB.
func smallBuffer(opt int) func(_, _ string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, opt, 4096) })
		return cmp.Or(err, serr)
	}
}

// pathAnswer is an answer whose body is the request's path.
func pathAnswer(path string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(path), path)
}

// targetOf is the request target of a head read by readHead.
func targetOf(head []string) string {
	_, rest, _ := strings.Cut(head[0], " ")
	target, _, _ := strings.Cut(rest, " ")
	return target
}

// smallBufferPair dials a listener whose connections have a small receive
// buffer through a pool whose connections have a small send buffer, so that
// a little unread data fills everything between them.
func smallBufferPair(t *testing.T) (*h1Pool, *h1Conn, net.Conn) {
	t.Helper()
	lc := net.ListenConfig{Control: smallBuffer(syscall.SO_RCVBUF)}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	p := newH1Pool(&sockio.Dialer{Dialer: net.Dialer{Control: smallBuffer(syscall.SO_SNDBUF)}})
	t.Cleanup(p.close)
	c, err := p.get(context.Background(), ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.conn.Close() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	return p, c, peer
}

// TestSendAndAwaitPartialWrite: when the socket cannot take the end of the
// head at once (the backend reads nothing and the buffers between are
// full), the rest is written as the backend reads, in order, and the
// answer is read after it.
func TestSendAndAwaitPartialWrite(t *testing.T) {
	_, c, peer := smallBufferPair(t)
	// Fill the buffers: write until the socket takes no more, even after
	// what is in flight has reached the backend's side.
	filled := 0
	fill := bytes.Repeat([]byte("f"), 1024)
	for round := 0; ; round++ {
		took := 0
		err := c.raw.Write(func(fd uintptr) bool {
			for {
				n, err := syscall.Write(int(fd), fill)
				if err != nil {
					return true
				}
				took += n
			}
		})
		filled += took
		if err != nil || round == 100 {
			t.Fatalf("filling: %d bytes, %v", filled, err)
		}
		if took == 0 && round > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	head := "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", 3000) + "\r\n\r\n"
	c.beginRequest()
	c.bw.WriteString(head)
	c.lastFlush = true
	flushed := make(chan error, 1)
	go func() { flushed <- c.bw.Flush() }()
	// The backend starts reading once the flush found the socket full (the
	// step checked below says whether it did).
	time.Sleep(100 * time.Millisecond)
	got := make([]byte, filled+len(head))
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatalf("backend read %v", err)
	}
	if string(got[filled:]) != head {
		t.Fatalf("the head arrived as %q", got[filled:])
	}
	io.WriteString(peer, "HTTP/1.1 204 No Content\r\n\r\n")
	if err := <-flushed; err != nil {
		t.Fatalf("flush: %v", err)
	}
	if c.step != stepFallback {
		t.Fatalf("the head went out in one write (step %d): the test filled nothing", c.step)
	}
	c.readLimit = 1 << 20
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := c.ans.ReadHead(c.br, "GET", 1<<20); err != nil || c.ans.Status != 204 {
		t.Fatalf("answer: %d %v", c.ans.Status, err)
	}
}

// TestSendAndAwaitWriteFails: a write that fails after the peek found the
// connection clean returns the write's error, not a stale connection (the
// request may have reached the backend in part).
func TestSendAndAwaitWriteFails(t *testing.T) {
	_, c, _ := smallBufferPair(t)
	if err := c.conn.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.reused = true
	c.beginRequest()
	c.bw.WriteString("GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	c.lastFlush = true
	err := c.bw.Flush()
	if !errors.Is(err, syscall.EPIPE) || errors.Is(err, errStaleConn) {
		t.Fatalf("flush after the write side closed: %v, want EPIPE", err)
	}
}

// TestSendRefusesBackendThatSpokeFirst: bytes on a new connection before
// its first request went out answer no request: they are refused, not
// read as the answer, whether the head fits one write or goes in parts.
func TestSendRefusesBackendThatSpokeFirst(t *testing.T) {
	for _, size := range []int{100, 20 << 10} {
		_, c, peer := smallBufferPair(t)
		io.WriteString(peer, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
		time.Sleep(50 * time.Millisecond) // the greeting reaches Portico's side
		c.beginRequest()
		c.bw.WriteString("GET / HTTP/1.1\r\nHost: a\r\nX-Pad: " + strings.Repeat("p", size) + "\r\n\r\n")
		c.lastFlush = true
		if err := c.bw.Flush(); !errors.Is(err, errSpokeFirst) {
			t.Errorf("head of %d bytes after a greeting: %v, want %v", size, err, errSpokeFirst)
		}
	}
}
