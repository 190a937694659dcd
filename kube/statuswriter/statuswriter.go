// Package statuswriter writes the statuses translate decided to the API
// server while this replica leads: one generic path for every kind, which
// merges with what is stored and writes only what differs, working from
// what each translation changed rather than from every status.
package statuswriter

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
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
	"portico.dev/portico/internal/shared/debounce"
	"portico.dev/portico/internal/shared/pmap"
	"portico.dev/portico/kube/source"
)

// statusUpdate is what one translation hands the status writer.
type statusUpdate struct {
	// st holds every status; changed names those that may differ from
	// the update's before (nil: any may). A Computed is never changed, so
	// the writer keeps it as it is handed.
	st      *status.Computed
	changed *status.Changed
	// versions holds the identity and generation of the objects the
	// statuses were computed from: of every object when changed is nil,
	// else of those changed names. A status computed for another
	// generation (or another incarnation) than the object now has is not
	// written: the change that moved it triggers a rebuild whose update
	// will follow.
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

// Writer writes computed statuses to the API server, off the data
// plane's path: Submit never blocks, and nothing is written unless this
// replica leads. It keeps the statuses of its own, brought up to date by
// the updates it is handed, and works from what they changed: after a
// change of one object at 100,000, it compares and writes what that change
// touched, not every status. Every status is compared again when it starts
// leading, after a full translation, when someone else may have written a
// status (Resync), and after a failure.
type Writer struct {
	client     gatewayclient.Interface
	dynamic    dynamic.Interface // nil: Portico's own kinds are not written
	in         source.Listers
	controller gwv1.GatewayController
	log        *zap.Logger
	now        func() time.Time
	workers    int
	// observe is told the result of every update sent ("ok", "conflict",
	// "error"); may be nil.
	observe func(kind, result string)

	mu      sync.Mutex
	pending []*statusUpdate // not yet taken by run
	// compareAll asks run for a pass over every status.
	compareAll bool
	received   bool            // an update arrived
	clean      bool            // every update taken was written in full
	lead       context.Context // while leading: cancelled when the lease is lost
	kick       chan struct{}

	// Only run's goroutine uses these: the statuses and versions of the
	// updates taken, and what the next pass compares.
	cur      *status.Computed
	versions map[statusKey]objectVersion
	all      bool
	dirty    map[statusKey]bool
	// backlog is what a pass interrupted by a newer update had not
	// started, in its order: the next pass writes what the update made
	// dirty, then goes on with it. Starting over instead would compare
	// every status again at each interruption; at 100,000 objects a full
	// pass is minutes of writes, each of which echoes back as an update,
	// so it would never finish.
	backlog []statusJob

	// Status-only events are either the echo of this writer's own
	// updates or someone else's write, which the writer must compare
	// again (foreign: foreignWrites' Mark, unless a test counts them). At 100,000 objects a
	// comparison of every status is seconds of CPU: one after every write
	// of its own, as before, cost more than the writes. An echo often
	// comes before the update's answer, so an event for an object with an
	// update in flight waits for the answer (early).
	foreign func()
	echoMu  sync.Mutex
	echoes  map[types.UID]string // resourceVersion an answered update produced
	flight  map[types.UID]bool   // an update sent and not answered (one at a time per object)
	early   map[types.UID]string // resourceVersion of the last event during them

	foreignWrites *debounce.Debouncer

	writes atomic.Int64 // successful updates, for tests and logs
	passes atomic.Int64 // completed passes while leading
	// deltaCompared counts the objects passes over what changed compared
	// (tests).
	deltaCompared atomic.Int64
	// fullCompares counts the comparisons of every status (tests).
	fullCompares atomic.Int64
}

// Options are what a Writer may be given beyond its clients.
type Options struct {
	// Workers bounds the updates in flight; 0 means 8.
	Workers int
	// Observe is told the result of every update sent ("ok", "conflict",
	// "error"); may be nil. It runs on the writer's goroutines and must
	// not block.
	Observe func(kind, result string)
	// Dynamic writes the status of Portico's own kinds
	// (BackendTrafficPolicy); nil: it is not written.
	Dynamic dynamic.Interface
}

// New returns a Writer of the statuses of the objects in, read from the
// informers' caches, for the GatewayClasses of controller. Run starts it.
func New(client gatewayclient.Interface, in source.Listers, controller gwv1.GatewayController, log *zap.Logger, opts Options) *Writer {
	w := &Writer{
		client:     client,
		in:         in,
		controller: controller,
		log:        log,
		now:        time.Now,
		workers:    8,
		observe:    opts.Observe,
		dynamic:    opts.Dynamic,
		kick:       make(chan struct{}, 1),
		dirty:      map[statusKey]bool{},
		echoes:     map[types.UID]string{},
		flight:     map[types.UID]bool{},
		early:      map[types.UID]string{},
		// Someone else's writes are compared again after a pause long
		// enough for the caches to have seen them, and a burst of them
		// once.
		foreignWrites: debounce.New(time.Second, 5*time.Second),
	}
	w.foreign = w.foreignWrites.Mark
	if opts.Workers > 0 {
		w.workers = opts.Workers
	}
	return w
}

// Submit hands the writer the statuses of a rebuild, as translate.Finish
// decided them, from the snapshot res; it never blocks. changed names the
// statuses that may differ from those of the rebuild before (nil: any
// may); GatewayClasses (a handful, which the CRD check may change without
// any object changing) are compared every time. An update of every status
// replaces those not yet taken.
func (w *Writer) Submit(st *status.Computed, changed *status.Changed, res *snapshot.Resources) {
	u := &statusUpdate{st: st, changed: changed}
	if changed == nil {
		u.versions = statusVersions(res)
	} else {
		u.versions = changedVersions(res, changed)
	}
	w.submit(u)
}

func (w *Writer) submit(u *statusUpdate) {
	w.mu.Lock()
	if u.changed == nil {
		w.pending = w.pending[:0]
	}
	w.pending = append(w.pending, u)
	w.received, w.clean = true, false
	w.mu.Unlock()
	w.poke()
}

// Resync compares every status against the stored objects again, for
// when someone else changed a status.
func (w *Writer) Resync() {
	w.mu.Lock()
	w.compareAll, w.clean = true, false
	w.mu.Unlock()
	w.poke()
}

// StartLeading is called when this replica becomes leader; ctx ends when
// it stops leading. Becoming leader writes everything that differs once.
func (w *Writer) StartLeading(ctx context.Context) {
	w.mu.Lock()
	w.lead = ctx
	w.compareAll, w.clean = true, false
	w.mu.Unlock()
	w.poke()
}

// Stats are the writer's counters, read for tests and benchmarks.
type Stats struct {
	// Idle: every status submitted has been written.
	Idle bool
	// Writes counts the successful updates.
	Writes int64
	// Passes counts the passes completed while leading.
	Passes int64
	// DeltaCompared counts the objects that passes over what changed
	// compared.
	DeltaCompared int64
	// FullCompares counts the comparisons of every status.
	FullCompares int64
}

// Stats reads the writer's counters.
func (w *Writer) Stats() Stats {
	return Stats{
		Idle:          w.idle(),
		Writes:        w.writes.Load(),
		Passes:        w.passes.Load(),
		DeltaCompared: w.deltaCompared.Load(),
		FullCompares:  w.fullCompares.Load(),
	}
}

// maxEchoes bounds the echoes awaited: one whose event never comes (the
// informer relisted instead) would otherwise stay. Past it they are
// forgotten, and their events, if they come, are taken for foreign.
const maxEchoes = 1 << 17

// StatusEvent sorts a status-only event of o (source.Handlers'
// StatusChanged): the echo of an update of the writer's is dropped,
// anything else is compared again.
func (w *Writer) StatusEvent(o metav1.Object) {
	w.echoMu.Lock()
	uid, rv := o.GetUID(), o.GetResourceVersion()
	switch {
	case w.echoes[uid] == rv && rv != "":
		delete(w.echoes, uid)
	case w.flight[uid]:
		w.early[uid] = rv // decided when the update is answered
	default:
		w.echoMu.Unlock()
		w.foreign()
		return
	}
	w.echoMu.Unlock()
}

// sending records an update of o about to be sent.
func (w *Writer) sending(o metav1.Object) {
	w.echoMu.Lock()
	w.flight[o.GetUID()] = true
	w.echoMu.Unlock()
}

// answered records the answer to an update of the object uid: stored is
// the resourceVersion it stored, "" when it failed. An event that came
// meanwhile was foreign unless it is stored's.
func (w *Writer) answered(uid types.UID, stored string) {
	w.echoMu.Lock()
	delete(w.flight, uid)
	rv, early := w.early[uid]
	delete(w.early, uid)
	isEcho := early && stored != "" && rv == stored
	if stored != "" && !isEcho {
		if len(w.echoes) >= maxEchoes {
			clear(w.echoes)
		}
		w.echoes[uid] = stored
	}
	w.echoMu.Unlock()
	if early && !isEcho {
		w.foreign()
	}
}

func (w *Writer) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// take brings the writer's statuses up to date with the updates submitted
// and returns the leader context, nil when there is nothing to write.
func (w *Writer) take() context.Context {
	w.mu.Lock()
	updates := w.pending
	w.pending = nil
	if w.compareAll {
		w.compareAll, w.all = false, true
	}
	lead := w.lead
	w.mu.Unlock()
	for _, u := range updates {
		w.apply(u)
	}
	if w.cur == nil || lead == nil || lead.Err() != nil {
		// Not leading: what changed meanwhile is compared in full once
		// this replica leads.
		w.all, w.dirty, w.backlog = true, map[statusKey]bool{}, nil
		return nil
	}
	if !w.all && len(w.dirty) == 0 && len(w.backlog) == 0 {
		w.finished()
		return nil
	}
	return lead
}

// apply takes one update into the writer's statuses: its own, which hold
// every status, and marks what it changed dirty.
func (w *Writer) apply(u *statusUpdate) {
	if u.changed == nil || w.cur == nil {
		// The first update is a full one: a translation without memory.
		w.cur, w.versions, w.all = u.st, u.versions, true
		w.dirty = map[statusKey]bool{}
		if w.versions == nil {
			w.versions = map[statusKey]objectVersion{}
		}
		return
	}
	for key, v := range u.versions {
		w.versions[key] = v
	}
	w.cur = u.st
	markDirty(w.dirty, "Gateway", u.changed.Gateways)
	markDirty(w.dirty, "ListenerSet", u.changed.ListenerSets)
	markDirty(w.dirty, "HTTPRoute", u.changed.HTTPRoutes)
	for name := range u.st.GatewayClasses.Keys() {
		w.dirty[statusKey{"GatewayClass", types.NamespacedName{Name: name}}] = true
	}
}

func markDirty(dirty map[statusKey]bool, kind string, keys []types.NamespacedName) {
	for _, key := range keys {
		dirty[statusKey{kind, key}] = true
	}
}

// finished records that every update taken has been written, unless
// another arrived meanwhile.
func (w *Writer) finished() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 && !w.compareAll {
		w.clean = true
	}
}

