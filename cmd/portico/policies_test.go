package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

// TestServeClientAddressOfSecurityPolicy: a SecurityPolicy's address list
// judges the client's address as the ClientTrafficPolicy of the listener
// finds it: a trusted proxy's X-Forwarded-For is believed (an allowed
// client passes, one outside the list, or hidden behind an allowed entry
// it added itself, does not); once the proxy is no longer trusted, the
// same header is ignored and the proxy's own address is judged.
func TestServeClientAddressOfSecurityPolicy(t *testing.T) {
	port, listen := freeport.Port(t), freeport.Port(t)
	serveBackends(t, port, []string{"127.0.0.1"}, func(string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	})
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, []string{"127.0.0.1"}, `apiVersion: portico.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: customers-only}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}]
  clientAddresses: {allow: [203.0.113.0/24]}
`)
	trust := func(cidr string) {
		p := "apiVersion: portico.dev/v1alpha1\nkind: ClientTrafficPolicy\nmetadata: {name: behind-balancer}\nspec:\n" +
			"  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]\n" +
			"  clientIPDetection: {xForwardedFor: {trustedCIDRs: [" + cidr + "]}}\n"
		if err := os.WriteFile(filepath.Join(dir, "client.yaml"), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	trust("127.0.0.1/32")
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	url := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(xff string) int {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0 // not served yet
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body) //nolint:errcheck // only the status matters
		return resp.StatusCode
	}
	waitUntil(t, "an allowed client through the trusted proxy", func() error {
		if code := get("203.0.113.7"); code != 200 {
			return fmt.Errorf("%d", code)
		}
		return nil
	})
	for _, tc := range []struct {
		xff  string
		code int
	}{
		{"", 403},                          // the proxy itself is not a customer
		{"198.51.100.1", 403},              // outside the list
		{"203.0.113.7, 198.51.100.1", 403}, // the allowed entry was the client's own claim
		{"198.51.100.1, 203.0.113.9", 200}, // the last untrusted hop is allowed
	} {
		if code := get(tc.xff); code != tc.code {
			t.Errorf("X-Forwarded-For %q: %d, want %d", tc.xff, code, tc.code)
		}
	}
	trust("10.0.0.0/8")
	waitUntil(t, "X-Forwarded-For ignored from an untrusted peer", func() error {
		if code := get("203.0.113.7"); code != 403 {
			return fmt.Errorf("%d, want 403", code)
		}
		return nil
	})
}
