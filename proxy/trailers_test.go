package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestForbiddenTrailersNeverForwarded: a backend's trailer section may
// name fields that frame, route or control a message (Content-Length,
// Host, Transfer-Encoding, ...), announced or not. None reaches a client,
// whichever server answers it (Portico's HTTP/1.1 loop or its HTTP/2
// server) and whichever path forwards it (direct, or ReverseProxy for a
// request with a body); the others, gRPC's among them, do.
func TestForbiddenTrailersNeverForwarded(t *testing.T) {
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "Grpc-Status, Content-Type, Host")
		io.WriteString(w, "body")
		http.NewResponseController(w).Flush() //nolint:errcheck // test backend
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("Content-Type", "late/type")
		w.Header().Set("Host", "announced.example")
		w.Header().Set(http.TrailerPrefix+"Grpc-Message", "m")
		w.Header().Set(http.TrailerPrefix+"Content-Length", "99")
		w.Header().Set(http.TrailerPrefix+"host", "undeclared.example")
		w.Header().Set(http.TrailerPrefix+"transfer-encoding", "chunked")
		w.Header().Set(http.TrailerPrefix+"If-Match", "*")
	})
	forbidden := []string{"Content-Length", "Content-Type", "Host", "Transfer-Encoding", "If-Match"}
	rt := relRuntime(t, nil)
	addr := relHTTPPort(t, rt, backend)
	for _, req := range []string{
		"GET /direct HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
		"POST /reverse-proxy HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
	} {
		c := relDial(t, addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		raw, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		_, tail, ok := strings.Cut(string(raw), "\r\n0\r\n")
		if !ok {
			t.Fatalf("%.20q: no last chunk in %q", req, raw)
		}
		for _, bad := range forbidden {
			if strings.Contains(strings.ToLower(tail), strings.ToLower(bad)+":") {
				t.Errorf("%.20q: trailer section %q carries %s", req, tail, bad)
			}
		}
		if !strings.Contains(tail, "Grpc-Status: 0\r\n") || !strings.Contains(tail, "Grpc-Message: m\r\n") {
			t.Errorf("%.20q: trailer section %q lost gRPC's fields", req, tail)
		}
	}
	resp, err := h2cClient().Get("http://" + addr + "/h2")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, bufio.NewReader(resp.Body))
	resp.Body.Close()
	for _, bad := range forbidden {
		if resp.Trailer.Get(bad) != "" {
			t.Errorf("HTTP/2: trailers %v carry %s", resp.Trailer, bad)
		}
	}
	if got := fmt.Sprint(resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")); got != "0m" {
		t.Errorf("HTTP/2: trailers %v lost gRPC's fields", resp.Trailer)
	}
}
