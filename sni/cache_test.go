package sni

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/snitest"
)

func issuePEM(t testing.TB, kind snitest.KeyKind, names ...string) snitest.KeyPair {
	t.Helper()
	ca, err := testCA()
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue(kind, serial.Add(1), names...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCacheReusesUnchangedSecrets(t *testing.T) {
	a := issuePEM(t, snitest.ECDSA, "a.example.com")
	b := issuePEM(t, snitest.ECDSA, "b.example.com")
	c := NewCache()

	a1, err := c.Load("ns/a", a.CertPEM, a.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if a1.Leaf == nil || a1.Leaf.DNSNames[0] != "a.example.com" {
		t.Fatalf("leaf not set or wrong: %+v", a1.Leaf)
	}
	// A second listener referencing the same Secret shares the parse.
	a2, _ := c.Load("ns/a", a.CertPEM, a.KeyPEM)
	if a1 != a2 {
		t.Error("same Secret loaded twice: parsed twice")
	}
	b1, _ := c.Load("ns/b", b.CertPEM, b.KeyPEM)
	c.Sweep()

	// Next rebuild: equal bytes in new slices (a new informer object) are
	// not parsed again.
	a3, _ := c.Load("ns/a", bytes.Clone(a.CertPEM), bytes.Clone(a.KeyPEM))
	if a3 != a1 {
		t.Error("unchanged Secret parsed again after a rebuild")
	}
	// Rotation: new bytes for b give a new certificate.
	b2pem := issuePEM(t, snitest.ECDSA, "b.example.com")
	b2, err := c.Load("ns/b", b2pem.CertPEM, b2pem.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if b2 == b1 || b2.Leaf.SerialNumber.Cmp(b1.Leaf.SerialNumber) == 0 {
		t.Error("rotated Secret still returns the old certificate")
	}
	c.Sweep()
	if c.Len() != 2 {
		t.Errorf("Len = %d, want 2", c.Len())
	}

	// A rebuild that no longer references b drops it at Sweep.
	c.Load("ns/a", a.CertPEM, a.KeyPEM)
	c.Sweep()
	if c.Len() != 1 {
		t.Errorf("after sweep Len = %d, want 1", c.Len())
	}
	b3, _ := c.Load("ns/b", b2pem.CertPEM, b2pem.KeyPEM)
	if b3 == b2 {
		t.Error("swept Secret was still cached")
	}
}

func TestCacheKeepsErrors(t *testing.T) {
	c := NewCache()
	_, err1 := c.Load("ns/bad", []byte("junk"), []byte("junk"))
	_, err2 := c.Load("ns/bad", []byte("junk"), []byte("junk"))
	if err1 == nil || err1 != err2 {
		t.Errorf("errors %v, %v: want the same cached error", err1, err2)
	}
}

func TestCacheConcurrentLoadsShareOneParse(t *testing.T) {
	p := issuePEM(t, snitest.ECDSA, "a.example.com")
	c := NewCache()
	got := make([]any, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			cert, err := c.Load("ns/a", p.CertPEM, p.KeyPEM)
			if err != nil {
				t.Error(err)
			}
			got[i] = cert
		})
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] {
			t.Fatal("concurrent loads of one Secret returned different certificates")
		}
	}
}

func TestCacheLoadAll(t *testing.T) {
	ca, err := testCA()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 200)
	for i := range names {
		names[i] = fmt.Sprintf("s%d.example.com", i)
	}
	pems, err := ca.IssueMany(names, serial.Add(int64(len(names))))
	if err != nil {
		t.Fatal(err)
	}
	pairs := make([]KeyPair, len(pems))
	for i, p := range pems {
		pairs[i] = KeyPair{Key: "ns/" + names[i], CertPEM: p.CertPEM, KeyPEM: p.KeyPEM}
	}
	pairs[7].KeyPEM = pems[8].KeyPEM // one broken Secret
	c := NewCache()
	certs, errs := c.LoadAll(pairs, 3)
	for i := range pairs {
		if i == 7 {
			if errs[i] == nil {
				t.Error("mismatched key accepted")
			}
			continue
		}
		if errs[i] != nil || certs[i].Leaf.DNSNames[0] != names[i] {
			t.Fatalf("pair %d: %v, %v", i, certs[i], errs[i])
		}
		if again, _ := c.Load(pairs[i].Key, pairs[i].CertPEM, pairs[i].KeyPEM); again != certs[i] {
			t.Fatalf("pair %d parsed again after LoadAll", i)
		}
	}
}

func TestParseKeyPairErrors(t *testing.T) {
	ok := issuePEM(t, snitest.ECDSA, "a.example.com")
	other := issuePEM(t, snitest.ECDSA, "b.example.com")
	keyOnly := ok.KeyPEM
	badDER := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte{1, 2, 3}})
	badKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1, 2, 3}})
	tests := []struct {
		name             string
		certPEM, keyPEM  []byte
		wantErrSubstring string
	}{
		{"empty cert", nil, ok.KeyPEM, "tls.crt: empty"},
		{"key in tls.crt", keyOnly, ok.KeyPEM, "tls.crt: no PEM certificate"},
		{"garbage cert", badDER, ok.KeyPEM, "tls.crt: x509:"},
		{"empty key", ok.CertPEM, []byte("\n"), "tls.key: empty"},
		{"cert in tls.key", ok.CertPEM, ok.CertPEM, "tls.key: no PEM private key"},
		{"garbage key", ok.CertPEM, badKey, "tls.key: "},
		{"other key", ok.CertPEM, other.KeyPEM, "private key does not match certificate"},
	}
	for _, tt := range tests {
		_, err := ParseKeyPair(tt.certPEM, tt.keyPEM)
		if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstring) {
			t.Errorf("%s: error %v, want one containing %q", tt.name, err, tt.wantErrSubstring)
		}
	}
}

func TestParseKeyPairEncodings(t *testing.T) {
	p := issuePEM(t, snitest.ECDSA, "a.example.com")
	block, _ := pem.Decode(p.KeyPEM)
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(k.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	// A chain with an intermediate after the leaf, and a SEC 1 key.
	chain := append(bytes.Clone(p.CertPEM), p.CertPEM...)
	cert, err := ParseKeyPair(chain, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}))
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.Certificate) != 2 {
		t.Errorf("chain has %d certificates, want 2", len(cert.Certificate))
	}
	rsaPair := issuePEM(t, snitest.RSA, "r.example.com")
	if _, err := ParseKeyPair(rsaPair.CertPEM, rsaPair.KeyPEM); err != nil {
		t.Errorf("RSA pair: %v", err)
	}
}

// selfSigned returns a PEM pair whose certificate expires at notAfter.
func selfSigned(t *testing.T, name string, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}
