// Package pipeline is the run loop both modes share: it takes a snapshot
// from a source (the cluster's informers, or YAML files), translates it,
// applies the result to the data plane and hands the statuses and ACME
// wants to their outputs; and again, debounced, whenever the source says
// something changed. The failure rules are the same for every source: a
// snapshot that cannot be taken leaves the running configuration as it
// is, and a port that cannot be bound leaves out only the Gateways served
// on it, which report Programmed=False until a retry binds it.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/shared/debounce"
	"portico.dev/portico/translate"
)

// Source gives snapshots and says when they change.
type Source interface {
	// Run watches until ctx ends, calling changed (which must not block)
	// after every change and ready once, when a first Snapshot can be
	// taken. It returns nil once ctx ended, and an error when the source
	// cannot go on, which ends the loop.
	Run(ctx context.Context, changed, ready func()) error
	// Snapshot returns the objects as they are now.
	Snapshot() (*snapshot.Resources, error)
}

// Options are the loop's settings. cmd builds them from the flags, in one
// place.
type Options struct {
	Translate translate.Settings
	// MinHoldoff, Holdoff and MaxDelay debounce changes (see debounce.Debouncer;
	// MinHoldoff 0 keeps the holdoff fixed at Holdoff).
	MinHoldoff time.Duration
	Holdoff    time.Duration
	MaxDelay   time.Duration
	// RetryAfter is how long after a port failed to bind the loop tries
	// again; 0 means 10 s.
	RetryAfter time.Duration
	// ACMESecrets puts the ACME manager's certificates into snapshots, as
	// Portico-managed Secrets of the names the listeners ask for (a Secret
	// of that name in the snapshot wins). For sources that have no Secret
	// storage of their own (files); a cluster writes them into Secrets,
	// which come back through its informers.
	ACMESecrets bool
}

// DataPlane is where the loop puts each configuration: proxy.Runtime. The
// control plane knows the data plane by these three calls only.
type DataPlane interface {
	// Apply serves cfg; when it cannot, the configuration served stays
	// as it was and the error says why.
	Apply(cfg *config.Config) error
	// Current is the configuration served.
	Current() *config.Config
	// PortAddr is the bound address of a port, nil when it is not bound.
	PortAddr(key config.PortKey) net.Addr
}

// ACME is what the loop asks of the ACME manager (acme.Manager): it tells it
// the hostnames translate wants certificates for, and reads the
// certificates it holds and why it holds none for a hostname. The manager
// tells the loop of a change by calling Changed.
type ACME interface {
	// Want sets the hostnames to obtain and renew certificates for.
	Want(hostnames []string)
	// Certificate is the certificate held for a hostname.
	Certificate(hostname string) (acme.Certificate, bool)
	// Errors says, by hostname, why no certificate could be obtained.
	Errors() map[string]string
}

// Outputs are where a rebuild's results go besides the data plane. Each may
// be nil; each runs on the loop's goroutine and must not block.
type Outputs struct {
	// Facts gets what the source knows beyond the snapshot that decides
	// statuses (the installed CRD versions, the configuration each data
	// plane of its own is to acknowledge), after DataPlanes; the loop adds
	// what apply found, and translate.Finish decides.
	Facts func(*snapshot.Resources) translate.Facts
	// Statuses gets the statuses of every rebuild, as translate.Finish
	// decided them, with the snapshot they were computed from. st is
	// never changed (status.Computed): it may be kept. changed names the
	// statuses that may differ from those of the call before; nil when
	// any may.
	Statuses func(st *status.Computed, changed *status.Changed, res *snapshot.Resources)
	// ACME gets the certificates wanted, with the snapshot.
	ACME func([]translate.ACMECertificate, *snapshot.Resources)
	// Applied is told about every rebuild (metrics).
	Applied func(ApplyReport)
	// Knative gets what translate says of the KIngresses and Certificates
	// of Portico's classes, once their configuration is applied, with the
	// snapshot.
	Knative func(*translate.KnativeOutput, *snapshot.Resources)
	// DataPlanes gets the Gateways that have data planes of their own
	// (GEP-1762), with the snapshot, before Facts and Statuses: what it
	// publishes is what their data planes are to acknowledge.
	DataPlanes func([]provision.Input, *snapshot.Resources)
}

// ApplyReport describes one rebuild.
type ApplyReport struct {
	Generation   int64
	Translate    time.Duration
	Apply        time.Duration
	Certificates int
	// CertificatesExpire is when the first of those certificates expires
	// (zero when there is none).
	CertificatesExpire time.Time
	// SinceChange is the time from the first change this configuration
	// holds (an object of the source changed, a certificate arrived) to
	// its being served; 0 for a rebuild no change asked for (a retry) or
	// one not applied in full.
	SinceChange time.Duration
	// Err is the error of applying the configuration; on a partial failure
	// (some ports could not be bound) it describes the ports left out.
	Err error
}

