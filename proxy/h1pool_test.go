package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDirectUncheckedReuse: a replayable request takes a connection back
// from the pool for less than h1FreshIdle without the peek; what the peek
// found must still never reach a client, and a request that cannot be
// replayed keeps the peek and is sent once. The backend answers the first
// request of each connection with "ok" and then, by mode: closes the
// connection (without Connection: close), or 20ms later sends something
// unasked (a 408, bytes that are no answer, or for a HEAD a body that is
// an answer of its own) and goes on answering "stale".
func TestDirectUncheckedReuse(t *testing.T) {
	const (
		ok       = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		stale    = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
		smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSMUGG"
	)
	for _, tc := range []struct {
		name, mode    string
		first, second string // methods
		wait          time.Duration
		// want: the second request's status and body; sent: what the
		// backend's first connection received, in order.
		wantStatus int
		wantBody   string
		sent       []string
	}{
		{"closed, GET retried", "close", "GET", "GET", 50 * time.Millisecond, 200, "ok", []string{"GET"}},
		{"closed, POST peeked", "close", "GET", "POST", 50 * time.Millisecond, 200, "ok", []string{"GET"}},
		{"408 within the bound, GET retried", "408", "GET", "GET", 50 * time.Millisecond, 200, "ok", []string{"GET", "GET"}},
		{"408 past the bound, peeked", "408", "GET", "GET", h1FreshIdle + 100*time.Millisecond, 200, "ok", []string{"GET"}},
		{"408 within the bound, POST peeked", "408", "GET", "POST", 50 * time.Millisecond, 200, "ok", []string{"GET"}},
		{"garbage within the bound, GET retried", "garbage", "GET", "GET", 50 * time.Millisecond, 200, "ok", []string{"GET", "GET"}},
		{"body after HEAD, peeked", "headbody", "HEAD", "GET", 50 * time.Millisecond, 200, "ok", []string{"HEAD"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var sent [][]string // per backend connection, the methods received
			backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
				mu.Lock()
				i := len(sent)
				sent = append(sent, nil)
				mu.Unlock()
				for n := 0; ; n++ {
					head, err := readHead(br)
					if err != nil {
						return
					}
					method, _, _ := strings.Cut(head[0], " ")
					mu.Lock()
					sent[i] = append(sent[i], method)
					mu.Unlock()
					if n > 0 {
						io.WriteString(c, stale)
						continue
					}
					if method == "HEAD" {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n")
					} else {
						io.WriteString(c, ok)
					}
					switch tc.mode {
					case "close":
						return
					case "408":
						time.Sleep(20 * time.Millisecond)
						io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\n\r\n")
					case "garbage":
						time.Sleep(20 * time.Millisecond)
						io.WriteString(c, "\x00\x01 not an answer\r\n\r\n")
					case "headbody":
						time.Sleep(20 * time.Millisecond)
						io.WriteString(c, smuggled)
					}
				}
			})
			addr := directPort(t, backend)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := func(method string) string {
				if method == "POST" {
					return "POST /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 0\r\n\r\n"
				}
				return method + " /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n"
			}
			if tc.first == "HEAD" {
				// Its answer has no body to read: exchangeOn would wait
				// for the Content-Length it announces.
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, req("HEAD"))
				br := bufio.NewReader(c)
				if _, err := readHead(br); err != nil {
					t.Fatal(err)
				}
			} else if resp, body := exchangeOn(t, c, req(tc.first)); resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("first request: %d %q", resp.StatusCode, body)
			}
			time.Sleep(tc.wait)
			resp, body := exchangeOn(t, c, req(tc.second))
			if resp.StatusCode != tc.wantStatus || body != tc.wantBody {
				t.Errorf("second request: %d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			time.Sleep(20 * time.Millisecond) // the backend logs what it read
			mu.Lock()
			defer mu.Unlock()
			if len(sent) == 0 || !slices.Equal(sent[0], tc.sent) {
				t.Errorf("the first backend connection received %v, want %v", sent, tc.sent)
			}
			if n := strings.Count(fmt.Sprint(sent), tc.second); tc.second == "POST" && n != 1 {
				t.Errorf("the POST reached the backend %d times: %v", n, sent)
			}
		})
	}
}
