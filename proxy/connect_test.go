package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Attacks on Portico's HTTP/1.1 server (package h1) through the proxy,
// where the harm is what reaches the backend.

// TestNothingAfterCONNECT: the bytes a client sends after a CONNECT
// head are tunnel data to whoever sent them (a proxy in front relays them
// as soon as it forwarded the CONNECT), never a request. Portico does not
// tunnel, so the CONNECT is refused; the connection must then close, as
// net/http's server closes it, instead of reading those bytes as the next
// request and forwarding it to a backend.
func TestNothingAfterCONNECT(t *testing.T) {
	paths := make(chan string, 4)
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			paths <- head[0]
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	addr := directPort(t, backend)
	const hidden = "GET /svc/tunnelled HTTP/1.1\r\nHost: app.example.com\r\n\r\n"
	for _, connect := range []string{
		"CONNECT app.example.com:443 HTTP/1.1\r\nHost: app.example.com:443\r\n\r\n",
		"CONNECT /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n",
		"CONNECT app.example.com:443 HTTP/1.1\r\nHost: app.example.com:443\r\nContent-Length: 3\r\n\r\nabc",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, connect+hidden)
		br := bufio.NewReader(c)
		var codes []int
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				if !errorIsEOF(err) {
					t.Errorf("%.40q: reading answers: %v", connect, err)
				}
				break
			}
			io.Copy(io.Discard, resp.Body)
			codes = append(codes, resp.StatusCode)
		}
		c.Close()
		// 501 before any route: a 502 would mean it was forwarded and
		// refused by the backend transport, a warning logged each time.
		if len(codes) != 1 || codes[0] != http.StatusNotImplemented {
			t.Errorf("%.40q: answers %v, want one 501 and the connection closed", connect, codes)
		}
	}
	select {
	case p := <-paths:
		t.Errorf("backend got %q, sent after a CONNECT", p)
	case <-time.After(200 * time.Millisecond):
	}
}

func errorIsEOF(err error) bool {
	return err == io.EOF || err == io.ErrUnexpectedEOF || strings.Contains(err.Error(), "connection reset")
}
