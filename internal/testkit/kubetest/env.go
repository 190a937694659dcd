// Package kubetest runs a real Kubernetes control plane for tests: etcd and
// kube-apiserver built from pinned Go modules (hack/kube-binaries.sh), on
// loopback, with the Gateway API CRDs installed. Each Env has its own etcd and
// directory, so test packages that run in parallel do not share state.
//
// It also makes network namespaces for test backends (see Netns), because the
// API server refuses EndpointSlice addresses on loopback.
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"portico.dev/portico/internal/testkit/proc"
	"strconv"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options tunes StartEnv. The zero value is what tests want.
type Options struct {
	// BinDir holds etcd and kube-apiserver. Empty: run hack/kube-binaries.sh,
	// which builds them on first use and otherwise only finds them.
	BinDir string
	// CRDDir holds the manifests applied once the API server is ready.
	// Empty: the Channel of the sigs.k8s.io/gateway-api version in
	// Portico's go.mod.
	CRDDir string
	// Channel is the Gateway API release channel whose CRDs are applied
	// when CRDDir is empty: "standard" (also when empty) or
	// "experimental".
	Channel string
	// NoCRDs leaves the API server with built-in types only.
	NoCRDs bool
	// APIServerArgs are appended to the kube-apiserver flags; a later flag
	// overrides an earlier one.
	APIServerArgs []string
	// StartTimeout bounds how long etcd and the API server may take to become
	// ready once built. Zero means one minute.
	StartTimeout time.Duration
}

// Env is one running control plane.
type Env struct {
	// Config reaches the API server as an administrator (group
	// system:masters), which RBAC does not restrict.
	Config *rest.Config
	// Dir holds certificates, the token file, etcd's data and the logs
	// (<process>.log). It is removed by Stop unless the test failed.
	Dir string
	// BinDir holds the binaries this Env runs.
	BinDir string
	// EtcdURL is the client URL of this Env's etcd.
	EtcdURL string

	pki        *pki
	kubeconfig string

	procs *proc.Group
}

// Start starts an Env for a test and stops it when the test ends. When the
// test fails, the last lines of every process log are printed and Dir is
// kept with the full logs.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Env {
	t.Helper()
	start := time.Now()
	env, err := StartEnv(context.Background(), opts)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Logf("kubetest: control plane ready in %v (dir %s)", time.Since(start).Round(time.Millisecond), env.Dir)
	env.procs.StopWhenDone(t, "kubetest", 3<<10)
	return env
}

// StartEnv starts an Env outside of a test, for TestMain or a benchmark
// harness. The caller must call Stop.
func StartEnv(ctx context.Context, opts Options) (*Env, error) {
	if opts.StartTimeout == 0 {
		opts.StartTimeout = time.Minute
	}
	if opts.BinDir == "" || (opts.CRDDir == "" && !opts.NoCRDs) {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		if opts.BinDir == "" {
			if opts.BinDir, err = Binaries(ctx, root); err != nil {
				return nil, err
			}
		}
		if opts.CRDDir == "" && !opts.NoCRDs {
			if opts.CRDDir, err = gatewayAPICRDDir(ctx, root, opts.Channel); err != nil {
				return nil, err
			}
		}
	}

	return proc.RetryPortTaken(3, func() (*Env, error) { return startOnce(ctx, opts) })
}

func startOnce(ctx context.Context, opts Options) (_ *Env, err error) {
	dir, err := os.MkdirTemp("", "portico-kubetest-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	env := &Env{Dir: dir, BinDir: opts.BinDir, procs: &proc.Group{Dir: dir}}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, env.Logs(8<<10))
			_ = env.Stop()
		}
	}()

	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	if env.pki, err = newPKI(dir); err != nil {
		return env, err
	}
	token, tokenFile, err := writeTokenFile(dir)
	if err != nil {
		return env, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return env, err
	}
	if err := env.startEtcd(ctx, ports[0], ports[1]); err != nil {
		return env, err
	}
	if err := env.startAPIServer(ctx, ports[2], token, tokenFile, opts.APIServerArgs); err != nil {
		return env, err
	}
	if err := env.writeKubeconfig(token); err != nil {
		return env, err
	}
	if !opts.NoCRDs {
		if err := ApplyManifests(ctx, env.Config, opts.CRDDir); err != nil {
			return env, fmt.Errorf("install CRDs: %w", err)
		}
	}
	return env, nil
}

