package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNoInformationalToHTTP10: an HTTP/1.0 client takes any head for the
// final answer, so a backend's 1xx heads never reach one (RFC 9110,
// section 15.2), whichever path forwards the request: it would read the 1xx as the answer, and the answer as the
// one to its next request.
func TestNoInformationalToHTTP10(t *testing.T) {
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, r.URL.Path)
	})
	rt := relRuntime(t, nil)
	addr := relHTTPPort(t, rt, backend)
	for _, req := range []struct{ raw, path string }{
		{"GET /direct HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", "/direct"},
		{"POST /reverse-proxy HTTP/1.0\r\nHost: a\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\nx", "/reverse-proxy"},
	} {
		c := relDial(t, addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req.raw)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", req.path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || string(b) != req.path {
			t.Fatalf("%s: an HTTP/1.0 client read %d %q (%v), want 200 %q", req.path, resp.StatusCode, b, err, req.path)
		}
	}
}

// TestInformationalKeepsConnectionClose: a request after which its
// connection must close (chunked, or HTTP/1.0: a proxy in front may have
// framed its body otherwise, RFC 9112 section 6.1) still closes it when
// the backend sends a 1xx head first. The forwarders clear the header map
// after each 1xx they relay, which took the "Connection: close" decided
// before forwarding with it, and the bytes after the body were then read
// as a request of their own.
func TestInformationalKeepsConnectionClose(t *testing.T) {
	paths := make(chan string, 8)
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.Path
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	const smuggled = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"
	rt := relRuntime(t, nil)
	addr := relHTTPPort(t, rt, backend)
	for _, raw := range []string{
		"POST /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"POST /both HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"GET /http10 HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		c := relDial(t, addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, raw+smuggled)
		var codes []int
		for _, code := range readAllAnswers(bufio.NewReader(c)) {
			if code >= 200 {
				codes = append(codes, code)
			}
		}
		if len(codes) != 1 {
			t.Errorf("%.20q: answers %v on one connection, want one, then the connection closed", raw, codes)
		}
	}
	close(paths)
	for p := range paths {
		if p == "/smuggled" {
			t.Errorf("the backend got %s: the bytes after a body were read as a request", p)
		}
	}
}

// TestInformationalWithoutHopByHop: a backend's 1xx head reaches the
// client without its connection's own fields (Connection, those it names,
// Keep-Alive, ...), as its final answer does. Over HTTP/2 they make the
// head malformed (RFC 9113 section 8.2.2): strict clients reset the stream
// (curl: PROTOCOL_ERROR) and never see the answer.
func TestInformationalWithoutHopByHop(t *testing.T) {
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			if slices.Contains(head, "Content-Length: 1") {
				_, _ = br.Discard(1)
			}
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nConnection: X-Secret\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nLink: </a.css>\r\n\r\n"+
				"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")
		}
	})
	rt := relRuntime(t, nil)
	addr := relHTTPPort(t, rt, backend)
	for _, client := range []struct {
		name string
		c    *http.Client
	}{{"HTTP/1.1", &http.Client{Timeout: 5 * time.Second}}, {"h2c", h2cClient()}} {
		for _, method := range []string{http.MethodGet, http.MethodPost} { // direct path, ReverseProxy
			var hints []textproto.MIMEHeader
			ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
				Got1xxResponse: func(_ int, h textproto.MIMEHeader) error {
					hints = append(hints, h)
					return nil
				},
			})
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader("x")
			}
			req, _ := http.NewRequestWithContext(ctx, method, "http://"+addr+"/", body)
			resp, err := client.c.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", client.name, method, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "done" || len(hints) != 1 {
				t.Fatalf("%s %s: %d 1xx heads, answer %q", client.name, method, len(hints), b)
			}
			for _, hop := range []string{"Connection", "X-Secret", "Keep-Alive"} {
				if _, ok := hints[0][hop]; ok {
					t.Errorf("%s %s: 103 head carries %s: %v", client.name, method, hop, hints[0])
				}
			}
			if hints[0].Get("Link") != "</a.css>" {
				t.Errorf("%s %s: 103 head lost its Link: %v", client.name, method, hints[0])
			}
		}
	}
}