// idle reports whether every status submitted has been written.
func (w *Writer) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.received && w.clean
}

// superseded reports whether an update arrived since the pass started.
func (w *Writer) superseded() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) > 0 || w.compareAll
}

// Run writes until ctx ends.
func (w *Writer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { w.foreignWrites.Run(ctx, w.Resync) })
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		lead := w.take()
		if lead == nil {
			continue
		}
		// A pass ends early when the lease is lost or when ctx ends.
		passCtx, cancel := context.WithCancel(lead)
		stop := context.AfterFunc(ctx, cancel)
		w.pass(passCtx)
		stop()
		cancel()
	}
}

// statusJob is one object whose stored status may need an update.
type statusJob struct {
	key   statusKey
	write func(ctx context.Context) (bool, error)
}

// pass brings the objects to compare (every one, or the dirty ones) up to
// date, several at a time. What it could not finish stays to compare.
func (w *Writer) pass(ctx context.Context) {
	jobs := w.jobs()
	start := time.Now()
	var wrote, failed atomic.Int64
	sem := make(chan struct{}, max(w.workers, 1))
	var wg sync.WaitGroup
	interrupted := false
	for i, j := range jobs {
		if ctx.Err() != nil || w.superseded() {
			interrupted = true
			if ctx.Err() == nil {
				// Every dirty object and, for a full pass, every
				// differing one has a job, done or in the backlog.
				w.backlog = slices.Clone(jobs[i:])
				w.all, w.dirty = false, map[statusKey]bool{}
			}
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
	}
	if ctx.Err() == nil && !interrupted && failed.Load() == 0 {
		w.all, w.dirty = false, map[statusKey]bool{}
		w.finished()
	}
	if interrupted && ctx.Err() == nil {
		w.poke() // take what superseded it, and go on
	}
	if wrote.Load() > 0 || failed.Load() > 0 {
		w.log.Info("status written", zap.Int64("updated", wrote.Load()), zap.Int64("failed", failed.Load()), zap.Duration("took", time.Since(start)))
	}
	if failed.Load() > 0 && ctx.Err() == nil {
		// Try again later rather than spin against a failing API server.
		w.all = true
		time.AfterFunc(5*time.Second, w.poke)
	}
}

// jobs lists the objects whose cached status differs from the computed
// one, among every object (w.all) or the dirty ones. The comparison against
// the cache is repeated against the API server's copy when an update
// conflicts.
func (w *Writer) jobs() []statusJob {
	ts := metav1.NewTime(w.now().Truncate(time.Second))
	k := w.kinds()
	st := w.cur
	classes := classKeys(st.GatewayClasses)
	var jobs []statusJob
	if !w.all {
		w.deltaCompared.Add(int64(len(w.dirty)))
		jobs = kindJobs(w, ts, k.class, fromKeys(w.dirtyOf("GatewayClass"), classes, k.getClass, nil))
		jobs = append(jobs, kindJobs(w, ts, k.gateway, fromKeys(w.dirtyOf("Gateway"), st.Gateways, k.getGateway, nil))...)
		jobs = append(jobs, kindJobs(w, ts, k.listenerSet, fromKeys(w.dirtyOf("ListenerSet"), st.ListenerSets, k.getListenerSet, nil))...)
		// A route that lost its status (no longer attached to Portico)
		// loses the entries Portico wrote.
		jobs = append(jobs, kindJobs(w, ts, k.route, fromKeys(w.dirtyOf("HTTPRoute"), st.HTTPRoutes, k.getRoute, k.routeIsOurs))...)
		sortJobs(jobs)
		// What the newer updates made dirty has been compared again: its
		// backlogged job would write the status before them.
		for _, j := range w.backlog {
			if !w.dirty[j.key] {
				jobs = append(jobs, j)
			}
		}
		w.backlog = nil
		return jobs
	}
	w.backlog = nil
	w.fullCompares.Add(1)
	jobs = kindJobs(w, ts, k.class, fromComputed(classes, k.getClass))
	jobs = append(jobs, kindJobs(w, ts, k.gateway, fromComputed(st.Gateways, k.getGateway))...)
	jobs = append(jobs, kindJobs(w, ts, k.listenerSet, fromComputed(st.ListenerSets, k.getListenerSet))...)
	// Every route is visited, not only those with computed entries: a route
	// that no longer attaches to Portico must lose the entries Portico wrote.
	routes, _ := w.in.HTTPRoutes.List(labels.Everything())
	jobs = append(jobs, kindJobs(w, ts, k.route, fromCache(routes, st.HTTPRoutes, k.routeIsOurs))...)
	jobs = append(jobs, w.otherJobs(ts)...)
	sortJobs(jobs)
	return jobs
}

// dirtyOf lists the dirty objects of one kind.
func (w *Writer) dirtyOf(kind string) []types.NamespacedName {
	var keys []types.NamespacedName
	for k := range w.dirty {
		if k.kind == kind {
			keys = append(keys, k.NamespacedName)
		}
	}
	return keys
}

// writerKinds are the kinds a delta may change, and how to read their
// cached objects.
type writerKinds struct {
	class          statusKind[*gwv1.GatewayClass, gwv1.GatewayClassStatus]
	gateway        statusKind[*gwv1.Gateway, gwv1.GatewayStatus]
	listenerSet    statusKind[*gwv1.ListenerSet, gwv1.ListenerSetStatus]
	route          statusKind[*gwv1.HTTPRoute, []gwv1.RouteParentStatus]
	getClass       func(types.NamespacedName) (*gwv1.GatewayClass, error)
	getGateway     func(types.NamespacedName) (*gwv1.Gateway, error)
	getListenerSet func(types.NamespacedName) (*gwv1.ListenerSet, error)
	getRoute       func(types.NamespacedName) (*gwv1.HTTPRoute, error)
	routeIsOurs    func(*gwv1.HTTPRoute) bool
}

func (w *Writer) kinds() writerKinds {
	gws := w.client.GatewayV1()
	return writerKinds{
		class: statusKind[*gwv1.GatewayClass, gwv1.GatewayClassStatus]{
			name:   "GatewayClass",
			client: func(string) statusClient[*gwv1.GatewayClass] { return gws.GatewayClasses() },
			merge:  status.MergeGatewayClass,
		},
		gateway: statusKind[*gwv1.Gateway, gwv1.GatewayStatus]{
			name:   "Gateway",
			client: func(ns string) statusClient[*gwv1.Gateway] { return gws.Gateways(ns) },
			merge:  status.MergeGateway,
		},
		listenerSet: statusKind[*gwv1.ListenerSet, gwv1.ListenerSetStatus]{
			name:   "ListenerSet",
			client: func(ns string) statusClient[*gwv1.ListenerSet] { return gws.ListenerSets(ns) },
			merge:  status.MergeListenerSet,
		},
		route: statusKind[*gwv1.HTTPRoute, []gwv1.RouteParentStatus]{
			name:   "HTTPRoute",
			client: func(ns string) statusClient[*gwv1.HTTPRoute] { return gws.HTTPRoutes(ns) },
			merge: func(o *gwv1.HTTPRoute, c []gwv1.RouteParentStatus, now metav1.Time) (*gwv1.HTTPRoute, bool) {
				return status.MergeHTTPRoute(o, c, w.controller, now)
			},
		},
		getClass: func(k types.NamespacedName) (*gwv1.GatewayClass, error) { return w.in.GatewayClasses.Get(k.Name) },
		getGateway: func(k types.NamespacedName) (*gwv1.Gateway, error) {
			return w.in.Gateways.Gateways(k.Namespace).Get(k.Name)
		},
		getListenerSet: func(k types.NamespacedName) (*gwv1.ListenerSet, error) {
			return w.in.ListenerSets.ListenerSets(k.Namespace).Get(k.Name)
		},
		getRoute: func(k types.NamespacedName) (*gwv1.HTTPRoute, error) {
			return w.in.HTTPRoutes.HTTPRoutes(k.Namespace).Get(k.Name)
		},
		routeIsOurs: func(r *gwv1.HTTPRoute) bool { return status.HasParentsOf(r.Status.Parents, w.controller) },
	}
}

// otherJobs lists the GRPCRoutes, TLSRoutes, TCPRoutes, UDPRoutes and BackendTLSPolicies to
// write, which only a full translation changes.
func (w *Writer) otherJobs(ts metav1.Time) []statusJob {
	gws := w.client.GatewayV1()
	st := w.cur
	var jobs []statusJob
	grpcRoutes, _ := w.in.GRPCRoutes.List(labels.Everything())
	jobs = append(jobs, kindJobs(w, ts, statusKind[*gwv1.GRPCRoute, []gwv1.RouteParentStatus]{
		name:   "GRPCRoute",
		client: func(ns string) statusClient[*gwv1.GRPCRoute] { return gws.GRPCRoutes(ns) },
		merge: func(o *gwv1.GRPCRoute, c []gwv1.RouteParentStatus, now metav1.Time) (*gwv1.GRPCRoute, bool) {
			return status.MergeGRPCRoute(o, c, w.controller, now)
		},
	}, fromCache(grpcRoutes, st.GRPCRoutes, func(r *gwv1.GRPCRoute) bool { return status.HasParentsOf(r.Status.Parents, w.controller) }))...)
	tlsRoutes, _ := w.in.TLSRoutes.List(labels.Everything())
	jobs = append(jobs, kindJobs(w, ts, statusKind[*gwv1.TLSRoute, []gwv1.RouteParentStatus]{
		name:   "TLSRoute",
		client: func(ns string) statusClient[*gwv1.TLSRoute] { return gws.TLSRoutes(ns) },
		merge: func(o *gwv1.TLSRoute, c []gwv1.RouteParentStatus, now metav1.Time) (*gwv1.TLSRoute, bool) {
			return status.MergeTLSRoute(o, c, w.controller, now)
		},
	}, fromCache(tlsRoutes, st.TLSRoutes, func(r *gwv1.TLSRoute) bool { return status.HasParentsOf(r.Status.Parents, w.controller) }))...)
	if w.in.TCPRoutes != nil { // nil: the CRD is not installed
		tcpRoutes, _ := w.in.TCPRoutes.List(labels.Everything())
		jobs = append(jobs, kindJobs(w, ts, statusKind[*gwv1.TCPRoute, []gwv1.RouteParentStatus]{
			name:   "TCPRoute",
			client: func(ns string) statusClient[*gwv1.TCPRoute] { return gws.TCPRoutes(ns) },
			merge: func(o *gwv1.TCPRoute, c []gwv1.RouteParentStatus, now metav1.Time) (*gwv1.TCPRoute, bool) {
				return status.MergeTCPRoute(o, c, w.controller, now)
			},
		}, fromCache(tcpRoutes, st.TCPRoutes, func(r *gwv1.TCPRoute) bool { return status.HasParentsOf(r.Status.Parents, w.controller) }))...)
	}
	if w.in.UDPRoutes != nil { // nil: the CRD is not installed
		udpRoutes, _ := w.in.UDPRoutes.List(labels.Everything())
		jobs = append(jobs, kindJobs(w, ts, statusKind[*gwv1.UDPRoute, []gwv1.RouteParentStatus]{
			name:   "UDPRoute",
			client: func(ns string) statusClient[*gwv1.UDPRoute] { return gws.UDPRoutes(ns) },
			merge: func(o *gwv1.UDPRoute, c []gwv1.RouteParentStatus, now metav1.Time) (*gwv1.UDPRoute, bool) {
				return status.MergeUDPRoute(o, c, w.controller, now)
			},
		}, fromCache(udpRoutes, st.UDPRoutes, func(r *gwv1.UDPRoute) bool { return status.HasParentsOf(r.Status.Parents, w.controller) }))...)
	}
	// Every policy with entries of Portico's is visited too, so that
	// entries for Gateways no longer routing to its targets go.
	policies, _ := w.in.BackendTLS.List(labels.Everything())
	jobs = append(jobs, kindJobs(w, ts, statusKind[*gwv1.BackendTLSPolicy, []gwv1.PolicyAncestorStatus]{
		name:   "BackendTLSPolicy",
		client: func(ns string) statusClient[*gwv1.BackendTLSPolicy] { return gws.BackendTLSPolicies(ns) },
		merge: func(o *gwv1.BackendTLSPolicy, c []gwv1.PolicyAncestorStatus, now metav1.Time) (*gwv1.BackendTLSPolicy, bool) {
			return status.MergeBackendTLSPolicy(o, c, w.controller, now)
		},
	}, fromCache(policies, st.BackendTLSPolicies, func(p *gwv1.BackendTLSPolicy) bool { return status.HasAncestorsOf(p.Status.Ancestors, w.controller) }))...)
	jobs = append(jobs, w.ownPolicyJobs(ts, st)...)
	return jobs
}

// sortJobs puts parents before children, so a watcher sees a Gateway
// programmed no later than the routes on it; ties in name order for stable
// logs.
func sortJobs(jobs []statusJob) {
	order := map[string]int{"GatewayClass": 0, "Gateway": 1, "ListenerSet": 2, "HTTPRoute": 3, "GRPCRoute": 3, "TLSRoute": 3, "TCPRoute": 3, "UDPRoute": 3, "BackendTLSPolicy": 4, trafficpolicy.Kind: 4,
		securitypolicy.Kind: 4, clientpolicy.Kind: 4}
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
func fromComputed[T, S any](computed pmap.Map[types.NamespacedName, S], cached func(types.NamespacedName) (T, error)) []pending[T, S] {
	out := make([]pending[T, S], 0, computed.Len())
	for key, c := range computed.All() {
		if obj, err := cached(key); err == nil {
			out = append(out, pending[T, S]{key, obj, c})
		}
	}
	return out
}

// fromCache pairs every cached object that has a computed status, or
// entries of Portico's to remove, with its computed status.
func fromCache[T metav1.Object, S any](cached []T, computed pmap.Map[types.NamespacedName, S], hasOurs func(T) bool) []pending[T, S] {
	var out []pending[T, S]
	for _, obj := range cached {
		key := nn(obj.GetNamespace(), obj.GetName())
		c, ours := computed.Get(key)
		if ours || hasOurs(obj) {
			out = append(out, pending[T, S]{key, obj, c})
		}
	}
	return out
}

// fromKeys pairs the cached objects of keys with their computed statuses:
// those that have one, and with hasOurs (nil: none) those that have
// entries of Portico's to remove. Objects gone from the cache are left out.
func fromKeys[T metav1.Object, S any](keys []types.NamespacedName, computed pmap.Map[types.NamespacedName, S], cached func(types.NamespacedName) (T, error), hasOurs func(T) bool) []pending[T, S] {
	var out []pending[T, S]
	for _, key := range keys {
		obj, err := cached(key)
		if err != nil {
			continue
		}
		c, ours := computed.Get(key)
		if ours || (hasOurs != nil && hasOurs(obj)) {
			out = append(out, pending[T, S]{key, obj, c})
		}
	}
	return out
}

// classKeys keys GatewayClass statuses like those of namespaced kinds.
func classKeys(in pmap.Map[string, gwv1.GatewayClassStatus]) pmap.Map[types.NamespacedName, gwv1.GatewayClassStatus] {
	out := make(map[types.NamespacedName]gwv1.GatewayClassStatus, in.Len())
	for name, s := range in.All() {
		out[types.NamespacedName{Name: name}] = s
	}
	return pmap.Of(out)
}

// kindJobs lists the objects of one kind whose status must be written.
func kindJobs[T metav1.Object, S any](w *Writer, ts metav1.Time, k statusKind[T, S], objs []pending[T, S]) []statusJob {
	var jobs []statusJob
	for _, o := range objs {
		key := statusKey{k.name, o.key}
		if _, changed := k.merge(o.cached, o.computed, ts); !changed {
			continue
		}
		version := w.versions[key]
		jobs = append(jobs, statusJob{key, func(ctx context.Context) (bool, error) {
			client := k.client(o.key.Namespace)
			return writeStatus(ctx, w, key, version, o.cached,
				func(ctx context.Context) (T, error) { return client.Get(ctx, o.key.Name, metav1.GetOptions{}) },
				func(obj T) (T, bool) { return k.merge(obj, o.computed, ts) },
				func(ctx context.Context, obj T) (T, error) {
					return client.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: wellknown.FieldManager})
				})
		}})
	}
	return jobs
}

