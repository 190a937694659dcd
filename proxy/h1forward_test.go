package proxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// scriptedBackend accepts connections on loopback and hands each to serve
// with a reader over it; it reports how many it accepted.
func scriptedBackend(t *testing.T, serve func(c net.Conn, br *bufio.Reader)) (addr string, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
}

// readHead reads one request's line and headers as sent, in order.
func readHead(br *bufio.Reader) ([]string, error) {
	var lines []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			return lines, nil
		}
		lines = append(lines, line)
	}
}

// directPort serves a port whose one route goes to backend.
func directPort(t *testing.T, backend string) string {
	t.Helper()
	rt := newRuntime(t)
	port := freePort(t)
	if err := rt.Apply(httpPortConfig(t, port, "svc", backend)); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// TestDirectRequestHead: a request without a body reaches the backend with
// the head http.Transport would write after ReverseProxy's rewrite: request
// line and Host first, hop-by-hop headers and those Connection names gone,
// "Te: trailers" kept, no User-Agent when the client sent none, an empty
// Content-Length for methods that carry a body, the rest sorted, Portico's
// forwarding headers last.
func TestDirectRequestHead(t *testing.T) {
	heads := make(chan []string, 4)
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			heads <- head
			io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n")
		}
	})
	addr := directPort(t, backend)
	_, port, _ := net.SplitHostPort(addr)
	resp, _ := exchange1(t, addr, "GET /svc/a?x=1&y=%20 HTTP/1.1\r\nHost: app.example.com\r\n"+
		"Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nKeep-Alive: 5\r\nTE: trailers, deflate\r\nProxy-Authorization: x\r\n"+
		"User-Agent: curl/8\r\nZ-Last: z\r\nA-First: a\r\nA-First: b\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n")
	if resp.StatusCode != 204 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []string{
		"GET /svc/a?x=1&y=%20 HTTP/1.1", "Host: app.example.com", "User-Agent: curl/8",
		"A-First: a", "A-First: b", "Z-Last: z", "Te: trailers",
		"X-Forwarded-For: 127.0.0.1", "X-Forwarded-Host: app.example.com", "X-Forwarded-Proto: http", "X-Forwarded-Port: " + port,
	}
	if got := <-heads; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("backend got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Over HTTP/2 (h2c with prior knowledge) the same request, which ends
	// with its headers, goes the same way.
	c := &http.Client{Transport: &http2.Transport{
		AllowHTTP:          true,
		DisableCompression: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/svc/a?x=1&y=%20", nil)
	req.Host = "app.example.com"
	for _, h := range []string{"User-Agent: curl/8", "Z-Last: z", "A-First: a", "A-First: b", "X-Forwarded-For: 203.0.113.9", "Te: trailers", "X-Hop: 1"} {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Add(k, v)
	}
	h2resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	h2resp.Body.Close()
	if h2resp.StatusCode != 204 || h2resp.ProtoMajor != 2 {
		t.Fatalf("HTTP/2: %s %d", h2resp.Proto, h2resp.StatusCode)
	}
	want = slices.Insert(want[:len(want):len(want)], 5, "X-Hop: 1") // HTTP/2 has no Connection header to name it
	if got := <-heads; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("over HTTP/2 backend got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	resp, _ = exchange1(t, addr, "DELETE /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	if resp.StatusCode != 204 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want = []string{
		"DELETE /svc HTTP/1.1", "Host: app.example.com", "Content-Length: 0",
		"X-Forwarded-For: 127.0.0.1", "X-Forwarded-Host: app.example.com", "X-Forwarded-Proto: http", "X-Forwarded-Port: " + port,
	}
	if got := <-heads; strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("backend got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDirectReusesConnections: kept-alive answers leave their connection
// for the next request; one the backend closes after answering, or closes
// while idle after sending an answer nobody asked for (a 408), is not
// used again, and no client sees an error or that stray answer.
func TestDirectReusesConnections(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    string
		thenClose bool
		wantConns int
	}{
		{"kept alive", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, 1},
		{"Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", true, 3},
		{"closed while idle", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true, 3},
		{"stray 408 while idle", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend, accepted := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
				for {
					if _, err := readHead(br); err != nil {
						return
					}
					io.WriteString(c, tc.answer)
					if tc.name == "stray 408 while idle" {
						time.Sleep(20 * time.Millisecond)
						io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
					}
					if tc.thenClose {
						return
					}
				}
			})
			addr := directPort(t, backend)
			for i := range 3 {
				resp, body := exchange1(t, addr, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
				if resp.StatusCode != 200 || body != "ok" {
					t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
				}
				time.Sleep(50 * time.Millisecond) // the backend closes meanwhile
			}
			if n := accepted(); n != tc.wantConns {
				t.Errorf("backend accepted %d connections, want %d", n, tc.wantConns)
			}
		})
	}
}

// TestDirectResendsOnStaleConnection: a GET whose reused connection the
// backend closes without answering is sent again on a new one; a POST
// without a body (not idempotent) is not, and gets a 502.
func TestDirectResendsOnStaleConnection(t *testing.T) {
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		// Read the next request and drop the connection without a byte,
		// as a backend closing an idle connection in a race does.
		readHead(br) //nolint:errcheck // closed anyway
	})
	addr := directPort(t, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i, want := range []int{200, 200, 200} {
		resp, _ := exchangeOn(t, c, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
		if resp.StatusCode != want {
			t.Fatalf("GET %d: %d", i, resp.StatusCode)
		}
	}
	resp, _ := exchangeOn(t, c, "POST /svc HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 0\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("POST on a stale connection: %d, want 502", resp.StatusCode)
	}
}

// TestDirectInformationalAndTrailers: 1xx answers before the final one
// reach the client, trailers announced by the backend follow the body, and
// hop-by-hop headers of the answer do not.
func TestDirectInformationalAndTrailers(t *testing.T) {
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-Kept: yes\r\n\r\n"+
			"5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n")
	})
	addr := directPort(t, backend)
	var hints []string
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
		return nil
	}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/svc", nil)
	req.Host = "app.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(body) != "hello" {
		t.Fatalf("body %q, %v", body, err)
	}
	if len(hints) != 1 || hints[0] != "103 </style.css>; rel=preload" {
		t.Errorf("1xx answers %q", hints)
	}
	if got := resp.Trailer.Get("X-Checksum"); got != "abc" {
		t.Errorf("trailer X-Checksum %q", got)
	}
	for _, h := range []string{"X-Hop", "Keep-Alive"} {
		if _, ok := resp.Header[h]; ok {
			t.Errorf("hop-by-hop %s reached the client", h)
		}
	}
	if resp.Header.Get("X-Kept") != "yes" {
		t.Error("X-Kept lost")
	}
}

