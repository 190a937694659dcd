package pipeline

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/resources"
	"portico.dev/portico/translate"
)

// withACME adds the ACME manager's state to res: its errors, and with
// Options.ACMESecrets a managed Secret for every certificate it holds that
// the snapshot does not define.
func (l *Loop) withACME(res *resources.Resources) *resources.Resources {
	if l.acme == nil {
		return res
	}
	out := *res
	out.ACMEErrors = l.acme.Errors()
	if !l.opts.ACMESecrets {
		return &out
	}
	have := make(map[types.NamespacedName]bool, len(res.Secrets))
	for _, sec := range res.Secrets {
		have[types.NamespacedName{Namespace: sec.Namespace, Name: sec.Name}] = true
	}
	l.mu.Lock()
	wanted := l.acmeWanted
	l.mu.Unlock()
	for _, c := range wanted {
		if have[c.Secret] {
			continue
		}
		if cert, ok := l.acme.Certificate(c.Hostname); ok {
			out.Secrets = append(slices.Clip(out.Secrets), translate.ManagedSecret(c, cert.CertPEM, cert.KeyPEM))
			have[c.Secret] = true
		}
	}
	return &out
}

// wantACME tells the ACME manager which hostnames to hold certificates
// for, and the ACME output which Secrets they go to.
func (l *Loop) wantACME(wanted []translate.ACMECertificate, res *resources.Resources) {
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
