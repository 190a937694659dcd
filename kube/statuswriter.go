package kube

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/resources"
	"portico.dev/portico/status"
)

// statusFieldManager names Portico in the managedFields of what it writes.
const statusFieldManager = "portico"

// statusBatch is the result of one translation for the status writer.
type statusBatch struct {
	st *status.Computed
	// versions holds the identity and generation of every object the
	// statuses were computed from. A status computed for another generation
	// (or another incarnation) than the object now has is not written: the
	// change that moved it triggers a rebuild whose batch will follow.
	versions map[statusKey]objectVersion
}

type objectVersion struct {
	uid        types.UID
	generation int64
}

type statusKey struct {
	kind string
	types.NamespacedName
}

// statusWriter writes computed statuses to the API server, off the data
// plane's path: Submit never blocks, only the latest batch matters, and
// nothing is written unless this replica leads.
type statusWriter struct {
	client     gatewayclient.Interface
	in         *informers
	controller gwv1.GatewayController
	log        *zap.Logger
	now        func() time.Time
	workers    int
	// observe is told the result of every update sent ("ok", "conflict",
	// "error"); may be nil.
	observe func(kind, result string)

	mu     sync.Mutex
	latest *statusBatch
	lead   context.Context // while leading: cancelled when the lease is lost
	kick   chan struct{}

	writes atomic.Int64 // successful updates, for tests and logs
	passes atomic.Int64 // completed passes while leading
	// done is the last batch written in full.
	done atomic.Pointer[statusBatch]
}

func newStatusWriter(client gatewayclient.Interface, in *informers, controller gwv1.GatewayController, log *zap.Logger) *statusWriter {
	return &statusWriter{
		client:     client,
		in:         in,
		controller: controller,
		log:        log,
		now:        time.Now,
		workers:    8,
		kick:       make(chan struct{}, 1),
	}
}

// submit hands over the statuses of a new translation, replacing any batch
// not yet written.
func (w *statusWriter) submit(b *statusBatch) {
	w.mu.Lock()
	w.latest = b
	w.mu.Unlock()
	w.poke()
}

// resync compares the latest batch against the stored objects again, for
// when someone else changed a status.
func (w *statusWriter) resync() { w.poke() }

// leading is called when this replica becomes leader; ctx ends when it
// stops leading. Becoming leader writes everything that differs once.
func (w *statusWriter) leading(ctx context.Context) {
	w.mu.Lock()
	w.lead = ctx
	w.mu.Unlock()
	w.poke()
}

func (w *statusWriter) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// state returns the batch to write and the leader context, or nil when
// there is nothing to do.
func (w *statusWriter) state() (*statusBatch, context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.latest == nil || w.lead == nil || w.lead.Err() != nil {
		return nil, nil
	}
	return w.latest, w.lead
}

// idle reports whether the latest batch has been written in full.
func (w *statusWriter) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest != nil && w.done.Load() == w.latest
}

// superseded reports whether a newer batch arrived since b.
func (w *statusWriter) superseded(b *statusBatch) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.latest != b
}

// run writes until ctx ends.
func (w *statusWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		b, lead := w.state()
		if b == nil {
			continue
		}
		// A pass ends early when the lease is lost or when ctx ends.
		passCtx, cancel := context.WithCancel(lead)
		stop := context.AfterFunc(ctx, cancel)
		w.pass(passCtx, b)
		stop()
		cancel()
	}
}

// statusJob is one object whose stored status may need an update.
type statusJob struct {
	key   statusKey
	write func(ctx context.Context) (bool, error)
}

