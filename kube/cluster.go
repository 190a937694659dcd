package kube

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/acme"
	"portico.dev/portico/proxy"
)

// Cluster serves the Gateway API objects of a Kubernetes cluster: informers
// feed the same translate path as standalone mode, every replica applies
// the result to its data plane, and the elected leader writes status.
type Cluster struct {
	Kube    kubernetes.Interface
	Gateway gatewayclient.Interface
	// Metadata reads the Gateway API CRDs' bundle versions for the
	// GatewayClass SupportedVersion condition; nil skips the check.
	Metadata   metadata.Interface
	Translator *Translator
	Runtime    *proxy.Runtime
	Log        *zap.Logger
	// MinHoldoff, Holdoff and MaxDelay debounce change events (see
	// Debouncer; MinHoldoff 0 keeps the holdoff fixed at Holdoff).
	MinHoldoff     time.Duration
	Holdoff        time.Duration
	MaxDelay       time.Duration
	LeaderElection LeaderElection
	// StatusWorkers bounds the status updates in flight; 0 means 8.
	StatusWorkers int
	// ACME, when set, obtains the certificates of listeners that opted in
	// to ACME (see acme.go), which are then written into their Secrets.
	// Its OnChange must call ACMEChanged.
	ACME *acme.Manager

	// Hooks for metrics; each may be nil. They run on Portico's own
	// goroutines and must not block.
	OnApply       func(ApplyReport)
	OnLeader      func(leading bool)
	OnStatusWrite func(kind, result string)

	// retryAfter is how long after a failed bind Portico tries again.
	retryAfter time.Duration

	mu          sync.Mutex
	generation  int64
	ready       bool
	crdProblems []string
	leading     atomic.Bool
	writer      *statusWriter
	debouncer   *Debouncer
	acmeMarker  atomic.Pointer[Debouncer]
	acmeBatch   *acmeBatch // the latest, for acmeWriter
	acmeWake    chan struct{}
}

// acmeBatch is what the ACME Secret writer works from: the wanted
// certificates and the Secrets of one snapshot.
type acmeBatch struct {
	wanted  []ACMECertificate
	secrets []*corev1.Secret
}

// ACMEChanged asks for a rebuild: a certificate arrived, was renewed, or
// an order failed.
func (c *Cluster) ACMEChanged() {
	if d := c.acmeMarker.Load(); d != nil {
		d.Mark()
	}
}

// acmeWriter writes certificates into Secrets off the rebuild path, always
// from the latest batch.
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
			writeACMESecrets(ctx, c.Kube, c.ACME, b.wanted, b.secrets, c.Log.Named("acme"))
		}
	}
}

// ApplyReport describes one rebuild.
type ApplyReport struct {
	Generation   int64
	Translate    time.Duration
	Apply        time.Duration
	Certificates int
	// Err is the error of applying the configuration; on a partial failure
	// (some ports could not be bound) it describes the ports left out.
	Err error
}

// Run watches the cluster and serves it until ctx ends. It returns an
// error only when it cannot run at all (a misconfigured leader election).
func (c *Cluster) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if c.Translator == nil || c.Runtime == nil || c.Kube == nil || c.Gateway == nil || c.Log == nil {
		return errors.New("cluster: Kube, Gateway, Translator, Runtime and Log are required")
	}
	if err := c.LeaderElection.validate(); err != nil {
		return err
	}
	c.debouncer = NewAdaptiveDebouncer(c.MinHoldoff, c.Holdoff, c.MaxDelay)
	c.acmeMarker.Store(c.debouncer)
	c.acmeWake = make(chan struct{}, 1)
	// Status-only events (mostly the echo of Portico's own writes) are
	// compared again after a pause long enough for the caches to have seen
	// those writes.
	statusDebouncer := NewDebouncer(time.Second, 5*time.Second)
	in, err := newInformers(c.Kube, c.Gateway, 0, eventHandlers{changed: c.debouncer.Mark, statusChanged: statusDebouncer.Mark})
	if err != nil {
		return err
	}
	c.writer = newStatusWriter(c.Gateway, in, c.Translator.ControllerName, c.Log.Named("status"))
	c.writer.observe = c.OnStatusWrite
	if c.StatusWorkers > 0 {
		c.writer.workers = c.StatusWorkers
	}

	start := time.Now()
	in.start(ctx)
	defer in.shutdown()
	if err := in.waitForSync(ctx, c.Log); err != nil {
		return nil // ctx ended before the caches filled
	}
	c.Log.Info("caches synced", zap.Duration("took", time.Since(start)))
	c.checkCRDs(ctx)
	c.rebuild(in)

	var wg sync.WaitGroup
	electErr := make(chan error, 1)
	wg.Go(func() { c.writer.run(ctx) })
	wg.Go(func() { statusDebouncer.Run(ctx, c.writer.resync) })
	wg.Go(func() {
		err := elect(ctx, c.Kube, c.LeaderElection, c.Log.Named("leader"), c.startLeading, c.stopLeading)
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
	c.debouncer.Run(ctx, func() { c.rebuild(in) })
	wg.Wait()
	return <-electErr
}

// Ready returns nil once a configuration was applied, and why not before.
func (c *Cluster) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ready {
		return errors.New("no configuration applied yet")
	}
	return nil
}

