// Command gencerts writes the key pairs the golden translate cases embed:
// a server CA with leaf certificates, a client CA, a backend CA and the
// client certificate a Gateway presents to backends, all valid from 2025
// to 2125 so that the cases never expire. Keys are random: it was run once
// and its output pasted into the *.in.yaml files; run it again only to add
// a certificate, into a fresh directory:
//
//	go run ./kube/testdata/golden/gencerts /tmp/golden-pem
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

var (
	notBefore = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	notAfter  = time.Date(2125, 1, 1, 0, 0, 0, 0, time.UTC)
)

type issuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gencerts DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cas := map[string]*issuer{}
	for i, name := range []string{"server-ca", "client-ca", "backend-ca"} {
		ca, err := write(dir, name, nil, &x509.Certificate{
			SerialNumber:          big.NewInt(int64(i + 1)),
			Subject:               pkix.Name{CommonName: "Golden " + name},
			KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			BasicConstraintsValid: true,
			IsCA:                  true,
		})
		if err != nil {
			return err
		}
		cas[name] = ca
	}
	leaves := []struct {
		file, ca string
		usage    x509.ExtKeyUsage
		names    []string
	}{
		{"wildcard", "server-ca", x509.ExtKeyUsageServerAuth, []string{"*.example.com"}},
		{"foo", "server-ca", x509.ExtKeyUsageServerAuth, []string{"foo.example.com"}},
		{"bar", "server-ca", x509.ExtKeyUsageServerAuth, []string{"bar.example.com", "www.bar.example.com"}},
		{"team", "server-ca", x509.ExtKeyUsageServerAuth, []string{"app.team.example.net"}},
		{"managed", "server-ca", x509.ExtKeyUsageServerAuth, []string{"managed.example.com"}},
		{"old", "server-ca", x509.ExtKeyUsageServerAuth, []string{"old.example.com"}},
		{"gateway-client", "backend-ca", x509.ExtKeyUsageClientAuth, []string{"gateway-client"}},
	}
	for i, l := range leaves {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(100 + i)),
			Subject:      pkix.Name{CommonName: l.names[0]},
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{l.usage},
		}
		if l.usage == x509.ExtKeyUsageServerAuth {
			tmpl.DNSNames = l.names
		}
		if _, err := write(dir, l.file, cas[l.ca], tmpl); err != nil {
			return err
		}
	}
	return nil
}

// write signs tmpl with a new key (self-signed when parent is nil) and
// writes DIR/name.crt and DIR/name.key.
func write(dir, name string, parent *issuer, tmpl *x509.Certificate) (*issuer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl.NotBefore, tmpl.NotAfter = notBefore, notAfter
	signer, signerKey := tmpl, key
	if parent != nil {
		signer, signerKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	crt := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	k := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), crt, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".key"), k, 0o600); err != nil {
		return nil, err
	}
	return &issuer{cert: cert, key: key}, nil
}
