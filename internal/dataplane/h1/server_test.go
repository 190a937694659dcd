package h1

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// serve runs a Server with h on a loopback port for the test and returns
// its address and the server.
func serve(t *testing.T, h http.HandlerFunc, set func(*Server)) (string, *Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, Log: zaptest.NewLogger(t), ReadHeaderTimeout: 2 * time.Second, IdleTimeout: 5 * time.Second, MaxHeaderBytes: 8 << 10}
	if set != nil {
		set(s)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.ServeConn(c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		s.Close()
	})
	return ln.Addr().String(), s
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// answers sends raw on a new connection and reads every response until
// the connection ends; it returns them with their bodies.
func answers(t *testing.T, addr, raw string, method string) ([]*http.Response, []string) {
	t.Helper()
	c := dial(t, addr)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var resps []*http.Response
	var bodies []string
	for {
		resp, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return resps, bodies
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading a body: %v", err)
		}
		resps = append(resps, resp)
		bodies = append(bodies, string(b))
	}
}

// closed reports whether the server closed c within limit, after
// whatever it still sends.
func closed(c net.Conn, limit time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func okHandler(hits *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%s %s %s", r.Method, r.RequestURI, b)
	}
}

// TestRefusedHeads: every head two parsers could read differently, or
// that breaks RFC 9112, is answered with an error and a closed connection
// and never reaches the handler, together with what follows it.
func TestRefusedHeads(t *testing.T) {
	var hits atomic.Int64
	addr, _ := serve(t, okHandler(&hits), nil)
	const next = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, c := range []struct {
		name, head string
		status     int
	}{
		{"Content-Length and Transfer-Encoding", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"Transfer-Encoding and Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400},
		{"two Content-Lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
		{"two equal Content-Lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400},
		{"Content-Length list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc", 400},
		{"signed Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc", 400},
		{"hex Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0x3\r\n\r\nabc", 400},
		{"huge Content-Length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\nabc", 400},
		{"gzip coding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
		{"chunked then gzip", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 501},
		{"gzip then chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
		{"chunked with a parameter", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n0\r\n\r\n", 501},
		{"two Transfer-Encodings", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"Transfer-Encoding in HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n Transfer-Encoding: chunked\r\n\r\n", 400},
		{"space before the colon", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length : 3\r\n\r\nabc", 400},
		{"tab before the colon", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length\t: 3\r\n\r\nabc", 400},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x00c\r\n\r\n", 400},
		{"bare CR in a value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rContent-Length: 3\r\n\r\nabc", 400},
		{"bare LF line end", "GET / HTTP/1.1\nHost: a\r\n\r\n", 400},
		{"bare LF in the fields", "GET / HTTP/1.1\r\nHost: a\nContent-Length: 3\r\n\r\nabc", 400},
		{"empty line first", "\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"no Host in HTTP/1.1", "GET / HTTP/1.1\r\n\r\n", 400},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
		{"malformed Host", "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
		{"non-token field name", "GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n", 400},
		{"empty field name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", 400},
		{"non-token method", "G(T / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"two spaces in the request line", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"space in the target", "GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"relative target", "GET a HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"asterisk without OPTIONS", "GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400},
		{"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
		{"HTTP/1.2", "GET / HTTP/1.2\r\nHost: a\r\n\r\n", 505},
		{"lower-case version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400},
		{"HTTP/0.9", "GET /\r\n\r\n", 400},
		{"unknown expectation", "POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\na", 417},
		{"forbidden trailer", "POST / HTTP/1.1\r\nHost: a\r\nTrailer: Content-Length\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nContent-Length: 9\r\n\r\n", 400},
		{"oversize head", "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + strings.Repeat("b", 9<<10) + "\r\n\r\n", 431},
		{"many small fields", "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-A: b\r\n", 2000) + "\r\n", 431},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := hits.Load()
			resps, bodies := answers(t, addr, c.head+next, http.MethodGet)
			if len(resps) != 1 || resps[0].StatusCode != c.status {
				t.Fatalf("answers %v, want one %d", statuses(resps), c.status)
			}
			if !resps[0].Close {
				t.Errorf("the refusal does not say Connection: close")
			}
			want := fmt.Sprintf("%d %s", c.status, http.StatusText(c.status))
			if bodies[0] != want {
				t.Errorf("body %q, want %q", bodies[0], want)
			}
			if n := hits.Load() - before; n != 0 {
				t.Errorf("the handler served %d requests", n)
			}
		})
	}
}

func statuses(resps []*http.Response) []int {
	var s []int
	for _, r := range resps {
		s = append(s, r.StatusCode)
	}
	return s
}

// TestAcceptedHeads: what RFC 9112 allows is served as net/http serves it.
func TestAcceptedHeads(t *testing.T) {
	seen := make(chan *http.Request, 1)
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		seen <- r
	}, nil)
	for _, c := range []struct {
		name, raw, method, uri, host, body string
	}{
		{"absolute-form", "GET http://b.example/p?q=1 HTTP/1.1\r\nHost: a\r\n\r\n", "GET", "http://b.example/p?q=1", "b.example", ""},
		{"OWS around values", "POST /x HTTP/1.1\r\nHost:   a \t\r\nContent-Length:\t3 \r\n\r\nabc", "POST", "/x", "a", "abc"},
		{"chunked with extensions and trailer", "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\nTrailer: X-T\r\n\r\n3;ext=1\r\nabc\r\n2 ; e\r\nde\r\n0\r\nX-T: v\r\n\r\n", "POST", "/c", "a", "abcde"},
		{"HTTP/1.0 without Host", "GET /o HTTP/1.0\r\n\r\n", "GET", "/o", "", ""},
		{"CONNECT authority", "CONNECT b.example:443 HTTP/1.1\r\nHost: b.example:443\r\n\r\n", "CONNECT", "b.example:443", "b.example:443", ""},
		{"lower-case names", "GET /l HTTP/1.1\r\nhost: a\r\nx-lower: v\r\n\r\n", "GET", "/l", "a", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			resps, _ := answers(t, addr, c.raw, c.method)
			if len(resps) == 0 || resps[0].StatusCode != 200 {
				t.Fatalf("answers %v", statuses(resps))
			}
			r := <-seen
			b, _ := io.ReadAll(r.Body)
			if r.Method != c.method || r.RequestURI != c.uri || r.Host != c.host || string(b) != c.body {
				t.Errorf("handler got %s %s Host %q body %q", r.Method, r.RequestURI, r.Host, b)
			}
			if _, ok := r.Header["Host"]; ok {
				t.Errorf("Host left in the header")
			}
			if c.name == "chunked with extensions and trailer" && (r.Trailer.Get("X-T") != "v" || r.ContentLength != -1 || len(r.TransferEncoding) != 1) {
				t.Errorf("trailer %v, length %d, encodings %v", r.Trailer, r.ContentLength, r.TransferEncoding)
			}
			if c.name == "lower-case names" && r.Header.Get("X-Lower") != "v" {
				t.Errorf("header %v", r.Header)
			}
		})
	}
}

// TestChunkedBodyAttacks: chunked bodies built to exhaust the server
// (sizes that overflow, endless size lines or trailers, framing without
// data) fail the handler's read and close the connection.
func TestChunkedBodyAttacks(t *testing.T) {
	errs := make(chan error, 1)
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.Copy(io.Discard, r.Body)
		errs <- err
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
		}
	}, nil)
	head := "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, c := range []struct{ name, body string }{
		{"size overflow", "fffffffffffffffff1\r\nabc\r\n0\r\n\r\n"},
		{"size line too long", "3;" + strings.Repeat("e", 5000) + "\r\nabc\r\n0\r\n\r\n"},
		{"no size", ";ext\r\nabc\r\n0\r\n\r\n"},
		{"junk after the size", "3x\r\nabc\r\n0\r\n\r\n"},
		{"data longer than its size", "3\r\nabcd\r\n0\r\n\r\n"},
		{"bare LF after the data", "3\r\nabc\n0\r\n\r\n"},
		{"bare LF after the size", "3\nabc\r\n0\r\n\r\n"},
		{"endless trailer", "0\r\n" + strings.Repeat("X-T: "+strings.Repeat("t", 100)+"\r\n", 200) + "\r\n"},
		{"malformed trailer", "0\r\nX T: v\r\n\r\n"},
		{"framing without data", strings.Repeat("1;"+strings.Repeat("e", 200)+"\r\na\r\n", 200) + "0\r\n\r\n"},
		{"cut short", "5\r\nab"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := dial(t, addr)
			io.WriteString(conn, head+c.body)
			if c.name == "cut short" {
				conn.(*net.TCPConn).CloseWrite()
			}
			if err := <-errs; err == nil {
				t.Fatalf("the body read without error")
			}
			if !closed(conn, 2*time.Second) {
				t.Errorf("connection still open")
			}
		})
	}
}

// TestSlowlorisHead: a head sent a byte at a time is cut at the header
// timeout, counted from its first byte, and never reaches the handler.
func TestSlowlorisHead(t *testing.T) {
	var hits atomic.Int64
	addr, _ := serve(t, okHandler(&hits), func(s *Server) { s.ReadHeaderTimeout = 300 * time.Millisecond })
	c := dial(t, addr)
	start := time.Now()
	cut := false
	for _, b := range []byte("GET / HTTP/1.1\r\nHost: a\r\nX-Slow: 0123456789012345678901234567890\r\n\r\n") {
		if _, err := c.Write([]byte{b}); err != nil {
			cut = true
			break
		}
		time.Sleep(30 * time.Millisecond)
	}
	if !cut && !closed(c, 100*time.Millisecond) {
		t.Fatalf("a slow head was not cut after %v", time.Since(start))
	}
	if hits.Load() != 0 {
		t.Errorf("the slow request reached the handler")
	}
}

// TestIdleTimeout: a kept-alive connection without a next request closes
// at the idle timeout, and a second request within it is served.
func TestIdleTimeout(t *testing.T) {
	var hits atomic.Int64
	addr, _ := serve(t, okHandler(&hits), func(s *Server) { s.IdleTimeout = 300 * time.Millisecond })
	c := dial(t, addr)
	br := bufio.NewReader(c)
	for range 2 {
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	if !closed(c, 2*time.Second) {
		t.Fatal("idle connection never closed")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("closed after %v, idle timeout 300ms", d)
	}
}

// TestPipelined: requests sent in one go, bodies included, are answered
// in order, each with its own body; a handler slower than the close
// detection delay does not lose the next request's bytes.
func TestPipelined(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/slow" {
			time.Sleep(150 * time.Millisecond)
		}
		fmt.Fprintf(w, "%s:%s", r.URL.Path, b)
	}, func(s *Server) { s.CloseDetectDelay = 20 * time.Millisecond })
	raw := "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello" +
		"POST /b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
		"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"
	c := dial(t, addr)
	io.WriteString(c, raw)
	br := bufio.NewReader(c)
	var got []string
	for i := range 4 {
		if i == 3 {
			// Sent while /slow runs: the watch for a closed client reads
			// its first byte and must keep it.
			time.Sleep(60 * time.Millisecond)
			io.WriteString(c, "GET /c HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		b, _ := io.ReadAll(resp.Body)
		got = append(got, string(b))
	}
	if want := "[/a:hello /b:abc /slow: /c:]"; fmt.Sprint(got) != want {
		t.Errorf("answers %v, want %s", got, want)
	}
}

// TestExpectContinue: 100 (Continue) goes only to a client whose handler
// reads the body; one whose body is refused unread gets the answer and a
// closed connection, since its body may follow or not.
func TestExpectContinue(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "got %s", b)
	}, nil)
	c := dial(t, addr)
	io.WriteString(c, "POST /read HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("first line %q, %v; want 100 Continue", line, err)
	}
	br.ReadString('\n')
	io.WriteString(c, "abc")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "got abc" || resp.Close {
		t.Errorf("answer %q, close %v", b, resp.Close)
	}
	io.WriteString(c, "POST /refuse HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
	line, _ = br.ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 413") {
		t.Fatalf("refused body: first line %q", line)
	}
	if !closed(c, 2*time.Second) {
		t.Errorf("connection kept after a body that never came")
	}
}

