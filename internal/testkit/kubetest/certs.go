package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"portico.dev/portico/internal/testkit/snitest"
)

// pki is the key material of one Env, written as PEM files into its directory.
type pki struct {
	caCertPEM []byte

	caCertFile  string
	servingCert string
	servingKey  string
	saKeyFile   string // private key that signs service-account tokens
	saPublicKey string // public half, for verifying them
}

// newPKI creates a throwaway CA, a serving certificate for the API server on
// loopback and a service-account signing key. ECDSA P-256 keeps generation
// fast enough to do it for every Env.
func newPKI(dir string) (*pki, error) {
	ca, err := snitest.NewCA()
	if err != nil {
		return nil, err
	}
	serving, err := ca.IssueLoopback(2, "localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, fmt.Errorf("service-account key: %w", err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("service-account public key: %w", err)
	}

	p := &pki{
		caCertPEM:   ca.CertPEM,
		caCertFile:  filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKeyFile:   filepath.Join(dir, "sa.key"),
		saPublicKey: filepath.Join(dir, "sa.pub"),
	}
	files := []struct {
		path string
		data []byte
	}{
		{p.caCertFile, p.caCertPEM},
		{p.servingCert, serving.CertPEM},
		{p.servingKey, serving.KeyPEM},
		{p.saKeyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saKeyDER})},
		{p.saPublicKey, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", f.path, err)
		}
	}
	return p, nil
}
