// Package kube is Portico's side of a Kubernetes cluster: Cluster composes
// the informers of kube/source, the status writer (kube/statuswriter,
// leader only), leader election (kube/leader), the per-Gateway data
// planes (kube/provisioner), and the ACME certificates written into
// Secrets (kube/acmecerts), for cmd; kube/kingress adds the KIngress
// source to it. With cmd, it and its sub-packages are the only ones that
// import client-go.
package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/internal/configstream"
	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/kube/acmecerts"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/kube/provisioner"
	"portico.dev/portico/kube/source"
	"portico.dev/portico/kube/statuswriter"
	"portico.dev/portico/translate"
)

// The client-side limits of the API requests Portico ships with
// (cmd/portico's --kube-api-qps, --kube-api-burst and --status-workers),
// which the benchmarks of bench/ run with too.
const (
	DefaultAPIQPS        = 200
	DefaultAPIBurst      = 400
	DefaultStatusWorkers = 8
)

// Cluster is the cluster's side of the pipeline: a source of snapshots
// (informers over every kind translate reads) and the outputs that talk to
// the API server (statuses, written by the elected leader only, and ACME
// certificates written into Secrets). Every replica serves traffic.
type Cluster struct {
	Kube    kubernetes.Interface
	Gateway gatewayclient.Interface
	// Metadata reads the Gateway API CRDs' bundle versions for the
	// GatewayClass SupportedVersion condition; nil skips the check.
	Metadata       metadata.Interface
	ControllerName gwv1.GatewayController
	Log            *zap.Logger
	LeaderElection leader.Election
	// StatusWorkers bounds the status updates in flight; 0 means 8.
	StatusWorkers int
	// ACME, when set, holds the certificates that WriteACME writes into
	// listeners' Secrets.
	ACME *acme.Manager
	// Dynamic reads PorticoParameters and BackendTrafficPolicies (and
	// writes the latter's status); nil: none are read, every
	// parametersRef to PorticoParameters is InvalidParameters and no
	// traffic policy applies.
	Dynamic dynamic.Interface
	// DataPlanes, when set, provisions the data planes of Gateways whose
	// class gives each Gateway its own (GEP-1762), while this replica
	// leads (kube/provisioner).
	DataPlanes *provision.Settings
	// DataPlaneListen, with DataPlanes, is where this replica serves the
	// provisioned data planes their configuration (provisioner.Server),
	// over TLS with the certificate of the Secret DataPlaneTLSSecret of
	// Portico's namespace (created when missing).
	DataPlaneListen    string
	DataPlaneTLSSecret string
	// SessionKey, when set, is the session persistence key the replicas
	// share (SessionKey's Secret): the data planes they serve get keys
	// derived from it, one per Gateway (configstream.DeriveSessionKey).
	SessionKey []byte
	// Challenges answer the ACME HTTP-01 challenges data planes are sent
	// (the ACME manager); nil answers none.
	Challenges configstream.ChallengeHandler

	// Hooks for metrics; each may be nil. They run on Portico's own
	// goroutines and must not block.
	OnLeader      func(leading bool)
	OnStatusWrite func(kind, result string)

	informers   *source.Informers
	writer      *statuswriter.Writer
	leading     atomic.Bool
	changed     func()
	mu          sync.Mutex
	crdProblems []string
	// waiting are, by Gateway with a data plane of its own, when the
	// configuration its Deployment does not say it applied was published
	// (zero: applied), as the last rebuild found them (DataPlaneLag).
	waiting     map[types.NamespacedName]time.Time
	acmeBatch   *acmeBatch // the latest, for acmeWriter
	acmeWake    chan struct{}
	provisioner *provisioner.Provisioner
	server      *provisioner.Server // with DataPlaneListen
}

// acmeBatch is what the ACME Secret writer works from: the wanted
// certificates and the Secrets of one snapshot.
type acmeBatch struct {
	wanted  []translate.ACMECertificate
	secrets []*corev1.Secret
}

