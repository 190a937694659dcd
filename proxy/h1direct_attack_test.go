package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for n := 0; ; n++ {
			head, err := readHead(br)
			if err != nil {
				return
			}
			path := targetOf(head)
			io.WriteString(c, pathAnswer(path))
			if n == 0 {
				time.Sleep(20 * time.Millisecond)
				io.WriteString(c, pathAnswer(path))
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

// TestKeptAliveUpgradeAfterServerTimeouts: through the proxy, a request on
// a kept-alive client connection (its head in two parts, so that both the
// idle and the header deadline were on it) is upgraded to a WebSocket,
// and the client speaks only once both timeouts are long past: the
// tunnel must carry it (the server's deadline is lifted as the
// connection is taken over), and a body sent as slowly after the head
// of a plain POST must reach the backend whole.
func TestKeptAliveUpgradeAfterServerTimeouts(t *testing.T) {
	rt := relRuntime(t, func(o *Options) {
		o.ReadHeaderTimeout = 150 * time.Millisecond
		o.IdleTimeout = 150 * time.Millisecond
	})
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			if strings.HasPrefix(head[0], "POST") {
				b := make([]byte, 5)
				if _, err := io.ReadFull(br, b); err != nil {
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"+string(b))
				continue
			}
			if !strings.Contains(head[0], "/svc/ws") {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				continue
			}
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			io.WriteString(c, "echo "+line)
			return
		}
	})
	addr := relHTTPPort(t, rt, backend)
	for _, tc := range []struct{ name, head, late, want string }{
		{"upgrade", "GET /svc/ws HTTP/1.1\r\nHost: app.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "hello\n", "echo hello\n"},
		{"slow body", "POST /svc/up HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 5\r\n\r\n", "hello", "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := relDial(t, addr)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			io.WriteString(c, "GET /svc/ HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			io.WriteString(c, tc.head[:10])
			time.Sleep(20 * time.Millisecond)
			io.WriteString(c, tc.head[10:])
			if tc.name == "upgrade" {
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
					t.Fatalf("upgrade: %v %v", resp, err)
				}
			}
			time.Sleep(500 * time.Millisecond)
			io.WriteString(c, tc.late)
			var got string
			if tc.name == "upgrade" {
				got, err = br.ReadString('\n')
			} else {
				var resp *http.Response
				if resp, err = http.ReadResponse(br, nil); err == nil {
					b, _ := io.ReadAll(resp.Body)
					got = fmt.Sprintf("%d %s", resp.StatusCode, b)
					tc.want = "200 " + tc.want
				}
			}
			if err != nil || got != tc.want {
				t.Errorf("after the server's timeouts: %q %v, want %q", got, err, tc.want)
			}
		})
	}
}

// TestDirectConcurrentOwnAnswers: many clients at once over the pooled
// backend connections, with a backend that closes a connection right
// after some answers (without saying so), or answers a real request with
// 408: each client gets the answer to its own request and no other, a
// request that cannot be sent again (DELETE, a POST without a body) is
// never sent twice (nor is any other: the backend read none it did not
// answer), and a 408 that answers a request reaches its client.
// Run with -race: a connection used by two requests at once shows there.
func TestDirectConcurrentOwnAnswers(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{} // request path: times the backend received it
	var nconn, failed atomic.Int64
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		conn := nconn.Add(1)
		for n := int64(0); ; n++ {
			head, err := readHead(br)
			if err != nil {
				return
			}
			method, rest, _ := strings.Cut(head[0], " ")
			path, _, _ := strings.Cut(rest, " ")
			mu.Lock()
			seen[method+" "+path]++
			mu.Unlock()
			status := "200 OK"
			if strings.Contains(path, "/408/") {
				status = "408 Request Timeout"
			}
			fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n%s", status, len(path), path)
			if (conn+n)%5 == 0 {
				return // closed as the answer went, without Connection: close
			}
		}
	})
	addr := directPort(t, backend)
	const clients, requests = 12, 25
	methods := []string{"GET", "HEAD", "DELETE", "POST", "OPTIONS"}
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for j := range requests {
				method := methods[(i+j)%len(methods)]
				path := fmt.Sprintf("/svc/%d/%d", i, j)
				if j%7 == 3 {
					path = fmt.Sprintf("/svc/408/%d/%d", i, j)
				}
				raw := method + " " + path + " HTTP/1.1\r\nHost: app.example.com\r\n"
				if method == "POST" {
					raw += "Content-Length: 0\r\n"
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, raw+"\r\n")
				resp, err := http.ReadResponse(br, &http.Request{Method: method})
				if err != nil {
					t.Errorf("%s %s: %v", method, path, err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch {
				case resp.StatusCode == http.StatusBadGateway && (method == "DELETE" || method == "POST"):
					// The backend closed the connection it was sent on;
					// it is not sent again.
					failed.Add(1)
				case method == "HEAD":
					if len(b) != 0 || resp.ContentLength != int64(len(path)) {
						t.Errorf("HEAD %s: %d, length %d, body %q", path, resp.StatusCode, resp.ContentLength, b)
					}
				case string(b) != path:
					t.Errorf("%s %s: %d %q, another request's answer", method, path, resp.StatusCode, b)
				case strings.Contains(path, "/408/") != (resp.StatusCode == http.StatusRequestTimeout):
					t.Errorf("%s %s: %d", method, path, resp.StatusCode)
				}
				if resp.Close {
					return
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	// The backend closes a connection only after an answer: a request
	// it read it answered, so each reached it once, or none for one
	// that failed with 502.
	for req, n := range seen {
		if n > 1 {
			t.Errorf("%s reached the backend %d times", req, n)
		}
	}
	if len(seen)+int(failed.Load()) != clients*requests {
		t.Errorf("%d requests reached the backend and %d failed, of %d", len(seen), failed.Load(), clients*requests)
	}
}
