package proxy

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

// oneExchange sends raw on a new client connection and reads the answer
// to method, its body to the end (err: how the body ended).
func oneExchange(t *testing.T, addr, method, raw string) (*http.Response, string, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// TestDirectAnswerSmuggledSecondAnswer: a second answer a backend puts
// after the first one's end (after a Content-Length body, in a 204, 304
// or HEAD answer that has none whatever its headers say), in the same
// write or a moment later, is neither part of the first client's answer
// nor the answer to the next request, another client's.
func TestDirectAnswerSmuggledSecondAnswer(t *testing.T) {
	const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSMUGG"
	for _, tc := range []struct {
		name, method, answer, body string
	}{
		{"after a length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", "ok"},
		{"in a 204", "GET", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", ""},
		{"in a 304", "GET", "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", ""},
		{"in a HEAD answer", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", ""},
	} {
		for _, later := range []bool{false, true} {
			var requests atomic.Int32
			backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
				for {
					if _, err := readHead(br); err != nil {
						return
					}
					if requests.Add(1) > 1 {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
						continue
					}
					if later {
						io.WriteString(c, tc.answer)
						time.Sleep(30 * time.Millisecond)
						io.WriteString(c, smuggled)
					} else {
						io.WriteString(c, tc.answer+smuggled)
					}
				}
			})
			addr := directPort(t, backend)
			resp, body, err := oneExchange(t, addr, tc.method, tc.method+" /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
			if err != nil || resp.StatusCode == http.StatusBadGateway || body != tc.body {
				t.Fatalf("%s (later %v): first client got %d %q %v", tc.name, later, resp.StatusCode, body, err)
			}
			time.Sleep(60 * time.Millisecond) // the smuggled answer has arrived
			for range 2 {
				resp, body, err = oneExchange(t, addr, "GET", "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
				if err != nil || resp.StatusCode != http.StatusOK || body != "second" {
					t.Errorf("%s (later %v): next client got %d %q %v", tc.name, later, resp.StatusCode, body, err)
				}
			}
		}
	}
}

// TestDirectAnswerUntilClose: an answer with neither Content-Length nor
// Transfer-Encoding lasts until the backend closes: it is served whole,
// and its connection is not used again.
func TestDirectAnswerUntilClose(t *testing.T) {
	big := strings.Repeat("0123456789", 20<<10)
	backend, accepted := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"+big)
		c.(*net.TCPConn).CloseWrite()
		readHead(br) // a request sent on it anyway would be seen here
	})
	addr := directPort(t, backend)
	for i := range 2 {
		resp, body, err := oneExchange(t, addr, "GET", "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
		if err != nil || resp.StatusCode != http.StatusOK || body != big {
			t.Fatalf("request %d: %d, %d bytes of %d, %v", i, resp.StatusCode, len(body), len(big), err)
		}
	}
	if n := accepted(); n != 2 {
		t.Errorf("backend accepted %d connections for 2 requests", n)
	}
}

// TestDirectAnswerAmbiguousLength: an answer two parsers could end at
// different places (Transfer-Encoding with Content-Length, differing
// Content-Lengths) is a 502 whose body names nothing internal, and its
// connection is not used again.
func TestDirectAnswerAmbiguousLength(t *testing.T) {
	for _, answer := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nContent-Length: 3, 30\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length : 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nX-Nul: a\x00b\r\nContent-Length: 3\r\n\r\nabc",
	} {
		backend, accepted := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
			for {
				if _, err := readHead(br); err != nil {
					return
				}
				io.WriteString(c, answer)
			}
		})
		addr := directPort(t, backend)
		for range 2 {
			resp, body, err := oneExchange(t, addr, "GET", "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
			if err != nil || resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("%q: %d %q %v", answer, resp.StatusCode, body, err)
			}
			for _, internal := range []string{"127.0.0.1", "Content-Length", "Transfer-Encoding", "chunked", "backend", "answer"} {
				if strings.Contains(body, internal) || strings.Contains(resp.Status, internal) {
					t.Errorf("%q: the 502 names %q: %q", answer, internal, body)
				}
			}
		}
		if n := accepted(); n != 2 {
			t.Errorf("%q: backend accepted %d connections for 2 refused answers", answer, n)
		}
	}
}

// TestDirectAnswerChunkedTrailers: a chunked answer reaches the client
// with its trailers, announced or not; those a trailer may not carry are
// dropped; the connection is used again.
func TestDirectAnswerChunkedTrailers(t *testing.T) {
	for _, tc := range []struct {
		name, trailerField string
		announced          bool
	}{
		{"announced", "Trailer: X-Sum\r\n", true},
		{"not announced", "", false},
	} {
		backend, accepted := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
			for {
				if _, err := readHead(br); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"+tc.trailerField+"\r\n"+
					"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\nHost: evil\r\nContent-Length: 99\r\n\r\n")
			}
		})
		addr := directPort(t, backend)
		for range 2 {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/svc", nil)
			req.Host = "app.example.com"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || string(body) != "hello world" {
				t.Fatalf("%s: body %q, %v", tc.name, body, err)
			}
			if got := resp.Trailer.Get("X-Sum"); got != "42" {
				t.Errorf("%s: trailer X-Sum %q (trailers %v)", tc.name, got, resp.Trailer)
			}
			for _, k := range []string{"Host", "Content-Length"} {
				if _, ok := resp.Trailer[k]; ok {
					t.Errorf("%s: forbidden trailer %s reached the client", tc.name, k)
				}
			}
		}
		if n := accepted(); n != 1 {
			t.Errorf("%s: backend accepted %d connections for 2 requests", tc.name, n)
		}
	}
}

// TestDirectAnswerCutMidBody: an answer the backend ends before its end
// (within a chunk, before the last chunk, short of its length) reaches
// the client cut short, never as a whole answer.
func TestDirectAnswerCutMidBody(t *testing.T) {
	for _, answer := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n10\r\nonly part",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Sum: 1\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part",
	} {
		backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
			if _, err := readHead(br); err != nil {
				return
			}
			io.WriteString(c, answer)
		})
		addr := directPort(t, backend)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
		}
		c.Close()
		if err == nil {
			t.Errorf("%q reached the client as a whole answer", answer)
		}
	}
}

// TestDirectAnswerBareLF: a head whose lines end with a bare LF is taken,
// as net/http takes it: Portico writes the head anew, so no parser after
// it sees the bare LFs.
func TestDirectAnswerBareLF(t *testing.T) {
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			if _, err := readHead(br); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\nX-A: 1\nContent-Length: 2\n\nok")
		}
	})
	addr := directPort(t, backend)
	resp, body, err := oneExchange(t, addr, "GET", "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	if err != nil || resp.StatusCode != http.StatusOK || body != "ok" || resp.Header.Get("X-A") != "1" {
		t.Fatalf("%d %q %v %v", resp.StatusCode, body, resp.Header, err)
	}
}