// Generation returns the number of rebuilds so far.
func (c *Cluster) Generation() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.generation
}

// Leading reports whether this replica holds the leader lease.
func (c *Cluster) Leading() bool { return c.leading.Load() }

func (c *Cluster) startLeading(ctx context.Context) {
	c.leading.Store(true)
	if c.OnLeader != nil {
		c.OnLeader(true)
	}
	c.writer.leading(ctx)
}

func (c *Cluster) stopLeading() {
	if c.leading.Swap(false) {
		c.Log.Info("stopped leading")
	}
	if c.OnLeader != nil {
		c.OnLeader(false)
	}
}

// rebuild translates the caches, applies the result and hands the
// statuses to the status writer. It runs on one goroutine at a time.
func (c *Cluster) rebuild(in *informers) {
	start := time.Now()
	res, err := in.snapshot()
	if err != nil {
		c.Log.Error("snapshot failed; the previous config keeps serving", zap.Error(err))
		return
	}
	if c.ACME != nil {
		res.ACMEErrors = c.ACME.Errors()
	}
	cfg, st := c.Translator.Translate(res)
	translated := time.Since(start)
	if c.ACME != nil {
		c.ACME.Want(acmeHostnames(st.ACME))
		c.mu.Lock()
		c.acmeBatch = &acmeBatch{wanted: st.ACME, secrets: res.Secrets}
		c.mu.Unlock()
		select {
		case c.acmeWake <- struct{}{}:
		default:
		}
	}

	c.mu.Lock()
	c.generation++
	cfg.Generation = c.generation
	crdProblems := c.crdProblems
	c.mu.Unlock()

	if len(crdProblems) > 0 {
		setUnsupportedVersion(st, crdProblems)
	}
	applyStart := time.Now()
	applied, applyErr := c.apply(cfg, st, res)
	applyTook := time.Since(applyStart)
	if applied {
		c.mu.Lock()
		c.ready = true
		c.mu.Unlock()
	}
	if c.OnApply != nil {
		c.OnApply(ApplyReport{Generation: cfg.Generation, Translate: translated, Apply: applyTook, Certificates: c.Translator.Certs.Len(), Err: applyErr})
	}
	fields := []zap.Field{zap.Int64("generation", cfg.Generation), zap.Duration("translate", translated), zap.Duration("apply", applyTook),
		zap.Int("gateways", len(res.Gateways)), zap.Int("listenerSets", len(res.ListenerSets)), zap.Int("httpRoutes", len(res.HTTPRoutes))}
	if applyErr != nil {
		c.Log.Error("config not fully applied", append(fields, zap.Error(applyErr))...)
	} else {
		c.Log.Info("config applied", fields...)
	}
	c.writer.submit(&statusBatch{st: st, versions: statusVersions(res)})
}

// apply puts cfg on the data plane. When some new ports cannot be bound,
// it applies everything else, reports the Gateways using those ports as not
// programmed and tries again later. It reports whether any configuration
// was applied.
func (c *Cluster) apply(cfg *proxy.Config, st *Statuses, res *Resources) (bool, error) {
	err := c.Runtime.Apply(cfg)
	if err == nil {
		return true, nil
	}
	// Ports already bound with the same protocol cannot fail; try those
	// first, then each new port on its own.
	type boundPort struct {
		address string
		number  int32
	}
	bound := map[boundPort]proxy.Protocol{}
	for _, p := range c.Runtime.Current().Ports {
		if c.Runtime.Addr(p.Address, p.Number) != nil {
			bound[boundPort{p.Address, p.Number}] = p.Protocol
		}
	}
	base := &proxy.Config{Generation: cfg.Generation, Endpoints: cfg.Endpoints, BackendTLSIDs: cfg.BackendTLSIDs, BackendClientCertIDs: cfg.BackendClientCertIDs}
	var fresh []*proxy.Port
	for _, p := range cfg.Ports {
		if proto, ok := bound[boundPort{p.Address, p.Number}]; ok && proto == p.Protocol {
			base.Ports = append(base.Ports, p)
		} else {
			fresh = append(fresh, p)
		}
	}
	if baseErr := c.Runtime.Apply(base); baseErr != nil {
		markNotProgrammed(st, res, nil, baseErr.Error())
		c.retryLater()
		return false, baseErr
	}
	failed := map[int32]error{}
	for _, p := range fresh {
		next := &proxy.Config{Generation: cfg.Generation, Endpoints: cfg.Endpoints, BackendTLSIDs: cfg.BackendTLSIDs, BackendClientCertIDs: cfg.BackendClientCertIDs, Ports: append(slices.Clone(base.Ports), p)}
		if err := c.Runtime.Apply(next); err != nil {
			failed[p.Number] = err
			continue
		}
		base = next
	}
	if len(failed) == 0 {
		return true, nil // the first failure did not repeat
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(failed)) {
		errs = append(errs, failed[n])
		markNotProgrammed(st, res, &n, failed[n].Error())
	}
	c.retryLater()
	return true, errors.Join(errs...)
}

