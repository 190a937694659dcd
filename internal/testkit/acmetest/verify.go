package acmetest

import (
	"crypto/x509"
	"encoding/pem"
	"testing"
)

// VerifyChain checks that certPEM (a leaf and its intermediates, as ACME
// certificates are stored in Secrets) is a chain for host under roots,
// such as a Server's Roots, and returns its leaf.
func VerifyChain(t testing.TB, certPEM []byte, host string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	var chain []*x509.Certificate
	for rest := certPEM; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		t.Fatal("no certificate in the Secret")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{DNSName: host, Roots: roots, Intermediates: inter}); err != nil {
		t.Errorf("certificate does not verify for %s under Pebble's root: %v", host, err)
	}
	return chain[0]
}