// TestHTTP10: an HTTP/1.0 client is answered in HTTP/1.0, kept alive only
// when it asked and the answer has a length, and a streamed answer ends
// with the connection.
func TestHTTP10(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part1")
		if r.URL.Path == "/stream" {
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "part2")
	}, nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	io.WriteString(c, "GET /short HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.Proto != "HTTP/1.0" || resp.ContentLength != 10 || resp.Header.Get("Connection") != "keep-alive" || string(b) != "part1part2" {
		t.Fatalf("keep-alive answer %s, length %d, Connection %q, %q", resp.Proto, resp.ContentLength, resp.Header.Get("Connection"), b)
	}
	io.WriteString(c, "GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	if resp.ContentLength != -1 || len(resp.TransferEncoding) != 0 || string(b) != "part1part2" {
		t.Errorf("streamed answer: length %d, encodings %v, %q", resp.ContentLength, resp.TransferEncoding, b)
	}
	if !closed(c, time.Second) {
		t.Errorf("connection kept after a body delimited by its close")
	}
	resps, _ := answers(t, addr, "GET /short HTTP/1.0\r\n\r\nGET /short HTTP/1.0\r\n\r\n", http.MethodGet)
	if len(resps) != 1 {
		t.Errorf("HTTP/1.0 without keep-alive: %d answers on one connection", len(resps))
	}
}

