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

// TestServeAppliesXTrafficPolicy: "portico serve --config" with an
// XBackendTrafficPolicy on Service web (sessionPersistence by cookie) in
// its files: the first answer opens a session, and 100 requests carrying
// it reach the same endpoint of three, where requests without it go
// round the three; and so they do after the policy file is rewritten with
// a retryConstraint added. (proxy's TestXPolicySessionAffinity holds a
// session across a reload the test makes itself.)
func TestServeAppliesXTrafficPolicy(t *testing.T) {
	port := freeport.Port(t)
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}
	serveBackends(t, port, ips, func(ip string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, ip) })
	})
	listen := freeport.Port(t)
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, ips)
	policy := func(more string) {
		p := "apiVersion: gateway.networking.x-k8s.io/v1alpha1\nkind: XBackendTrafficPolicy\nmetadata: {name: web}\nspec:\n" +
			"  targetRefs: [{group: \"\", kind: Service, name: web}]\n  sessionPersistence: {type: Cookie, cookie: {name: web-affinity}}\n" + more
		if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policy("")
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	url := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(cookie string) (by, setCookie string, err error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := c.Do(req)
		if err != nil {
			return "", "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return "", "", fmt.Errorf("status %d: %s", resp.StatusCode, b)
		}
		return string(b), resp.Header.Get("Set-Cookie"), nil
	}
	var first, set string
	waitUntil(t, "a session opened", func() error {
		var err error
		if first, set, err = get(""); err == nil && set == "" {
			err = fmt.Errorf("answer of %s opened no session", first)
		}
		return err
	})
	ck, err := http.ParseSetCookie(set)
	if err != nil || ck.Name != "web-affinity" {
		t.Fatalf("Set-Cookie %q (%v), want the policy's cookie web-affinity", set, err)
	}
	stick := func(phase string) {
		t.Helper()
		for i := range 100 {
			by, again, err := get("web-affinity=" + ck.Value)
			if err != nil || by != first || again != "" {
				t.Fatalf("%s: request %d went to %s (Set-Cookie %q, %v), the session's endpoint is %s", phase, i, by, again, err, first)
			}
		}
	}
	stick("first")

	policy("  retryConstraint: {budget: {percent: 10}}\n")
	waitUntil(t, "requests without a session spread", func() error {
		seen := map[string]bool{}
		for range 3 {
			by, _, err := get("")
			if err != nil {
				return err
			}
			seen[by] = true
		}
		if len(seen) != 3 {
			return fmt.Errorf("three requests without a session went to %v", seen)
		}
		return nil
	})
	stick("after the policy changed")
}
