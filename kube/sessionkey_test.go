package kube

import (
	"bytes"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
)

// TestSessionKeySharedThroughSecret: replicas starting at once all get
// one key, created once in a Secret Portico manages; later starts read it
// back; a Secret that does not hold a 32-byte key is refused, not used.
func TestSessionKeySharedThroughSecret(t *testing.T) {
	f := newClusterFixture(t)
	ctx := t.Context()
	const ns, name = "default", "portico-session-key"
	keys := make([][]byte, 6)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			k, err := SessionKey(ctx, f.Kube, ns, name)
			if err != nil {
				t.Error(err)
			}
			keys[i] = k
		})
	}
	wg.Wait()
	for i, k := range keys {
		if len(k) != 32 || !bytes.Equal(k, keys[0]) {
			t.Fatalf("replica %d got key %x, replica 0 %x", i, k, keys[0])
		}
	}
	s, err := f.Kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Data[SessionKeyField], keys[0]) || s.Labels[wellknown.ManagedByLabel] != wellknown.ManagedByValue {
		t.Errorf("Secret holds %x, labels %v", s.Data[SessionKeyField], s.Labels)
	}
	again, err := SessionKey(ctx, f.Kube, ns, name)
	if err != nil || !bytes.Equal(again, keys[0]) {
		t.Errorf("a later start got %x, %v", again, err)
	}

	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "short"}, Data: map[string][]byte{SessionKeyField: []byte("too short")}}
	if _, err := f.Kube.CoreV1().Secrets(ns).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if k, err := SessionKey(ctx, f.Kube, ns, "short"); err == nil {
		t.Errorf("a 9-byte key was used: %x", k)
	}
}