// TestResponseFraming: HEAD, 204 and 304 carry no body whatever the
// handler writes; trailers declared or named with http.TrailerPrefix
// follow a chunked body; a body short of its declared length closes the
// connection; a value holding CR LF cannot add a field.
func TestResponseFraming(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/head":
			io.WriteString(w, "body of a HEAD")
		case "/204":
			w.WriteHeader(http.StatusNoContent)
			if _, err := io.WriteString(w, "x"); err != http.ErrBodyNotAllowed {
				t.Errorf("write after 204: %v", err)
			}
		case "/304":
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(http.StatusNotModified)
		case "/trailers":
			w.Header().Set("Trailer", "X-Declared")
			io.WriteString(w, "data")
			w.Header().Set("X-Declared", "d")
			w.Header().Set(http.TrailerPrefix+"X-Late", "l")
		case "/short":
			w.Header().Set("Content-Length", "10")
			io.WriteString(w, "abc")
		case "/inject":
			w.Header().Set("X-Safe", "ok")
			w.Header().Set("X-Bad", "v\r\nX-Injected: 1")
			w.Header()["Bad Name"] = []string{"v"}
		case "/103":
			w.Header().Set("Link", "</s.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Del("Link")
			io.WriteString(w, "final")
		}
	}, nil)
	// Answers without a body, so all read as answers to HEAD; the last
	// one shows the connection still in step.
	resps, _ := answers(t, addr, "HEAD /head HTTP/1.1\r\nHost: a\r\n\r\nGET /204 HTTP/1.1\r\nHost: a\r\n\r\nGET /304 HTTP/1.1\r\nHost: a\r\n\r\nHEAD /head HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", http.MethodHead)
	if len(resps) != 4 {
		t.Fatalf("answers %v", statuses(resps))
	}
	if resps[0].ContentLength != int64(len("body of a HEAD")) {
		t.Errorf("HEAD: Content-Length %d", resps[0].ContentLength)
	}
	if resps[1].StatusCode != 204 || resps[2].StatusCode != 304 || resps[2].Header.Get("Content-Length") != "" {
		t.Errorf("204/304: %d, %d, %v", resps[1].StatusCode, resps[2].StatusCode, resps[2].Header)
	}
	// The rest, read properly as answers to GET.
	c := dial(t, addr)
	io.WriteString(c, "GET /trailers HTTP/1.1\r\nHost: a\r\n\r\nGET /inject HTTP/1.1\r\nHost: a\r\n\r\nGET /103 HTTP/1.1\r\nHost: a\r\n\r\nGET /short HTTP/1.1\r\nHost: a\r\n\r\nGET /head HTTP/1.1\r\nHost: a\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "data" || resp.Trailer.Get("X-Declared") != "d" || resp.Trailer.Get("X-Late") != "l" || resp.Header.Get("X-Declared") != "" {
		t.Errorf("trailers: body %q, trailer %v, header %v", b, resp.Trailer, resp.Header)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	if resp.Header.Get("X-Injected") != "" || resp.Header.Get("X-Safe") != "ok" || resp.Header.Get("X-Bad") != "" {
		t.Errorf("injection: header %v", resp.Header)
	}
	line, _ := br.ReadString('\n')
	if line != "HTTP/1.1 103 Early Hints\r\n" {
		t.Fatalf("103: first line %q", line)
	}
	hints, _ := br.ReadString('\n')
	br.ReadString('\n')
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	if !strings.HasPrefix(hints, "Link: ") || string(b) != "final" || resp.Header.Get("Link") != "" {
		t.Errorf("103: hints %q, final %q %v", hints, b, resp.Header)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("a body short of its length read without error")
	}
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Errorf("the connection went on after a short body")
	}
}

