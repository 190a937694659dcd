package translate

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/shared/layered"
	"portico.dev/portico/listeners"
	"portico.dev/portico/sni"
)

// index holds lookups built once per translation.
type index struct {
	nsLabels map[string]map[string]string
	secrets  map[types.NamespacedName]*corev1.Secret
	certs    certSource
	// acme maps each Secret an ACME listener wants written to its
	// hostname; acmeErrors are the manager's last errors by hostname.
	acme       map[types.NamespacedName]string
	acmeErrors map[string]string
}

func newIndex(res *snapshot.Resources, prevCerts layered.Map[types.NamespacedName, parsedCert]) *index {
	ix := &index{
		nsLabels: make(map[string]map[string]string, len(res.Namespaces)),
		secrets:  make(map[types.NamespacedName]*corev1.Secret, len(res.Secrets)),
		certs:    certSource{prev: prevCerts, used: make(map[types.NamespacedName]parsedCert, len(res.Secrets))},
	}
	for _, ns := range res.Namespaces {
		ix.nsLabels[ns.Name] = ns.Labels
	}
	for _, s := range res.Secrets {
		ix.secrets[nn(s.Namespace, s.Name)] = s
	}
	return ix
}

// parsedCert is one Secret's key pair, parsed, with the bytes it was
// parsed from. The pair's Leaf is dropped once checked: a parsed leaf is
// the largest part of a key pair held for every hostname, and only its
// expiry is read after the check (the data plane parses a leaf only to
// choose among several certificates, see sni.Entry.Certificate).
type parsedCert struct {
	certPEM, keyPEM []byte
	cert            *tls.Certificate
	notAfter        time.Time // the leaf's; zero when cert is nil
	err             error
}

// certSource parses the key pairs of Secrets. What the previous translation
// parsed is reused when the Secret's bytes did not change; what this one
// reads is what the next one gets.
type certSource struct {
	prev layered.Map[types.NamespacedName, parsedCert]
	used map[types.NamespacedName]parsedCert
}

func (c *certSource) load(key types.NamespacedName, certPEM, keyPEM []byte) parsedCert {
	if p, ok := c.used[key]; ok {
		return p
	}
	p, ok := c.prev.Get(key)
	if !ok || !bytes.Equal(p.certPEM, certPEM) || !bytes.Equal(p.keyPEM, keyPEM) {
		next := parsedCert{certPEM: certPEM, keyPEM: keyPEM}
		next.cert, next.err = sni.ParseKeyPair(certPEM, keyPEM)
		if next.cert != nil {
			next.notAfter = next.cert.Leaf.NotAfter
			next.cert.Leaf = nil
		}
		if next.err != nil && ok && p.cert != nil {
			// An update broke a Secret that served: its hostname keeps
			// the key pair it had until the Secret is mended or deleted.
			next.cert, next.notAfter = p.cert, p.notAfter
			next.err = fmt.Errorf("%w; %w", next.err, listeners.ErrServingPrevious)
		}
		p = next
	}
	c.used[key] = p
	return p
}

// parsed returns the key pair of a Secret certificate resolved, nil when
// it did not resolve.
func (ix *index) parsed(key types.NamespacedName) *tls.Certificate {
	return ix.certs.used[key].cert
}

// certificate resolves and parses a listener's Secret
// (listeners.Input.Certificates).
func (ix *index) certificate(namespace, name string) error {
	key := nn(namespace, name)
	if p, ok := ix.certs.used[key]; ok {
		return p.err
	}
	s, ok := ix.secrets[key]
	// A managed Secret still holding the certificate of a hostname the
	// listener no longer has is as good as missing.
	if host, isACME := ix.acme[key]; isACME && (!ok || len(s.Data[corev1.TLSCertKey]) == 0 ||
		cmp.Or(s.Annotations[wellknown.ACMEHostnameAnnotation], host) != host) {
		if msg := ix.acmeErrors[host]; msg != "" {
			return fmt.Errorf("ACME order for %s failed, will retry: %s", host, msg)
		}
		return fmt.Errorf("waiting for an ACME certificate for %s", host)
	}
	if !ok {
		return errors.New("does not exist")
	}
	if s.Type != corev1.SecretTypeTLS {
		return fmt.Errorf("is of type %q, not %q", s.Type, corev1.SecretTypeTLS)
	}
	return ix.certs.load(key, s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]).err
}
