package kube

import (
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

const tcpGatewayTmpl = gatewayYAML + `  - {name: db, port: {{.Port}}, protocol: TCP}
`

const tcpRouteYAML = `apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: db, namespace: apps}
spec:
  parentRefs: [{name: gw, sectionName: db}]
  rules:
  - backendRefs:
    - {name: svc-a, port: 80, weight: 1}
    - {name: svc-b, port: 80, weight: 1}
`

// TestStandaloneTCPRoute: from YAML files (a v1alpha2 TCPRoute, admitted
// by its CRD schema), a TCP listener carries each connection to one of
// the route's two backends, bytes both ways with the client's half-close;
// both backends get connections; a route removed from the files stops
// being served.
func TestStandaloneTCPRoute(t *testing.T) {
	a := &backend{name: "a", addr: namedTCPEcho(t, "a")}
	b := &backend{name: "b", addr: namedTCPEcho(t, "b")}
	port := freeport.Port(t)
	h := startStandalone(t, map[string]string{
		"gateway.yaml":  render(t, tcpGatewayTmpl, map[string]int{"Port": port}),
		"routes.yaml":   tcpRouteYAML,
		"backends.yaml": serviceYAML("apps", "svc-a", a) + "---\n" + serviceYAML("apps", "svc-b", b),
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	exchange := func() (string, error) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return "", err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "ping"); err != nil {
			return "", err
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return "", err
		}
		got, err := io.ReadAll(c)
		return string(got), err
	}
	seen := map[string]int{}
	for range 10 {
		got, err := exchange()
		if err != nil {
			t.Fatal(err)
		}
		seen[got]++
	}
	if seen["a:ping"] == 0 || seen["b:ping"] == 0 || seen["a:ping"]+seen["b:ping"] != 10 {
		t.Fatalf("answers: %v; want both a:ping and b:ping, nothing else", seen)
	}

	gen := h.s.Generation()
	h.write("routes.yaml", "")
	h.waitGeneration(gen + 1)
	if got, err := exchange(); err == nil && got != "" {
		t.Errorf("still served after the TCPRoute was removed: %q", got)
	}
}

// namedTCPEcho answers each connection with name, ":" and what it read
// until the end of the client's writes.
func namedTCPEcho(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				got, _ := io.ReadAll(c)
				_, _ = io.WriteString(c, name+":"+string(got))
			}()
		}
	}()
	return ln.Addr().String()
}
