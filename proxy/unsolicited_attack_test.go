package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"portico.dev/portico/config"
)

// unsolicitedRequests is how many requests each kind of unsolicited
// answer is attacked with (50,000 in all; a fifth under the race
// detector), over unsolicitedClients kept-alive client connections at
// once. It may be raised: once the endpoint is caught every request dials
// a connection of its own (each kind has a backend of its own, so its
// ports are its own too).
const (
	unsolicitedRequests = 10_000
	unsolicitedClients  = 8
)

// unsolicitedKind is how the attacking backend sends a second answer,
// nobody's, after each real one.
type unsolicitedKind struct {
	name string
	// send writes the second answer u after the real answer went out on
	// c; next is closed when the backend has read the connection's next
	// request.
	send func(c *lockedConn, u string, next <-chan struct{})
	// post sends the requests with a body, which take the ReverseProxy
	// path and Go's transport instead of the direct path.
	post bool
}

// lockedConn serialises the backend's writes of real and unsolicited
// answers, which come from different goroutines.
type lockedConn struct {
	mu sync.Mutex
	net.Conn
}

func (c *lockedConn) write(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c.Conn, s)
}

var unsolicitedKinds = []unsolicitedKind{
	// Right behind the real answer, in a write of its own.
	{name: "immediate", send: func(c *lockedConn, u string, _ <-chan struct{}) { c.write(u) }},
	// Only the start of an answer: nothing may parse it together with
	// what the backend sends next.
	{name: "partial", send: func(c *lockedConn, u string, _ <-chan struct{}) { c.write(u[:12]) }},
	// 20 ms later, by when the connection has carried other requests
	// (the probe that found the hole).
	{name: "delayed", send: func(c *lockedConn, u string, _ <-chan struct{}) {
		go func() { time.Sleep(20 * time.Millisecond); c.write(u) }()
	}},
	// Once the next request on the connection came, just before its
	// answer: no check of the connection before that request went out
	// can see it.
	{name: "after next request", send: func(c *lockedConn, u string, next <-chan struct{}) {
		go func() {
			select {
			case <-next:
				c.write(u)
			case <-time.After(5 * time.Second):
			}
		}()
	}},
	// The same, 20 ms later, on the path of requests with a body.
	{name: "delayed, request body", post: true, send: func(c *lockedConn, u string, _ <-chan struct{}) {
		go func() { time.Sleep(20 * time.Millisecond); c.write(u) }()
	}},
}

// TestAttackUnsolicitedAnswers: a backend sends, after each real answer, a
// second one nobody asked for, in the ways of unsolicitedKinds, while
// several clients send requests over kept-alive connections. Every answer
// names the request it is for; a client that receives an answer naming
// another request has another client's answer (or its own earlier one).
// What the pool guarantees (see h1Pool): bytes that arrive while a
// connection is idle are never read as an answer, and an endpoint caught
// sending bytes unasked has its connections used once each from then
// on, so an answer that comes too late to be caught reaches at most one
// request per connection reused before the endpoint was caught; the
// bound below is that, with room for connections the clients' requests
// opened at once.
func TestAttackUnsolicitedAnswers(t *testing.T) {
	n := unsolicitedRequests
	switch {
	case testing.Short():
		n /= 10
	case raceDetector:
		n /= 5 // about as long as the full count without it
	}
	for _, kind := range unsolicitedKinds {
		t.Run(kind.name, func(t *testing.T) {
			backend := unsolicitedBackend(t, kind)
			addr := directPort(t, backend)
			wrong, failed := unsolicitedLoad(t, addr, n, kind.post)
			t.Logf("%d requests: %d answers for another request, %d failed", n, wrong, failed)
			if bound := int64(2 * unsolicitedClients); wrong > bound {
				t.Errorf("%d of %d answers were for another request (at most %d may be)", wrong, n, bound)
			}
		})
	}
}

// unsolicitedBackend answers each request with its target, as its body
// and in X-Answer-For, then sends the same answer once more as kind says.
func unsolicitedBackend(t *testing.T, kind unsolicitedKind) string {
	addr, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		lc := &lockedConn{Conn: c}
		var next chan struct{}
		for {
			head, err := readHead(br)
			if next != nil {
				close(next)
				next = nil
			}
			if err != nil {
				return
			}
			if cl := contentLengthOf(head); cl > 0 {
				if _, err := br.Discard(cl); err != nil {
					return
				}
			}
			target := targetOf(head)
			a := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Answer-For: %s\r\n\r\n%s", len(target), target, target)
			if kind.name == "after next request" {
				// The real answer waits for the unsolicited one of the
				// previous request, which goes first.
				time.Sleep(50 * time.Microsecond)
			}
			lc.write(a)
			next = make(chan struct{})
			kind.send(lc, a, next)
		}
	})
	return addr
}

// contentLengthOf is the Content-Length of a head read by readHead, 0 when
// it has none.
func contentLengthOf(head []string) int {
	for _, l := range head[1:] {
		k, v, _ := strings.Cut(l, ":")
		if strings.EqualFold(k, "Content-Length") {
			var n int
			fmt.Sscanf(strings.TrimSpace(v), "%d", &n)
			return n
		}
	}
	return 0
}

