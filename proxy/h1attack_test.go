package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Attacks on the direct HTTP/1.1 path (h1forward.go, h1pool.go) from
// hostile clients and hostile backends, on real loopback sockets.

// h2Status sends one HTTP/2 request (prior knowledge) made of fields to
// Portico at addr and returns the answer's :status, "" when the stream or
// connection ended without one.
func h2Status(t *testing.T, addr string, fields [][2]string) string {
	t.Helper()
	switch s := h2Exchange(t, addr, fields, nil); s {
	case "reset", "closed", "goaway":
		return ""
	default:
		return s
	}
}

// TestAttackH2MethodInRequestLine: HTTP/2 checks :method for control
// bytes only, so a client can send one with spaces in it. Written as it
// is, it would turn the request line into another one for the backend
// ("GET /admin? /svc HTTP/1.1": the route matched /svc, a lenient backend
// serves /admin). It must never reach the wire, on either path: the
// client gets a 400 before any route is tried.
func TestAttackH2MethodInRequestLine(t *testing.T) {
	lines := make(chan string, 4)
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			lines <- head[0]
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		}
	})
	addr := directPort(t, backend)
	for _, method := range []string{"GET /admin?", "GET\t/admin", "G(E)T", "POST /admin?"} {
		status := h2Status(t, addr, [][2]string{{":method", method}, {":scheme", "http"}, {":authority", "app.example.com"}, {":path", "/svc"}})
		if status != "400" {
			t.Errorf("method %q: status %q, want 400", method, status)
		}
	}
	// A method that is a token goes through.
	if status := h2Status(t, addr, [][2]string{{":method", "PURGE"}, {":scheme", "http"}, {":authority", "app.example.com"}, {":path", "/svc"}}); status != "204" {
		t.Errorf("PURGE: status %q, want 204", status)
	}
	close(lines)
	for l := range lines {
		if len(strings.Fields(l)) != 3 || strings.ContainsAny(l, "\t") {
			t.Errorf("backend got request line %q", l)
		}
	}
}

// TestAttackStatusBelow100: a backend answering with a status under 100
// ("HTTP/1.1 042", which ReadResponse accepts) was taken by the direct path
// for a 1xx and passed to WriteHeader, which panics: the client saw its
// connection dropped and the backend's connection was left open, never
// closed. ReverseProxy passed it to WriteHeader as the final status, with
// the same panic. It is a malformed answer: 502 and the connection closed,
// on both paths.
func TestAttackStatusBelow100(t *testing.T) {
	closed := make(chan struct{}, 2)
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		if slices.Contains(head, "Content-Length: 1") {
			br.ReadByte() //nolint:errcheck // the request's body
		}
		io.WriteString(c, "HTTP/1.1 042 Odd\r\nContent-Length: 2\r\n\r\nok")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadByte(); err == io.EOF {
			closed <- struct{}{}
		}
	})
	addr := directPort(t, backend)
	for _, req := range []string{
		"GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n",                        // direct
		"POST /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 1\r\n\r\nx", // ReverseProxy
	} {
		resp, _, err := rawAnswer(t, addr, req)
		if err != nil {
			t.Errorf("%.4s: no answer: %v", req, err)
			continue
		}
		if resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%.4s: status %d, want 502", req, resp.StatusCode)
		}
		select {
		case <-closed:
		case <-time.After(6 * time.Second):
			t.Errorf("%.4s: the backend's connection was not closed", req)
		}
	}
}

