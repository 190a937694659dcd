package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"portico.dev/portico/internal/dataplane/proxyproto"
	"portico.dev/portico/internal/testkit/freeport"
)

// TestServeBackendProxyProtocol: "portico serve --config" with a
// BackendTrafficPolicy setting proxyProtocol on a TCPRoute's Service: the
// backend reads a v2 header with the client's address before the
// client's bytes; the policy edited to V1, new connections carry a v1
// line; the policy removed, none.
func TestServeBackendProxyProtocol(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	type seen struct {
		h    proxyproto.Header
		err  error
		data string
	}
	got := make(chan seen, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				h, rest, err := proxyproto.Read(c)
				if err != nil && len(rest) == 0 {
					got <- seen{err: err}
					return
				}
				buf := make([]byte, 4)
				n := copy(buf, rest)
				if _, rerr := io.ReadFull(c, buf[n:]); rerr != nil {
					got <- seen{err: rerr}
					return
				}
				io.WriteString(c, "ok")
				got <- seen{h: h, err: err, data: string(buf)}
			}()
		}
	}()
	backendPort := ln.Addr().(*net.TCPAddr).Port
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
  listeners: [{name: db, port: %d, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: db}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: v1
kind: Service
metadata: {name: db}
spec: {ports: [{name: db, port: 5432, targetPort: %d}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: db-1, labels: {kubernetes.io/service-name: db}}
addressType: IPv4
ports: [{name: db, port: %d}]
endpoints: [{addresses: [127.0.0.1], conditions: {ready: true}}]
`, listen, backendPort, backendPort)
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(dir, "policy.yaml")
	policy := func(version string) {
		p := "apiVersion: portico.dev/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: db}\nspec:\n" +
			"  targetRefs: [{group: \"\", kind: Service, name: db}]\n  proxyProtocol: {version: " + version + "}\n"
		if err := os.WriteFile(policyFile, []byte(p), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policy("V2")
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")

	// connect sends "ping" through Portico and returns what the backend
	// saw of it.
	connect := func() (seen, net.Addr, error) {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", listen))
		if err != nil {
			return seen{}, nil, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "ping"); err != nil {
			return seen{}, nil, err
		}
		answer := make([]byte, 2)
		if _, err := io.ReadFull(c, answer); err != nil {
			return seen{}, nil, fmt.Errorf("no answer: %w", err)
		}
		select {
		case s := <-got:
			return s, c.LocalAddr(), nil
		case <-time.After(5 * time.Second):
			return seen{}, nil, fmt.Errorf("the backend reported nothing")
		}
	}
	// expect waits until connections carry a header of version v (0:
	// none) with the client's address, then the client's bytes.
	expect := func(v int) {
		waitUntil(t, fmt.Sprintf("a v%d header", v), func() error {
			s, client, err := connect()
			if err != nil {
				return err
			}
			if v == 0 {
				if s.err == nil || s.data != "ping" {
					return fmt.Errorf("header %+v (%v), then %q", s.h, s.err, s.data)
				}
				return nil
			}
			if s.err != nil || s.h.Version != v || s.h.Source.String() != client.String() || s.data != "ping" {
				return fmt.Errorf("header %+v (%v) then %q, want v%d from %s then ping", s.h, s.err, s.data, v, client)
			}
			return nil
		})
	}
	expect(2)
	policy("V1")
	expect(1)
	if err := os.Remove(policyFile); err != nil {
		t.Fatal(err)
	}
	expect(0)
}
