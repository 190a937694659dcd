package kingress

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/translate"
)

// ProbeOptions tune the readiness probing of KIngresses.
type ProbeOptions struct {
	// Client sends the probes; nil: a client with a 2 s timeout that
	// keeps no connections.
	Client *http.Client
	// Interval is the pause between two rounds of a probe that failed;
	// 0 means 100 ms. It doubles up to 16 times that.
	Interval time.Duration
	// Parallel bounds the KIngresses probed at once; 0 means 64.
	Parallel int
}

// kingressWriter writes the status of the KIngresses of Portico's class,
// while this replica leads: conditions from translate's results, and
// LoadBalancerReady once every ready replica answered a probe of every
// host with the hash of the KIngress's version.
type kingressWriter struct {
	k    *Knative
	log  *zap.Logger
	opts ProbeOptions
	sem  chan struct{}
	wake chan struct{}

	mu       sync.Mutex
	results  map[types.NamespacedName]translate.KIngressResult
	replicas []string // the ready replicas' addresses
	probed   map[types.NamespacedName]string
	probing  map[types.NamespacedName]string
	// dirty are the KIngresses to look at again: a new result, a probe
	// done, an update seen, a write that failed. Only they are compared,
	// so that one change among thousands of KIngresses costs one.
	dirty map[types.NamespacedName]struct{}
	// all asks for every KIngress to be looked at (leadership gained).
	all bool
}

func newKIngressWriter(k *Knative, log *zap.Logger) *kingressWriter {
	opts := k.Probe
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if opts.Interval <= 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 64
	}
	return &kingressWriter{k: k, log: log, opts: opts, sem: make(chan struct{}, opts.Parallel),
		wake: make(chan struct{}, 1), probed: map[types.NamespacedName]string{}, probing: map[types.NamespacedName]string{},
		dirty: map[types.NamespacedName]struct{}{}}
}