// TestAttackNoReplayAfter1xx: a GET whose reused connection the backend
// closes after an informational answer was sent again on a new connection,
// as if nothing had been read: the backend got it twice and the client
// two sets of 1xx answers. Only a connection that failed before any byte
// of an answer may be retried (http.Transport's rule): here the client
// gets a 502 and the backend the request once.
func TestAttackNoReplayAfter1xx(t *testing.T) {
	var requests atomic.Int32
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for n := 1; ; n++ {
			if _, err := readHead(br); err != nil {
				return
			}
			requests.Add(1)
			if n == 2 {
				io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	addr := directPort(t, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	statuses := []int{}
	for range 2 {
		io.WriteString(c, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses = append(statuses, resp.StatusCode)
			if resp.StatusCode >= 200 {
				break
			}
		}
	}
	if got := requests.Load(); got != 2 {
		t.Errorf("backend got %d requests, want 2", got)
	}
	if want := []int{200, 103, 502}; !slices.Equal(statuses, want) {
		t.Errorf("client got %v, want %v", statuses, want)
	}
}

// rawAnswer sends raw to Portico at addr on a new connection and returns
// the answer and its body; err when no whole answer came.
func rawAnswer(t *testing.T, addr, raw string) (*http.Response, string, error) {
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
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), err
}

// TestAttackInformationalFlood: informational answers are relayed up to
// Options.MaxInformational per request (Go's client stops at 5; 5,000
// 102 Processing heads were all relayed before the cap): past it the
// backend has failed, a 502 since no final answer started, and its
// connection is closed. A flood of big heads ends at the headers limit
// too. Both forwarding paths: the direct one (GET) and ReverseProxy's (a
// POST with a body).
func TestAttackInformationalFlood(t *testing.T) {
	big := "HTTP/1.1 103 Early Hints\r\nLink: <" + strings.Repeat("a", 64<<10) + ">\r\n\r\n"
	heads := func(n int) func(c net.Conn) {
		return func(c net.Conn) {
			for range n {
				if _, err := io.WriteString(c, "HTTP/1.1 102 Processing\r\n\r\n"); err != nil {
					return
				}
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	}
	max1xx := DefaultOptions().MaxInformational
	for _, tc := range []struct {
		name    string
		answer  func(c net.Conn)
		want    int
		relayed int // -1: any
	}{
		{"102 up to the cap", heads(max1xx), http.StatusOK, max1xx},
		{"one 102 past the cap", heads(max1xx + 1), http.StatusBadGateway, max1xx},
		{"5,000 102", heads(5000), http.StatusBadGateway, max1xx},
		{"endless big 1xx", func(c net.Conn) {
			for {
				if _, err := io.WriteString(c, big); err != nil {
					return
				}
			}
		}, http.StatusBadGateway, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
				head, err := readHead(br)
				if err != nil {
					return
				}
				if slices.Contains(head, "Content-Length: 3") {
					_, _ = br.Discard(3)
				}
				tc.answer(c)
			})
			addr := directPort(t, backend)
			for _, req := range []string{
				"GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n",
				"POST /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 3\r\n\r\nabc",
			} {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				io.WriteString(c, req)
				br := bufio.NewReader(c)
				n1xx := 0
				for {
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Fatalf("%.4s: after %d 1xx: %v", req, n1xx, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode >= 200 {
						if resp.StatusCode != tc.want || tc.relayed >= 0 && n1xx != tc.relayed {
							t.Errorf("%.4s: status %d after %d 1xx, want %d after %d", req, resp.StatusCode, n1xx, tc.want, tc.relayed)
						}
						break
					}
					n1xx++
				}
				c.Close()
			}
		})
	}
}

// TestAttackH2SpaceInQuery: HTTP/2 checks :path for control bytes only
// and url.ParseRequestURI keeps a query as it is, so a client can send
// "/svc?a= /admin". The direct path leaves such a query to ReverseProxy,
// whose transport wrote it as it is: "GET /svc?a= /admin HTTP/1.1", a
// request line naming another target than the one routed. No HTTP/1.1
// client can send it (a space ends the target): it is answered 400 and
// never forwarded.
func TestAttackH2SpaceInQuery(t *testing.T) {
	lines := make(chan string, 4)
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			lines <- head[0]
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		}
	})
	addr := directPort(t, backend)
	for _, path := range []string{"/svc?a= /admin", "/svc?a=b /admin#"} {
		status := h2Status(t, addr, [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.example.com"}, {":path", path}})
		if status != "400" {
			t.Errorf("path %q: status %q, want 400", path, status)
		}
	}
	if status := h2Status(t, addr, [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "app.example.com"}, {":path", "/svc?a=%20/admin"}}); status != "204" {
		t.Errorf("escaped space: status %q, want 204", status)
	}
	close(lines)
	for l := range lines {
		if len(strings.Fields(l)) != 3 || strings.ContainsAny(l, "\t") {
			t.Errorf("backend got request line %q", l)
		}
	}
}

