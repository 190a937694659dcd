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
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// statusFieldManager names Portico in the managedFields of what it writes.
const statusFieldManager = "portico"

// statusBatch is the result of one translation for the status writer.
type statusBatch struct {
	st *Statuses
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
	var jobs []statusJob
	ts := metav1.NewTime(w.now().Truncate(time.Second))
	gws := w.client.GatewayV1()

	for name, computed := range b.st.GatewayClasses {
		cached, err := w.in.gatewayClasses.Get(name)
		if err != nil {
			continue
		}
		key := statusKey{"GatewayClass", types.NamespacedName{Name: name}}
		if _, changed := mergeGatewayClass(cached, computed, ts); !changed {
			continue
		}
		jobs = append(jobs, statusJob{key, func(ctx context.Context) (bool, error) {
			return writeStatus(ctx, w, key, b.versions[key], cached,
				func(ctx context.Context) (*gwv1.GatewayClass, error) {
					return gws.GatewayClasses().Get(ctx, name, metav1.GetOptions{})
				},
				func(o *gwv1.GatewayClass) (*gwv1.GatewayClass, bool) { return mergeGatewayClass(o, computed, ts) },
				func(ctx context.Context, o *gwv1.GatewayClass) error {
					_, err := gws.GatewayClasses().UpdateStatus(ctx, o, metav1.UpdateOptions{FieldManager: statusFieldManager})
					return err
				})
		}})
	}
	for nn, computed := range b.st.Gateways {
		cached, err := w.in.gateways.Gateways(nn.Namespace).Get(nn.Name)
		if err != nil {
			continue
		}
		key := statusKey{"Gateway", nn}
		if _, changed := mergeGateway(cached, computed, ts); !changed {
			continue
		}
		jobs = append(jobs, statusJob{key, func(ctx context.Context) (bool, error) {
			return writeStatus(ctx, w, key, b.versions[key], cached,
				func(ctx context.Context) (*gwv1.Gateway, error) {
					return gws.Gateways(nn.Namespace).Get(ctx, nn.Name, metav1.GetOptions{})
				},
				func(o *gwv1.Gateway) (*gwv1.Gateway, bool) { return mergeGateway(o, computed, ts) },
				func(ctx context.Context, o *gwv1.Gateway) error {
					_, err := gws.Gateways(nn.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{FieldManager: statusFieldManager})
					return err
				})
		}})
	}
	for nn, computed := range b.st.ListenerSets {
		cached, err := w.in.listenerSets.ListenerSets(nn.Namespace).Get(nn.Name)
		if err != nil {
			continue
		}
		key := statusKey{"ListenerSet", nn}
		if _, changed := mergeListenerSet(cached, computed, ts); !changed {
			continue
		}
		jobs = append(jobs, statusJob{key, func(ctx context.Context) (bool, error) {
			return writeStatus(ctx, w, key, b.versions[key], cached,
				func(ctx context.Context) (*gwv1.ListenerSet, error) {
					return gws.ListenerSets(nn.Namespace).Get(ctx, nn.Name, metav1.GetOptions{})
				},
				func(o *gwv1.ListenerSet) (*gwv1.ListenerSet, bool) { return mergeListenerSet(o, computed, ts) },
				func(ctx context.Context, o *gwv1.ListenerSet) error {
					_, err := gws.ListenerSets(nn.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{FieldManager: statusFieldManager})
					return err
				})
		}})
	}
	// Every route is visited, not only those with computed entries: a route
	// that no longer attaches to Portico must lose the entries Portico wrote.
	routes, _ := w.in.httpRoutes.List(labels.Everything())
	for _, cached := range routes {
		nn := types.NamespacedName{Namespace: cached.Namespace, Name: cached.Name}
		computed, ours := b.st.HTTPRoutes[nn]
		if !ours && !hasParentsOf(cached.Status.Parents, w.controller) {
			continue
		}
		key := statusKey{"HTTPRoute", nn}
		if _, changed := mergeHTTPRoute(cached, computed, w.controller, ts); !changed {
			continue
		}
		jobs = append(jobs, statusJob{key, func(ctx context.Context) (bool, error) {
			return writeStatus(ctx, w, key, b.versions[key], cached,
				func(ctx context.Context) (*gwv1.HTTPRoute, error) {
					return gws.HTTPRoutes(nn.Namespace).Get(ctx, nn.Name, metav1.GetOptions{})
				},
				func(o *gwv1.HTTPRoute) (*gwv1.HTTPRoute, bool) {
					return mergeHTTPRoute(o, computed, w.controller, ts)
				},
				func(ctx context.Context, o *gwv1.HTTPRoute) error {
					_, err := gws.HTTPRoutes(nn.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{FieldManager: statusFieldManager})
					return err
				})
		}})
	}
	// Every policy with entries of Portico's is visited too, so that
	// entries for Gateways no longer routing to its targets go.
	policies, _ := w.in.backendTLS.List(labels.Everything())
	for _, cached := range policies {
		nn := types.NamespacedName{Namespace: cached.Namespace, Name: cached.Name}
		computed, ours := b.st.BackendTLSPolicies[nn]
		if !ours && !hasAncestorsOf(cached.Status.Ancestors, w.controller) {
			continue
		}
		key := statusKey{"BackendTLSPolicy", nn}
		if _, changed := mergeBackendTLSPolicy(cached, computed, w.controller, ts); !changed {
			continue
		}
		jobs = append(jobs, statusJob{key, func(ctx context.Context) (bool, error) {
			return writeStatus(ctx, w, key, b.versions[key], cached,
				func(ctx context.Context) (*gwv1.BackendTLSPolicy, error) {
					return gws.BackendTLSPolicies(nn.Namespace).Get(ctx, nn.Name, metav1.GetOptions{})
				},
				func(o *gwv1.BackendTLSPolicy) (*gwv1.BackendTLSPolicy, bool) {
					return mergeBackendTLSPolicy(o, computed, w.controller, ts)
				},
				func(ctx context.Context, o *gwv1.BackendTLSPolicy) error {
					_, err := gws.BackendTLSPolicies(nn.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{FieldManager: statusFieldManager})
					return err
				})
		}})
	}
	// Parents before children, so a watcher sees a Gateway programmed no
	// later than the routes on it; ties in name order for stable logs.
	order := map[string]int{"GatewayClass": 0, "Gateway": 1, "ListenerSet": 2, "HTTPRoute": 3, "BackendTLSPolicy": 4}
	slices.SortFunc(jobs, func(a, b statusJob) int {
		if c := cmp.Compare(order[a.key.kind], order[b.key.kind]); c != 0 {
			return c
		}
		return cmp.Compare(a.key.String(), b.key.String())
	})
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

// The merge functions return a copy of obj with the computed status merged
// in, and whether that differs from obj's stored status.

func mergeGatewayClass(obj *gwv1.GatewayClass, computed gwv1.GatewayClassStatus, now metav1.Time) (*gwv1.GatewayClass, bool) {
	status := computed
	status.Conditions = stampConditions(computed.Conditions, obj.Status.Conditions, now)
	if apiequality.Semantic.DeepEqual(status, obj.Status) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status = status
	return out, true
}

func mergeGateway(obj *gwv1.Gateway, computed gwv1.GatewayStatus, now metav1.Time) (*gwv1.Gateway, bool) {
	status := gatewayStatus(obj.Status, computed, now)
	if apiequality.Semantic.DeepEqual(status, obj.Status) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status = status
	return out, true
}

func mergeListenerSet(obj *gwv1.ListenerSet, computed gwv1.ListenerSetStatus, now metav1.Time) (*gwv1.ListenerSet, bool) {
	status := listenerSetStatus(obj.Status, computed, now)
	if apiequality.Semantic.DeepEqual(status, obj.Status) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status = status
	return out, true
}

// mergeHTTPRoute replaces Portico's parent entries and keeps every other
// controller's. Entries are compared regardless of order, so Portico never
// rewrites a route only to move its entries after someone else's.
func mergeHTTPRoute(obj *gwv1.HTTPRoute, computed []gwv1.RouteParentStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.HTTPRoute, bool) {
	status := routeStatus(obj.Status.RouteStatus, computed, controller, now)
	if status.Parents == nil {
		// The field is required: no entries left is an empty list, not null.
		status.Parents = []gwv1.RouteParentStatus{}
	}
	if apiequality.Semantic.DeepEqual(sortedParents(status.Parents), sortedParents(obj.Status.Parents)) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status.RouteStatus = status
	return out, true
}

func sortedParents(in []gwv1.RouteParentStatus) []gwv1.RouteParentStatus {
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(a, b gwv1.RouteParentStatus) int {
		if c := cmp.Compare(a.ControllerName, b.ControllerName); c != 0 {
			return c
		}
		return cmp.Compare(parentRefKey(a.ParentRef), parentRefKey(b.ParentRef))
	})
	return out
}