// Run watches the cluster until ctx ends (pipeline.Source): it fills the
// informers' caches, calls ready, and then writes status while this
// replica leads. It returns an error only when it cannot run at all.
func (c *Cluster) Run(ctx context.Context, changed, ready func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.Kube == nil || c.Gateway == nil || c.Log == nil {
		return errors.New("cluster: Kube, Gateway and Log are required")
	}
	if err := c.LeaderElection.Validate(); err != nil {
		return err
	}
	c.changed = changed
	c.acmeWake = make(chan struct{}, 1)
	// Status-only events go to the writer, which tells its own echoes from
	// someone else's writes (c.writer is set before the informers start).
	statusChanged := func(o metav1.Object) { c.writer.StatusEvent(o) }
	in, err := source.New(c.Kube, c.Gateway, 0, source.Handlers{Changed: changed, StatusChanged: statusChanged})
	if err != nil {
		return err
	}
	if err := in.AddDataPlanes(ctx, c.Kube, c.Dynamic, c.DataPlanes != nil,
		source.Handlers{Changed: changed, StatusChanged: statusChanged}, c.Log); err != nil {
		return err
	}
	if err := in.AddClusterTrustBundles(c.Kube, source.Handlers{Changed: changed, StatusChanged: statusChanged}, c.Log); err != nil {
		return err
	}
	if err := in.AddTCPRoutes(c.Kube, c.Gateway, source.Handlers{Changed: changed, StatusChanged: statusChanged}, c.Log); err != nil {
		return err
	}
	if err := in.AddUDPRoutes(c.Kube, c.Gateway, source.Handlers{Changed: changed, StatusChanged: statusChanged}, c.Log); err != nil {
		return err
	}
	if err := in.AddTrafficPolicies(c.Kube, c.Dynamic, source.Handlers{Changed: changed, StatusChanged: statusChanged}, c.Log); err != nil {
		return err
	}
	if err := in.AddSecurityPolicies(c.Kube, c.Dynamic, source.Handlers{Changed: changed, StatusChanged: statusChanged}, c.Log); err != nil {
		return err
	}
	if err := in.AddClientPolicies(c.Kube, c.Dynamic, source.Handlers{Changed: changed, StatusChanged: statusChanged}, c.Log); err != nil {
		return err
	}
	if err := in.AddXTrafficPolicies(c.Kube, c.Dynamic, source.Handlers{Changed: changed, StatusChanged: statusChanged}, c.Log); err != nil {
		return err
	}
	c.informers = in
	if err := c.setUpDataPlanes(ctx); err != nil {
		return err
	}
	c.writer = statuswriter.New(c.Gateway, in.Listers(), c.controller(), c.Log.Named("status"),
		statuswriter.Options{Workers: c.StatusWorkers, Observe: c.OnStatusWrite, Dynamic: c.Dynamic})

	start := time.Now()
	in.Start(ctx)
	defer in.Shutdown()
	if err := in.WaitForSync(ctx, c.Log); err != nil {
		return nil // ctx ended before the caches filled
	}
	c.Log.Info("caches synced", zap.Duration("took", time.Since(start)))
	c.checkCRDs(ctx)
	ready()

	var wg sync.WaitGroup
	electErr := make(chan error, 1)
	wg.Go(func() { c.writer.Run(ctx) })
	wg.Go(func() {
		err := leader.Elect(ctx, c.Kube, c.LeaderElection, c.Log.Named("leader"), c.startLeading, c.stopLeading)
		if err != nil {
			cancel()
		}
		electErr <- err
	})
	if c.Metadata != nil {
		wg.Go(func() { c.recheckCRDs(ctx) })
	}
	if c.ACME != nil {
		wg.Go(func() { c.acmeWriter(ctx) })
	}
	if c.provisioner != nil {
		wg.Go(func() { c.provisioner.Run(ctx) })
	}
	if c.server != nil {
		wg.Go(func() { c.server.Run(ctx) })
	}
	wg.Wait()
	return <-electErr
}

