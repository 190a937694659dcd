package kingress

import (
	"context"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/shared/pmap"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/translate"
)

// ProbeOptions tune the readiness probing of KIngresses.
type ProbeOptions struct {
	// Client sends the probes; nil: a client with a 2 s timeout that
	// keeps its connections to the replicas for the next round.
	Client *http.Client
	// Interval is the pause before a version whose probes failed is
	// probed again; 0 means 100 ms. It doubles up to 16 times that.
	Interval time.Duration
	// Parallel bounds the probes in flight at once, over every replica
	// and host of a round; 0 means 64.
	Parallel int
	// Grace is how long a new version of a KIngress may wait for its
	// probes before its status says LoadBalancerReady=Unknown: versions
	// served everywhere within it get one write, Ready. 0 means 1 s; a
	// negative value writes Unknown at once.
	Grace time.Duration
}

// kingressWriter writes the status of the KIngresses of Portico's class,
// while this replica leads: conditions from translate's results, and
// LoadBalancerReady once every ready replica answered a probe of every
// host with the hash of the KIngress's version.
type kingressWriter struct {
	k         *Knative
	log       *zap.Logger
	opts      ProbeOptions
	workers   int
	wake      chan struct{}
	probeWake chan struct{}

	mu sync.Mutex
	// results are those of the last rebuild submitted (submitted: there
	// was one).
	results   pmap.Map[types.NamespacedName, translate.KIngressResult]
	submitted bool
	replicas  []string // the ready replicas' addresses
	// replicaGen counts the changes of replicas: a probe round that
	// started before one does not prove a version served everywhere.
	replicaGen int
	probed     map[types.NamespacedName]string
	// want are the versions the prober is asked for (prober.go).
	want map[types.NamespacedName]*probeWant
	// dirty are the KIngresses to look at again: a new result, a probe
	// done, an update seen, a write that failed, a grace that ran out.
	// Only they are compared, so that one change among thousands of
	// KIngresses costs one.
	dirty map[types.NamespacedName]struct{}
	// all asks for every KIngress to be looked at (leadership gained).
	all bool

	rounds atomic.Int64 // probe rounds run (tests)
}

