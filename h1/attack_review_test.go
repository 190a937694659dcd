package h1

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestStalledBodyLeftUnread: a body the handler left unread is drained
// after the answer so the connection can be kept; a client that stops
// sending it part way must not hold the connection (and its goroutine)
// forever. The drain is bounded like a head, by ReadHeaderTimeout. OPTIONS
// * is answered without a handler, which leaves its body to the drain too.
func TestStalledBodyLeftUnread(t *testing.T) {
	addr, _ := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}, func(s *Server) { s.ReadHeaderTimeout = 300 * time.Millisecond })
	for _, raw := range []string{
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n0123456789",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n",
		"OPTIONS * HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n0123456789",
	} {
		c := dial(t, addr)
		io.WriteString(c, raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%.20q: %v", raw, err)
		}
		resp.Body.Close()
		if !closed(c, 3*time.Second) {
			t.Errorf("%.20q: connection still open 3s after the rest of the body stalled", raw)
		}
	}
}