// pass brings every object of b up to date, several at a time.
func (w *statusWriter) pass(ctx context.Context, b *statusBatch) {
	jobs := w.jobs(b)
	if len(jobs) == 0 {
		w.passes.Add(1)
		w.done.Store(b)
		return
	}
	start := time.Now()
	var wrote, failed atomic.Int64
	sem := make(chan struct{}, max(w.workers, 1))
	var wg sync.WaitGroup
	for _, j := range jobs {
		if ctx.Err() != nil || w.superseded(b) {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			changed, err := j.write(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				failed.Add(1)
				w.log.Warn("status not written", zap.String("kind", j.key.kind), zap.Stringer("object", j.key.NamespacedName), zap.Error(err))
			case changed:
				wrote.Add(1)
			}
		})
	}
	wg.Wait()
	if ctx.Err() == nil {
		w.passes.Add(1)
		if failed.Load() == 0 && !w.superseded(b) {
			w.done.Store(b)
		}
	}
	if wrote.Load() > 0 || failed.Load() > 0 {
		w.log.Info("status written", zap.Int64("updated", wrote.Load()), zap.Int64("failed", failed.Load()), zap.Duration("took", time.Since(start)))
	}
	if failed.Load() > 0 && ctx.Err() == nil {
		// Try again later rather than spin against a failing API server.
		time.AfterFunc(5*time.Second, w.poke)
	}
}

// jobs lists the objects whose cached status differs from the computed one.
// The comparison against the cache is repeated against the API server's copy
// when an update conflicts.
func (w *statusWriter) jobs(b *statusBatch) []statusJob {
	ts := metav1.NewTime(w.now().Truncate(time.Second))
	gws := w.client.GatewayV1()
	jobs := kindJobs(w, b, ts, statusKind[*gwv1.GatewayClass, gwv1.GatewayClassStatus]{
		name:   "GatewayClass",
		client: func(string) statusClient[*gwv1.GatewayClass] { return gws.GatewayClasses() },
		merge:  status.MergeGatewayClass,
	}, fromComputed(classKeys(b.st.GatewayClasses), func(k types.NamespacedName) (*gwv1.GatewayClass, error) { return w.in.gatewayClasses.Get(k.Name) }))
	jobs = append(jobs, kindJobs(w, b, ts, statusKind[*gwv1.Gateway, gwv1.GatewayStatus]{
		name:   "Gateway",
		client: func(ns string) statusClient[*gwv1.Gateway] { return gws.Gateways(ns) },
		merge:  status.MergeGateway,
	}, fromComputed(b.st.Gateways, func(k types.NamespacedName) (*gwv1.Gateway, error) {
		return w.in.gateways.Gateways(k.Namespace).Get(k.Name)
	}))...)
	jobs = append(jobs, kindJobs(w, b, ts, statusKind[*gwv1.ListenerSet, gwv1.ListenerSetStatus]{
		name:   "ListenerSet",
		client: func(ns string) statusClient[*gwv1.ListenerSet] { return gws.ListenerSets(ns) },
		merge:  status.MergeListenerSet,
	}, fromComputed(b.st.ListenerSets, func(k types.NamespacedName) (*gwv1.ListenerSet, error) {
		return w.in.listenerSets.ListenerSets(k.Namespace).Get(k.Name)
	}))...)
	// Every route is visited, not only those with computed entries: a route
	// that no longer attaches to Portico must lose the entries Portico wrote.
	routes, _ := w.in.httpRoutes.List(labels.Everything())
	jobs = append(jobs, kindJobs(w, b, ts, statusKind[*gwv1.HTTPRoute, []gwv1.RouteParentStatus]{
		name:   "HTTPRoute",
		client: func(ns string) statusClient[*gwv1.HTTPRoute] { return gws.HTTPRoutes(ns) },
		merge: func(o *gwv1.HTTPRoute, c []gwv1.RouteParentStatus, now metav1.Time) (*gwv1.HTTPRoute, bool) {
			return status.MergeHTTPRoute(o, c, w.controller, now)
		},
	}, fromCache(routes, b.st.HTTPRoutes, func(r *gwv1.HTTPRoute) bool { return status.HasParentsOf(r.Status.Parents, w.controller) }))...)
	grpcRoutes, _ := w.in.grpcRoutes.List(labels.Everything())
	jobs = append(jobs, kindJobs(w, b, ts, statusKind[*gwv1.GRPCRoute, []gwv1.RouteParentStatus]{
		name:   "GRPCRoute",
		client: func(ns string) statusClient[*gwv1.GRPCRoute] { return gws.GRPCRoutes(ns) },
		merge: func(o *gwv1.GRPCRoute, c []gwv1.RouteParentStatus, now metav1.Time) (*gwv1.GRPCRoute, bool) {
			return status.MergeGRPCRoute(o, c, w.controller, now)
		},
	}, fromCache(grpcRoutes, b.st.GRPCRoutes, func(r *gwv1.GRPCRoute) bool { return status.HasParentsOf(r.Status.Parents, w.controller) }))...)
	tlsRoutes, _ := w.in.tlsRoutes.List(labels.Everything())
	jobs = append(jobs, kindJobs(w, b, ts, statusKind[*gwv1.TLSRoute, []gwv1.RouteParentStatus]{
		name:   "TLSRoute",
		client: func(ns string) statusClient[*gwv1.TLSRoute] { return gws.TLSRoutes(ns) },
		merge: func(o *gwv1.TLSRoute, c []gwv1.RouteParentStatus, now metav1.Time) (*gwv1.TLSRoute, bool) {
			return status.MergeTLSRoute(o, c, w.controller, now)
		},
	}, fromCache(tlsRoutes, b.st.TLSRoutes, func(r *gwv1.TLSRoute) bool { return status.HasParentsOf(r.Status.Parents, w.controller) }))...)
	// Every policy with entries of Portico's is visited too, so that
	// entries for Gateways no longer routing to its targets go.
	policies, _ := w.in.backendTLS.List(labels.Everything())
	jobs = append(jobs, kindJobs(w, b, ts, statusKind[*gwv1.BackendTLSPolicy, []gwv1.PolicyAncestorStatus]{
		name:   "BackendTLSPolicy",
		client: func(ns string) statusClient[*gwv1.BackendTLSPolicy] { return gws.BackendTLSPolicies(ns) },
		merge: func(o *gwv1.BackendTLSPolicy, c []gwv1.PolicyAncestorStatus, now metav1.Time) (*gwv1.BackendTLSPolicy, bool) {
			return status.MergeBackendTLSPolicy(o, c, w.controller, now)
		},
	}, fromCache(policies, b.st.BackendTLSPolicies, func(p *gwv1.BackendTLSPolicy) bool { return status.HasAncestorsOf(p.Status.Ancestors, w.controller) }))...)
	sortJobs(jobs)
	return jobs
}

