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

// rawAsk sends raw on a new connection and reads what comes back within a
// bounded time: the answer's status (0: no head at all), its body, and how
// reading the body ended.
func rawAsk(t *testing.T, addr, method, raw string) (status int, body string, bodyErr error) {
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
		return 0, "", err
	}
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestAttackBackendFailsMidAnswer: one failure contract on both forwarding
// paths (the direct one for a GET, ReverseProxy's for a POST with a body).
// A backend that sends its head and dies before any of its body got a 502,
// since nothing of its answer reached the client; one that dies after part
// of a streamed body went out leaves the client an answer visibly cut
// short, never one that looks whole. The direct path used to close without
// a byte, ReverseProxy's to send the head alone, or to end a chunked
// answer cut short as if it were whole.
func TestAttackBackendFailsMidAnswer(t *testing.T) {
	requests := map[string]string{
		"direct":       "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n",
		"ReverseProxy": "POST /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 3\r\n\r\nabc",
	}
	for _, tc := range []struct {
		name, answer string
		// want502: nothing of the body came; may502: nor did any byte,
		// but a streamed head is flushed as it comes, which may be
		// before the failure is seen, or after.
		want502, may502 bool
	}{
		{"head then close", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", true, true},
		{"chunked head then close", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n", false, true},
		{"cut mid-chunk", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", false, false},
		{"cut before last chunk", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", false, false},
	} {
		backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
			head, err := readHead(br)
			if err != nil {
				return
			}
			for _, l := range head {
				if strings.EqualFold(l, "Content-Length: 3") {
					_, _ = br.Discard(3)
				}
			}
			io.WriteString(c, tc.answer)
		})
		addr := directPort(t, backend)
		for path, raw := range requests {
			method, _, _ := strings.Cut(raw, " ")
			status, body, err := rawAsk(t, addr, method, raw)
			switch {
			case tc.may502 && !tc.want502 && status == http.StatusBadGateway && err == nil:
			case tc.want502:
				if status != http.StatusBadGateway || err != nil {
					t.Errorf("%s, %s path: status %d, body %q, %v; want a 502", tc.name, path, status, body, err)
				}
			case status == http.StatusOK && err == nil:
				t.Errorf("%s, %s path: a whole 200 answer %q; want one cut short", tc.name, path, body)
			case status != http.StatusOK && status != 0:
				t.Errorf("%s, %s path: status %d after the head went; want the 200 cut short", tc.name, path, status)
			}
		}
	}
}