func newKIngressWriter(k *Knative, log *zap.Logger) *kingressWriter {
	opts := k.Probe
	if opts.Interval <= 0 {
		opts.Interval = 100 * time.Millisecond
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 64
	}
	if opts.Grace == 0 {
		opts.Grace = time.Second
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 2 * time.Second,
			Transport:     &http.Transport{MaxIdleConnsPerHost: opts.Parallel, IdleConnTimeout: 30 * time.Second},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	workers := k.Workers
	if workers <= 0 {
		workers = 8
	}
	return &kingressWriter{k: k, log: log, opts: opts, workers: workers,
		wake: make(chan struct{}, 1), probeWake: make(chan struct{}, 1),
		probed: map[types.NamespacedName]string{}, want: map[types.NamespacedName]*probeWant{},
		dirty: map[types.NamespacedName]struct{}{}}
}

func (w *kingressWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// submit takes the results of a rebuild and the replicas of its snapshot.
// When the rebuild names the KIngresses whose results changed since the
// one before (a delta), only they are looked at: one change among
// thousands costs one.
func (w *kingressWriter) submit(out *translate.KnativeOutput, res *snapshot.Resources) {
	results := out.Ingresses
	replicas := readyAddresses(res, w.k.Settings.LocalService)
	w.mu.Lock()
	replicasChanged := !slices.Equal(replicas, w.replicas)
	if replicasChanged {
		w.all = true
		w.replicaGen++
		// A replica gone and one come at its address later serves what
		// it was last given, not what the one before answered.
		for _, p := range w.want {
			maps.DeleteFunc(p.passed, func(t probeTarget, _ bool) bool {
				host, _, _ := net.SplitHostPort(t.addr)
				_, found := slices.BinarySearch(replicas, host)
				return !found
			})
		}
	}
	forget := func(key types.NamespacedName, r translate.KIngressResult, ok bool) {
		// A version probed before counts only while it is still the one
		// served: a KIngress deleted and created again is probed again.
		if hash, probed := w.probed[key]; probed && (!ok || r.Hash != hash) {
			delete(w.probed, key)
		}
		// Versions no longer served are not probed.
		if p := w.want[key]; p != nil && (!ok || r.Hash != p.hash || r.Conflict != "") {
			delete(w.want, key)
		}
	}
	if out.Changed != nil && w.submitted {
		for _, key := range out.Changed {
			r, ok := results.Get(key)
			if old, had := w.results.Get(key); ok && (!had || !sameResult(old, r)) {
				w.dirty[key] = struct{}{}
			}
			forget(key, r, ok)
		}
	} else {
		for key, r := range results.All() {
			if old, ok := w.results.Get(key); !ok || !sameResult(old, r) {
				w.dirty[key] = struct{}{}
			}
		}
		for key := range w.probed {
			r, ok := results.Get(key)
			forget(key, r, ok)
		}
		for key := range w.want {
			r, ok := results.Get(key)
			forget(key, r, ok)
		}
	}
	w.results, w.replicas, w.submitted = results, replicas, true
	w.mu.Unlock()
	if replicasChanged {
		select {
		case w.probeWake <- struct{}{}:
		default:
		}
	}
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

// run writes statuses after every change while leading, and probes what
// they wait for; a tick retries writes that failed.
func (w *kingressWriter) run(ctx context.Context) {
	go w.probeLoop(ctx)
	leader.RunWhileLeading(ctx, w.wake, w.k.Cluster.Leading, w.pass)
}

// statusWrite is one KIngress whose stored status differs from the one it
// should have.
type statusWrite struct {
	key types.NamespacedName
	ing *knative.Ingress
	st  knative.IngressStatus
}

// pass compares the KIngresses marked dirty with the status they should
// have, asks the prober for the versions they wait for and writes what
// differs, several at a time. A version not yet served everywhere is not
// written before its grace ends: most are probed within it, and then
// their one write says Ready.
func (w *kingressWriter) pass(ctx context.Context, fresh bool) {
	w.mu.Lock()
	w.all = w.all || fresh
	results, replicas := w.results, w.replicas
	dirty := w.dirty
	if w.all {
		dirty = make(map[types.NamespacedName]struct{}, results.Len())
		for key := range results.Keys() {
			dirty[key] = struct{}{}
		}
		w.all = false
	}
	w.dirty = map[types.NamespacedName]struct{}{}
	w.mu.Unlock()
	now := metav1.Now()
	var writes []statusWrite
	for key := range dirty {
		r, ok := results.Get(key)
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
		inGrace := false
		if !probed && r.Conflict == "" && len(replicas) > 0 {
			p := w.wantProbe(key, r, now.Time)
			// Only the probes are awaited: a KIngress with problems is
			// not Ready whatever they find, and says so at once.
			inGrace = len(r.Problems) == 0 && now.Sub(p.since) < w.opts.Grace
		}
		w.mu.Unlock()
		if inGrace {
			continue // marked dirty again when its probes pass or its grace ends
		}
		want := w.status(ing, r, probed, now)
		if sameConditions(ing.Status.Conditions, want.Conditions) && ing.Status.ObservedGeneration == want.ObservedGeneration &&
			sameLoadBalancer(ing.Status.PublicLoadBalancer, want.PublicLoadBalancer) &&
			sameLoadBalancer(ing.Status.PrivateLoadBalancer, want.PrivateLoadBalancer) {
			continue
		}
		writes = append(writes, statusWrite{key, ing, want})
	}
	w.writeAll(ctx, writes)
}

// writeAll sends writes, at most w.workers at once: the client's rate
// limit, not one round trip after another, paces a pass of thousands.
// Those that fail are looked at again on the next tick.
func (w *kingressWriter) writeAll(ctx context.Context, writes []statusWrite) {
	next := make(chan statusWrite)
	var wg sync.WaitGroup
	for range min(w.workers, len(writes)) {
		wg.Go(func() {
			for sw := range next {
				err := w.write(ctx, sw.ing, sw.st)
				w.k.report(err)
				if err == nil || ctx.Err() != nil {
					continue
				}
				w.log.Warn("KIngress status not written; will retry", zap.String("kingress", sw.key.String()), zap.Error(err))
				w.mu.Lock()
				w.dirty[sw.key] = struct{}{} // on the next tick
				w.mu.Unlock()
			}
		})
	}
	for _, sw := range writes {
		next <- sw
	}
	close(next)
	wg.Wait()
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
