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

// TestServeAppliesListenerFilters: "portico serve --config" runs a
// listener's ExternalAuth request filter, by a Service of the files,
// before routing: the header its service sets selects the rule, whose
// own ExternalAuth filter then asks the same service on its path; a
// refusal of the listener's filter goes to the client and no rule runs.
func TestServeAppliesListenerFilters(t *testing.T) {
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
		fmt.Fprintf(w, "tenant=%s route=%s", r.Header.Get("X-Tenant"), r.Header.Get("X-Route-Checked"))
	})
	authz := listenOn(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/route/admin" && r.Header.Get("X-Tenant") == "acme":
			w.Header().Set("X-Route-Checked", "yes")
		case r.URL.Path == "/route/admin":
			w.WriteHeader(http.StatusForbidden)
		case r.Header.Get("Authorization") == "Bearer acme":
			w.Header().Set("X-Tenant", "acme")
		case r.Header.Get("Authorization") == "Bearer guest":
			// Allowed, of no tenant.
		default:
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "who are you")
		}
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
  listeners:
  - name: http
    port: %[1]d
    protocol: HTTP
    filters:
      requests:
      - type: ExternalAuth
        externalAuth:
          protocol: HTTP
          backendRef: {name: authz, port: 9000}
          http: {allowedResponseHeaders: [X-Tenant]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /admin}, headers: [{name: X-Tenant, value: acme}]}]
    filters:
    - type: ExternalAuth
      externalAuth:
        protocol: HTTP
        backendRef: {name: authz, port: 9000}
        http: {path: /route, allowedHeaders: [X-Tenant], allowedResponseHeaders: [X-Route-Checked]}
    backendRefs: [{name: web, port: 80}]
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
`, listen, backend, authz)
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(path, token string, h ...string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", listen, path), nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Set(h[i], h[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitUntil(t, "listener filter", func() error {
		if code, body := get("/admin", ""); code != 401 || body != "who are you" {
			return fmt.Errorf("without a token: %d %q", code, body)
		}
		return nil
	})
	if code, body := get("/admin", "acme"); code != 200 || body != "tenant=acme route=yes" {
		t.Errorf("allowed: %d %q, want 200 tenant=acme route=yes", code, body)
	}
	// A guest's own X-Tenant is dropped, the service setting none: no
	// rule matches.
	if code, body := get("/admin", "guest", "X-Tenant", "acme"); code != 404 {
		t.Errorf("a guest claiming a tenant: %d %q, want 404", code, body)
	}
}
