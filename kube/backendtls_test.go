package kube

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/internal/testkit/snitest"
)

// TestStandaloneBackendTLS sends requests through Portico to TLS backends
// on loopback: verified against the policy's CA and hostname, with the
// policy's hostname as SNI; a backend whose certificate does not check out
// gets no request (502); a policy without a usable CA answers 500; a new
// CA in the ConfigMap takes effect.
func TestStandaloneBackendTLS(t *testing.T) {
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	other, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	good := startTLSBackend(t, ca, "backend.internal")
	foreign := startTLSBackend(t, other, "backend.internal")
	port := freeport.Port(t)
	config := func(caPEM []byte) string {
		return caConfigMapYAML("ca", caPEM) + render(t, gatewayYAML+`  - {name: http, port: {{.Port}}, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {value: /good}}]
    backendRefs: [{name: good, port: 443}]
  - matches: [{path: {value: /foreign}}]
    backendRefs: [{name: foreign, port: 443}]
  - matches: [{path: {value: /broken}}]
    backendRefs: [{name: broken, port: 443}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: tls, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: good}, {group: "", kind: Service, name: foreign}]
  validation:
    caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]
    hostname: backend.internal
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: broken, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: broken}]
  validation:
    caCertificateRefs: [{group: "", kind: ConfigMap, name: nonexistent}]
    hostname: backend.internal
---
`+tlsServiceYAML("good", good)+tlsServiceYAML("foreign", foreign)+tlsServiceYAML("broken", good),
			map[string]any{"Port": port})
	}
	h := startStandalone(t, map[string]string{"config.yaml": config(ca.CertPEM)})
	c := httpClient(fmt.Sprintf("127.0.0.1:%d", port))

	status, body, _ := get(t, c, "http://app.example.com/good")
	if status != 200 || body != "sni=backend.internal host=app.example.com" {
		t.Errorf("/good: %d %q", status, body)
	}
	if status, _, _ := get(t, c, "http://app.example.com/foreign"); status != http.StatusBadGateway {
		t.Errorf("/foreign, a certificate of another CA: %d, want 502", status)
	}
	if status, body, _ := get(t, c, "http://app.example.com/broken"); status != 500 || strings.Contains(body, "apps") || strings.Contains(body, "BackendTLSPolicy") {
		t.Errorf("/broken: %d %q, want 500 naming nothing internal", status, body)
	}

	// The ConfigMap now trusts the other CA only.
	gen := h.s.Generation()
	h.write("config.yaml", config(other.CertPEM))
	kubetest.WaitFor(t, 10*time.Second, "new CA applied", func() error {
		if h.s.Generation() == gen {
			return fmt.Errorf("still generation %d", gen)
		}
		return nil
	})
	if status, _, _ := get(t, c, "http://app.example.com/foreign"); status != 200 {
		t.Errorf("/foreign after the CA change: %d, want 200", status)
	}
	if status, _, _ := get(t, c, "http://app.example.com/good"); status != http.StatusBadGateway {
		t.Errorf("/good after the CA change: %d, want 502 (its pooled connection must not be reused)", status)
	}
}

// startTLSBackend serves HTTPS on loopback with a certificate of ca for
// name, and answers with the SNI and Host it saw.
func startTLSBackend(t *testing.T, ca *snitest.CA, name string) *backend {
	t.Helper()
	pair, err := ca.Issue(snitest.ECDSA, time.Now().UnixNano(), name)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "sni=%s host=%s", r.TLS.ServerName, r.Host)
		}),
	}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return &backend{name: name, addr: ln.Addr().String()}
}