// TestHijack: an upgraded connection is handed over with the bytes the
// client sent after its head, and the server lets it be.
func TestHijack(t *testing.T) {
	addr, s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		// Past the close detection delay: the background read is pending
		// and must give way to the hijacker.
		time.Sleep(50 * time.Millisecond)
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		buf := make([]byte, 5)
		if _, err := io.ReadFull(brw, buf); err != nil {
			return
		}
		c.Write(buf)
	}, func(s *Server) { s.CloseDetectDelay = 10 * time.Millisecond })
	for _, early := range []bool{true, false} {
		c := dial(t, addr)
		raw := "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"
		if early { // buffered with the head
			raw += "hello"
		}
		io.WriteString(c, raw)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 101 {
			t.Fatalf("%v %v", resp, err)
		}
		if !early { // sent to the hijacked connection
			io.WriteString(c, "hello")
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "hello" {
			t.Fatalf("echo %q, %v", buf, err)
		}
	}
	c := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhello")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("%v %v", resp, err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo %q, %v", buf, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("shutdown waits for a hijacked connection: %v", err)
	}
}

// TestClientGoneCancels: the context of a request whose handler waits is
// cancelled once its client closes the connection.
func TestClientGoneCancels(t *testing.T) {
	cause := make(chan error, 1)
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cause <- context.Cause(r.Context())
		case <-time.After(5 * time.Second):
			cause <- nil
		}
	}, func(s *Server) { s.CloseDetectDelay = 20 * time.Millisecond })
	c := dial(t, addr)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(100 * time.Millisecond)
	c.Close()
	if err := <-cause; !errors.Is(err, errClientGone) {
		t.Errorf("request context: %v, want cancelled as the client left", err)
	}
}

