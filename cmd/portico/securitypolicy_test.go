package main

import (
	"crypto/sha1"
	"encoding/base64"
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

// TestServeAppliesSecurityPolicy: "portico serve --config" with a
// SecurityPolicy in its files asks for the users of its htpasswd Secret
// (given as stringData): no credentials get a 401 with the realm, the
// right password reaches the backend; changing the Secret's password
// takes effect without a restart (the old one then gets a 401).
func TestServeAppliesSecurityPolicy(t *testing.T) {
	port := freeport.Port(t)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(port)))
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.2: %v", err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "user=%s auth=%q", r.Header.Get("X-User"), r.Header.Get("Authorization"))
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	listen := freeport.Port(t)
	dir := t.TempDir()
	objects := fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: portico}
spec: {controllerName: portico.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  gatewayClassName: portico
  listeners: [{name: http, port: %d, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: web, port: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{name: http, port: 80, targetPort: %d}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: %d}]
endpoints:
- {addresses: [127.0.0.2], conditions: {ready: true}}
---
apiVersion: portico.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: staff}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  basicAuth: {users: {name: users}, realm: staff, forwardUsernameHeader: X-User}
`, listen, port, port)
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
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
