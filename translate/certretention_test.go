package translate

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
)

// TestBrokenSecretUpdateKeepsPreviousCertificate: a Secret whose update
// breaks its key pair keeps serving the key pair it held, with the
// listener's ResolvedRefs saying why, for as long as the broken data stays;
// a Secret that was never good, or is deleted, serves nothing.
func TestBrokenSecretUpdateKeepsPreviousCertificate(t *testing.T) {
	_, good := loadGolden(t, "testdata/golden/listenerset-protocol-conflict.in.yaml")
	key := types.NamespacedName{Namespace: "infra", Name: "foo-tls"}
	broken := withSecret(good, key, func(s *corev1.Secret) { s.Data[corev1.TLSCertKey] = []byte("not a certificate") })
	deleted := withSecret(good, key, nil)
	ls := types.NamespacedName{Namespace: "infra", Name: "ls"}

	before, mem := Translate(Settings{}, good, Memory{})
	served := sniCertificate(t, before)
	if served == nil {
		t.Fatal("the good Secret is not served")
	}

	after, mem := Translate(Settings{}, broken, mem)
	if got := sniCertificate(t, after); got != served {
		t.Fatalf("after a broken update the hostname serves %v, want the previous key pair", got)
	}
	conds := listenerConditions(t, after, ls, "https")
	rr := meta.FindStatusCondition(conds, string(gwv1.ListenerConditionResolvedRefs))
	if rr == nil || rr.Status != metav1.ConditionFalse || rr.Reason != string(gwv1.ListenerReasonInvalidCertificateRef) ||
		!strings.Contains(rr.Message, "infra/foo-tls") || !strings.Contains(rr.Message, "held before") {
		t.Errorf("ResolvedRefs = %+v, want False/InvalidCertificateRef naming the Secret and the previous key pair", rr)
	}
	if c := meta.FindStatusCondition(conds, string(gwv1.ListenerConditionProgrammed)); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Programmed = %+v, want True: the listener serves", c)
	}

	// The same broken data again: still the previous key pair.
	again, mem := Translate(Settings{}, broken, mem)
	if got := sniCertificate(t, again); got != served {
		t.Errorf("on the next translation the hostname serves %v, want the previous key pair", got)
	}
	// Deleted: nothing to serve.
	if out, _ := Translate(Settings{}, deleted, mem); sniCertificate(t, out) != nil {
		t.Error("a deleted Secret still serves")
	}
	// Never good (a restart with the broken data): nothing to serve.
	out, _ := Translate(Settings{}, broken, Memory{})
	if sniCertificate(t, out) != nil {
		t.Error("a Secret that never held a usable key pair serves")
	}
	c := meta.FindStatusCondition(listenerConditions(t, out, ls, "https"), string(gwv1.ListenerConditionProgrammed))
	if c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Programmed = %+v, want False", c)
	}
}

// withSecret returns a copy of res whose Secret key is changed by edit (a
// copy of it), or removed when edit is nil.
func withSecret(res *snapshot.Resources, key types.NamespacedName, edit func(*corev1.Secret)) *snapshot.Resources {
	out := *res
	out.Secrets = nil
	for _, s := range res.Secrets {
		if s.Namespace != key.Namespace || s.Name != key.Name {
			out.Secrets = append(out.Secrets, s)
			continue
		}
		if edit == nil {
			continue
		}
		c := s.DeepCopy()
		edit(c)
		out.Secrets = append(out.Secrets, c)
	}
	return &out
}

// sniCertificate is the key pair port 8443 presents for foo.example.com,
// nil when none.
func sniCertificate(t *testing.T, out Output) any {
	t.Helper()
	i := slices.IndexFunc(out.Config.Ports, func(p *config.Port) bool { return p.Number == 8443 })
	if i < 0 || out.Config.Ports[i].SNI == nil {
		return nil
	}
	e := out.Config.Ports[i].SNI.Lookup("foo.example.com")
	if e == nil || len(e.Certificates) == 0 {
		return nil
	}
	return e.Certificates[0]
}

func listenerConditions(t *testing.T, out Output, ls types.NamespacedName, name gwv1.SectionName) []metav1.Condition {
	t.Helper()
	for _, l := range out.Statuses.ListenerSets.At(ls).Listeners {
		if l.Name == name {
			return l.Conditions
		}
	}
	t.Fatalf("no status of listener %s of %s", name, ls)
	return nil
}