// writeTokenFile makes up a bearer token for a cluster admin and writes
// the API server's token file for it to dir.
func writeTokenFile(dir string) (token, file string, err error) {
	if token, err = randomToken(); err != nil {
		return "", "", err
	}
	file = filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(file, []byte(token+`,portico-admin,portico-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return "", "", fmt.Errorf("token file: %w", err)
	}
	return token, file, nil
}

// startEtcd starts etcd on clientPort and peerPort, sets e.EtcdURL and
// waits until etcd is healthy.
func (e *Env) startEtcd(ctx context.Context, clientPort, peerPort int) error {
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	e.EtcdURL = clientURL
	etcd, err := e.start("etcd",
		"--name=default",
		"--data-dir="+filepath.Join(e.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		// A test's data dies with the test: durability buys nothing.
		"--unsafe-no-fsync",
		// The default 2 GiB quota fills before the largest benchmark
		// (300,000 objects, each status written once) is set up; etcd
		// then refuses every write.
		"--quota-backend-bytes=8589934592",
	)
	if err != nil {
		return err
	}
	return proc.WaitReady(ctx, etcd, 100*time.Millisecond, func(ctx context.Context) error { return etcdHealthy(ctx, clientURL) })
}

// startAPIServer starts the API server on port, backed by e.EtcdURL and
// taking token as a cluster admin's, sets e.Config to reach it and waits
// until it is ready for tests.
func (e *Env) startAPIServer(ctx context.Context, port int, token, tokenFile string, extraArgs []string) error {
	args := []string{
		"--etcd-servers=" + e.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(e.Dir, "apiserver-certs"),
		"--tls-cert-file=" + e.pki.servingCert,
		"--tls-private-key-file=" + e.pki.servingKey,
		"--client-ca-file=" + e.pki.caCertFile,
		"--token-auth-file=" + tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + e.pki.saPublicKey,
		"--service-account-signing-key-file=" + e.pki.saKeyFile,
		// ClusterIPs are only ever data here; nothing routes to them.
		"--service-cluster-ip-range=198.19.0.0/16",
		// The endpoints of the "kubernetes" Service would be 127.0.0.1,
		// which the API server itself rejects as an endpoint address.
		"--endpoint-reconciler-type=none",
		// Fewer moving parts at start-up and no request queuing in tests.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	}
	apiserver, err := e.start("kube-apiserver", append(args, extraArgs...)...)
	if err != nil {
		return err
	}
	e.Config = &rest.Config{
		Host:            "https://127.0.0.1:" + strconv.Itoa(port),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.pki.caCertPEM},
		// Tests and benchmarks create objects by the thousand; the default
		// client-side limit (5 QPS) would measure the limiter.
		QPS:   1000,
		Burst: 2000,
	}
	client, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	return proc.WaitReady(ctx, apiserver, 100*time.Millisecond, func(ctx context.Context) error {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		// Tests take the "default" namespace for granted; a controller
		// inside the API server creates it a little after start-up.
		_, err = client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
		return err
	})
}

// start runs one of the Env's binaries, logging to Dir/<name>.log.
func (e *Env) start(name string, args ...string) (*proc.Proc, error) {
	return e.procs.Start(name, filepath.Join(e.BinDir, name), nil, args...)
}

func etcdHealthy(ctx context.Context, clientURL string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd health: %s", resp.Status)
	}
	return nil
}

// writeKubeconfig writes Dir/kubeconfig for the admin, for processes such as
// the controller manager, and for a person poking at a kept Dir.
func (e *Env) writeKubeconfig(token string) error {
	e.kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	caPath, _ := filepath.Abs(e.pki.caCertFile)
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: admin
current-context: kubetest
`, e.Config.Host, caPath, token)
	if err := os.WriteFile(e.kubeconfig, []byte(kc), 0o600); err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	return nil
}

// ImpersonatingConfig returns a copy of the admin Config that acts as user
// with groups, so RBAC decides as it would for that identity. For a
// ServiceAccount pass "system:serviceaccount:<namespace>:<name>" and no
// groups: the API server then adds the groups such a token would carry.
func (e *Env) ImpersonatingConfig(user string, groups ...string) *rest.Config {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return cfg
}

// ServiceAccountConfig returns a Config that authenticates with a real token
// of the ServiceAccount namespace/name, creating the ServiceAccount if it does
// not exist. The token is valid for an hour.
func (e *Env) ServiceAccountConfig(ctx context.Context, namespace, name string) (*rest.Config, error) {
	client, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("service account %s/%s: %w", namespace, name, err)
	}
	seconds := int64(3600)
	tr, err := client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for %s/%s: %w", namespace, name, err)
	}
	return &rest.Config{
		Host:            e.Config.Host,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.pki.caCertPEM},
		QPS:             e.Config.QPS,
		Burst:           e.Config.Burst,
	}, nil
}

// Logs returns the tail (at most max bytes each) of every process log.
func (e *Env) Logs(max int64) string {
	return e.procs.Logs(max)
}

// Stop kills every process, last started first, and removes Dir unless a
// failed test asked to keep it. It is safe to call more than once.
func (e *Env) Stop() error {
	return e.procs.Stop()
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// All listeners are held until every port is picked so that none repeats.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
