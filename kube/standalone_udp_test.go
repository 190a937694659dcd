package kube

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

// A UDP and a TCP listener on one port number: two sockets.
const udpGatewayTmpl = gatewayYAML + `  - {name: dns, port: {{.Port}}, protocol: UDP}
  - {name: dns-tcp, port: {{.Port}}, protocol: TCP}
`

const udpRouteYAML = `apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {name: dns, namespace: apps}
spec:
  parentRefs: [{name: gw, sectionName: dns}]
  rules:
  - backendRefs:
    - {name: dns-a, port: 53, weight: 1}
    - {name: dns-b, port: 53, weight: 1}
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: dns-tcp, namespace: apps}
spec:
  parentRefs: [{name: gw, sectionName: dns-tcp}]
  rules:
  - backendRefs: [{name: dns-tcp, port: 80}]
`

// udpServiceYAML is a Service with one UDP port 53 whose one endpoint is
// addr.
func udpServiceYAML(ns, name, addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  ports:
  - {name: dns, port: 53, targetPort: %[4]s, protocol: UDP}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[2]s-1
  namespace: %[1]s
  labels: {kubernetes.io/service-name: %[2]s}
addressType: IPv4
ports:
- {name: dns, port: %[4]s, protocol: UDP}
endpoints:
- addresses: [%[3]s]
  conditions: {ready: true}
`, ns, name, host, port)
}

// namedUDPEcho answers each datagram with name, ":" and the datagram.
func namedUDPEcho(t *testing.T, name string) string {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			_, _ = c.WriteToUDPAddrPort([]byte(name+":"+string(buf[:n])), from)
		}
	}()
	return c.LocalAddr().String()
}

// TestStandaloneUDPRoute: from YAML files, a UDP listener carries each
// client's datagrams to one of its UDPRoute's two backends (both get
// sessions) while a TCP listener on the same port number serves its
// TCPRoute; a UDPRoute removed from the files stops being served.
func TestStandaloneUDPRoute(t *testing.T) {
	tcpBackend := &backend{name: "tcp", addr: namedTCPEcho(t, "tcp")}
	port := freeport.Port(t)
	h := startStandalone(t, map[string]string{
		"gateway.yaml": render(t, udpGatewayTmpl, map[string]int{"Port": port}),
		"routes.yaml":  udpRouteYAML,
		"backends.yaml": udpServiceYAML("apps", "dns-a", namedUDPEcho(t, "a")) + "---\n" +
			udpServiceYAML("apps", "dns-b", namedUDPEcho(t, "b")) + "---\n" + serviceYAML("apps", "dns-tcp", tcpBackend),
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	exchange := func(c net.Conn, p string, wait time.Duration) string {
		if _, err := c.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		buf := make([]byte, 1500)
		n, _ := c.Read(buf)
		return string(buf[:n])
	}
	seen := map[string]int{}
	for range 10 {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		first := exchange(c, "q1", 5*time.Second)
		name, _, _ := strings.Cut(first, ":")
		if again := exchange(c, "q2", 5*time.Second); again != name+":q2" {
			t.Fatalf("a session's second datagram answered %q, its first %q", again, first)
		}
		c.Close()
		seen[name]++
	}
	if seen["a"] == 0 || seen["b"] == 0 || seen["a"]+seen["b"] != 10 {
		t.Fatalf("sessions by backend %v; want both a and b, nothing else", seen)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("the TCP listener on the UDP listener's port: %v", err)
	}
	c.Close()

	gen := h.s.Generation()
	h.write("routes.yaml", "")
	h.waitGeneration(gen + 1)
	c, err = net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := exchange(c, "q", 300*time.Millisecond); got != "" {
		t.Errorf("still served after the UDPRoute was removed: %q", got)
	}
}