func (c *Cluster) controller() gwv1.GatewayController {
	if c.ControllerName == "" {
		return wellknown.ControllerName
	}
	return c.ControllerName
}

// Snapshot lists the informers' caches (pipeline.Source).
func (c *Cluster) Snapshot() (*snapshot.Resources, error) {
	return c.informers.Snapshot()
}

// WriteStatuses hands the statuses of a rebuild, as translate.Finish
// decided them, to the status writer, which writes what differs while this
// replica leads (pipeline.Outputs.Statuses); changed nil means every
// status.
func (c *Cluster) WriteStatuses(st *status.Computed, changed *status.Changed, res *snapshot.Resources) {
	c.writer.Submit(st, changed, res)
}

// Facts are what this cluster knows that decides statuses beyond the
// snapshot (pipeline.Outputs.Facts): the installed CRDs of another version
// and, with data planes of their own, the configuration each is to
// acknowledge, which its hub published just before.
func (c *Cluster) Facts(res *snapshot.Resources) translate.Facts {
	c.mu.Lock()
	f := translate.Facts{CRDProblems: c.crdProblems}
	c.mu.Unlock()
	if c.server == nil {
		return f
	}
	applied := map[types.NamespacedName]string{}
	for _, d := range res.Deployments {
		applied[types.NamespacedName{Namespace: d.Namespace, Name: d.Name}] = d.Annotations[provision.AppliedVersionAnnotation]
	}
	waiting := map[types.NamespacedName]time.Time{}
	for _, gw := range res.Gateways {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		if current, at := c.server.Published(key); current != "" {
			if f.DataPlaneVersions == nil {
				f.DataPlaneVersions = map[types.NamespacedName]string{}
			}
			f.DataPlaneVersions[key] = current
			// The acknowledgement recorded on the Deployment, which every
			// replica reads, as translate.Finish does: not this replica's
			// hub's, which sees only the acknowledgements sent to it.
			if applied[types.NamespacedName{Namespace: gw.Namespace, Name: provision.Name(gw.Name, string(gw.Spec.GatewayClassName))}] == current {
				at = time.Time{}
			}
			waiting[key] = at
		}
	}
	c.mu.Lock()
	c.waiting = waiting
	c.mu.Unlock()
	return f
}

// DataPlaneLag says, for each Gateway with a data plane of its own, how
// long the configuration published for it has waited for its data plane
// to acknowledge it (0: acknowledged), as of the last rebuild, which an
// acknowledgement recorded on a Deployment triggers (metrics, at scrape).
func (c *Cluster) DataPlaneLag() map[string]time.Duration {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]time.Duration, len(c.waiting))
	for gw, since := range c.waiting {
		var lag time.Duration
		if !since.IsZero() {
			lag = max(now.Sub(since), 0)
		}
		out[gw.String()] = lag
	}
	return out
}

// WriteACME writes the certificates wanted into their Secrets, off the
// rebuild's goroutine (pipeline.Outputs.ACME).
func (c *Cluster) WriteACME(wanted []translate.ACMECertificate, res *snapshot.Resources) {
	if c.ACME == nil {
		return
	}
	c.mu.Lock()
	c.acmeBatch = &acmeBatch{wanted: wanted, secrets: res.Secrets}
	c.mu.Unlock()
	select {
	case c.acmeWake <- struct{}{}:
	default:
	}
}

// acmeWriter writes certificates into Secrets, always from the latest
// batch.
func (c *Cluster) acmeWriter(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.acmeWake:
		}
		c.mu.Lock()
		b := c.acmeBatch
		c.mu.Unlock()
		if b != nil {
			acmecerts.WriteSecrets(ctx, c.Kube, c.ACME, b.wanted, b.secrets, c.Log.Named("acme"))
		}
	}
}