// TestDirectBackendFailures: an answer whose headers never end within the
// limit, a switch of protocols nobody asked for and a body cut short by the
// backend are not passed on as if they were whole.
func TestDirectBackendFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(c net.Conn)
		status int // 0: the client must see the body fail
	}{
		{"headers over the limit", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\n")
			line := "X-Big: " + strings.Repeat("a", 64<<10) + "\r\n"
			for range h1MaxResponseHeader/len(line) + 2 {
				if _, err := io.WriteString(c, line); err != nil {
					return
				}
			}
		}, http.StatusBadGateway},
		{"unasked 101", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		}, http.StatusBadGateway},
		{"body cut short", func(c net.Conn) {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
				if _, err := readHead(br); err != nil {
					return
				}
				tc.answer(c)
			})
			addr := directPort(t, backend)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			io.WriteString(c, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				if tc.status == 0 {
					return // cut before its headers left: not whole either
				}
				t.Fatal(err)
			}
			_, berr := io.ReadAll(resp.Body)
			if tc.status != 0 {
				if resp.StatusCode != tc.status {
					t.Errorf("status %d, want %d", resp.StatusCode, tc.status)
				}
				return
			}
			if berr == nil {
				t.Error("a body the backend cut short reached the client whole")
			}
		})
	}
}

// TestDirectClientGoneEndsBackendRequest: a client that leaves while the
// backend has not answered (a long poll) ends the backend's request too.
// (Timeouts of the direct path: TestRetryOnBackendTimeout.)
func TestDirectClientGoneEndsBackendRequest(t *testing.T) {
	closed := make(chan struct{}, 1)
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		if _, err := readHead(br); err != nil {
			return
		}
		// Never answer; wait for Portico to give up on the connection.
		if _, err := br.ReadByte(); err != nil {
			closed <- struct{}{}
		}
	})
	addr := directPort(t, backend)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /svc HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	time.Sleep(100 * time.Millisecond)
	c.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the backend's connection stayed open after the client left")
	}
}

// TestDirectH2ResetEndsBackendRequest: over HTTP/2, a client that resets
// its stream while the backend has not answered, or closes the whole
// connection, ends the backend's request too; the connection whose stream
// was reset serves on.
func TestDirectH2ResetEndsBackendRequest(t *testing.T) {
	closed := make(chan string, 4)
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		head, err := readHead(br)
		if err != nil {
			return
		}
		if strings.HasPrefix(head[0], "GET /svc/ok ") {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			return
		}
		// Never answer; report when Portico gives up on the connection.
		if _, err := br.ReadByte(); err != nil {
			closed <- head[0]
		}
	})
	addr := directPort(t, backend)
	dial := func() (net.Conn, *http2.ClientConn) {
		t.Helper()
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(nc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return nc, cc
	}
	get := func(cc *http2.ClientConn, ctx context.Context, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://app.example.com"+path, nil)
		return cc.RoundTrip(req)
	}
	waitClosed := func(want string) {
		t.Helper()
		select {
		case got := <-closed:
			if !strings.Contains(got, want) {
				t.Fatalf("backend connection of %q closed, want %q's", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the backend's connection for %s stayed open after the client left", want)
		}
	}

	// A reset stream: the client's context ends, it sends RST_STREAM.
	_, cc := dial()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := get(cc, ctx, "/svc/hang1")
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the reset request was answered")
	}
	waitClosed("/svc/hang1")
	resp, err := get(cc, t.Context(), "/svc/ok")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("after the reset: %d %q", resp.StatusCode, body)
	}

	// The whole connection closed while a request waits.
	nc, cc2 := dial()
	go func() {
		_, err := get(cc2, t.Context(), "/svc/hang2")
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	nc.Close()
	<-errc
	waitClosed("/svc/hang2")
}
