package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

// TestServeAppliesTrafficPolicy: "portico serve --config" with a
// BackendTrafficPolicy in its files balances as the policy says: a
// consistent hash on a header keeps each key on one of three endpoints,
// and the keys spread over more than one; editing the policy to
// RoundRobin takes each endpoint in turn.
func TestServeAppliesTrafficPolicy(t *testing.T) {
	// Three endpoints on one port of three loopback addresses, as an
	// EndpointSlice lists them.
	port := freeport.Port(t)
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	serveBackends(t, port, ips, func(ip string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, ip) })
	})
	listen := freeport.Port(t)
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, ips)
	policy := func(lb string) {
		p := "apiVersion: portico.dev/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: web}\nspec:\n" +
			"  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}]\n  loadBalancer: " + lb + "\n"
		if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policy("{type: ConsistentHash, consistentHash: {type: Header, header: {name: X-User}}}")
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	url := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(user string) (string, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if user != "" {
			req.Header.Set("X-User", user)
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return string(b), nil
	}
	waitUntil(t, "served", func() error { _, err := get("u0"); return err })
	used := map[string]bool{}
	for i := range 30 {
		user := "user-" + strconv.Itoa(i)
		first, err := get(user)
		if err != nil {
			t.Fatal(err)
		}
		used[first] = true
		for range 5 {
			if got, err := get(user); err != nil || got != first {
				t.Fatalf("key %s went to %s, then %s (%v)", user, first, got, err)
			}
		}
	}
	if len(used) < 2 {
		t.Errorf("30 keys all went to %v", used)
	}

	policy("{type: RoundRobin}")
	waitUntil(t, "round robin", func() error {
		seen := map[string]bool{}
		for range 3 {
			got, err := get("same-user")
			if err != nil {
				return err
			}
			seen[got] = true
		}
		if len(seen) != 3 {
			return fmt.Errorf("three requests of one key went to %v", seen)
		}
		return nil
	})
}

// TestServeActiveHealthCheck: "portico serve --config" with a
// BackendTrafficPolicy whose active check probes /healthz leaves out the
// one endpoint of three whose /healthz fails: once the probes ran, none
// of 60 requests reaches it.
func TestServeActiveHealthCheck(t *testing.T) {
	port := freeport.Port(t)
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	serveBackends(t, port, ips, func(ip string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" && ip == "127.0.0.3" {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			io.WriteString(w, ip)
		})
	})
	listen := freeport.Port(t)
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, ips, `apiVersion: portico.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: web}
spec:
  targetRefs: [{group: "", kind: Service, name: web}]
  healthCheck:
    active: {type: HTTP, interval: 50ms, timeout: 40ms, http: {path: /healthz}}
`)
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	url := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func() (string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return string(b), nil
	}
	waitUntil(t, "the failing endpoint left out", func() error {
		seen := map[string]int{}
		for range 60 {
			got, err := get()
			if err != nil {
				return err
			}
			seen[got]++
		}
		if seen["127.0.0.3"] > 0 || len(seen) != 2 {
			return fmt.Errorf("60 requests went to %v", seen)
		}
		return nil
	})
}