func (c *Cluster) retryLater() {
	d := c.retryAfter
	if d == 0 {
		d = 10 * time.Second
	}
	time.AfterFunc(d, c.debouncer.Mark)
}

// reasonParentNotProgrammed is listed for the ListenerSet Programmed
// condition but has no constant in the API package.
const reasonParentNotProgrammed = "ParentNotProgrammed"

// markNotProgrammed turns Programmed False on every Gateway that has a
// programmed listener on port (every Gateway when port is nil), on its
// listeners and on its ListenerSets and their listeners. Accepted stays as
// it is: the configuration is valid, it is just not live.
func markNotProgrammed(st *Statuses, res *Resources, port *int32, msg string) {
	onPort := func(p gwv1.PortNumber, conds []metav1.Condition) bool {
		if port == nil {
			return true
		}
		return int32(p) == *port && meta.IsStatusConditionTrue(conds, string(gwv1.ListenerConditionProgrammed))
	}
	hit := map[types.NamespacedName]bool{}
	for _, gw := range res.Gateways {
		key := nn(gw.Namespace, gw.Name)
		gs, ok := st.Gateways[key]
		if !ok {
			continue
		}
		for _, l := range gw.Spec.Listeners {
			for _, ls := range gs.Listeners {
				if ls.Name == l.Name && onPort(l.Port, ls.Conditions) {
					hit[key] = true
				}
			}
		}
	}
	children := map[types.NamespacedName][]types.NamespacedName{}
	for _, ls := range res.ListenerSets {
		lsKey := nn(ls.Namespace, ls.Name)
		lss, ok := st.ListenerSets[lsKey]
		if !ok {
			continue
		}
		parent, ok := listenerSetParent(ls)
		if !ok {
			continue
		}
		children[parent] = append(children[parent], lsKey)
		for _, l := range ls.Spec.Listeners {
			for _, le := range lss.Listeners {
				if le.Name == l.Name && onPort(l.Port, le.Conditions) {
					hit[parent] = true
				}
			}
		}
	}
	for key := range hit {
		gs, ok := st.Gateways[key]
		if !ok {
			continue
		}
		gs.Conditions = unprogram(gs.Conditions, string(gwv1.GatewayConditionProgrammed), string(gwv1.GatewayReasonNoResources), msg, true)
		gs.Listeners = slices.Clone(gs.Listeners)
		for i := range gs.Listeners {
			gs.Listeners[i].Conditions = unprogram(gs.Listeners[i].Conditions, string(gwv1.ListenerConditionProgrammed), string(gwv1.ListenerReasonPending), msg, false)
		}
		st.Gateways[key] = gs
		for _, lsKey := range children[key] {
			lss := st.ListenerSets[lsKey]
			lss.Conditions = unprogram(lss.Conditions, string(gwv1.ListenerSetConditionProgrammed), reasonParentNotProgrammed, "The parent Gateway is not programmed: "+msg, false)
			lss.Listeners = slices.Clone(lss.Listeners)
			for i := range lss.Listeners {
				lss.Listeners[i].Conditions = unprogram(lss.Listeners[i].Conditions, string(gwv1.ListenerConditionProgrammed), string(gwv1.ListenerReasonPending), "The parent Gateway is not programmed", false)
			}
			st.ListenerSets[lsKey] = lss
		}
	}
}

// unprogram returns conds with condType False. Unless always is set, only a
// True condition is changed: a False one already says why.
func unprogram(conds []metav1.Condition, condType, reason, msg string, always bool) []metav1.Condition {
	out := slices.Clone(conds)
	for i, cnd := range out {
		if cnd.Type == condType && (always || cnd.Status == metav1.ConditionTrue) {
			out[i].Status = metav1.ConditionFalse
			out[i].Reason = reason
			out[i].Message = msg
		}
	}
	return out
}

// GatewayAddress is a status address: of type IPAddress when value parses
// as an IP, else Hostname.
func GatewayAddress(value string) gwv1.GatewayStatusAddress {
	t := gwv1.HostnameAddressType
	if _, err := netip.ParseAddr(value); err == nil {
		t = gwv1.IPAddressType
	}
	return gwv1.GatewayStatusAddress{Type: &t, Value: value}
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
	problems, err := checkCRDVersions(ctx, c.Metadata)
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
// watches.
func (c *Cluster) recheckCRDs(ctx context.Context) {
	t := time.NewTicker(5 * time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.checkCRDs(ctx) {
				c.debouncer.Mark()
			}
		}
	}
}
