package pipeline

import (
	"path/filepath"
	"testing"

	"github.com/caddyserver/certmagic"
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

// TestWithACMEHoldingNothing: with a manager that holds no certificate,
// the snapshot's Secrets are handed on as they are.
func TestWithACMEHoldingNothing(t *testing.T) {
	manager, err := acme.New(acme.Options{Storage: &certmagic.FileStorage{Path: filepath.Join(t.TempDir(), "acme")}})
	if err != nil {
		t.Fatal(err)
	}
	defer manager.Close()
	l := New(Options{ACMESecrets: true}, nil, nil, manager, Outputs{}, zap.NewNop())
	l.acmeWanted = []translate.ACMECertificate{{Hostname: "a.example.com", Secret: types.NamespacedName{Namespace: "apps", Name: "a-tls"}}}
	res := &snapshot.Resources{Secrets: []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "other"}}}}
	out := l.withACME(res)
	if len(out.Secrets) != 1 || &out.Secrets[0] != &res.Secrets[0] {
		t.Errorf("Secrets %v, want the snapshot's own list", out.Secrets)
	}
}
