package sni

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
)

// Cache memoizes parsed key pairs across configuration rebuilds, keyed by
// Secret "namespace/name": a Secret whose bytes did not change is not parsed
// again, and a Secret used by many listeners is parsed once and its
// *tls.Certificate shared. It is safe for concurrent use.
//
// Cache keeps references to the PEM slices it was given, to compare them at
// the next Load; callers must not modify them afterwards (Secrets from an
// informer cache are never modified in place).
type Cache struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry
	gen     uint64 // current generation; Sweep advances it
}

type cacheEntry struct {
	certPEM, keyPEM []byte
	gen             uint64 // last generation that loaded this entry

	once sync.Once // parses; concurrent Loads of the same bytes wait for it
	cert *tls.Certificate
	err  error
}

// NewCache returns an empty cache.
func NewCache() *Cache {
	return &Cache{entries: make(map[string]*cacheEntry)}
}

// Load returns the parsed certificate (Leaf set) for key. When certPEM and
// keyPEM are byte-equal to those of the previous Load of key, it returns the
// previous result, parse error included, without parsing again.
func (c *Cache) Load(key string, certPEM, keyPEM []byte) (*tls.Certificate, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	if !ok || !bytes.Equal(e.certPEM, certPEM) || !bytes.Equal(e.keyPEM, keyPEM) {
		e = &cacheEntry{certPEM: certPEM, keyPEM: keyPEM}
		c.entries[key] = e
	}
	e.gen = c.gen
	c.mu.Unlock()

	// Parsing happens outside the lock so that loads of different Secrets
	// run in parallel.
	return e.parsed()
}

// parsed parses the entry's pair on first use and returns the result.
func (e *cacheEntry) parsed() (*tls.Certificate, error) {
	e.once.Do(func() { e.cert, e.err = ParseKeyPair(e.certPEM, e.keyPEM) })
	return e.cert, e.err
}

// KeyPair is one Secret's certificate chain and private key, for LoadAll.
type KeyPair struct {
	Key     string // Secret "namespace/name"
	CertPEM []byte // data["tls.crt"]
	KeyPEM  []byte // data["tls.key"]
}

// LoadAll calls Load for every pair on up to workers goroutines
// (GOMAXPROCS when workers <= 0) and returns the certificates and errors in
// the order of pairs. Parsing is CPU-bound, so a first load of many Secrets
// scales with the cores.
func (c *Cache) LoadAll(pairs []KeyPair, workers int) ([]*tls.Certificate, []error) {
	certs := make([]*tls.Certificate, len(pairs))
	errs := make([]error, len(pairs))
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(pairs))
	// Workers take fixed-size chunks so that the hand-out costs little
	// compared to a parse, and stay in balance at the end.
	const chunk = 64
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				lo := next
				next += chunk
				mu.Unlock()
				if lo >= len(pairs) {
					return
				}
				for i := lo; i < min(lo+chunk, len(pairs)); i++ {
					p := pairs[i]
					certs[i], errs[i] = c.Load(p.Key, p.CertPEM, p.KeyPEM)
				}
			}
		})
	}
	wg.Wait()
	return certs, errs
}

// Sweep drops the entries that were not loaded since the previous Sweep.
// Call it once per rebuild, after all Loads.
func (c *Cache) Sweep() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.gen != c.gen {
			delete(c.entries, k)
		}
	}
	c.gen++
}

// Len returns the number of Secrets in the cache.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// ParseKeyPair parses a PEM certificate chain (leaf first) and a PEM private
// key, checks that the key belongs to the leaf, and returns the pair with
// Leaf set. Errors name the Secret field at fault ("tls.crt", "tls.key").
func ParseKeyPair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	cert := &tls.Certificate{}
	for rest := certPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			cert.Certificate = append(cert.Certificate, block.Bytes)
		}
	}
	if len(cert.Certificate) == 0 {
		if len(bytes.TrimSpace(certPEM)) == 0 {
			return nil, errors.New("tls.crt: empty")
		}
		return nil, errors.New("tls.crt: no PEM certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("tls.crt: %w", err)
	}
	cert.Leaf = leaf

	var keyBlock *pem.Block
	for rest := keyPEM; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type == "PRIVATE KEY" || strings.HasSuffix(block.Type, " PRIVATE KEY") {
			keyBlock = block
			break
		}
	}
	if keyBlock == nil {
		if len(bytes.TrimSpace(keyPEM)) == 0 {
			return nil, errors.New("tls.key: empty")
		}
		return nil, errors.New("tls.key: no PEM private key")
	}
	key, err := parsePrivateKey(keyBlock)
	if err != nil {
		return nil, fmt.Errorf("tls.key: %w", err)
	}
	pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(key.Public()) {
		return nil, errors.New("private key does not match certificate")
	}
	cert.PrivateKey = key
	return cert, nil
}

// parsePrivateKey accepts the encodings crypto/tls accepts: PKCS #8,
// PKCS #1 (RSA) and SEC 1 (EC), trying the one the block type names first.
func parsePrivateKey(block *pem.Block) (crypto.Signer, error) {
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			if k, err1 := x509.ParsePKCS1PrivateKey(block.Bytes); err1 == nil {
				key, err = k, nil
			} else if k, err1 := x509.ParseECPrivateKey(block.Bytes); err1 == nil {
				key, err = k, nil
			}
		}
	}
	if err != nil {
		return nil, err
	}
	switch k := key.(type) {
	case *rsa.PrivateKey, *ecdsa.PrivateKey, ed25519.PrivateKey:
		return k.(crypto.Signer), nil
	}
	return nil, fmt.Errorf("unsupported private key type %T", key)
}
