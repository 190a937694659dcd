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
// the request: a kept-alive HTTP/1.0 connection would otherwise read each
// answer as the one to its next request.
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
			c := relDial(t, addr)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			for _, req := range []struct{ raw, path string }{
				{"GET /direct HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n", "/direct"},
				{"POST /reverse-proxy HTTP/1.0\r\nHost: a\r\nContent-Length: 1\r\nConnection: keep-alive\r\n\r\nx", "/reverse-proxy"},
			} {
				io.WriteString(c, req.raw)
				resp, err := http.ReadResponse(br, nil)
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