// tlsServiceYAML is a Service with one port, 443, and its EndpointSlice
// pointing at b.
func tlsServiceYAML(name string, b *backend) string {
	host, port, _ := net.SplitHostPort(b.addr)
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: apps}
spec:
  ports: [{name: https, port: 443, targetPort: %[3]s}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-1
  namespace: apps
  labels: {kubernetes.io/service-name: %[1]s}
addressType: IPv4
ports: [{name: https, port: %[3]s}]
endpoints: [{addresses: [%[2]s], conditions: {ready: true}}]
---
`, name, host, port)
}

// TestStandaloneClientCertificates: a Gateway validating client
// certificates (spec.tls.frontend) serves a client with a certificate of
// its CA and refuses one without; a port set to AllowInsecureFallback lets
// both through.
func TestStandaloneClientCertificates(t *testing.T) {
	clients, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	clientCert := issueClientCert(t, clients, 1, "client")
	strangers, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	stranger := issueClientCert(t, strangers, 1, "stranger")
	server := newTestCert(t, "app.example.com")
	bk := startBackend(t, "backend")
	ports := map[string]any{"Strict": freeport.Port(t), "Lenient": freeport.Port(t)}
	config := render(t, classYAML+`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: portico
  tls:
    frontend:
      default:
        validation: {caCertificateRefs: [{group: "", kind: ConfigMap, name: clients}]}
      perPort:
      - port: {{.Lenient}}
        tls: {validation: {caCertificateRefs: [{group: "", kind: ConfigMap, name: clients}], mode: AllowInsecureFallback}}
  listeners:
  - {name: strict, port: {{.Strict}}, protocol: HTTPS, tls: {certificateRefs: [{name: cert}]}}
  - {name: lenient, port: {{.Lenient}}, protocol: HTTPS, tls: {certificateRefs: [{name: cert}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: svc, port: 80}]}]
---
`, ports) + caConfigMapYAML("clients", clients.CertPEM) + serviceYAML("apps", "svc", bk) + "---\n" + secretYAML("apps", "cert", server)
	h := startStandalone(t, map[string]string{"config.yaml": config})

	roots := x509.NewCertPool()
	roots.AddCert(server.leaf)
	var asked atomic.Bool
	// seen is the X-Forwarded-Client-Cert the backend got for the last
	// request; every request also sends a forged one of its own.
	var seen string
	request := func(port any, cert *tls.Certificate) error {
		seen = "(no answer)"
		cfg := &tls.Config{RootCAs: roots, ServerName: "app.example.com"}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if port == ports["Lenient"] {
				asked.Store(true)
			}
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		}
		c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
		req, _ := http.NewRequest("GET", fmt.Sprintf("https://127.0.0.1:%d/", port), nil)
		req.Header.Set("X-Forwarded-Client-Cert", `Hash=forged;Subject="CN=admin"`)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		seen = resp.Header.Get("X-Seen-Client-Cert")
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	leafHash := sha256.Sum256(clientCert.Leaf.Raw)
	ours := fmt.Sprintf("Hash=%x;", leafHash)
	passedOn := func(what string, want bool) {
		t.Helper()
		ok := strings.HasPrefix(seen, ours) && strings.Contains(seen, `;Subject="CN=client"`)
		if want && !ok || !want && seen != "" {
			t.Errorf("%s: backend got X-Forwarded-Client-Cert %q; want the client's certificate passed on: %v", what, seen, want)
		}
	}
	if err := request(ports["Strict"], &clientCert); err != nil {
		t.Errorf("strict port, client certificate: %v", err)
	}
	passedOn("strict port, client certificate", true)
	if err := request(ports["Strict"], nil); err == nil {
		t.Error("strict port served a client without a certificate")
	}
	if err := request(ports["Strict"], &stranger); err == nil {
		t.Error("strict port served a client with a certificate of another CA")
	}
	for _, cert := range []*tls.Certificate{&clientCert, &stranger, nil} {
		if err := request(ports["Lenient"], cert); err != nil {
			t.Errorf("AllowInsecureFallback port, certificate %v: %v", cert != nil, err)
		}
		// Only a certificate that verified is passed on.
		passedOn(fmt.Sprintf("AllowInsecureFallback port, certificate %v", cert != nil), cert == &clientCert)
	}
	if !asked.Load() {
		t.Error("the AllowInsecureFallback port never asked for a client certificate")
	}

	// A connection opened without a certificate while the port allowed it
	// is not served once the port requires one: 421 and the connection
	// closed, and the next connection goes through the new check.
	keep := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "app.example.com"}}}
	url := fmt.Sprintf("https://127.0.0.1:%d/", ports["Lenient"])
	status := func() (int, error) {
		resp, err := keep.Get(url)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body) // so the connection is kept
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := status(); code != 200 {
		t.Fatalf("lenient port before the change: %d %v", code, err)
	}
	gen := h.s.Generation()
	h.write("config.yaml", strings.Replace(config, ", mode: AllowInsecureFallback", "", 1))
	kubetest.WaitFor(t, 10*time.Second, "the port requires certificates", func() error {
		if h.s.Generation() == gen {
			return errors.New("not applied yet")
		}
		return nil
	})
	if code, err := status(); code != http.StatusMisdirectedRequest {
		t.Errorf("kept-alive connection after the port began requiring certificates: %d %v, want 421", code, err)
	}
	if code, err := status(); err == nil {
		t.Errorf("a new connection without a certificate got %d after the port began requiring certificates", code)
	}
}

// TestStandaloneBackendClientCertificate: a Gateway's
// spec.tls.backend.clientCertificateRef is presented to TLS backends; a
// reference that does not resolve is reported on the Gateway's
// ResolvedRefs condition without making it unaccepted.
func TestStandaloneBackendClientCertificate(t *testing.T) {
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(snitest.ECDSA, 1, "backend.internal")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.IssueClient(2, "the-gateway")
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := tls.X509KeyPair(server.CertPEM, server.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "client=%s", r.TLS.PeerCertificates[0].Subject.CommonName)
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })

	port := freeport.Port(t)
	config := render(t, classYAML+`apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: portico
  tls: {backend: {clientCertificateRef: {name: client}}}
  listeners: [{name: http, port: {{.Port}}, protocol: HTTP}]
