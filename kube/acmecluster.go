package kube

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/acme"
)

// acmeSecretTimeout bounds one Secret write.
const acmeSecretTimeout = 10 * time.Second

// writeACMESecrets writes the certificate the manager holds for each of
// wanted into its Secret, when that Secret is missing or is Portico's and
// holds something else. A Secret that is not Portico's is never written
// (translate leaves such listeners out of wanted; this checks again
// against the same snapshot). The informer then brings the Secret to
// translate like any other. Every replica may write: they hold the same
// certificate from the shared storage, and a lost race is harmless.
func writeACMESecrets(ctx context.Context, client kubernetes.Interface, mgr *acme.Manager, wanted []ACMECertificate, secrets []*corev1.Secret, log *zap.Logger) {
	if len(wanted) == 0 {
		return
	}
	existing := make(map[types.NamespacedName]*corev1.Secret, len(secrets))
	for _, s := range secrets {
		existing[nn(s.Namespace, s.Name)] = s
	}
	done := map[types.NamespacedName]bool{}
	for _, c := range wanted {
		if done[c.Secret] {
			continue // two listeners, one Secret: the first hostname wins
		}
		done[c.Secret] = true
		cert, ok := mgr.Certificate(c.Hostname)
		if !ok {
			continue
		}
		if err := writeACMESecret(ctx, client, c, cert, existing[c.Secret]); err != nil {
			log.Error("ACME certificate not written to its Secret", zap.String("hostname", c.Hostname), zap.Stringer("secret", c.Secret), zap.Error(err))
		}
	}
}

func writeACMESecret(ctx context.Context, client kubernetes.Interface, c ACMECertificate, cert acme.Certificate, cur *corev1.Secret) error {
	ctx, cancel := context.WithTimeout(ctx, acmeSecretTimeout)
	defer cancel()
	want := ManagedSecret(c, cert.CertPEM, cert.KeyPEM)
	secrets := client.CoreV1().Secrets(c.Secret.Namespace)
	if cur == nil {
		_, err := secrets.Create(ctx, want, metav1.CreateOptions{FieldManager: "portico"})
		if apierrors.IsAlreadyExists(err) {
			return nil // another replica, or a user: the informer will tell
		}
		if err != nil {
			return fmt.Errorf("create: %w", err)
		}
		return nil
	}
	if !IsManaged(cur) {
		return nil
	}
	if bytes.Equal(cur.Data[corev1.TLSCertKey], cert.CertPEM) && bytes.Equal(cur.Data[corev1.TLSPrivateKeyKey], cert.KeyPEM) &&
		cur.Annotations[ACMEHostnameAnnotation] == c.Hostname {
		return nil
	}
	next := cur.DeepCopy()
	next.Data = want.Data
	next.Labels = maps.Clone(cur.Labels)
	next.Labels[ManagedByLabel] = ManagedByValue
	next.Annotations = maps.Clone(cur.Annotations)
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[ACMEHostnameAnnotation] = c.Hostname
	// The resourceVersion of the snapshot makes a write over a newer
	// Secret fail rather than clobber it; the next rebuild looks again.
	if _, err := secrets.Update(ctx, next, metav1.UpdateOptions{FieldManager: "portico"}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("update: %w", err)
	}
	return nil
}