// writeStatus updates one object's status: first against the cached copy,
// then, on a conflict, against a fresh one from the API server, until the
// update goes through or there is nothing left to write. It reports whether
// it wrote.
func writeStatus[T metav1.Object](ctx context.Context, w *Writer, key statusKey, want objectVersion, cached T,
	get func(context.Context) (T, error),
	merge func(T) (T, bool),
	update func(context.Context, T) (T, error),
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
		w.sending(updated)
		stored, err := update(ctx, updated)
		storedRV := ""
		if err == nil {
			storedRV = stored.GetResourceVersion()
		}
		w.answered(updated.GetUID(), storedRV)
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

func (w *Writer) report(kind, result string) {
	if w.observe != nil {
		w.observe(kind, result)
	}
}

// statusVersions records the identity and generation of every object a
// full update may write, from the snapshot it was computed from.
func statusVersions(res *snapshot.Resources) map[statusKey]objectVersion {
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
	for _, o := range res.TCPRoutes {
		add("TCPRoute", o)
	}
	for _, o := range res.UDPRoutes {
		add("UDPRoute", o)
	}
	for _, o := range res.BackendTLSPolicies {
		add("BackendTLSPolicy", o)
	}
	for _, o := range res.TrafficPolicies {
		add(trafficpolicy.Kind, o)
	}
	for _, o := range res.SecurityPolicies {
		add(securitypolicy.Kind, o)
	}
	for _, o := range res.ClientPolicies {
		add(clientpolicy.Kind, o)
	}
	for _, o := range res.XTrafficPolicies {
		add(xtrafficpolicy.Kind, o)
	}
	return out
}

// changedVersions records the identity and generation of the objects a
// delta update names, and of every GatewayClass (which it carries whole).
// Finding them is a pass over the names of two kinds, no map of every
// object.
func changedVersions(res *snapshot.Resources, changed *status.Changed) map[statusKey]objectVersion {
	out := make(map[statusKey]objectVersion, changed.Len()+len(res.GatewayClasses))
	for _, o := range res.GatewayClasses {
		out[statusKey{"GatewayClass", nn("", o.Name)}] = objectVersion{o.UID, o.Generation}
	}
	versionsOf(out, "Gateway", res.Gateways, changed.Gateways)
	versionsOf(out, "ListenerSet", res.ListenerSets, changed.ListenerSets)
	versionsOf(out, "HTTPRoute", res.HTTPRoutes, changed.HTTPRoutes)
	return out
}

func versionsOf[T metav1.Object](out map[statusKey]objectVersion, kind string, objs []T, keys []types.NamespacedName) {
	if len(keys) == 0 {
		return
	}
	want := make(map[string][]string, len(keys)) // name -> namespaces
	for _, k := range keys {
		want[k.Name] = append(want[k.Name], k.Namespace)
	}
	for _, o := range objs {
		if namespaces, ok := want[o.GetName()]; ok && slices.Contains(namespaces, o.GetNamespace()) {
			out[statusKey{kind, nn(o.GetNamespace(), o.GetName())}] = objectVersion{o.GetUID(), o.GetGeneration()}
		}
	}
}

func nn(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}
