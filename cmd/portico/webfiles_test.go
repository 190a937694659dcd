package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// serveBackends serves, on port of each of the loopback addresses ips,
// what handler gives for that address, until the test ends. It skips the
// test where an address cannot be listened on.
func serveBackends(t *testing.T, port int, ips []string, handler func(ip string) http.Handler) {
	t.Helper()
	for _, ip := range ips {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			t.Skipf("cannot listen on %s: %v", ip, err)
		}
		srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: handler(ip)}
		go srv.Serve(ln) //nolint:errcheck // ends with Close
		t.Cleanup(func() { srv.Close() })
	}
}

// writeWebFiles writes dir/objects.yaml: a Gateway "gw" listening for
// HTTP on port listen, its HTTPRoute "web" to the Service "web" (port
// 80), whose endpoints are ips on port, and then the documents more.
func writeWebFiles(t *testing.T, dir string, listen, port int, ips []string, more ...string) {
	t.Helper()
	var endpoints strings.Builder
	for _, ip := range ips {
		fmt.Fprintf(&endpoints, "- {addresses: [%s], conditions: {ready: true}}\n", ip)
	}
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
`, listen, port, port) + endpoints.String()
	for _, doc := range more {
		objects += "---\n" + doc
	}
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
}