// Loop runs the stages. Build it with New.
type Loop struct {
	opts    Options
	source  Source
	runtime DataPlane
	log     *zap.Logger
	acme    ACME
	out     Outputs

	debouncer *debounce.Debouncer

	memory translate.Memory // only the rebuild's goroutine uses it
	// listening are the ports bound after the last rebuild, with their
	// protocol (logListening); only the rebuild's goroutine uses them.
	listening map[config.PortKey]config.Protocol
	// firstChange is when the first change not yet in a snapshot arrived
	// (Unix nanoseconds; 0: none).
	firstChange atomic.Int64
	// managed are the ACME Secrets of the last snapshot (withACME); only
	// the rebuild's goroutine uses them.
	managed managedSecrets

	// statusMu is held while a rebuild translates and hands on the
	// statuses: Statuses waits for a rebuild under way.
	statusMu sync.Mutex
	statuses *status.Computed
	// decorated names the statuses translate.Finish changed in the last
	// rebuild: the next hands them on again, changed or not, so that a
	// fact gone takes its mark with it.
	decorated *status.Changed

	mu         sync.Mutex
	generation int64
	applied    bool
	lastErr    error
	acmeWanted []translate.ACMECertificate
}

// New returns a loop over source. certs may be nil (no ACME), or hold a
// nil *acme.Manager, taken as no ACME too.
func New(opts Options, source Source, rt DataPlane, certs ACME, out Outputs, log *zap.Logger) *Loop {
	if m, ok := certs.(*acme.Manager); ok && m == nil {
		certs = nil
	}
	return &Loop{
		opts:      opts,
		source:    source,
		runtime:   rt,
		log:       log,
		acme:      certs,
		out:       out,
		debouncer: debounce.NewAdaptive(opts.MinHoldoff, opts.Holdoff, opts.MaxDelay),
	}
}

// Changed asks for a rebuild, as a change of the source does: the ACME
// manager calls it when a certificate arrived or an order failed.
func (l *Loop) Changed() {
	// The first change since the last rebuild took its snapshot starts
	// the clock of ApplyReport.SinceChange.
	l.firstChange.CompareAndSwap(0, time.Now().UnixNano())
	l.debouncer.Mark()
}

// Run serves the source until ctx ends. The first snapshot must be taken:
// starting on a broken configuration would serve nothing silently. (A port
// that cannot be bound is not a broken configuration: it is retried.) It
// returns the source's error when the source stopped on one.
func (l *Loop) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{})
	var once sync.Once
	srcErr := make(chan error, 1)
	go func() {
		err := l.source.Run(ctx, l.Changed, func() { once.Do(func() { close(ready) }) })
		if err != nil {
			cancel()
		}
		srcErr <- err
	}()
	select {
	case <-ready:
	case <-ctx.Done():
		cancel()
		return <-srcErr
	}
	if err := l.rebuild(); err != nil {
		cancel()
		<-srcErr
		return fmt.Errorf("initial config: %w", err)
	}
	l.debouncer.RunCosted(ctx, l.rebuildCost)
	cancel()
	return <-srcErr
}

// Ready returns nil once a configuration was applied, and why not before.
func (l *Loop) Ready() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.applied {
		return errors.New("no configuration applied yet")
	}
	return nil
}

// Generation returns the number of rebuilds so far, counted once each was
// applied (or failed to apply).
func (l *Loop) Generation() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.generation
}

// LastError is the error of the last rebuild, nil when it applied in full.
func (l *Loop) LastError() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastErr
}

// Statuses returns the statuses of the last rebuild (never changed, as
// every status.Computed), nil before the first. It waits for a rebuild
// under way.
func (l *Loop) Statuses() *status.Computed {
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	return l.statuses
}

// Rebuild takes a snapshot, translates it, applies the result and hands
// it to the outputs. Rebuilds must not overlap: Run calls it from one
// goroutine. It returns the error that kept the configuration from being
// applied in full.
func (l *Loop) Rebuild() error {
	if err := l.rebuild(); err != nil {
		return err
	}
	return l.LastError()
}

// rebuildCost rebuilds and returns what the holdoff before the next
// rebuild follows: nothing after a change translated as a delta (a few
// milliseconds of work at 100,000 hostnames, however long a busy machine
// made it take), else the time the rebuild took.
func (l *Loop) rebuildCost() time.Duration {
	start := time.Now()
	_ = l.rebuild()
	if l.memory.Incremental() {
		return 0
	}
	return time.Since(start)
}

