package pipeline

import (
	"bytes"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/translate"
)

// withACME adds the ACME manager's state to res: its errors, and with
// Options.ACMESecrets a managed Secret for every certificate it holds that
// the snapshot does not define. It costs nothing in proportion to the
// snapshot unless the manager holds certificates: a standalone Portico
// always has a manager, mostly wanting nothing, and a change at 100,000
// Secrets must not index them all.
func (l *Loop) withACME(res *snapshot.Resources) *snapshot.Resources {
	if l.acme == nil {
		return res
	}
	out := *res
	out.ACMEErrors = l.acme.Errors()
	if !l.opts.ACMESecrets {
		return &out
	}
	l.mu.Lock()
	wanted := l.acmeWanted
	l.mu.Unlock()
	held := map[types.NamespacedName]*corev1.Secret{}
	for _, c := range wanted {
		if held[c.Secret] != nil {
			continue
		}
		if cert, ok := l.acme.Certificate(c.Hostname); ok {
			held[c.Secret] = l.managed.secret(c, cert.CertPEM, cert.KeyPEM)
		}
	}
	l.managed.keep(held)
	if len(held) == 0 {
		return &out
	}
	// A Secret of that name in the snapshot wins.
	for _, sec := range res.Secrets {
		delete(held, types.NamespacedName{Namespace: sec.Namespace, Name: sec.Name})
	}
	for _, c := range wanted {
		if sec := held[c.Secret]; sec != nil {
			out.Secrets = append(slices.Clip(out.Secrets), sec)
			delete(held, c.Secret)
		}
	}
	return &out
}

// managedSecrets are the Secrets withACME made, by name. A certificate
// that did not change keeps its Secret from one snapshot to the next:
// translate tells changes by identity, and a new object for each of
// thousands of managed certificates would make every change a full
// translation.
type managedSecrets map[types.NamespacedName]*corev1.Secret

// secret is the managed Secret of c holding certPEM and keyPEM: the one
// made before when it holds the same.
func (m managedSecrets) secret(c translate.ACMECertificate, certPEM, keyPEM []byte) *corev1.Secret {
	if prev := m[c.Secret]; prev != nil && prev.Annotations[wellknown.ACMEHostnameAnnotation] == c.Hostname &&
		bytes.Equal(prev.Data[corev1.TLSCertKey], certPEM) && bytes.Equal(prev.Data[corev1.TLSPrivateKeyKey], keyPEM) {
		return prev
	}
	return translate.ManagedSecret(c, certPEM, keyPEM)
}

// keep makes m hold exactly held.
func (m *managedSecrets) keep(held map[types.NamespacedName]*corev1.Secret) {
	if len(*m) == 0 && len(held) == 0 {
		return
	}
	*m = maps.Clone(held)
}

// wantACME tells the ACME manager which hostnames to hold certificates
// for, and the ACME output which Secrets they go to.
func (l *Loop) wantACME(wanted []translate.ACMECertificate, res *snapshot.Resources) {
	if l.acme == nil {
		return
	}
	l.mu.Lock()
	l.acmeWanted = wanted
	l.mu.Unlock()
	l.acme.Want(acmeHostnames(wanted))
	if l.out.ACME != nil {
		l.out.ACME(wanted, res)
	}
}

// acmeHostnames lists the hostnames of cs once each, in order.
func acmeHostnames(cs []translate.ACMECertificate) []string {
	seen := make(map[string]bool, len(cs))
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		if !seen[c.Hostname] {
			seen[c.Hostname] = true
			out = append(out, c.Hostname)
		}
	}
	return out
}
