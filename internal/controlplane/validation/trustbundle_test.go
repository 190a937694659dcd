package validation

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"
)

// TestClusterTrustBundleAdmission: a ClusterTrustBundle in a file is
// admitted by the API server's rules, so that standalone mode trusts
// nothing a cluster would refuse: a bundle of CA certificates is
// admitted, with or without a signer; a leaf certificate slipped into a
// bundle, a private key, a duplicate, an empty bundle, a namespace on
// the cluster-scoped kind, a ':' in the name of a bundle without signer
// and a name without its signer's prefix are refused.
func TestClusterTrustBundleAdmission(t *testing.T) {
	c := newChecker(t)
	ca, leaf := testCertPEM(t, true), testCertPEM(t, false)
	bundle := func(meta, spec string) string {
		return "apiVersion: certificates.k8s.io/v1\nkind: ClusterTrustBundle\nmetadata: " + meta + "\nspec:\n" + spec
	}
	trust := func(pems ...string) string {
		return "  trustBundle: |\n    " + strings.ReplaceAll(strings.TrimSpace(strings.Join(pems, "")), "\n", "\n    ") + "\n"
	}
	for _, doc := range []string{
		bundle("{name: clients}", trust(ca)),
		bundle(`{name: "example.com:backends:v1"}`, "  signerName: example.com/backends\n"+trust(ca)),
	} {
		if err := check(t, c, doc); err != nil {
			t.Errorf("refused: %v\n%s", err, doc)
		}
	}
	key := "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n"
	for _, tc := range []struct{ name, doc, want string }{
		{"leaf certificate", bundle("{name: b}", trust(ca, leaf)), "entry 1 does not have the CA bit set"},
		{"private key", bundle("{name: b}", trust(ca, key)), "bad block type: PRIVATE KEY"},
		{"duplicate", bundle("{name: b}", trust(ca, ca)), "entry 1 is a duplicate"},
		{"empty", bundle("{name: b}", "  trustBundle: \"\"\n"), "at least one trust anchor"},
		{"namespace", bundle("{name: b, namespace: default}", trust(ca)), "metadata.namespace"},
		{"colon without signer", bundle(`{name: "a:b"}`, trust(ca)), "must not have ':'"},
		{"signer prefix", bundle("{name: other}", "  signerName: example.com/backends\n"+trust(ca)), "prefix example.com:backends:"},
		{"signer name", bundle(`{name: "nopath:x"}`, "  signerName: nopath\n"+trust(ca)), "spec.signerName"},
	} {
		err := check(t, c, tc.doc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refused with %q", tc.name, err, tc.want)
		}
	}
}

// testCertPEM is a self-signed certificate, a CA or not.
func testCertPEM(t *testing.T, isCA bool) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		BasicConstraintsValid: true, IsCA: isCA,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