// sortJobs puts parents before children, so a watcher sees a Gateway
// programmed no later than the routes on it; ties in name order for stable
// logs.
func sortJobs(jobs []statusJob) {
	order := map[string]int{"GatewayClass": 0, "Gateway": 1, "ListenerSet": 2, "HTTPRoute": 3, "GRPCRoute": 3, "TLSRoute": 3, "BackendTLSPolicy": 4}
	slices.SortFunc(jobs, func(a, b statusJob) int {
		if c := cmp.Compare(order[a.key.kind], order[b.key.kind]); c != 0 {
			return c
		}
		return cmp.Compare(a.key.String(), b.key.String())
	})
}

// statusKind is how the writer reads, merges and writes the status of one
// kind; T is the object, S its computed status.
type statusKind[T metav1.Object, S any] struct {
	name string
	// client is the kind's typed client for a namespace.
	client func(namespace string) statusClient[T]
	merge  func(T, S, metav1.Time) (T, bool)
}

// statusClient is what the typed clients of every kind have in common.
type statusClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// pending is one cached object with the status computed for it.
type pending[T, S any] struct {
	key      types.NamespacedName
	cached   T
	computed S
}

// fromComputed pairs each computed status with its cached object; objects
// gone from the cache are left out.
func fromComputed[T, S any](computed map[types.NamespacedName]S, cached func(types.NamespacedName) (T, error)) []pending[T, S] {
	out := make([]pending[T, S], 0, len(computed))
	for key, c := range computed {
		if obj, err := cached(key); err == nil {
			out = append(out, pending[T, S]{key, obj, c})
		}
	}
	return out
}

// fromCache pairs every cached object that has a computed status, or
// entries of Portico's to remove, with its computed status.
func fromCache[T metav1.Object, S any](cached []T, computed map[types.NamespacedName]S, hasOurs func(T) bool) []pending[T, S] {
	var out []pending[T, S]
	for _, obj := range cached {
		key := nn(obj.GetNamespace(), obj.GetName())
		c, ours := computed[key]
		if ours || hasOurs(obj) {
			out = append(out, pending[T, S]{key, obj, c})
		}
	}
	return out
}