// TestBodyLeftUnread: a small body the handler ignored is read and the
// connection kept; a large one closes it after the answer.
func TestBodyLeftUnread(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ignored") }, nil)
	small := "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789"
	resps, _ := answers(t, addr, small+small+"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", http.MethodGet)
	if len(resps) != 3 {
		t.Errorf("small bodies: %d answers, want 3", len(resps))
	}
	big := fmt.Sprintf("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", 1<<20)
	c := dial(t, addr)
	io.WriteString(c, big)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Close {
		t.Errorf("a large unread body did not close the connection")
	}
}

// TestShutdown: idle connections close at once; a request in progress
// finishes, told the connection closes; then Shutdown returns.
func TestShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	addr, s := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	}, nil)
	idle := dial(t, addr)
	io.WriteString(idle, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	ib := bufio.NewReader(idle)
	if _, err := http.ReadResponse(ib, nil); err != nil {
		t.Fatal(err)
	}
	busy := dial(t, addr)
	io.WriteString(busy, "GET /wait HTTP/1.1\r\nHost: a\r\n\r\n")
	<-started
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(context.Background()) }()
	if !closed(idle, time.Second) {
		t.Errorf("idle connection still open during shutdown")
	}
	select {
	case err := <-done:
		t.Fatalf("shutdown returned during a request: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "done" || !resp.Close {
		t.Errorf("request during shutdown: %q, close %v", b, resp.Close)
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

// TestHandlerPanics: a panicking handler closes its connection, not the
// server.
func TestHandlerPanics(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "fine")
	}, nil)
	resps, _ := answers(t, addr, "GET /panic HTTP/1.1\r\nHost: a\r\n\r\n", http.MethodGet)
	if len(resps) != 0 {
		t.Errorf("answers %v to a handler that aborted", statuses(resps))
	}
	resps, bodies := answers(t, addr, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", http.MethodGet)
	if len(resps) != 1 || bodies[0] != "fine" {
		t.Errorf("after a panic: %v %v", statuses(resps), bodies)
	}
}

