package proxy

import (
	"bufio"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestNoInformationalToHTTP10: an HTTP/1.0 client takes any head for the
// final answer, so a backend's 1xx heads never reach one (RFC 9110,
// section 15.2), whichever server answers it and whichever path forwards
// the request: it would read the 1xx as the answer, and the answer as the
// one to its next request.
func TestNoInformationalToHTTP10(t *testing.T) {
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		io.WriteString(w, r.URL.Path)
	})
	for _, server := range []string{HTTP1Portico, HTTP1Go} {
		t.Run(server, func(t *testing.T) {
			rt := relRuntime(t, func(o *Options) { o.HTTP1Server = server })
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
		})
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
	for _, server := range []string{HTTP1Portico, HTTP1Go} {
		t.Run(server, func(t *testing.T) {
			rt := relRuntime(t, func(o *Options) { o.HTTP1Server = server })
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
			paths = make(chan string, 8)
		})
	}
}
