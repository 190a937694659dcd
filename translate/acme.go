package translate

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/shared/hostname"
)

// ACME opt-in (the markers are in wellknown).
//
// A Gateway or ListenerSet annotated wellknown.ACMEAnnotation:
// wellknown.ACMEHTTP01 asks for certificates over ACME HTTP-01 for its own
// HTTPS listeners (a Gateway's annotation does not extend to its
// ListenerSets: each object opts in for itself, so whoever owns the
// listener decides). A listener qualifies when it is HTTPS with TLS mode
// Terminate, has a concrete hostname (HTTP-01 cannot prove a wildcard), and
// has exactly one certificateRef: a Secret in its own namespace that either
// does not exist yet or is managed by Portico (wellknown.ManagedByLabel:
// wellknown.ManagedByValue). A Secret that exists and is not Portico's is
// used as it is and never written.

// ACMECertificate is one certificate to obtain: for Hostname, to be
// written into Secret.
type ACMECertificate struct {
	Hostname string
	Secret   types.NamespacedName
}

// acmeCandidate is a listener that opted in and qualifies by its spec.
type acmeCandidate struct {
	kind, namespace, name string
	listener              gwv1.SectionName
	cert                  ACMECertificate
}

// acmeCandidates finds the listeners that opted in to ACME and qualify by
// their spec alone, and records their Secrets in the index so that a
// missing one reads as "waiting for a certificate". Whether they are
// accepted is only known after the merge (acmeWanted).
func (ix *index) acmeCandidates(res *snapshot.Resources) []acmeCandidate {
	var out []acmeCandidate
	add := func(kind string, obj metav1.Object, ls []gwv1.Listener) {
		for i := range ls {
			c, ok := ix.acmeListener(obj.GetNamespace(), ls[i].Protocol, ls[i].Hostname, ls[i].TLS)
			if !ok {
				continue
			}
			if ix.acme == nil {
				ix.acme = map[types.NamespacedName]string{}
				ix.acmeErrors = res.ACMEErrors
			}
			out = append(out, acmeCandidate{kind: kind, namespace: obj.GetNamespace(), name: obj.GetName(), listener: ls[i].Name, cert: c})
			if _, taken := ix.acme[c.Secret]; !taken {
				ix.acme[c.Secret] = c.Hostname
			}
		}
	}
	for _, gw := range res.Gateways {
		if gw.Annotations[wellknown.ACMEAnnotation] == wellknown.ACMEHTTP01 {
			add("Gateway", gw, gw.Spec.Listeners)
		}
	}
	for _, ls := range res.ListenerSets {
		if ls.Annotations[wellknown.ACMEAnnotation] != wellknown.ACMEHTTP01 {
			continue // the common case costs no copy
		}
		// ListenerEntry and Listener share their fields but not their type.
		entries := make([]gwv1.Listener, len(ls.Spec.Listeners))
		for i, e := range ls.Spec.Listeners {
			entries[i] = gwv1.Listener{Name: e.Name, Hostname: e.Hostname, Protocol: e.Protocol, TLS: e.TLS}
		}
		add("ListenerSet", ls, entries)
	}
	return out
}

// acmeListener decides whether one opted-in listener qualifies for ACME.
func (ix *index) acmeListener(namespace string, protocol gwv1.ProtocolType, host *gwv1.Hostname, tls *gwv1.ListenerTLSConfig) (ACMECertificate, bool) {
	if protocol != gwv1.HTTPSProtocolType || host == nil || tls == nil || len(tls.CertificateRefs) != 1 {
		return ACMECertificate{}, false
	}
	if tls.Mode != nil && *tls.Mode != gwv1.TLSModeTerminate {
		return ACMECertificate{}, false
	}
	h := hostname.Normalize(string(*host))
	if h == "" || strings.Contains(h, "*") {
		return ACMECertificate{}, false
	}
	ref := tls.CertificateRefs[0]
	if ptr.Deref(ref.Group, "") != "" || (ref.Kind != nil && *ref.Kind != "Secret") {
		return ACMECertificate{}, false
	}
	if ref.Namespace != nil && string(*ref.Namespace) != namespace {
		return ACMECertificate{}, false
	}
	key := nn(namespace, string(ref.Name))
	if s, ok := ix.secrets[key]; ok && !IsManaged(s) {
		return ACMECertificate{}, false
	}
	return ACMECertificate{Hostname: h, Secret: key}, true
}

// acmeWanted keeps the candidates whose listener is accepted and not
// conflicted, on an accepted Gateway or an attached ListenerSet: nothing
// else is ever ordered. It reads the statuses rather than the merged
// list, which leaves out a ListenerSet none of whose listeners serves
// yet, as is the case while its only listener waits for its certificate.
// The result is sorted by hostname, then Secret.
func (t *translation) acmeWanted() {
	t.acme = acmeWanted(t.st, t.acmeListeners)
}

func acmeWanted(st *status.Maps, candidates []acmeCandidate) []ACMECertificate {
	var out []ACMECertificate
	for _, c := range candidates {
		var conds []metav1.Condition
		switch c.kind {
		case "Gateway":
			gs, ok := st.Gateways[nn(c.namespace, c.name)]
			if !ok || !meta.IsStatusConditionTrue(gs.Conditions, string(gwv1.GatewayConditionAccepted)) {
				continue
			}
			for _, l := range gs.Listeners {
				if l.Name == c.listener {
					conds = l.Conditions
				}
			}
		case "ListenerSet":
			// A ListenerSet that may not attach has no listener statuses.
			for _, l := range st.ListenerSets[nn(c.namespace, c.name)].Listeners {
				if l.Name == c.listener {
					conds = l.Conditions
				}
			}
		}
		if meta.IsStatusConditionTrue(conds, string(gwv1.ListenerConditionAccepted)) &&
			!meta.IsStatusConditionTrue(conds, string(gwv1.ListenerConditionConflicted)) {
			out = append(out, c.cert)
		}
	}
	slices.SortFunc(out, func(a, b ACMECertificate) int {
		return cmp.Or(cmp.Compare(a.Hostname, b.Hostname), cmp.Compare(a.Secret.String(), b.Secret.String()))
	})
	return out
}

// IsManaged reports whether Portico manages s and may overwrite it.
func IsManaged(s *corev1.Secret) bool {
	return s.Labels[wellknown.ManagedByLabel] == wellknown.ManagedByValue
}

// ManagedSecret is the Secret Portico writes for an ACME certificate.
func ManagedSecret(c ACMECertificate, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   c.Secret.Namespace,
			Name:        c.Secret.Name,
			Labels:      map[string]string{wellknown.ManagedByLabel: wellknown.ManagedByValue},
			Annotations: map[string]string{wellknown.ACMEHostnameAnnotation: c.Hostname},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
}
