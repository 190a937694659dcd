package kingress

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/translate"
)

func knCertificate(name, class string, dnsNames ...string) string {
	return fmt.Sprintf(`apiVersion: networking.internal.knative.dev/v1alpha1
kind: Certificate
metadata:
  name: %s
  namespace: serving
  annotations: {networking.knative.dev/certificate.class: %q}
spec:
  dnsNames: [%s]
  secretName: %s-tls
`, name, class, strings.Join(dnsNames, ", "), name)
}

func (f *knFixture) applyCertificate(doc string) *unstructured.Unstructured {
	f.T.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		f.T.Fatal(err)
	}
	out, err := f.dyn.Resource(knative.CertificateResource).Namespace("serving").Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		f.T.Fatalf("create Certificate %s: %v", u.GetName(), err)
	}
	return out
}

func (f *knFixture) getCertificate(name string) (*unstructured.Unstructured, *knative.Certificate) {
	f.T.Helper()
	u, err := f.dyn.Resource(knative.CertificateResource).Namespace("serving").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.T.Fatal(err)
	}
	c := &knative.Certificate{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, c); err != nil {
		f.T.Fatal(err)
	}
	return u, c
}

// TestKnativeCertificateOnPebble issues a Certificate of Portico's class
// with Pebble over HTTP-01, answered on the external gateway: the Secret it
// names gets a chain for its name under Pebble's root, and its status
// says Ready with notAfter. A Certificate of another class is never
// written; one with two names is refused in its status.
func TestKnativeCertificateOnPebble(t *testing.T) {
	const host = "kcert.portico.test"
	f := newKnFixture(t)
	f.settings.ExternalHTTPPort = int32(freeport.Port(t))
	f.pebble = acmetest.Start(t, acmetest.Options{HTTPPort: int(f.settings.ExternalHTTPPort)})
	f.coreService("portico-system", "portico-internal", "http", f.settings.LocalHTTPPort, nil)
	f.replicas = append(f.replicas, f.startReplica("127.0.0.1", "portico-0"))

	foreign := f.applyCertificate(knCertificate("foreign", "cert-manager.certificate.networking.knative.dev", "foreign.portico.test"))
	f.applyCertificate(knCertificate("two", knative.DefaultCertificateClass, "a.portico.test", "b.portico.test"))
	start := time.Now()
	f.applyCertificate(knCertificate("kcert", knative.DefaultCertificateClass, host))

	var cert *knative.Certificate
	kubetest.WaitFor(t, 90*time.Second, "Certificate Ready", func() error {
		_, cert = f.getCertificate("kcert")
		for _, c := range cert.Status.Conditions {
			if c.Type == knative.ConditionReady && c.Status == metav1.ConditionTrue && cert.Status.ObservedGeneration == cert.Generation {
				return nil
			}
		}
		return fmt.Errorf("status %+v", cert.Status)
	})
	t.Logf("Certificate Ready %v after it was created", time.Since(start).Round(time.Millisecond))
	secret, err := f.Kube.CoreV1().Secrets("serving").Get(t.Context(), "kcert-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.Type != corev1.SecretTypeTLS || !translate.IsManaged(secret) {
		t.Errorf("Secret: type %s, labels %v", secret.Type, secret.Labels)
	}
	acmetest.VerifyChain(t, secret.Data[corev1.TLSCertKey], host, f.pebble.Roots)
	block, _ := pem.Decode(secret.Data[corev1.TLSCertKey])
	if block == nil {
		t.Fatal("no certificate in the Secret")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if na := cert.Status.NotAfter; na == nil || !na.Time.Equal(leaf.NotAfter.Truncate(time.Second)) {
		t.Errorf("notAfter %v, want the certificate's %v", na, leaf.NotAfter)
	}

	kubetest.WaitFor(t, 10*time.Second, "two names refused", func() error {
		_, two := f.getCertificate("two")
		for _, c := range two.Status.Conditions {
			if c.Type == knative.ConditionReady && c.Status == metav1.ConditionFalse && c.Reason == "UnsupportedSpec" {
				return nil
			}
		}
		return fmt.Errorf("status %+v", two.Status)
	})
	u, _ := f.getCertificate("foreign")
	if u.GetResourceVersion() != foreign.GetResourceVersion() || u.Object["status"] != nil {
		t.Errorf("Certificate of another class written: %v", u.Object["status"])
	}
	if _, err := f.Kube.CoreV1().Secrets("serving").Get(t.Context(), "foreign-tls", metav1.GetOptions{}); err == nil {
		t.Error("a Secret was written for a Certificate of another class")
	}
}

// TestKnativeCertificateRenews has Pebble issue certificates valid for 40
// seconds, renewed in the second half of their lifetime: the Secret gets
// the renewed certificate and the Certificate's notAfter follows, Ready
// all along.
func TestKnativeCertificateRenews(t *testing.T) {
	const host = "renew.portico.test"
	const validity = 40 * time.Second
	f := newKnFixture(t)
	f.settings.ExternalHTTPPort = int32(freeport.Port(t))
	f.pebble = acmetest.Start(t, acmetest.Options{HTTPPort: int(f.settings.ExternalHTTPPort), CertificateValidity: validity})
	f.tuneACME = func(o *acme.Options) {
		o.RenewalWindowRatio = 0.5
		o.RenewCheckInterval = time.Second
		o.DisableARI = true // Pebble would suggest any time in a short lifetime
	}
	f.coreService("portico-system", "portico-internal", "http", f.settings.LocalHTTPPort, nil)
	f.replicas = append(f.replicas, f.startReplica("127.0.0.1", "portico-0"))
	f.applyCertificate(knCertificate("renew", knative.DefaultCertificateClass, host))

	notAfter := func() (*metav1.Time, bool) {
		_, c := f.getCertificate("renew")
		for _, cond := range c.Status.Conditions {
			if cond.Type == knative.ConditionReady {
				return c.Status.NotAfter, cond.Status == metav1.ConditionTrue
			}
		}
		return nil, false
	}
	var first *metav1.Time
	kubetest.WaitFor(t, 60*time.Second, "issued", func() error {
		na, ready := notAfter()
		if !ready || na == nil {
			return fmt.Errorf("not Ready yet")
		}
		first = na
		return nil
	})
	kubetest.WaitFor(t, validity+10*time.Second, "renewed", func() error {
		na, ready := notAfter()
		if !ready {
			t.Fatalf("Ready lost during renewal")
		}
		if na == nil || !na.After(first.Time) {
			return fmt.Errorf("notAfter still %v", na)
		}
		return nil
	})
	secret, err := f.Kube.CoreV1().Secrets("serving").Get(t.Context(), "renew-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(secret.Data[corev1.TLSCertKey])
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.NotAfter.After(first.Time) {
		t.Errorf("Secret still holds the first certificate (notAfter %v)", leaf.NotAfter)
	}
}
