package kube

import (
	"context"
	"crypto/rand"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/controlplane/wellknown"
)

// SessionKeyField is the key of the session Secret's data that holds the
// key (32 bytes).
const SessionKeyField = "key"

// SessionKey is the key that seals session persistence values, kept in
// the Secret ns/name so that every replica seals and opens sessions with
// the same one: a session then holds on whichever replica a request
// reaches, and across restarts. The Secret is created, with a random key,
// when it does not exist; when several replicas start at once, the first
// create wins and the others read it.
func SessionKey(ctx context.Context, kc kubernetes.Interface, ns, name string) ([]byte, error) {
	secrets := kc.CoreV1().Secrets(ns)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		key := make([]byte, 32)
		_, _ = rand.Read(key) // never fails (crypto/rand)
		s = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{wellknown.ManagedByLabel: wellknown.ManagedByValue}},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{SessionKeyField: key},
		}
		created, cerr := secrets.Create(ctx, s, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(cerr): // another replica was first
			s, err = secrets.Get(ctx, name, metav1.GetOptions{})
		case cerr != nil:
			err = cerr
		default:
			s, err = created, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("session key Secret %s/%s: %w", ns, name, err)
	}
	key := s.Data[SessionKeyField]
	if len(key) != 32 {
		return nil, fmt.Errorf("session key Secret %s/%s: data %q holds %d bytes, want 32", ns, name, SessionKeyField, len(key))
	}
	return key, nil
}
