package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

// TestServeAppliesClientPolicy: "portico serve --config" with a
// ClientTrafficPolicy in its files finds the client's address as the
// policy says (a trusted hop's X-Forwarded-For, which the backend sees)
// and limits the route's requests per client (429 with Retry-After); an
// edit raising the limit is served without restarting.
func TestServeAppliesClientPolicy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Header.Get("X-Forwarded-For"))
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	listen := freeport.Port(t)
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, []string{"127.0.0.1"}, `apiVersion: portico.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {name: behind-balancer}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}]
  clientIPDetection: {xForwardedFor: {numTrustedHops: 1}}
`)
	limit := func(n int) {
		p := "apiVersion: portico.dev/v1alpha1\nkind: ClientTrafficPolicy\nmetadata: {name: per-client}\nspec:\n" +
			"  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}]\n" +
			"  rateLimit: {requests: " + strconv.Itoa(n) + ", unit: Hour, key: {type: ClientAddress}}\n"
		if err := os.WriteFile(filepath.Join(dir, "limit.yaml"), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	limit(2)
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	url := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(xff string) (int, string, http.Header) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error(), nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	waitUntil(t, "served", func() error {
		if code, body, _ := get("6.6.6.6, 203.0.113.1"); code != 200 || body != "203.0.113.1" {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
	// 203.0.113.1 has used one of its two; 203.0.113.2 has its own two.
	if code, body, _ := get("203.0.113.1"); code != 200 || body != "203.0.113.1" {
		t.Fatalf("second request of 203.0.113.1: %d %q", code, body)
	}
	code, _, h := get("203.0.113.1")
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || h.Get("RateLimit-Policy") == "" {
		t.Fatalf("third request of 203.0.113.1: %d, headers %v; want 429 with Retry-After and RateLimit-Policy", code, h)
	}
	if code, body, _ := get("203.0.113.2"); code != 200 || body != "203.0.113.2" {
		t.Errorf("another client: %d %q", code, body)
	}
	limit(100)
	waitUntil(t, "the raised limit", func() error {
		if code, _, _ := get("203.0.113.1"); code != 200 {
			return fmt.Errorf("%d", code)
		}
		return nil
	})
}