// TestPanicLogged: a handler's panic is logged once at error level with
// its value and stack, and the next client is served; an abort
// (http.ErrAbortHandler, how a handler cuts an answer on purpose) is not
// logged.
func TestPanicLogged(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bug":
			panic("handler bug")
		case "/abort":
			panic(http.ErrAbortHandler)
		}
		io.WriteString(w, "fine")
	}, func(s *Server) { s.Log = zap.New(core) })
	answers(t, addr, "GET /abort HTTP/1.1\r\nHost: a\r\n\r\n", http.MethodGet)
	answers(t, addr, "GET /bug HTTP/1.1\r\nHost: a\r\n\r\n", http.MethodGet)
	resps, bodies := answers(t, addr, "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", http.MethodGet)
	if len(resps) != 1 || bodies[0] != "fine" {
		t.Errorf("after a panic: %v %v", statuses(resps), bodies)
	}
	var panics []observer.LoggedEntry
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "panic") {
			panics = append(panics, e)
		}
	}
	if len(panics) != 1 {
		t.Fatalf("%d panic entries logged, want 1 (the bug, not the abort): %v", len(panics), panics)
	}
	e := panics[0]
	fields := e.ContextMap()
	if e.Level != zap.ErrorLevel || fmt.Sprint(fields["panic"]) != "handler bug" ||
		!strings.Contains(fmt.Sprint(fields["stack"]), "TestPanicLogged") {
		t.Errorf("panic entry: level %v, fields %v", e.Level, fields)
	}
}

// TestFullDuplexAndDeadlines: a handler that answers before it reads a
// large body keeps the connection when it enabled full duplex and read
// the body to its end; deadlines a handler set end with its response.
func TestFullDuplexAndDeadlines(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if r.URL.Path == "/duplex" {
			if err := rc.EnableFullDuplex(); err != nil {
				t.Error(err)
			}
			w.WriteHeader(http.StatusOK)
			rc.Flush()
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d", n)
			return
		}
		// Past before the next request arrives: it must not apply to it.
		rc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		rc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		io.WriteString(w, "short")
	}, nil)
	c := dial(t, addr)
	br := bufio.NewReader(c)
	const size = 400 << 10
	fmt.Fprintf(c, "POST /duplex HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n", size)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(make([]byte, size))
	b, _ := io.ReadAll(resp.Body)
	if string(b) != fmt.Sprint(size) || resp.Close {
		t.Fatalf("full duplex: %q, close %v", b, resp.Close)
	}
	for i := range 2 {
		if i == 1 {
			time.Sleep(100 * time.Millisecond)
		}
		io.WriteString(c, "GET /deadline HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d after deadlines: %v", i+1, err)
		}
		if b, _ := io.ReadAll(resp.Body); string(b) != "short" {
			t.Fatalf("request %d: %q", i+1, b)
		}
	}
}

// TestNotHTTPClosedUnanswered (h2spec 3.5/2 on a cleartext port that also
// takes HTTP/2 with prior knowledge): a first line whose version field is
// not HTTP's at all, such as a mangled HTTP/2 preface, gets no HTTP/1
// answer, only the close; one with a malformed HTTP version is still
// answered 400.
func TestNotHTTPClosedUnanswered(t *testing.T) {
	addr, _ := serve(t, http.NotFoundHandler().ServeHTTP, nil)
	for _, tc := range []struct {
		head   string
		answer bool
	}{
		{"INVALID CONNECTION PREFACE\r\n\r\n", false},
		{"PRI * HTTP/2.1\r\n\r\nSM\r\n\r\n", true}, // 505
		{"GET / HTTP/x\r\nHost: a\r\n\r\n", true},
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, tc.head); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%q: reading: %v", tc.head, err)
		}
		if answered := len(got) > 0; answered != tc.answer {
			t.Errorf("%q: answered %q, want an answer: %v", tc.head, got, tc.answer)
		}
	}
}