---
apiVersion: v1
kind: Secret
metadata: {name: client, namespace: apps}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{{.Cert}}
  tls.key: |
{{.Key}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: tls, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: svc}]
  validation: {caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}], hostname: backend.internal}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: svc, port: 443}]}]
---
`, map[string]any{"Port": port, "Cert": indent(4, string(client.CertPEM)), "Key": indent(4, string(client.KeyPEM))}) +
		caConfigMapYAML("ca", ca.CertPEM) + tlsServiceYAML("svc", &backend{addr: ln.Addr().String()})
	startStandalone(t, map[string]string{"config.yaml": config})
	c := httpClient(fmt.Sprintf("127.0.0.1:%d", port))
	if status, body, _ := get(t, c, "http://app.example.com/"); status != 200 || body != "client=the-gateway" {
		t.Errorf("through the Gateway: %d %q, want the Gateway's client certificate presented", status, body)
	}

	// Status: the reference resolves; a missing one is reported.
	path := filepath.Join(t.TempDir(), "c.yaml")
	for _, tc := range []struct{ yaml, reason string }{
		{config, "ResolvedRefs"},
		{strings.Replace(config, "clientCertificateRef: {name: client}", "clientCertificateRef: {name: nonexistent}", 1), "InvalidClientCertificateRef"},
		{strings.Replace(config, "clientCertificateRef: {name: client}", "clientCertificateRef: {name: client, namespace: other}", 1), "RefNotPermitted"},
	} {
		if err := os.WriteFile(path, []byte(tc.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		_, st := translateFile(t, path)
		gs := st.Gateways.At(types.NamespacedName{Namespace: "apps", Name: "gw"})
		if c := meta.FindStatusCondition(gs.Conditions, "ResolvedRefs"); c == nil || c.Reason != tc.reason {
			t.Errorf("ResolvedRefs %+v, want %s", c, tc.reason)
		}
		if !meta.IsStatusConditionTrue(gs.Conditions, "Accepted") {
			t.Errorf("%s: Gateway not accepted: %+v", tc.reason, gs.Conditions)
		}
	}
}

// caConfigMapYAML is the ConfigMap apps/name holding caPEM as ca.crt,
// followed by a document separator.
func caConfigMapYAML(name string, caPEM []byte) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: apps}\ndata:\n  ca.crt: |\n" +
		indent(4, string(caPEM)) + "\n---\n"
}

// issueClientCert issues a client certificate of ca, ready for a TLS
// client.
func issueClientCert(t *testing.T, ca *snitest.CA, serial int64, cn string) tls.Certificate {
	t.Helper()
	pair, err := ca.IssueClient(serial, cn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
