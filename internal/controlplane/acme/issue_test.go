package acme_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/secretstorage"
)

// recorder is a Storage that remembers the keys stored through it.
type recorder struct {
	*secretstorage.Storage
	mu   sync.Mutex
	keys []string
}

func (r *recorder) Store(ctx context.Context, key string, value []byte) error {
	r.mu.Lock()
	r.keys = append(r.keys, key)
	r.mu.Unlock()
	return r.Storage.Store(ctx, key, value)
}

func (r *recorder) stored() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.keys)
}

// eab is an External Account Binding: key ID and base64url HMAC key.
type eab struct{ keyID, macKey string }

func newOf[T any](*T) *T { return new(T) }

// newConfig is one replica's certmagic setup over its own Storage.
func newConfig(t *testing.T, storage certmagic.Storage, pebble *acmetest.Server, httpPort int, binding *eab) (*certmagic.Config, *certmagic.ACMEIssuer) {
	var cfg *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return cfg, nil },
		Logger:           zaptest.NewLogger(t),
	})
	t.Cleanup(cache.Stop)
	cfg = certmagic.New(cache, certmagic.Config{Storage: storage, Logger: zaptest.NewLogger(t)})
	tmpl := certmagic.ACMEIssuer{
		CA:                      pebble.DirectoryURL,
		TestCA:                  pebble.DirectoryURL,
		Email:                   "acme@portico.test",
		Agreed:                  true,
		TrustedRoots:            pebble.DirectoryRoots,
		DisableTLSALPNChallenge: true,
		// The test's own server holds this port, so the solver finds it
		// taken and leaves the answer to whoever serves it, from the
		// challenge state it puts in the storage, as Portico's HTTP
		// listeners will.
		ListenHost:  "127.0.0.1",
		AltHTTPPort: httpPort,
		Logger:      zaptest.NewLogger(t),
	}
	if binding != nil {
		// The type of this field lives in a module that Portico requires
		// only through certmagic; allocate it by inference.
		tmpl.ExternalAccount = newOf(tmpl.ExternalAccount)
		tmpl.ExternalAccount.KeyID = binding.keyID
		tmpl.ExternalAccount.MACKey = binding.macKey
	}
	iss := certmagic.NewACMEIssuer(cfg, tmpl)
	cfg.Issuers = []certmagic.Issuer{iss}
	return cfg, iss
}

// TestObtainFromPebble orders a certificate for one hostname from a real
// ACME server, as two replicas would: this process orders it, another
// process (TestChallengeReplica) answers Pebble's HTTP-01 request from the
// challenge state in the shared Secret storage alone, and this process then
// reads the issued certificate through a second Storage.
func TestObtainFromPebble(t *testing.T) {
	const host = "app.portico.test"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpPort := ln.Addr().(*net.TCPAddr).Port
	pebble := acmetest.Start(t, acmetest.Options{HTTPPort: httpPort})
	env := kubetest.StartWith(t, kubetest.Options{NoCRDs: true})
	client := kubernetes.NewForConfigOrDie(env.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "portico-system"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newStorage := func(identity string) *secretstorage.Storage {
		s, err := secretstorage.New(client, secretstorage.Options{Namespace: ns, Identity: identity})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// The other replica answers on the HTTP port that Pebble validates
	// against; it shares nothing with this process but the API server.
	replica := startReplica(t, ln, replicaConfig{
		Host:         env.Config.Host,
		Token:        env.Config.BearerToken,
		CA:           string(env.Config.CAData),
		Namespace:    ns,
		DirectoryURL: pebble.DirectoryURL,
	})

	// This process orders. Its solver finds the port taken and leaves the
	// challenge to whoever serves it, through the storage.
	storageA := &recorder{Storage: newStorage("replica-a")}
	cfgA, issA := newConfig(t, storageA, pebble, httpPort, nil)
	start := time.Now()
	if err := cfgA.ObtainCertSync(ctx, host); err != nil {
		t.Fatalf("obtain %s: %v", host, err)
	}
	t.Logf("certificate for %s issued in %v", host, time.Since(start).Round(time.Millisecond))

	if answered, missed := replica.stop(t); answered == 0 || missed != 0 {
		t.Errorf("other replica: answered %d challenge requests, %d not; want some, all", answered, missed)
	}
	if !slices.ContainsFunc(storageA.stored(), func(k string) bool { return strings.Contains(k, "challenge_tokens/") }) {
		t.Errorf("no challenge state went through the storage; stored %q", storageA.stored())
	}

	// Another Storage reads what this one stored.
	reader := newStorage("replica-c")
	certPEM, err := reader.Load(ctx, certmagic.StorageKeys.SiteCert(issA.IssuerKey(), host))
	if err != nil {
		t.Fatal(err)
	}
	checkLeaf(t, certPEM, host, pebble.Roots)
	if _, err := reader.Load(ctx, certmagic.StorageKeys.SitePrivateKey(issA.IssuerKey(), host)); err != nil {
		t.Errorf("private key: %v", err)
	}
}

// checkLeaf checks that certPEM is a chain for host alone under roots.
func checkLeaf(t *testing.T, certPEM []byte, host string, roots *x509.CertPool) {
	t.Helper()
	if leaf := acmetest.VerifyChain(t, certPEM, host, roots); !slices.Equal(leaf.DNSNames, []string{host}) {
		t.Errorf("leaf names %q, want [%s]", leaf.DNSNames, host)
	}
}

// TestObtainWithEAB orders with External Account Binding, which Pebble then
// requires, into the file storage of standalone mode; without the binding
// the order is refused.
func TestObtainWithEAB(t *testing.T) {
	const host = "eab.portico.test"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	httpPort := ln.Addr().(*net.TCPAddr).Port
	const kid, mac = "portico-kid", "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W"
	pebble := acmetest.Start(t, acmetest.Options{HTTPPort: httpPort, EAB: map[string]string{kid: mac}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	storage := &certmagic.FileStorage{Path: t.TempDir()}
	cfg, iss := newConfig(t, storage, pebble, httpPort, &eab{keyID: kid, macKey: mac})
	srv := &http.Server{
		Handler:      iss.HTTPChallengeHandler(http.NotFoundHandler()),
		ReadTimeout:  10 * time.Second,
		WriteTimeout: 10 * time.Second,
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })

	unbound, _ := newConfig(t, &certmagic.FileStorage{Path: t.TempDir()}, pebble, httpPort, nil)
	err = unbound.ObtainCertSync(ctx, "unbound.portico.test")
	if err == nil || !strings.Contains(err.Error(), "externalAccount") {
		t.Errorf("without the External Account Binding that Pebble requires: err = %v, want it refused for that", err)
	}

	start := time.Now()
	if err := cfg.ObtainCertSync(ctx, host); err != nil {
		t.Fatalf("obtain %s: %v", host, err)
	}
	t.Logf("certificate for %s issued in %v", host, time.Since(start).Round(time.Millisecond))
	certPEM, err := storage.Load(ctx, certmagic.StorageKeys.SiteCert(iss.IssuerKey(), host))
	if err != nil {
		t.Fatal(err)
	}
	checkLeaf(t, certPEM, host, pebble.Roots)
}
