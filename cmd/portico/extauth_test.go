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

// TestServeAppliesExtAuth: "portico serve --config" asks the HTTP
// authorization service a SecurityPolicy names, by its address (rule a)
// or by a Service of the files (rule b): the service's 2xx lets the
// request through with the header it sets, its 401 goes to the client
// with its body, and the backend sees only allowed requests.
func TestServeAppliesExtAuth(t *testing.T) {
	listenOn := func(h http.HandlerFunc) int {
		port := freeport.Port(t)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", strconv.Itoa(port)))
		if err != nil {
			t.Skipf("cannot listen on 127.0.0.2: %v", err)
		}
		srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: h}
		go srv.Serve(ln) //nolint:errcheck // ends with Close
		t.Cleanup(func() { srv.Close() })
		return port
	}
	backend := listenOn(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "user=%s", r.Header.Get("X-User"))
	})
	authz := listenOn(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Tenant") == "acme" {
			w.Header().Set("X-User", "alice")
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "no tenant")
	})
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
  listeners: [{name: http, port: %[1]d, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  parentRefs: [{name: gw}]
  rules:
  - {name: a, matches: [{path: {type: PathPrefix, value: /a}}], backendRefs: [{name: web, port: 80}]}
  - {name: b, matches: [{path: {type: PathPrefix, value: /b}}], backendRefs: [{name: web, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{name: http, port: 80, targetPort: %[2]d}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: %[2]d}]
endpoints:
- {addresses: [127.0.0.2], conditions: {ready: true}}
---
apiVersion: v1
kind: Service
metadata: {name: authz}
spec: {ports: [{name: http, port: 9000, targetPort: %[3]d}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: authz-1, labels: {kubernetes.io/service-name: authz}}
addressType: IPv4
ports: [{name: http, port: %[3]d}]
endpoints:
- {addresses: [127.0.0.2], conditions: {ready: true}}
---
apiVersion: portico.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: by-address}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web, sectionName: a}]
  extAuth: {http: {address: "127.0.0.2:%[3]d", headersToAuth: [X-Tenant], headersToBackend: [X-User]}}
---
apiVersion: portico.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: by-service}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web, sectionName: b}]
  extAuth: {http: {backendRef: {name: authz, port: 9000}, headersToAuth: [X-Tenant], headersToBackend: [X-User]}}
`, listen, backend, authz)
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(path, tenant string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", listen, path), nil)
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/a", "/b"} {
		waitUntil(t, "guarded "+path, func() error {
			if code, body := get(path, ""); code != 401 || body != "no tenant" {
				return fmt.Errorf("%s without a tenant: %d %q", path, code, body)
			}
			return nil
		})
		if code, body := get(path, "acme"); code != 200 || body != "user=alice" {
			t.Errorf("%s allowed: %d %q, want 200 user=alice", path, code, body)
		}
	}
}
