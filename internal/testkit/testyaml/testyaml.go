// Package testyaml holds the YAML pieces the tests of several packages
// build standalone configurations from, so that a fixture means the same
// thing in translate's tests as in the end-to-end ones.
package testyaml

import (
	"fmt"
	"strings"
)

// Class is the GatewayClass "portico" of Portico's default controller
// name, and the document separator after it.
const Class = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: portico}
spec: {controllerName: portico.dev/gateway-controller}
---
`

// Gateway is Class and the Gateway apps/gw, which ListenerSets of its own
// namespace may attach to, up to its list of listeners, which each test
// writes.
const Gateway = Class + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: portico
  allowedListeners: {namespaces: {from: Same}}
  listeners:
`

// Indent prefixes every line with n spaces, for PEM inside YAML block
// scalars.
func Indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
}

// Secret is a kubernetes.io/tls Secret holding a PEM key pair.
func Secret(namespace, name, certPEM, keyPEM string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %s, namespace: %s}
type: kubernetes.io/tls
stringData:
  tls.crt: |
%s
  tls.key: |
%s
`, name, namespace, Indent(4, certPEM), Indent(4, keyPEM))
}

// Backend is the Service apps/backend, port servicePort, and its
// EndpointSlice: one ready endpoint at addr (host:port).
func Backend(addr string, servicePort int) string {
	host, port, _ := strings.Cut(addr, ":")
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: backend, namespace: apps}
spec:
  ports: [{port: %d, targetPort: %s}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend
  namespace: apps
  labels: {kubernetes.io/service-name: backend}
addressType: IPv4
ports: [{port: %s}]
endpoints: [{addresses: [%s], conditions: {ready: true}}]
`, servicePort, port, port, host)
}

// Site is one site of the benchmarks' standalone configurations: its
// certificate's Secret name+"-tls", its ListenerSet apps/name (HTTPS on
// port for host, attached to apps/gw) and its HTTPRoute apps/name to
// Backend's Service, as three documents.
func Site(name, host string, port int, certPEM, keyPEM string) string {
	return Secret("apps", name+"-tls", certPEM, keyPEM) + fmt.Sprintf(`---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: %s, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - {name: https, hostname: %s, port: %d, protocol: HTTPS, tls: {certificateRefs: [{name: %s-tls}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %s, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: %s}]
  hostnames: [%s]
  rules: [{backendRefs: [{name: backend, port: 80}]}]
`, name, host, port, name, name, name, host)
}