// NewACMEEvents records the outcomes of c's ACME manager as Events on the
// Gateways and ListenerSets that declare the hostnames (use its Record as
// acme.Options.OnEvent); identity names the replica in their source.
// c.Kube, c.Gateway and c.Log must be set. Close stops it.
func NewACMEEvents(c *Cluster, identity string) *acmecerts.Events {
	return acmecerts.NewEvents(c.Kube, c.Gateway, identity, c.acmeNamespaces, c.Log)
}

// acmeNamespaces lists the namespaces of the Secrets the latest batch
// wants for host.
func (c *Cluster) acmeNamespaces(host string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	if c.acmeBatch != nil {
		for _, w := range c.acmeBatch.wanted {
			if w.Hostname == host && !slices.Contains(out, w.Secret.Namespace) {
				out = append(out, w.Secret.Namespace)
			}
		}
	}
	return out
}

// Leading reports whether this replica holds the leader lease.
func (c *Cluster) Leading() bool { return c.leading.Load() }

func (c *Cluster) startLeading(ctx context.Context) {
	c.leading.Store(true)
	if c.OnLeader != nil {
		c.OnLeader(true)
	}
	c.writer.StartLeading(ctx)
	if c.provisioner != nil {
		c.provisioner.StartLeading()
	}
}

func (c *Cluster) stopLeading() {
	if c.leading.Swap(false) {
		c.Log.Info("stopped leading")
	}
	if c.OnLeader != nil {
		c.OnLeader(false)
	}
}

// WriteDataPlanes hands the Gateways with data planes of their own to the
// provisioner, which applies them while this replica leads, and to the
// server of data planes (pipeline.Outputs.DataPlanes). Without
// Cluster.DataPlanes it does nothing.
func (c *Cluster) WriteDataPlanes(inputs []provision.Input, res *snapshot.Resources) {
	if c.provisioner != nil {
		c.provisioner.Submit(inputs, res)
	}
	if c.server != nil {
		c.server.Publish(inputs, res)
	}
}

// setUpDataPlanes prepares provisioning and, with DataPlaneListen, the
// server of data planes, whose certificate the provisioned Deployments
// carry, to trust it.
func (c *Cluster) setUpDataPlanes(ctx context.Context) error {
	if c.DataPlanes == nil {
		return nil
	}
	settings := *c.DataPlanes
	if c.DataPlaneListen != "" {
		srv, err := provisioner.Listen(ctx, c.Kube, provisioner.ServerOptions{
			Listen:     c.DataPlaneListen,
			Namespace:  c.LeaderElection.Namespace,
			Secret:     c.DataPlaneTLSSecret,
			Controller: settings.Controller,
			Challenges: c.Challenges,
			SessionKey: c.SessionKey,
		}, c.Log.Named("dataplanes"))
		if err != nil {
			return err
		}
		settings.ControllerCA = string(srv.CA)
		c.server = srv
	}
	c.provisioner = provisioner.New(c.Kube, settings, c.Leading, c.Log.Named("provision"))
	return nil
}

// ParseNamespacedName parses "namespace/name".
func ParseNamespacedName(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%q is not namespace/name", s)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// checkCRDs reads the installed CRD versions once; a failure to read them
// is logged and leaves the SupportedVersion condition as translate set it.
func (c *Cluster) checkCRDs(ctx context.Context) bool {
	if c.Metadata == nil {
		return false
	}
	problems, err := source.CheckCRDVersions(ctx, c.Metadata)
	if err != nil {
		c.Log.Warn("cannot check the Gateway API CRD versions", zap.Error(err))
		return false
	}
	sort.Strings(problems)
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := !slices.Equal(problems, c.crdProblems)
	c.crdProblems = problems
	if changed && len(problems) > 0 {
		c.Log.Warn("Gateway API CRDs of another version are installed; serving them on a best-effort basis", zap.Strings("problems", problems))
	}
	return changed
}

// recheckCRDs notices CRD upgrades, which do not touch any object Portico
// watches, and asks for a rebuild so that the statuses say so.
func (c *Cluster) recheckCRDs(ctx context.Context) {
	t := time.NewTicker(5 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.checkCRDs(ctx) {
				c.changed()
			}
		}
	}
}
