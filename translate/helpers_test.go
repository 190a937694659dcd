package translate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/proxy"
	"portico.dev/portico/resources"
	"portico.dev/portico/status"
)

// translator keeps the Memory between calls, as the run loop does, and the
// ACME wants of the last call.
type translator struct {
	Settings
	mem  Memory
	acme []ACMECertificate
}

func newTranslator() *translator { return &translator{} }

func (t *translator) Translate(res *resources.Resources) (*proxy.Config, *status.Computed) {
	var out Output
	out, t.mem = Translate(t.Settings, res, t.mem)
	t.acme = out.ACME
	return out.Config, out.Statuses
}

// testCert is a self-signed certificate for one hostname.
type testCert struct {
	certPEM, keyPEM string
}

func newTestCert(t testing.TB, host string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return testCert{
		certPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		keyPEM:  string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})),
	}
}

// indent prefixes every line, for PEM inside YAML block scalars.
func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n"+pad)
}

// classYAML is the GatewayClass "portico" most fixtures start with, and
// the separator after it.
const classYAML = `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: portico}
spec: {controllerName: portico.dev/gateway-controller}
---
`

func secretYAML(ns, name string, c testCert) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata: {name: %s, namespace: %s}
type: kubernetes.io/tls
stringData:
  tls.crt: |
%s
  tls.key: |
%s
`, name, ns, indent(4, c.certPEM), indent(4, c.keyPEM))
}

// gatewayYAML is the GatewayClass and the Gateway apps/gw, which
// ListenerSets of its own namespace may attach to, up to its list of
// listeners, which each test writes.
const gatewayYAML = classYAML + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: portico
  allowedListeners: {namespaces: {from: Same}}
  listeners:
`

func caConfigMapYAML(name string, caPEM []byte) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: apps}\ndata:\n  ca.crt: |\n" +
		indent(4, string(caPEM)) + "\n---\n"
}
