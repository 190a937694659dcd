package pipeline

import (
	"slices"
	"testing"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/translate"
)

// TestManagedSecretKept: a certificate that did not change keeps its
// Secret object from one snapshot to the next (translate tells changes by
// identity); a renewed one, or another hostname, gets a new one.
func TestManagedSecretKept(t *testing.T) {
	c := translate.ACMECertificate{Hostname: "a.example.com", Secret: types.NamespacedName{Namespace: "apps", Name: "a-tls"}}
	m := managedSecrets{}
	first := m.secret(c, []byte("cert 1"), []byte("key 1"))
	m.keep(map[types.NamespacedName]*corev1.Secret{c.Secret: first})
	if got := m.secret(c, []byte("cert 1"), []byte("key 1")); got != first {
		t.Error("the same certificate got a new Secret")
	}
	renewed := m.secret(c, []byte("cert 2"), []byte("key 2"))
	if renewed == first || string(renewed.Data[corev1.TLSCertKey]) != "cert 2" || string(renewed.Data[corev1.TLSPrivateKeyKey]) != "key 2" {
		t.Errorf("renewed certificate: %+v", renewed)
	}
	other := c
	other.Hostname = "b.example.com"
	if got := m.secret(other, []byte("cert 1"), []byte("key 1")); got == first || got.Annotations[wellknown.ACMEHostnameAnnotation] != "b.example.com" {
		t.Errorf("another hostname into the same Secret: %+v", got)
	}
	m.keep(nil)
	if got := m.secret(c, []byte("cert 1"), []byte("key 1")); got == first {
		t.Error("a Secret no longer held was kept")
	}
}

// fakeACME holds the certificates and errors a test gives it, and records
// the hostnames the loop wants.
type fakeACME struct {
	certs  map[string]acme.Certificate
	errs   map[string]string
	wanted []string
}

func (f *fakeACME) Want(hostnames []string) { f.wanted = hostnames }

func (f *fakeACME) Certificate(hostname string) (acme.Certificate, bool) {
	c, ok := f.certs[hostname]
	return c, ok
}

func (f *fakeACME) Errors() map[string]string { return f.errs }

// TestWithACMEHoldingNothing: with a manager that holds no certificate,
// the snapshot's Secrets are handed on as they are.
func TestWithACMEHoldingNothing(t *testing.T) {
	l := New(Options{ACMESecrets: true}, nil, nil, &fakeACME{}, Outputs{}, zap.NewNop())
	l.acmeWanted = []translate.ACMECertificate{{Hostname: "a.example.com", Secret: types.NamespacedName{Namespace: "apps", Name: "a-tls"}}}
	res := &snapshot.Resources{Secrets: []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "other"}}}}
	out := l.withACME(res)
	if len(out.Secrets) != 1 || &out.Secrets[0] != &res.Secrets[0] {
		t.Errorf("Secrets %v, want the snapshot's own list", out.Secrets)
	}
}

// TestWithACMEHeldCertificates: the loop tells the manager the hostnames
// translate wants, once each; the snapshot it translates next has a Secret
// for each certificate the manager holds, unless the snapshot defines a
// Secret of that name itself, and the manager's errors.
func TestWithACMEHeldCertificates(t *testing.T) {
	a := types.NamespacedName{Namespace: "apps", Name: "a-tls"}
	b := types.NamespacedName{Namespace: "apps", Name: "b-tls"}
	certs := &fakeACME{
		certs: map[string]acme.Certificate{
			"a.example.com": {CertPEM: []byte("cert a"), KeyPEM: []byte("key a")},
			"b.example.com": {CertPEM: []byte("cert b"), KeyPEM: []byte("key b")},
		},
		errs: map[string]string{"c.example.com": "rate limited"},
	}
	l := New(Options{ACMESecrets: true}, nil, nil, certs, Outputs{}, zap.NewNop())
	l.wantACME([]translate.ACMECertificate{
		{Hostname: "a.example.com", Secret: a}, {Hostname: "b.example.com", Secret: b},
		{Hostname: "c.example.com", Secret: a}, {Hostname: "a.example.com", Secret: a},
	}, &snapshot.Resources{})
	if want := []string{"a.example.com", "b.example.com", "c.example.com"}; !slices.Equal(certs.wanted, want) {
		t.Errorf("wanted %v, want %v", certs.wanted, want)
	}
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "b-tls"}}
	out := l.withACME(&snapshot.Resources{Secrets: []*corev1.Secret{own}})
	if len(out.Secrets) != 2 || out.Secrets[0] != own {
		t.Fatalf("Secrets %v, want the snapshot's b-tls and a managed a-tls", out.Secrets)
	}
	if m := out.Secrets[1]; m.Namespace != "apps" || m.Name != "a-tls" || string(m.Data[corev1.TLSCertKey]) != "cert a" || string(m.Data[corev1.TLSPrivateKeyKey]) != "key a" {
		t.Errorf("managed Secret %+v", m)
	}
	if out.ACMEErrors["c.example.com"] != "rate limited" {
		t.Errorf("ACME errors %v", out.ACMEErrors)
	}
}

// TestNilManagerIsNoACME: a nil *acme.Manager handed to New, as a caller
// without ACME holds one, is no ACME: a rebuild neither asks it for
// anything nor fails.
func TestNilManagerIsNoACME(t *testing.T) {
	var m *acme.Manager
	l := New(Options{ACMESecrets: true}, nil, nil, m, Outputs{}, zap.NewNop())
	l.wantACME([]translate.ACMECertificate{{Hostname: "a.example.com", Secret: types.NamespacedName{Namespace: "apps", Name: "a-tls"}}}, &snapshot.Resources{})
	res := &snapshot.Resources{}
	if out := l.withACME(res); out != res {
		t.Errorf("the snapshot was changed without ACME: %+v", out)
	}
}
