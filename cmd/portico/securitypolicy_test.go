package main

import (
	"crypto/sha1"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

// TestServeAppliesSecurityPolicy: "portico serve --config" with a
// SecurityPolicy in its files asks for the users of its htpasswd Secret
// (given as stringData): no credentials get a 401 with the realm, the
// right password reaches the backend; changing the Secret's password
// takes effect without a restart (the old one then gets a 401).
func TestServeAppliesSecurityPolicy(t *testing.T) {
	port := freeport.Port(t)
	serveBackends(t, port, []string{"127.0.0.2"}, func(string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "user=%s auth=%q", r.Header.Get("X-User"), r.Header.Get("Authorization"))
		})
	})
	listen := freeport.Port(t)
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, []string{"127.0.0.2"}, `apiVersion: portico.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: staff}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  basicAuth: {users: {name: users}, realm: staff, forwardUsernameHeader: X-User}
`)
	users := func(password string) {
		sum := sha1.Sum([]byte(password))
		s := "apiVersion: v1\nkind: Secret\nmetadata: {name: users}\nstringData:\n  .htpasswd: |\n    bob:{SHA}" + base64.StdEncoding.EncodeToString(sum[:]) + "\n"
		if err := os.WriteFile(filepath.Join(dir, "users.yaml"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	users("first")
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	url := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(password string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if password != "" {
			req.SetBasicAuth("bob", password)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, "", err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Www-Authenticate"), string(b)
	}
	waitUntil(t, "guarded", func() error {
		if code, challenge, _ := get(""); code != 401 || challenge != `Basic realm="staff", charset="UTF-8"` {
			return fmt.Errorf("no credentials: %d %q", code, challenge)
		}
		return nil
	})
	if code, _, body := get("first"); code != 200 || body != `user=bob auth=""` {
		t.Fatalf("right password: %d %s", code, body)
	}
	users("second")
	waitUntil(t, "new password", func() error {
		if code, _, body := get("second"); code != 200 {
			return fmt.Errorf("new password: %d %s", code, body)
		}
		return nil
	})
	if code, _, _ := get("first"); code != 401 {
		t.Errorf("old password after the change: %d, want 401", code)
	}
}
