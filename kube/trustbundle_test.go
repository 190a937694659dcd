package kube

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/internal/testkit/snitest"
)

// TestStandaloneClusterTrustBundle: in standalone mode, ClusterTrustBundles
// in the files hold the CA certificates of a BackendTLSPolicy and of the
// Gateway's client certificate validation. A change of the files rotates
// them without a restart: the backend, whose CA the bundle did not hold
// (502), is served once it does; a client certificate refused before its
// CA was added is accepted after, and one of the CA taken out is refused.
func TestStandaloneClusterTrustBundle(t *testing.T) {
	newCA := func() *snitest.CA {
		ca, err := snitest.NewCA()
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	backendCA, otherCA, clientCA, strangerCA := newCA(), newCA(), newCA(), newCA()
	good := startTLSBackend(t, backendCA, "backend.internal")
	clientCert := issueClientCert(t, clientCA, 1, "client")
	strangerCert := issueClientCert(t, strangerCA, 2, "stranger")
	server := newTestCert(t, "app.example.com")
	ports := map[string]any{"HTTP": freeport.Port(t), "HTTPS": freeport.Port(t)}
	bundle := func(name string, cas ...*snitest.CA) string {
		var pems string
		for _, ca := range cas {
			pems += string(ca.CertPEM)
		}
		return "apiVersion: certificates.k8s.io/v1\nkind: ClusterTrustBundle\nmetadata: {name: " + name + "}\nspec:\n  trustBundle: |\n" +
			indent(4, pems) + "\n---\n"
	}
	config := func(backends, clients []*snitest.CA) string {
		return bundle("backends", backends...) + bundle("clients", clients...) + render(t, classYAML+`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: portico
  tls:
    frontend:
      default:
        validation: {caCertificateRefs: [{group: certificates.k8s.io, kind: ClusterTrustBundle, name: clients}]}
  listeners:
  - {name: http, port: {{.HTTP}}, protocol: HTTP}
  - {name: https, port: {{.HTTPS}}, protocol: HTTPS, tls: {certificateRefs: [{name: cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: good, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: tls, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: good}]
  validation:
    caCertificateRefs: [{group: certificates.k8s.io, kind: ClusterTrustBundle, name: backends}]
    hostname: backend.internal
---
`, ports) + tlsServiceYAML("good", good) + secretYAML("apps", "cert", server)
	}
	h := startStandalone(t, map[string]string{"config.yaml": config([]*snitest.CA{otherCA}, []*snitest.CA{strangerCA})})
	plain := httpClient(fmt.Sprintf("127.0.0.1:%d", ports["HTTP"]))
	roots := x509.NewCertPool()
	roots.AddCert(server.leaf)
	https := func(cert *tls.Certificate) error {
		cfg := &tls.Config{RootCAs: roots, ServerName: "app.example.com", GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cert, nil
		}}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
		resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/", ports["HTTPS"]))
		if err != nil {
			return err
		}
		// Any answer: the handshake took the certificate (the backend may
		// still be refused behind it).
		resp.Body.Close()
		return nil
	}

	if status, _, _ := get(t, plain, "http://app.example.com/"); status != http.StatusBadGateway {
		t.Errorf("backend of a CA the bundle does not hold: %d, want 502", status)
	}
	if err := https(&strangerCert); err != nil {
		t.Errorf("client of the bundle's CA: %v", err)
	}
	if err := https(&clientCert); err == nil {
		t.Error("client of a CA not in the bundle was served")
	}

	gen := h.s.Generation()
	h.write("config.yaml", config([]*snitest.CA{otherCA, backendCA}, []*snitest.CA{clientCA}))
	kubetest.WaitFor(t, 10*time.Second, "bundles rotated", func() error {
		if h.s.Generation() == gen {
			return fmt.Errorf("still generation %d", gen)
		}
		return nil
	})
	if status, body, _ := get(t, plain, "http://app.example.com/"); status != 200 || body != "sni=backend.internal host=app.example.com" {
		t.Errorf("backend after its CA entered the bundle: %d %q", status, body)
	}
	if err := https(&clientCert); err != nil {
		t.Errorf("client after its CA was added: %v", err)
	}
	if err := https(&strangerCert); err == nil {
		t.Error("client of a CA taken out of the bundle is still served")
	}
}
