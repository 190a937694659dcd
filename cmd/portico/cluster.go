package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/internal/admin"
	"portico.dev/portico/kube"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/translate"
)

// defaultNamespace is Portico's namespace when neither the flag, the
// downward API nor a mounted service account says otherwise.
const defaultNamespace = "portico-system"

// serviceAccountNamespaceFile is where the kubelet mounts the pod's namespace.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// clusterOptions are the flags of cluster mode.
type clusterOptions struct {
	kubeconfig     string
	namespace      string
	identity       string
	addresses      listFlag
	gatewayService string
	leaseName      string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	qps            float64
	burst          int
	statusWorkers  int
	sessionSecret  string
	// sharedKey is the session key every replica shares (from
	// sessionSecret or --session-key-file), nil when there is none.
	sharedKey  []byte
	knative    *knativeOptions
	dataPlanes *dataPlaneOptions // provision.go
}

func clusterFlags(fs *flag.FlagSet) *clusterOptions {
	o := &clusterOptions{}
	defaults := leader.Default("", "")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file to reach the API server (default: the in-cluster service account)")
	fs.StringVar(&o.namespace, "namespace", "", "Portico's own namespace, for its leader Lease and Events (default: $POD_NAMESPACE, else the service account's, else "+defaultNamespace+")")
	fs.StringVar(&o.identity, "identity", "", "this replica's name in the leader election (default: $POD_NAME, else the hostname)")
	fs.Var(&o.addresses, "gateway-address", "address (IP or hostname) to report in every Gateway's status; repeatable or comma-separated")
	fs.StringVar(&o.gatewayService, "gateway-service", "", "namespace/name of the Service in front of Portico, whose load balancer ingress (else cluster IP) is reported in every Gateway's status")
	fs.StringVar(&o.leaseName, "leader-election-id", defaults.Name, "name of the leader election Lease")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", defaults.LeaseDuration, "how long a leader's lease lasts without renewal")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", defaults.RenewDeadline, "how long the leader tries to renew before it stops leading")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", defaults.RetryPeriod, "interval between leader election attempts")
	fs.Float64Var(&o.qps, "kube-api-qps", kube.DefaultAPIQPS, "queries per second to the API server, for each of Portico's clients (status writes, leader election): a status is one query, so thousands of new objects take their number divided by this in seconds (deploy/README.md, \"API requests\")")
	fs.IntVar(&o.burst, "kube-api-burst", kube.DefaultAPIBurst, "burst of queries to the API server above --kube-api-qps, after a quiet spell")
	fs.IntVar(&o.statusWorkers, "status-workers", kube.DefaultStatusWorkers, "status updates in flight at once")
	fs.StringVar(&o.sessionSecret, "session-key-secret", "portico-session-key", "Secret of Portico's namespace holding the key that seals sessionPersistence values, created with a random key when missing, so that every replica shares it (\"\": a key per process); --session-key-file wins over it")
	o.knative = knativeFlags(fs)
	o.dataPlanes = dataPlaneFlags(fs)
	return o
}

// set reports whether any flag of cluster mode was given, which makes no
// sense with --config.
func (o *clusterOptions) set(fs *flag.FlagSet) bool {
	clusterOnly := []string{"kubeconfig", "namespace", "identity", "gateway-address", "gateway-service",
		"leader-election-id", "leader-election-lease-duration", "leader-election-renew-deadline",
		"leader-election-retry-period", "kube-api-qps", "kube-api-burst", "status-workers", "session-key-secret",
		"data-plane-image", "data-plane-image-pull-policy", "data-plane-controller-address", "data-plane-controller", "data-plane-listen", "data-plane-tls-secret"}
	found := false
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(clusterOnly, f.Name) {
			found = true
		}
	})
	return found || o.knative.set(fs)
}

// listFlag collects a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, errors.New("not running in a cluster: pass --kubeconfig, or --config for standalone mode")
	}
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	return cfg, nil
}

// ownNamespace finds the namespace Portico runs in.
func ownNamespace(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return defaultNamespace
}

func ownIdentity(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if name := os.Getenv("POD_NAME"); name != "" {
		return name, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("leader election identity: %w", err)
	}
	return host, nil
}

// sharedAddresses are the addresses every Gateway reports without an
// address pool: --gateway-address, then those of --gateway-service.
func (o *clusterOptions) sharedAddresses() (*translate.SharedAddresses, error) {
	shared := &translate.SharedAddresses{}
	if o.gatewayService != "" {
		var err error
		if shared.Service, err = kube.ParseNamespacedName(o.gatewayService); err != nil {
			return nil, fmt.Errorf("--gateway-service: %w", err)
		}
	}
	for _, a := range o.addresses {
		shared.Addresses = append(shared.Addresses, translate.GatewayAddress(a))
	}
	return shared, nil
}

// sharedSessionKey is the session key every replica shares, from the
// Secret --session-key-secret names (kube.SessionKey).
func (o *clusterOptions) sharedSessionKey(ctx context.Context) ([]byte, error) {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return kube.SessionKey(ctx, kc, ownNamespace(o.namespace), o.sessionSecret)
}

// newCluster builds the clients and the cluster source of cluster mode.
func newCluster(o *clusterOptions, controller gwv1.GatewayController, m *admin.Metrics, log *zap.Logger) (*kube.Cluster, error) {
	identity, err := ownIdentity(o.identity)
	if err != nil {
		return nil, err
	}
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	// client-go logs through klog, a process-wide logger: send it to
	// Portico's log, in its format. serve runs once per process, before any
	// client exists.
	klog.SetSlogLogger(slog.New(zapslog.NewHandler(log.Core(), zapslog.WithName("client-go"))))

	cfg.QPS = float32(o.qps)
	cfg.Burst = o.burst
	cfg.UserAgent = "portico"
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	gc, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("gateway API client: %w", err)
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	dataPlanes, err := o.dataPlanes.settings()
	if err != nil {
		return nil, err
	}
	le := leader.Default(ownNamespace(o.namespace), identity)
	le.Name = o.leaseName
	le.LeaseDuration, le.RenewDeadline, le.RetryPeriod = o.leaseDuration, o.renewDeadline, o.retryPeriod

	log.Info("cluster mode", zap.String("apiServer", cfg.Host), zap.String("namespace", le.Namespace), zap.String("identity", identity),
		zap.String("controllerName", string(controller)))
	c := &kube.Cluster{
		Kube:               kc,
		Gateway:            gc,
		Metadata:           md,
		Dynamic:            dyn,
		DataPlanes:         dataPlanes,
		DataPlaneListen:    o.dataPlanes.listen,
		DataPlaneTLSSecret: o.dataPlanes.tlsSecret,
		SessionKey:         o.sharedKey,
		ControllerName:     controller,
		Log:                log.Named("cluster"),
		LeaderElection:     le,
		StatusWorkers:      o.statusWorkers,
		OnLeader:           m.SetLeader,
		OnStatusWrite:      m.StatusWritten,
	}
	m.SetDataPlaneLag(c.DataPlaneLag)
	return c, nil
}