// TestAttackSlowBackendTimeouts: the route's timeouts bound the direct
// path as they bound ReverseProxy: a backend that accepts and never
// answers, or trickles its head a byte at a time, is answered 504 at
// timeouts.request or timeouts.backendRequest; one that trickles its body
// has the client's answer cut short. In every case Portico closes the
// backend's connection.
func TestAttackSlowBackendTimeouts(t *testing.T) {
	trickle := func(c net.Conn, s string) {
		for i := 0; ; i++ {
			if _, err := io.WriteString(c, s[i%len(s):i%len(s)+1]); err != nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	d := gwv1.Duration("300ms")
	for _, tc := range []struct {
		name     string
		answer   func(c net.Conn)
		timeouts gwv1.HTTPRouteTimeouts
		status   int // 0: the body must fail
	}{
		{"never answers", func(net.Conn) {}, gwv1.HTTPRouteTimeouts{BackendRequest: &d}, http.StatusGatewayTimeout},
		{"never answers, request timeout", func(net.Conn) {}, gwv1.HTTPRouteTimeouts{Request: &d}, http.StatusGatewayTimeout},
		{"trickled head", func(c net.Conn) { trickle(c, "HTTP/1.1 200 OK\r\nX-Slow: abcdefghijklmnopqrstuvwxyz") }, gwv1.HTTPRouteTimeouts{BackendRequest: &d}, http.StatusGatewayTimeout},
		{"trickled body", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
			trickle(c, "abcdefgh")
		}, gwv1.HTTPRouteTimeouts{BackendRequest: &d}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closed := make(chan struct{})
			backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := readHead(br); err != nil {
					return
				}
				go func() {
					if _, err := br.ReadByte(); err != nil {
						close(closed)
					}
				}()
				tc.answer(c)
				<-closed // never answers more, and never closes first
			})
			url := retryRuntime(t, []string{backend}, nil, &tc.timeouts)
			addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/")
			resp, _, err := rawAnswer(t, addr, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
			switch {
			case tc.status == 0 && err == nil:
				t.Error("a body the backend never finished reached the client whole")
			case tc.status != 0 && err != nil:
				t.Errorf("no answer: %v", err)
			case tc.status != 0 && resp.StatusCode != tc.status:
				t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
			}
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Error("the backend's connection was not closed")
			}
		})
	}
}

// TestAttackClientLeavesMidBody: a client that leaves while the backend
// is part way through a body has the backend's connection closed, not
// kept for the next request with the rest of that body unread.
func TestAttackClientLeavesMidBody(t *testing.T) {
	closed := make(chan struct{}, 1)
	backend, accepted := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\nfirst part\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := br.ReadByte(); err == io.EOF {
			closed <- struct{}{}
		}
	})
	addr := directPort(t, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	br := bufio.NewReader(c)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case <-closed:
	case <-time.After(6 * time.Second):
		t.Fatal("the backend's connection stayed open after the client left")
	}
	if n := accepted(); n != 1 {
		t.Errorf("backend accepted %d connections", n)
	}
}