// unsolicitedLoad sends n requests to addr over unsolicitedClients
// kept-alive connections, each request naming itself, and counts the
// answers that name another request and those that failed (a status
// other than 200, or a connection the proxy closed).
func unsolicitedLoad(t *testing.T, addr string, n int, post bool) (wrong, failed int64) {
	t.Helper()
	var next atomic.Int64
	var wrongN, failedN atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for client := range unsolicitedClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c net.Conn
			var br *bufio.Reader
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for {
				i := next.Add(1)
				if i > int64(n) || time.Now().After(deadline) {
					return
				}
				if c == nil {
					var err error
					if c, err = net.Dial("tcp", addr); err != nil {
						failedN.Add(1)
						continue
					}
					br = bufio.NewReader(c)
				}
				target := fmt.Sprintf("/svc/c%d/r%d", client, i)
				req := "GET " + target + " HTTP/1.1\r\nHost: app.example.com\r\n\r\n"
				if post {
					req = "POST " + target + " HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 2\r\n\r\nhi"
				}
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				resp, body, err := roundTripOn(c, br, req)
				switch {
				case err != nil:
					failedN.Add(1)
					c.Close()
					c = nil
				case resp.StatusCode != http.StatusOK:
					failedN.Add(1)
				case body != target || resp.Header.Get("X-Answer-For") != target:
					wrongN.Add(1)
				}
				if resp != nil && resp.Close && c != nil {
					c.Close()
					c = nil
				}
			}
		}()
	}
	wg.Wait()
	if got := next.Load(); got <= int64(n) {
		t.Fatalf("only %d of %d requests sent within a minute", got-1, n)
	}
	return wrongN.Load(), failedN.Load()
}

// roundTripOn writes req on c and reads its answer from br.
func roundTripOn(c net.Conn, br *bufio.Reader, req string) (*http.Response, string, error) {
	if _, err := io.WriteString(c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	return resp, string(b), err
}

// TestUnaskedBytesEndpointRule: bytes found on an idle connection make
// its endpoint's connections single-use (no connection reused after it),
// except a 408 answer, which backends send as they close an idle
// connection; on the direct path (GET) and Go's transport (POST).
func TestUnaskedBytesEndpointRule(t *testing.T) {
	type unaskedCase struct {
		name, late string
		closes     bool
		shunned    bool
	}
	var cases []unaskedCase
	for _, method := range []string{"GET", "POST"} {
		for _, tc := range []unaskedCase{
			{"408 before closing", "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", true, false},
			{"second answer", pathAnswer("/svc/again"), false, true},
			{"partial answer", "HTTP/1.1 20", false, true},
		} {
			tc.name = method + " " + tc.name
			cases = append(cases, tc)
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method, _, _ := strings.Cut(tc.name, " ")
			var first atomic.Bool
			backend, accepted := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
				late := first.CompareAndSwap(false, true)
				for {
					head, err := readHead(br)
					if err != nil {
						return
					}
					if _, err := br.Discard(contentLengthOf(head)); err != nil {
						return
					}
					io.WriteString(c, pathAnswer(targetOf(head)))
					if late {
						time.Sleep(30 * time.Millisecond)
						io.WriteString(c, tc.late)
						if tc.closes {
							return
						}
						late = false
					}
				}
			})
			addr := directPort(t, backend)
			c := relDial(t, addr)
			for i, path := range []string{"/svc/1", "/svc/2", "/svc/3", "/svc/4"} {
				if i == 1 {
					time.Sleep(100 * time.Millisecond) // the late bytes are in
				}
				req := "GET " + path + " HTTP/1.1\r\nHost: app.example.com\r\n\r\n"
				if method == "POST" {
					req = "POST " + path + " HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 2\r\n\r\nhi"
				}
				resp, body := exchangeOn(t, c, req)
				if resp.StatusCode != 200 || body != path {
					t.Fatalf("GET %s: %d %q", path, resp.StatusCode, body)
				}
			}
			// The first connection is given up at the second request;
			// the three after it share one connection unless the endpoint
			// was caught.
			want := 2
			if tc.shunned {
				want = 4
			}
			if got := accepted(); got != want {
				t.Errorf("backend connections: %d, want %d", got, want)
			}
		})
	}
}

// TestUnclaimedRequestsSkipWatchedTransport: requests that claim no
// connection (a mirror's copy, a request not sent for a client) never
// use a connection of the watched transport. Handed one whose last
// request's claim was not yet released (the transport gives a connection
// to the next request before the last answer's end reaches ReverseProxy),
// their answer would be taken for bytes no request asked for, and an
// honest endpoint would get a new connection per request for minutes.
func TestUnclaimedRequestsSkipWatchedTransport(t *testing.T) {
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	// The mirror's copy ends after the test may have: nothing of it is
	// logged to the test.
	f := newForwarder(DefaultOptions(), zap.NewNop())
	t.Cleanup(f.close)
	conns := make(chan net.Conn, 4)
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { conns <- i.Conn },
	})
	watched := func(what string) {
		t.Helper()
		select {
		case c := <-conns:
			if _, ok := c.(*watchedConn); ok {
				t.Errorf("%s went out on a watched connection", what)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s was not sent", what)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+backend+"/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	watched("a request not sent for a client")

	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	cfg := &config.Config{Endpoints: config.NewEndpointTable(map[config.BackendKey]*config.Endpoints{key: config.NewEndpoints(backend)})}
	in := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://app.example.com/mirrored", nil)
	f.mirror(in, []byte("copy"), &config.Mirror{Backend: key, Numerator: 1, Denominator: 1}, cfg, &exchange{})
	watched("a mirror's copy")
}
