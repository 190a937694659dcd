package translate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/wellknown"
)

// KCertificateResult is what translate says of one Certificate of
// Portico's certificate class: its Ready condition and, once issued, when
// the certificate expires.
type KCertificateResult struct {
	Generation int64
	Ready      metav1.ConditionStatus
	Reason     string
	Message    string
	NotAfter   *metav1.Time
}

func (s *KnativeSettings) certificateClass() string {
	return cmp.Or(s.CertificateClass, knative.DefaultCertificateClass)
}

// knativeCertificates orders the Certificates of Portico's class over ACME
// into the Secret each names, and says whether each is issued. Portico's
// ACME orders one name per certificate: a Certificate with more is
// refused.
func (t *translation) knativeCertificates() {
	s := t.settings.Knative
	if s == nil {
		return
	}
	t.kcertificates = map[types.NamespacedName]KCertificateResult{}
	added := false
	for _, c := range t.res.KCertificates {
		if c.Annotations[knative.CertificateClassAnnotation] != s.certificateClass() {
			continue
		}
		key := nn(c.Namespace, c.Name)
		r := KCertificateResult{Generation: c.Generation}
		names := slices.Compact(slices.Sorted(slices.Values(lowerAll(c.Spec.DNSNames))))
		switch {
		case len(names) == 0 || c.Spec.SecretName == "":
			r.Ready, r.Reason, r.Message = metav1.ConditionFalse, "InvalidSpec", "dnsNames and secretName are required"
		case len(names) > 1:
			r.Ready, r.Reason = metav1.ConditionFalse, "UnsupportedSpec"
			r.Message = fmt.Sprintf("Portico orders one DNS name per certificate; this Certificate has %d", len(names))
		default:
			want := ACMECertificate{Hostname: names[0], Secret: nn(c.Namespace, c.Spec.SecretName)}
			t.acme = append(t.acme, want)
			added = true
			r = t.issued(c, want)
		}
		t.kcertificates[key] = r
	}
	if added {
		slices.SortFunc(t.acme, func(a, b ACMECertificate) int {
			return cmp.Or(cmp.Compare(a.Hostname, b.Hostname), cmp.Compare(a.Secret.String(), b.Secret.String()))
		})
	}
}

// issued says whether want's Secret holds Portico's certificate for its
// name, or why not yet.
func (t *translation) issued(c *knative.Certificate, want ACMECertificate) KCertificateResult {
	r := KCertificateResult{Generation: c.Generation, Ready: metav1.ConditionUnknown, Reason: "Issuing",
		Message: "waiting for an ACME certificate for " + want.Hostname}
	if msg := t.res.ACMEErrors[want.Hostname]; msg != "" {
		r.Ready, r.Reason, r.Message = metav1.ConditionFalse, "IssuanceFailed",
			fmt.Sprintf("ACME order for %s failed, will retry: %s", want.Hostname, msg)
	}
	sec := t.ix.secrets[want.Secret]
	if sec == nil || sec.Annotations[wellknown.ACMEHostnameAnnotation] != want.Hostname || len(sec.Data[corev1.TLSCertKey]) == 0 {
		return r
	}
	p := t.ix.certs.load(want.Secret, sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey])
	if p.cert == nil {
		return r
	}
	notAfter := metav1.NewTime(p.notAfter)
	return KCertificateResult{Generation: c.Generation, Ready: metav1.ConditionTrue, NotAfter: &notAfter}
}

func lowerAll(in []string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = strings.ToLower(s)
	}
	return out
}