func (w *kingressWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// submit takes the results of a rebuild and the replicas of its snapshot.
func (w *kingressWriter) submit(results map[types.NamespacedName]translate.KIngressResult, res *snapshot.Resources) {
	replicas := readyAddresses(res, w.k.Settings.LocalService)
	w.mu.Lock()
	if !slices.Equal(replicas, w.replicas) {
		w.all = true
	}
	for key, r := range results {
		if old, ok := w.results[key]; !ok || !sameResult(old, r) {
			w.dirty[key] = struct{}{}
		}
	}
	w.results, w.replicas = results, replicas
	// A version probed before counts only while it is still the one
	// served: a KIngress deleted and created again is probed again.
	for key, hash := range w.probed {
		if results[key].Hash != hash {
			delete(w.probed, key)
		}
	}
	w.mu.Unlock()
	w.poke()
}

// markDirty asks for one KIngress to be looked at again.
func (w *kingressWriter) markDirty(key types.NamespacedName) {
	w.mu.Lock()
	w.dirty[key] = struct{}{}
	w.mu.Unlock()
	w.poke()
}

func sameResult(a, b translate.KIngressResult) bool {
	return a.Generation == b.Generation && a.Hash == b.Hash && a.Conflict == b.Conflict &&
		slices.Equal(a.Problems, b.Problems) && slices.Equal(a.External, b.External) && slices.Equal(a.Local, b.Local)
}

// readyAddresses lists the ready endpoint addresses of a Service, sorted.
func readyAddresses(res *snapshot.Resources, svc types.NamespacedName) []string {
	var out []string
	for _, es := range res.EndpointSlices {
		if es.Namespace != svc.Namespace || es.Labels[discoveryv1.LabelServiceName] != svc.Name {
			continue
		}
		for _, ep := range es.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			out = append(out, ep.Addresses...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// run writes statuses after every change while leading; a tick retries
// writes that failed.
func (w *kingressWriter) run(ctx context.Context) {
	leader.RunWhileLeading(ctx, w.wake, w.k.Cluster.Leading, w.pass)
}

// pass compares the KIngresses marked dirty with the status they should
// have, starts the probes they need and writes what differs.
func (w *kingressWriter) pass(ctx context.Context, fresh bool) {
	w.mu.Lock()
	w.all = w.all || fresh
	results, replicas := w.results, w.replicas
	dirty := leader.TakeDirty(&w.dirty, &w.all, results)
	w.mu.Unlock()
	now := metav1.Now()
	for key := range dirty {
		r, ok := results[key]
		if !ok {
			continue
		}
		obj, ok, err := w.k.informer.GetStore().GetByKey(key.String())
		if err != nil || !ok {
			continue
		}
		ing := obj.(*knative.Ingress)
		if ing.Generation != r.Generation || ing.Annotations[knative.IngressClassAnnotation] != w.k.Settings.IngressClassOrDefault() {
			continue // a newer translation is on its way
		}
		w.mu.Lock()
		probed := w.probed[key] == r.Hash
		if !probed && r.Conflict == "" && alreadyReady(ing) {
			// A leader probed this generation already (before a restart
			// or a change of leader): it stays Ready, and is not
			// written again.
			w.probed[key], probed = r.Hash, true
		}
		probing := w.probing[key] == r.Hash
		w.mu.Unlock()
		if !probed && !probing && r.Conflict == "" && len(replicas) > 0 {
			w.startProbe(ctx, key, r, replicas)
		}
		want := w.status(ing, r, probed, now)
		if sameConditions(ing.Status.Conditions, want.Conditions) && ing.Status.ObservedGeneration == want.ObservedGeneration &&
			sameLoadBalancer(ing.Status.PublicLoadBalancer, want.PublicLoadBalancer) &&
			sameLoadBalancer(ing.Status.PrivateLoadBalancer, want.PrivateLoadBalancer) {
			continue
		}
		err = w.write(ctx, ing, want)
		w.k.report(err)
		if err != nil {
			w.log.Warn("KIngress status not written; will retry", zap.String("kingress", key.String()), zap.Error(err))
			w.mu.Lock()
			w.dirty[key] = struct{}{} // on the next tick
			w.mu.Unlock()
		}
	}
}

// report tells OnStatusWrite about a Knative status write.
func (k *Knative) report(err error) {
	if obs := k.OnStatusWrite; obs != nil {
		result := "ok"
		switch {
		case apierrors.IsConflict(err):
			result = "conflict"
		case err != nil:
			result = "error"
		}
		obs("Knative", result)
	}
}

// alreadyReady reports whether ing's stored status says its current
// generation is served everywhere.
func alreadyReady(ing *knative.Ingress) bool {
	if ing.Status.ObservedGeneration != ing.Generation {
		return false
	}
	for _, c := range ing.Status.Conditions {
		if c.Type == knative.ConditionLoadBalancerReady {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// status is the status ing should have.
func (w *kingressWriter) status(ing *knative.Ingress, r translate.KIngressResult, probed bool, now metav1.Time) knative.IngressStatus {
	st := knative.IngressStatus{ObservedGeneration: r.Generation,
		Conditions: ingressConditions(ing.Status.Conditions, r, probed, now)}
	if probed && r.Conflict == "" {
		st.PublicLoadBalancer = &knative.LoadBalancerStatus{Ingress: []knative.LoadBalancerIngressStatus{
			{DomainInternal: serviceDomain(w.k.ExternalService, w.k.Settings.ClusterDomain)}}}
		st.PrivateLoadBalancer = &knative.LoadBalancerStatus{Ingress: []knative.LoadBalancerIngressStatus{
			{DomainInternal: serviceDomain(w.k.Settings.LocalService, w.k.Settings.ClusterDomain)}}}
	}
	return st
}

// write patches the status of ing: the whole status, in which an absent
// load balancer is removed.
func (w *kingressWriter) write(ctx context.Context, ing *knative.Ingress, st knative.IngressStatus) error {
	return patchStatus(ctx, w.k, knative.IngressResource, ing.Namespace, ing.Name, ing.ResourceVersion, map[string]any{
		"observedGeneration":  st.ObservedGeneration,
		"conditions":          st.Conditions,
		"publicLoadBalancer":  st.PublicLoadBalancer,
		"privateLoadBalancer": st.PrivateLoadBalancer,
	})
}

// startProbe probes, off the writer's goroutine, every replica for every
// host of r until all answer with r's hash or a newer version replaces it.
func (w *kingressWriter) startProbe(ctx context.Context, key types.NamespacedName, r translate.KIngressResult, replicas []string) {
	w.mu.Lock()
	w.probing[key] = r.Hash
	w.mu.Unlock()
	go func() {
		select {
		case w.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		defer func() { <-w.sem }()
		ok := w.probeUntilDone(ctx, key, r, replicas)
		w.mu.Lock()
		if w.probing[key] == r.Hash {
			delete(w.probing, key)
		}
		if ok {
			w.probed[key] = r.Hash
		}
		w.mu.Unlock()
		w.markDirty(key)
	}()
}

func (w *kingressWriter) probeUntilDone(ctx context.Context, key types.NamespacedName, r translate.KIngressResult, replicas []string) bool {
	pause := w.opts.Interval
	for {
		if w.probeAll(ctx, r, replicas) {
			return true
		}
		w.mu.Lock()
		current := w.results[key].Hash
		w.mu.Unlock()
		if current != r.Hash {
			return false // superseded
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
		pause = min(2*pause, 16*w.opts.Interval)
	}
}

// probeAll reports whether every replica serves r's version of every host
// on the gateway of its visibility.
func (w *kingressWriter) probeAll(ctx context.Context, r translate.KIngressResult, replicas []string) bool {
	s := w.k.Settings
	for _, ip := range replicas {
		for _, h := range r.External {
			if !w.probeOne(ctx, net.JoinHostPort(ip, strconv.Itoa(int(s.ExternalHTTPPort))), h, r.Hash) {
				return false
			}
		}
		for _, h := range r.Local {
			if !w.probeOne(ctx, net.JoinHostPort(ip, strconv.Itoa(int(s.LocalHTTPPort))), h, r.Hash) {
				return false
			}
		}
	}
	return true
}

// probeOne asks one replica which version of host it serves.
func (w *kingressWriter) probeOne(ctx context.Context, addr, host, hash string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return false
	}
	req.Host = host
	req.Header.Set(config.KnativeProbeHeader, config.KnativePorticoProbe)
	req.Header.Set(config.KnativeHashHeader, config.KnativeHashOverride)
	resp, err := w.opts.Client.Do(req)
	if err != nil {
		w.log.Debug("probe failed", zap.String("addr", addr), zap.String("host", host), zap.Error(err))
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && resp.Header.Get(config.KnativeHashHeader) == hash
}