// classKeys keys GatewayClass statuses like those of namespaced kinds.
func classKeys(in map[string]gwv1.GatewayClassStatus) map[types.NamespacedName]gwv1.GatewayClassStatus {
	out := make(map[types.NamespacedName]gwv1.GatewayClassStatus, len(in))
	for name, s := range in {
		out[types.NamespacedName{Name: name}] = s
	}
	return out
}

// kindJobs lists the objects of one kind whose status must be written.
func kindJobs[T metav1.Object, S any](w *statusWriter, b *statusBatch, ts metav1.Time, k statusKind[T, S], objs []pending[T, S]) []statusJob {
	var jobs []statusJob
	for _, o := range objs {
		key := statusKey{k.name, o.key}
		if _, changed := k.merge(o.cached, o.computed, ts); !changed {
			continue
		}
		jobs = append(jobs, statusJob{key, func(ctx context.Context) (bool, error) {
			client := k.client(o.key.Namespace)
			return writeStatus(ctx, w, key, b.versions[key], o.cached,
				func(ctx context.Context) (T, error) { return client.Get(ctx, o.key.Name, metav1.GetOptions{}) },
				func(obj T) (T, bool) { return k.merge(obj, o.computed, ts) },
				func(ctx context.Context, obj T) error {
					_, err := client.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: statusFieldManager})
					return err
				})
		}})
	}
	return jobs
}

// writeStatus updates one object's status: first against the cached copy,
// then, on a conflict, against a fresh one from the API server, until the
// update goes through or there is nothing left to write. It reports whether
// it wrote.
func writeStatus[T metav1.Object](ctx context.Context, w *statusWriter, key statusKey, want objectVersion, cached T,
	get func(context.Context) (T, error),
	merge func(T) (T, bool),
	update func(context.Context, T) error,
) (bool, error) {
	obj := cached
	first := true
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			fresh, err := get(ctx)
			if err != nil {
				return err
			}
			obj = fresh
		}
		first = false
		if want.uid != "" && (obj.GetUID() != want.uid || obj.GetGeneration() != want.generation) {
			return nil // computed for another version; a rebuild follows
		}
		updated, changed := merge(obj)
		if !changed {
			return nil
		}
		err := update(ctx, updated)
		switch {
		case err == nil:
			wrote = true
			w.writes.Add(1)
			w.report(key.kind, "ok")
		case apierrors.IsConflict(err):
			w.report(key.kind, "conflict")
		default:
			w.report(key.kind, "error")
		}
		return err
	})
	if apierrors.IsNotFound(err) {
		return wrote, nil // deleted meanwhile: nothing to report on
	}
	if err != nil {
		return wrote, fmt.Errorf("update %s %s status: %w", key.kind, key.NamespacedName, err)
	}
	return wrote, nil
}

func (w *statusWriter) report(kind, result string) {
	if w.observe != nil {
		w.observe(kind, result)
	}
}

// statusVersions records the identity and generation of every object a
// batch may write, from the snapshot it was computed from.
func statusVersions(res *resources.Resources) map[statusKey]objectVersion {
	out := make(map[statusKey]objectVersion, len(res.GatewayClasses)+len(res.Gateways)+len(res.ListenerSets)+len(res.HTTPRoutes))
	add := func(kind string, o metav1.Object) {
		out[statusKey{kind, nn(o.GetNamespace(), o.GetName())}] = objectVersion{o.GetUID(), o.GetGeneration()}
	}
	for _, o := range res.GatewayClasses {
		add("GatewayClass", o)
	}
	for _, o := range res.Gateways {
		add("Gateway", o)
	}
	for _, o := range res.ListenerSets {
		add("ListenerSet", o)
	}
	for _, o := range res.HTTPRoutes {
		add("HTTPRoute", o)
	}
	for _, o := range res.GRPCRoutes {
		add("GRPCRoute", o)
	}
	for _, o := range res.TLSRoutes {
		add("TLSRoute", o)
	}
	for _, o := range res.BackendTLSPolicies {
		add("BackendTLSPolicy", o)
	}
	return out
}