// mergeBackendTLSPolicy replaces Portico's ancestor entries and keeps every
// other controller's. It reports whether anything changed.
func mergeBackendTLSPolicy(obj *gwv1.BackendTLSPolicy, computed []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController, now metav1.Time) (*gwv1.BackendTLSPolicy, bool) {
	status := ancestorStatus(obj.Status, computed, controller, now)
	if apiequality.Semantic.DeepEqual(sortedAncestors(status.Ancestors), sortedAncestors(obj.Status.Ancestors)) {
		return obj, false
	}
	out := obj.DeepCopy()
	out.Status = status
	return out, true
}

func sortedAncestors(in []gwv1.PolicyAncestorStatus) []gwv1.PolicyAncestorStatus {
	out := slices.Clone(in)
	slices.SortStableFunc(out, func(a, b gwv1.PolicyAncestorStatus) int {
		if c := cmp.Compare(a.ControllerName, b.ControllerName); c != 0 {
			return c
		}
		return cmp.Compare(parentRefKey(a.AncestorRef), parentRefKey(b.AncestorRef))
	})
	return out
}

func hasAncestorsOf(ancestors []gwv1.PolicyAncestorStatus, controller gwv1.GatewayController) bool {
	return slices.ContainsFunc(ancestors, func(a gwv1.PolicyAncestorStatus) bool { return a.ControllerName == controller })
}

func hasParentsOf(parents []gwv1.RouteParentStatus, controller gwv1.GatewayController) bool {
	return slices.ContainsFunc(parents, func(p gwv1.RouteParentStatus) bool { return p.ControllerName == controller })
}

// statusVersions records the identity and generation of every object a
// batch may write, from the snapshot it was computed from.
func statusVersions(res *Resources) map[statusKey]objectVersion {
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
	for _, o := range res.BackendTLSPolicies {
		add("BackendTLSPolicy", o)
	}
	return out
}
