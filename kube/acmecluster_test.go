package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/kube/secretstorage"
	"portico.dev/portico/proxy"
	"portico.dev/portico/translate"
)

// TestClusterACMEIssues runs Portico in cluster mode against a real API
// server and Pebble: a ListenerSet that opted in to ACME gets its missing
// Secret created with a certificate Pebble issued (validated over HTTP-01
// on the Gateway's HTTP listener, from challenge state in Secrets), the
// certificate serves, and a Secret of the same ListenerSet that is not
// Portico's is never written.
func TestClusterACMEIssues(t *testing.T) {
	const host, theirHost = "app.portico.test", "theirs.portico.test"
	httpPort, httpsPort := freeport.Port(t), freeport.Port(t)
	pebble := acmetest.Start(t, acmetest.Options{HTTPPort: httpPort})
	env := kubetest.Start(t)
	kc, gc := kubetest.Clients(t, env.Config)
	ctx := t.Context()
	for _, ns := range []string{"portico-system", "apps"} {
		mustCreate(t)(kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}))
	}
	theirs, err := kc.CoreV1().Secrets("apps").Create(ctx, tlsSecret("apps", "theirs-tls", newTestCert(t, theirHost)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// One replica, as cmd/portico wires it.
	log := zaptest.NewLogger(t)
	storage, err := secretstorage.New(kc, secretstorage.Options{Namespace: "portico-system", Identity: "replica-a"})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{
		Kube:    kc,
		Gateway: gc,
		Log:     log,
		LeaderElection: leader.Election{
			Namespace: "portico-system", Name: "portico", Identity: "replica-a",
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond,
			ReleaseOnCancel: true,
		},
	}
	var loop *pipeline.Loop
	events := &acmeEvents{counts: map[string]int{}}
	mgr, err := acme.New(acme.Options{
		Directory:    pebble.DirectoryURL,
		TrustedRoots: pebble.DirectoryRoots,
		Storage:      storage,
		MinBackoff:   time.Second,
		OnChange:     func() { loop.Changed() },
		Observer:     events,
		Logger:       log.Named("acme"),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.ACME = mgr
	opts := proxy.DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 2 * time.Second
	opts.Challenges = mgr
	rt := proxy.New(opts, log.Named("proxy"))
	loop = pipeline.New(pipeline.Options{Holdoff: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond,
		Translate: translate.Settings{Shared: &translate.SharedAddresses{}}}, c, rt, mgr,
		pipeline.Outputs{Statuses: c.WriteStatuses, ACME: c.WriteACME}, log)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		mgr.Close()
		sctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
		defer stop()
		_ = rt.Close(sctx)
	})

	gws := gc.GatewayV1()
	createClassAndGateway(t, gc, httpPort)
	entry := func(name, hostname, secret string) gwv1.ListenerEntry {
		return gwv1.ListenerEntry{
			Name: gwv1.SectionName(name), Hostname: ptr.To(gwv1.Hostname(hostname)),
			Port: gwv1.PortNumber(httpsPort), Protocol: gwv1.HTTPSProtocolType,
			TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: gwv1.ObjectName(secret)}}},
		}
	}
	mustCreate(t)(gws.ListenerSets("apps").Create(ctx, &gwv1.ListenerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "app", Annotations: map[string]string{wellknown.ACMEAnnotation: wellknown.ACMEHTTP01}},
		Spec: gwv1.ListenerSetSpec{
			ParentRef: gwv1.ParentGatewayReference{Name: "gw"},
			Listeners: []gwv1.ListenerEntry{entry("app", host, "app-tls"), entry("theirs", theirHost, "theirs-tls")},
		},
	}, metav1.CreateOptions{}))
	start := time.Now()

	// The Secret appears, Portico's, with a chain for host under Pebble's root.
	var secret *corev1.Secret
	kubetest.WaitFor(t, 90*time.Second, "ACME Secret apps/app-tls", func() error {
		s, err := kc.CoreV1().Secrets("apps").Get(ctx, "app-tls", metav1.GetOptions{})
		if err != nil {
			return err
		}
		secret = s
		return nil
	})
	t.Logf("Secret with the certificate for %s written %v after the ListenerSet", host, time.Since(start).Round(time.Millisecond))
	if secret.Type != corev1.SecretTypeTLS || !translate.IsManaged(secret) || secret.Annotations[wellknown.ACMEHostnameAnnotation] != host {
		t.Errorf("Secret: type %q labels %v annotations %v; want kubernetes.io/tls, managed by Portico, for %s", secret.Type, secret.Labels, secret.Annotations, host)
	}
	acmetest.VerifyChain(t, secret.Data[corev1.TLSCertKey], host, pebble.Roots)
	if _, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey]); err != nil {
		t.Errorf("Secret's key pair: %v", err)
	}

	// It serves at the next handshake, and the status says so.
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(httpsPort))
	kubetest.WaitFor(t, 30*time.Second, "handshake for "+host, func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
			&tls.Config{ServerName: host, RootCAs: pebble.Roots, MinVersion: tls.VersionTLS12})
		if err != nil {
			return err
		}
		return conn.Close()
	})
	kubetest.WaitFor(t, 30*time.Second, "ListenerSet status", func() error {
		ls, err := gws.ListenerSets("apps").Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, l := range ls.Status.Listeners {
			if l.Name == "app" {
				if !meta.IsStatusConditionTrue(l.Conditions, string(gwv1.ListenerConditionResolvedRefs)) {
					return fmt.Errorf("listener app: %v", l.Conditions)
				}
				return nil
			}
		}
		return errors.New("no status for listener app")
	})

	// The Secret that is not Portico's was used as it is and not written.
	got, err := kc.CoreV1().Secrets("apps").Get(ctx, "theirs-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != theirs.ResourceVersion || translate.IsManaged(got) {
		t.Errorf("Secret apps/theirs-tls was written: resourceVersion %s -> %s, labels %v", theirs.ResourceVersion, got.ResourceVersion, got.Labels)
	}
	if got := mgr.Hostnames(); !slices.Equal(got, []string{host}) {
		t.Errorf("manager holds %q, want only %s", got, host)
	}
	if n := events.get("obtained"); n != 1 {
		t.Errorf("%d certificates obtained, want 1", n)
	}
	// The challenge state and the certificate live in Portico's namespace.
	list, err := kc.CoreV1().Secrets("portico-system").List(ctx, metav1.ListOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		t.Error("no storage Secret in portico-system")
	}
}
