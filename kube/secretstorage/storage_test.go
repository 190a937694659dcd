package secretstorage_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/internal/testkit/storagetest"
	"portico.dev/portico/kube/secretstorage"
)

// Short leases keep the takeover test short; real deployments use the
// default minute.
var testOptions = secretstorage.Options{
	LeaseDuration: 2 * time.Second,
	RenewInterval: 500 * time.Millisecond,
	PollInterval:  100 * time.Millisecond,
}

func newNamespace(t *testing.T, client kubernetes.Interface) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	ns := "acme-" + hex.EncodeToString(b)
	_, err := client.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func newStorage(t *testing.T, client kubernetes.Interface, ns, identity string) *secretstorage.Storage {
	t.Helper()
	opts := testOptions
	opts.Namespace = ns
	opts.Identity = identity
	s, err := secretstorage.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestContract(t *testing.T) {
	env := kubetest.StartWith(t, kubetest.Options{NoCRDs: true})
	client := kubernetes.NewForConfigOrDie(env.Config)
	storagetest.Run(t, func(t *testing.T) *storagetest.Fixture {
		ns := newNamespace(t, client)
		n := 0
		return &storagetest.Fixture{
			Replica: func(t *testing.T) certmagic.Storage {
				n++
				return newStorage(t, client, ns, fmt.Sprintf("replica-%d", n))
			},
			HoldAndDie: func(t *testing.T, name string) {
				s := newStorage(t, client, ns, "doomed")
				if err := s.Lock(context.Background(), name); err != nil {
					t.Fatal(err)
				}
				secretstorage.Abandon(s, name)
			},
			// The lease, once seen unchanged for its duration, plus polls.
			TakeoverWithin: testOptions.LeaseDuration + 2*time.Second,
		}
	})

	t.Run("Objects", func(t *testing.T) {
		ns := newNamespace(t, client)
		s := newStorage(t, client, ns, "replica")
		ctx := context.Background()
		key := "certificates/acme-v02/app.portico.test/app.portico.test.key"
		if err := s.Store(ctx, key, []byte("key")); err != nil {
			t.Fatal(err)
		}
		secrets, err := client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(secrets.Items) != 1 {
			t.Fatalf("%d Secrets for one key", len(secrets.Items))
		}
		sec := secrets.Items[0]
		if sec.Labels[wellknown.ManagedByLabel] != "portico" || sec.Annotations[secretstorage.AnnotationKey] != key ||
			sec.Type != secretstorage.SecretType || !strings.HasPrefix(sec.Name, "portico-acme-") {
			t.Errorf("Secret %s: labels %v, annotations %v, type %q", sec.Name, sec.Labels, sec.Annotations, sec.Type)
		}

		// A Secret by that name that the storage did not write is never
		// overwritten, nor read as a value.
		if err := client.CoreV1().Secrets(ns).Delete(ctx, sec.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		foreign := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: sec.Name, Namespace: ns},
			Data:       map[string][]byte{"value": []byte("not yours")},
		}
		if _, err := client.CoreV1().Secrets(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Store(ctx, key, []byte("key")); err == nil {
			t.Error("Store overwrote a Secret it does not manage")
		}
		if v, err := s.Load(ctx, key); err == nil {
			t.Errorf("Load read %q from a Secret it does not manage", v)
		}
		got, err := client.CoreV1().Secrets(ns).Get(ctx, sec.Name, metav1.GetOptions{})
		if err != nil || string(got.Data["value"]) != "not yours" {
			t.Errorf("foreign Secret changed: %v, %v", got, err)
		}
	})

	t.Run("LockLeaseLifecycle", func(t *testing.T) {
		ns := newNamespace(t, client)
		s := newStorage(t, client, ns, "replica")
		ctx := context.Background()
		if err := s.Lock(ctx, "issue_cert_app.portico.test"); err != nil {
			t.Fatal(err)
		}
		leases, err := client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(leases.Items) != 1 {
			t.Fatalf("leases while held: %v, %v", leases, err)
		}
		first := leases.Items[0].Spec.RenewTime.Time
		holder := *leases.Items[0].Spec.HolderIdentity
		if !strings.HasPrefix(holder, "replica/") {
			t.Errorf("holder %q does not name the replica", holder)
		}
		// The holder renews while it holds: wait for a renewal to show.
		deadline := time.Now().Add(5 * testOptions.RenewInterval)
		for {
			l, err := client.CoordinationV1().Leases(ns).Get(ctx, leases.Items[0].Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if l.Spec.RenewTime.After(first) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease not renewed since %v", first)
			}
			time.Sleep(testOptions.RenewInterval / 2)
		}
		if err := s.Unlock(ctx, "issue_cert_app.portico.test"); err != nil {
			t.Fatal(err)
		}
		leases, err = client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(leases.Items) != 0 {
			t.Fatalf("leases after Unlock: %d, %v", len(leases.Items), err)
		}
		if err := s.Unlock(ctx, "issue_cert_app.portico.test"); err == nil {
			t.Error("Unlock of a lock not held succeeded")
		}
	})

	t.Run("LostLock", func(t *testing.T) {
		// A holder that stalled past its lease and was taken over learns
		// so at Unlock, and does not release the new holder's lock.
		ns := newNamespace(t, client)
		a := newStorage(t, client, ns, "a")
		b := newStorage(t, client, ns, "b")
		ctx := context.Background()
		const name = "issue_cert_lost.portico.test"
		if err := a.Lock(ctx, name); err != nil {
			t.Fatal(err)
		}
		secretstorage.Abandon(a, name)
		if err := b.Lock(ctx, name); err != nil {
			t.Fatal(err)
		}
		if err := a.Unlock(ctx, name); err == nil {
			t.Error("Unlock by the holder that was taken over succeeded")
		}
		if ok, err := a.TryLock(ctx, name); err != nil || ok {
			t.Errorf("TryLock while b holds = %v, %v", ok, err)
		}
		if err := b.Unlock(ctx, name); err != nil {
			t.Fatal(err)
		}
	})
}

func TestNewValidates(t *testing.T) {
	for _, opts := range []secretstorage.Options{
		{},
		{Namespace: "ns", Name: "Not_A_Label"},
		{Namespace: "ns", LeaseDuration: 1500 * time.Millisecond},
		{Namespace: "ns", LeaseDuration: 10 * time.Second, RenewInterval: 10 * time.Second},
	} {
		if _, err := secretstorage.New(nil, opts); err == nil {
			t.Errorf("New(%+v) succeeded", opts)
		}
	}
}