// TestAttackStrayBytesNeverAnswerAnother: bytes a backend sends past the
// end of an answer (a body after HEAD, 204 or 304, more than
// Content-Length, an answer after a chunked body's end) must never be read
// as the answer to the next request on that connection, which may be
// another client's.
func TestAttackStrayBytesNeverAnswerAnother(t *testing.T) {
	const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nSMUGG"
	for _, tc := range []struct {
		method, answer string
		refused        bool // 502: framing two parsers could read differently
	}{
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + smuggled, false},
		{"HEAD", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + smuggled, false},
		{"GET", "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n" + smuggled, false},
		{"GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n" + smuggled, false},
		{"GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + smuggled, false},
		{"GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + smuggled, false},
		{"GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n" + smuggled, true},
	} {
		var requests atomic.Int32
		backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
			for {
				if _, err := readHead(br); err != nil {
					return
				}
				if requests.Add(1) == 1 {
					io.WriteString(c, tc.answer)
				} else {
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond")
				}
			}
		})
		addr := directPort(t, backend)
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, tc.method+" /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: tc.method})
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
		}
		c.Close()
		if err != nil || (resp.StatusCode == http.StatusBadGateway) != tc.refused {
			t.Fatalf("%.40q: %v %v", tc.answer, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
		// Another client, another connection: the backend's is reused
		// unless Portico saw the stray bytes.
		resp, body, err := rawAnswer(t, addr, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
		if err != nil || resp.StatusCode != 200 || body != "second" {
			t.Errorf("after %.60q the next client got %v %q %v", tc.answer, resp, body, err)
		}
	}
}

// TestAttackClientFramingNeverSmuggles: requests whose framing says "no
// body" one way and carries one another way (Transfer-Encoding with an
// empty or hidden body, Content-Length with Transfer-Encoding, a GET with
// a body, HTTP/2 with content-length 0 and DATA after it) never let the
// bytes after the head reach the backend as a request of their own: a
// backend with a real parser sees /svc only, never /admin.
func TestAttackClientFramingNeverSmuggles(t *testing.T) {
	paths := make(chan string, 32)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		paths <- r.Method + " " + r.URL.Path
	}))
	t.Cleanup(backend.Close)
	addr := directPort(t, backend.Listener.Addr().String())
	const smuggled = "GET /admin HTTP/1.1\r\nHost: app.example.com\r\n\r\n"
	// Content-Length with Transfer-Encoding: refused (400).
	const both = 400
	forwarded := 0
	for _, c := range []struct {
		raw  string
		want int
	}{
		{"GET /svc HTTP/1.1\r\nHost: app.example.com\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 200},
		{"GET /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled), both},
		{"GET /svc HTTP/1.1\r\nHost: app.example.com\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n" +
			fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled), both},
		{fmt.Sprintf("GET /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled), 200},
		{fmt.Sprintf("POST /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: %d\r\n\r\n%s", len(smuggled), smuggled), 200},
		{"DELETE /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 0\r\n\r\n", 200},
	} {
		if resp, _, err := rawAnswer(t, addr, c.raw); err != nil || resp.StatusCode != c.want {
			t.Errorf("%.60q: %v %v, want %d", c.raw, resp, err, c.want)
		}
		if c.want == 200 {
			forwarded++
		}
	}
	// HTTP/2: HEADERS with content-length 0 and without END_STREAM, then
	// DATA holding a request.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	h := newH2Client(t, c, "http")
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "app.example.com"}, {":path", "/svc"}, {"content-length", "0"}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}) //nolint:errcheck // writes to a buffer
	}
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.hbuf.Bytes(), EndHeaders: true}) //nolint:errcheck // checked by what the backend sees
	h.fr.WriteData(1, true, []byte(smuggled))                                                                //nolint:errcheck // the server may reset the stream
	// The HTTP/1.1 requests answered 200, and the HTTP/2 one unless its
	// stream was reset before it was forwarded.
	seen := 0
	for wait := time.After(3 * time.Second); seen < forwarded+1; seen++ {
		select {
		case p := <-paths:
			if strings.Contains(p, "/admin") {
				t.Errorf("backend served %q", p)
			}
			continue
		case <-wait:
		}
		break
	}
	if seen < forwarded {
		t.Fatalf("backend saw %d requests, want %d or %d", seen, forwarded, forwarded+1)
	}
	select {
	case p := <-paths:
		t.Errorf("backend served an extra request %q", p)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestAttackHostZoneLikeReverseProxy: a Host with an IPv6 zone
// ("[fe80::1%25eth0]:80", which Go's server accepts) went to the backend as
// it came on the direct path, while ReverseProxy's transport sends it
// without the zone. Both paths now send the same Host. (An Upgrade other
// than WebSocket makes the request take the ReverseProxy path, which
// drops that header.)
func TestAttackHostZoneLikeReverseProxy(t *testing.T) {
	hosts := make(chan string, 4)
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			hosts <- head[1]
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		}
	})
	addr := directPort(t, backend)
	var got []string
	for _, extra := range []string{"", "Upgrade: foo\r\n"} {
		resp, _, err := rawAnswer(t, addr, "GET /svc HTTP/1.1\r\nHost: [fe80::1%25eth0]:80\r\n"+extra+"\r\n")
		if err != nil || resp.StatusCode != http.StatusNoContent {
			t.Fatalf("%v %v", resp, err)
		}
		got = append(got, <-hosts)
	}
	if got[0] != got[1] {
		t.Errorf("direct path sent %q, ReverseProxy %q", got[0], got[1])
	}
}
