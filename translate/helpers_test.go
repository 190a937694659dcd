package translate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/testkit/testyaml"
)

// translator keeps the Memory between calls, as the run loop does, and the
// ACME wants of the last call.
type translator struct {
	Settings
	mem  Memory
	acme []ACMECertificate
}

func newTranslator() *translator { return &translator{} }

func (t *translator) Translate(res *snapshot.Resources) (*config.Config, *status.Computed) {
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

// indent is testyaml.Indent, short for the many fixtures that use it.
func indent(n int, s string) string { return testyaml.Indent(n, s) }

const classYAML = testyaml.Class

func secretYAML(ns, name string, c testCert) string {
	return testyaml.Secret(ns, name, c.certPEM, c.keyPEM)
}

// gatewayYAML is testyaml.Gateway: the class and apps/gw up to its listeners.
const gatewayYAML = testyaml.Gateway

func caConfigMapYAML(name string, caPEM []byte) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: " + name + ", namespace: apps}\ndata:\n  ca.crt: |\n" +
		indent(4, string(caPEM)) + "\n---\n"
}
