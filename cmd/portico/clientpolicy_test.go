package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"

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

// TestServeAppliesClientConnectionTimeouts: "portico serve --config" with
// a ClientTrafficPolicy's http.http1 timeouts closes a kept-alive
// connection idle past its idleTimeout and cuts a head trickled past its
// headerTimeout (the flags' are 120s and 10s), and tells a cleartext
// HTTP/2 connection the policy's maxConcurrentStreams.
func TestServeAppliesClientConnectionTimeouts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	listen := freeport.Port(t)
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, ln.Addr().(*net.TCPAddr).Port, []string{"127.0.0.1"}, `apiVersion: portico.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {name: tight}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}]
  http: {http1: {idleTimeout: 1s, headerTimeout: 500ms}, http2: {maxConcurrentStreams: 7}}
`)
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	addr := fmt.Sprintf("127.0.0.1:%d", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	waitUntil(t, "served", func() error {
		resp, err := c.Get("http://" + addr + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%d", resp.StatusCode)
		}
		return nil
	})
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	start := time.Now()
	if _, err := br.ReadByte(); err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("idle connection: %v after %v, want closed after about 1s", err, time.Since(start))
	}

	slow, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_ = slow.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(slow, "GET / HTTP/1.1\r\n")
	start = time.Now()
	if _, err := slow.Read(make([]byte, 1)); err == nil || time.Since(start) > 3*time.Second {
		t.Errorf("withheld head: %v after %v, want cut after about 500ms", err, time.Since(start))
	}

	h2, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	_ = h2.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(h2, http2.ClientPreface)
	fr := http2.NewFramer(h2, h2)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %T", f)
	}
	if v, _ := sf.Value(http2.SettingMaxConcurrentStreams); v != 7 {
		t.Errorf("h2c SETTINGS_MAX_CONCURRENT_STREAMS %d, want the policy's 7", v)
	}
}
