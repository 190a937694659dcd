// Package snitest issues throwaway certificates for tests and benchmarks of
// TLS serving: a private CA, and leaves signed by it for given DNS names.
package snitest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"runtime"
	"sync"
	"time"
)

// KeyKind selects the leaf key algorithm.
type KeyKind int

const (
	ECDSA KeyKind = iota // P-256
	RSA                  // 2048 bits
)

// CA is a self-signed ECDSA P-256 certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Pool    *x509.CertPool // trusts only this CA
	key     *ecdsa.PrivateKey
}

// KeyPair is a PEM certificate and its PEM private key (PKCS #8).
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// NewCA creates a CA valid from an hour ago for ten years.
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Portico test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Pool:    pool,
		key:     key,
	}, nil
}

// Issue creates a leaf for dnsNames (the first one is also the subject
// common name) with a new key of the given kind. serial must be unique per
// CA.
func (ca *CA) Issue(kind KeyKind, serial int64, dnsNames ...string) (KeyPair, error) {
	return ca.issue(kind, serial, dnsNames, nil)
}

// IssueLoopback creates an ECDSA leaf for a server on loopback: valid for
// 127.0.0.1 and ::1 as well as dnsNames, as the test servers that clients
// reach by address need (an API server, an ACME server).
func (ca *CA) IssueLoopback(serial int64, dnsNames ...string) (KeyPair, error) {
	return ca.issue(ECDSA, serial, dnsNames, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback})
}

// IssueClient creates an ECDSA client certificate (extended key usage
// client authentication) with subject common name cn.
func (ca *CA) IssueClient(serial int64, cn string) (KeyPair, error) {
	return ca.issueFor(ECDSA, serial, nil, nil, cn, x509.ExtKeyUsageClientAuth)
}

func (ca *CA) issue(kind KeyKind, serial int64, dnsNames []string, ips []net.IP) (KeyPair, error) {
	cn := ""
	if len(dnsNames) > 0 {
		cn = dnsNames[0]
	}
	return ca.issueFor(kind, serial, dnsNames, ips, cn, x509.ExtKeyUsageServerAuth)
}

func (ca *CA) issueFor(kind KeyKind, serial int64, dnsNames []string, ips []net.IP, cn string, usage x509.ExtKeyUsage) (KeyPair, error) {
	var key crypto.Signer
	var err error
	switch kind {
	case ECDSA:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case RSA:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		err = fmt.Errorf("unknown key kind %d", kind)
	}
	if err != nil {
		return KeyPair{}, fmt.Errorf("generate key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	tmpl.Subject.CommonName = cn
	if kind == RSA {
		tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("create certificate for %v: %w", dnsNames, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("marshal key: %w", err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// IssueMany issues one ECDSA leaf per name (names[i] is its only DNS name)
// on GOMAXPROCS goroutines. Serial numbers start at firstSerial.
func (ca *CA) IssueMany(names []string, firstSerial int64) ([]KeyPair, error) {
	pairs := make([]KeyPair, len(names))
	workers := runtime.GOMAXPROCS(0)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(names); i += workers {
				p, err := ca.Issue(ECDSA, firstSerial+int64(i), names[i])
				if err != nil {
					errs[w] = err
					return
				}
				pairs[i] = p
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return pairs, nil
}
