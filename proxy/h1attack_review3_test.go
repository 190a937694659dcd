package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestDirectUnsolicitedAnswer: a backend that sends a whole, valid answer
// nobody asked for while its connection sits in the pool (it answered a
// request twice, or sent after a Content-Length body one more answer of
// its own) must not have that answer reach the next client, nor shift
// every later answer on the connection by one. http.Transport's read loop
// and the peek of a reused connection both find such bytes before the
// connection is used again; nothing in the answer itself tells them from
// the real one. The backend answers each request with its path, and the
// first one of each connection twice, 20ms apart.
func TestDirectUnsolicitedAnswer(t *testing.T) {
	answer := func(path string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(path), path)
	}
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			head, err := readHead(br)
			if err != nil {
				return
			}
			_, rest, _ := strings.Cut(head[0], " ")
			path, _, _ := strings.Cut(rest, " ")
			io.WriteString(c, answer(path))
			if n == 0 {
				time.Sleep(20 * time.Millisecond)
				io.WriteString(c, answer(path))
			}
		}
	})
	addr := directPort(t, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, path := range []string{"/svc/first", "/svc/second", "/svc/third"} {
		resp, body := exchangeOn(t, c, "GET "+path+" HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
		if resp.StatusCode != 200 || body != path {
			t.Errorf("GET %s: %d %q, another request's answer", path, resp.StatusCode, body)
		}
		// The duplicate is in the socket before the next request: one
		// that comes after it was sent no proxy can tell from the answer.
		time.Sleep(60 * time.Millisecond)
	}
}
