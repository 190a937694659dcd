package kube

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

const tlsGatewayTmpl = gatewayYAML + `  - name: pass
    port: {{.TLS}}
    protocol: TLS
    hostname: pass.example.com
    tls: {mode: Passthrough}
  - name: term
    port: {{.TLS}}
    protocol: TLS
    hostname: term.example.com
    tls: {mode: Terminate, certificateRefs: [{name: cert-term}]}
`

const tlsPassRoute = `apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: pass, namespace: apps}
spec:
  parentRefs: [{name: gw, sectionName: pass}]
  hostnames: [pass.example.com]
  rules: [{backendRefs: [{name: svc-pass, port: 80}]}]
`

const tlsTermRoute = `apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: term, namespace: apps}
spec:
  parentRefs: [{name: gw, sectionName: term}]
  hostnames: [term.example.com]
  rules: [{backendRefs: [{name: svc-term, port: 80}]}]
`

// TestStandaloneTLSRoutes: from YAML files, a Passthrough and a Terminate
// listener share a port; the passthrough client sees the backend's own
// certificate, the terminated one reaches a plain TCP backend, and a
// TLSRoute removed from the files stops being served.
func TestStandaloneTLSRoutes(t *testing.T) {
	passCert, termCert := newTestCert(t, "pass.example.com"), newTestCert(t, "term.example.com")
	passBackend := &backend{name: "pass", addr: tlsEchoBackend(t, passCert)}
	termBackend := &backend{name: "term", addr: tlsEchoBackend(t, testCert{})}
	port := freeport.Port(t)
	backends := serviceYAML("apps", "svc-pass", passBackend) + "---\n" + serviceYAML("apps", "svc-term", termBackend) +
		"---\n" + secretYAML("apps", "cert-term", termCert)
	h := startStandalone(t, map[string]string{
		"gateway.yaml":  render(t, tlsGatewayTmpl, map[string]int{"TLS": port}),
		"routes.yaml":   tlsPassRoute + "---\n" + tlsTermRoute,
		"backends.yaml": backends,
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	roots := x509.NewCertPool()
	roots.AddCert(passCert.leaf)
	roots.AddCert(termCert.leaf)
	dial := func(name string) (*tls.Conn, error) {
		d := &net.Dialer{Timeout: 5 * time.Second, Deadline: time.Now().Add(10 * time.Second)}
		return tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, RootCAs: roots})
	}
	var c *tls.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err = dial("pass.example.com"); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("passthrough: %v", err)
	}
	if !bytes.Equal(c.ConnectionState().PeerCertificates[0].Raw, passCert.leaf.Raw) {
		t.Error("passthrough: the client did not see the backend's certificate")
	}
	if got := pingStream(t, c); got != "tls:ping" {
		t.Errorf("passthrough: got %q", got)
	}

	c, err = dial("term.example.com")
	if err != nil {
		t.Fatalf("terminate: %v", err)
	}
	if !bytes.Equal(c.ConnectionState().PeerCertificates[0].Raw, termCert.leaf.Raw) {
		t.Error("terminate: the client did not see the listener's certificate")
	}
	if got := pingStream(t, c); got != "plain:ping" {
		t.Errorf("terminate: got %q", got)
	}

	gen := h.s.Generation()
	h.write("routes.yaml", tlsTermRoute)
	h.waitGeneration(gen + 1)
	if c, err := dial("pass.example.com"); err == nil {
		c.Close()
		t.Error("passthrough still served after its TLSRoute was removed")
	}
}

// pingStream writes "ping", ends its writes and reads the answer.
func pingStream(t *testing.T, c *tls.Conn) string {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "ping"); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	return string(got)
}

// tlsEchoBackend answers each connection with "tls:" (over TLS, with cert)
// or "plain:" (cert empty) and what it read until the end of the client's
// writes.
func tlsEchoBackend(t *testing.T, cert testCert) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	prefix := "plain:"
	if cert.leaf != nil {
		kp, err := tls.X509KeyPair([]byte(cert.certPEM), []byte(cert.keyPEM))
		if err != nil {
			t.Fatal(err)
		}
		ln, prefix = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{kp}}), "tls:"
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				got, _ := io.ReadAll(c)
				io.WriteString(c, prefix+string(got))
			}()
		}
	}()
	return ln.Addr().String()
}