// rebuild is Rebuild; it returns only the error of taking the snapshot,
// the one that keeps Portico from starting.
func (l *Loop) rebuild() error {
	start := time.Now()
	// Changes after this are in this snapshot or the next: the next
	// rebuild's clock starts with them.
	firstChange := l.firstChange.Swap(0)
	res, err := l.source.Snapshot()
	if err != nil {
		l.mu.Lock()
		l.lastErr = err
		l.mu.Unlock()
		l.log.Error("config not applied; the previous config keeps serving", zap.Error(err))
		return err
	}
	snapshotTook := time.Since(start)
	res = l.withACME(res)
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	// Only rebuilds touch the memory, one at a time: no lock, so that
	// readiness and metrics are answered during a long translation.
	out, mem := TranslateConcurrently(l.opts.Translate, res, l.memory)
	l.memory = mem
	// Generation moves once the configuration is on the data plane, so
	// that whoever waits for it finds the ports bound.
	gen := l.Generation() + 1
	translated := time.Since(start)
	l.wantACME(out.ACME, res)

	cfg := *out.Config
	cfg.Generation = gen
	applyStart := time.Now()
	applied, facts, applyErr := l.apply(&cfg)
	applyTook := time.Since(applyStart)

	l.mu.Lock()
	l.generation = gen
	l.applied = l.applied || applied
	l.lastErr = applyErr
	l.mu.Unlock()
	var sinceChange time.Duration
	if firstChange != 0 && applyErr == nil {
		sinceChange = time.Since(time.Unix(0, firstChange))
	}
	if l.out.Applied != nil {
		l.out.Applied(ApplyReport{Generation: gen, SinceChange: sinceChange, Translate: translated, Apply: applyTook, Certificates: mem.Certificates(), CertificatesExpire: mem.EarliestExpiry(), Err: applyErr})
	}
	l.logListening(&cfg)
	l.logRebuild(applyErr,
		zap.Int64("generation", gen), zap.Duration("snapshot", snapshotTook), zap.Duration("translate", translated-snapshotTook),
		zap.Bool("incremental", mem.Incremental()), zap.Duration("apply", applyTook), zap.Int("statusesChanged", changedLen(out.StatusesChanged)),
		zap.Int("gateways", len(res.Gateways)), zap.Int("listenerSets", len(res.ListenerSets)), zap.Int("httpRoutes", len(res.HTTPRoutes)))
	outputsStart := time.Now()
	if l.out.DataPlanes != nil {
		l.out.DataPlanes(out.DataPlanes, res)
	}
	if l.out.Facts != nil {
		known := l.out.Facts(res)
		facts.CRDProblems, facts.DataPlaneVersions = known.CRDProblems, known.DataPlaneVersions
	}
	// Every status is decided here: translate's, with the facts only known
	// now. Finish makes a new Computed of what it changes, so the memory
	// of the next translation keeps translate's own.
	st, decorated := translate.Finish(out.Statuses, res, facts)
	changed := out.StatusesChanged.With(decorated).With(l.decorated)
	l.decorated = decorated
	l.statuses = st
	if l.out.Statuses != nil {
		l.out.Statuses(st, changed, res)
	}
	if l.out.Knative != nil && out.Knative != nil {
		l.out.Knative(out.Knative, res)
	}
	l.log.Debug("outputs told", zap.Int64("generation", gen), zap.Duration("outputs", time.Since(outputsStart)), zap.Duration("rebuild", time.Since(start)))
	return nil
}

// logRebuild logs a rebuild's timings: the snapshot taken, its
// translation (snapshot excluded), apply, and how many statuses changed
// (-1: all may have).
func (l *Loop) logRebuild(applyErr error, fields ...zap.Field) {
	if applyErr != nil {
		l.log.Error("config not fully applied", append(fields, zap.Error(applyErr))...)
		return
	}
	l.log.Info("config applied", fields...)
}

func changedLen(c *status.Changed) int {
	if c == nil {
		return -1
	}
	return c.Len()
}

// TranslateConcurrently is translate.Translate with the endpoints resolved
// on another goroutine while the rest is translated: they are a sixth of a
// full translation at 5,000 hostnames, and all of one after an
// EndpointSlice change, which the rest then answers from memory. Both
// re-derive only what changed since the translation mem comes from when
// they can (translate/incremental.go, translate/endpointsmemo.go).
func TranslateConcurrently(s translate.Settings, res *snapshot.Resources, mem translate.Memory) (translate.Output, translate.Memory) {
	type resolved struct {
		eps config.EndpointTable
		mem translate.EndpointsMemory
	}
	done := make(chan resolved, 1)
	go func() {
		eps, em := translate.ResolveEndpoints(res, mem)
		done <- resolved{eps, em}
	}()
	out, next := translate.Routes(s, res, mem)
	r := <-done
	cfg := *out.Config
	cfg.Endpoints = r.eps
	out.Config = &cfg
	return out, next.WithEndpoints(r.mem)
}
