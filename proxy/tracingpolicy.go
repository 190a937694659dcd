package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/tracing"
)

// policyTracers are the tracers of the XTelemetryPolicies in force, by
// config.Tracing.ID: one exporter per policy and settings, kept across
// configurations while its settings stay, shut down once none names it.
type policyTracers struct {
	// cur is read by requests; nil when no listener has a policy's
	// tracing, which keeps the handler's fast path one load.
	cur atomic.Pointer[map[string]*tracing.Tracer]
	// all is changed under Runtime.mu only.
	all map[string]*tracing.Tracer
}

// collectorDialTimeout bounds a connection to a collector's endpoint.
const collectorDialTimeout = 5 * time.Second

// applyTracers starts the tracers of cfg's listeners that are new and
// publishes the set, before cfg is swapped in; the tracers no longer
// named are returned, to stop after the swap. rt.mu is held.
func (rt *Runtime) applyTracers(cfg *config.Config) []*tracing.Tracer {
	want := map[string]*config.Tracing{}
	listed := false
	for _, p := range cfg.Ports {
		for l := range p.All.Values() {
			if t := l.Tracing; t != nil {
				listed = true
				if !t.Disabled {
					want[t.ID] = t
				}
			}
		}
	}
	pt := &rt.tracers
	next := make(map[string]*tracing.Tracer, len(want))
	for id, t := range want {
		if tr, ok := pt.all[id]; ok {
			next[id] = tr
			continue
		}
		tr, err := tracing.NewPolicy(context.Background(), t, rt.opts.TracingDefaults, rt.collectorDialer(t.Collector))
		if err != nil {
			// The listeners trace nothing rather than to another
			// collector; the policy's settings were checked by translate.
			rt.log.Warn("tracing of an XTelemetryPolicy not started", zap.String("policy", t.Policy), zap.Error(err))
			continue
		}
		next[id] = tr
	}
	var stop []*tracing.Tracer
	for id, tr := range pt.all {
		if _, kept := next[id]; !kept {
			stop = append(stop, tr)
		}
	}
	pt.all = next
	if listed {
		pt.cur.Store(&next)
	} else {
		pt.cur.Store(nil)
	}
	return stop
}

// stopTracers exports what the tracers hold, bounded, away from Apply: a
// collector that hangs must not hold up a configuration.
func (rt *Runtime) stopTracers(stop []*tracing.Tracer) {
	for _, tr := range stop {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), collectorDialTimeout)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				rt.log.Debug("tracing of an XTelemetryPolicy stopped", zap.Error(err))
			}
		}()
	}
}

// collectorDialer dials an endpoint of the collector's Service port, as
// the configuration in force has them at each connection.
func (rt *Runtime) collectorDialer(key config.BackendKey) tracing.Dialer {
	d := &net.Dialer{Timeout: collectorDialTimeout}
	return func(ctx context.Context) (net.Conn, error) {
		cfg := rt.current.Load()
		if cfg == nil {
			return nil, fmt.Errorf("collector %s: no configuration", key)
		}
		addr := cfg.Endpoints.Lookup(key).Pick()
		if addr == "" {
			return nil, fmt.Errorf("collector %s: no ready endpoint", key)
		}
		return d.DialContext(ctx, "tcp", addr)
	}
}

// listenerTracer is the tracer of listener l's requests: its policy's,
// none when its policy disables tracing or could not start one, else the
// process's.
func (rt *Runtime) listenerTracer(l *config.Listener) *tracing.Tracer {
	t := l.Tracing
	if t == nil {
		return rt.opts.Tracer
	}
	if t.Disabled {
		return nil
	}
	if m := rt.tracers.cur.Load(); m != nil {
		return (*m)[t.ID]
	}
	return nil
}

// startSpan opens the span of r, served by listener l (nil when none
// serves it), when w records the request (the handler's slow path):
// with l's tracer. It returns r as the backend must see it.
func (rt *Runtime) startSpan(w http.ResponseWriter, r *http.Request, l *config.Listener) *http.Request {
	sw, ok := w.(*statusWriter)
	if !ok || sw.spanDone {
		return r
	}
	sw.spanDone = true
	tr := rt.opts.Tracer
	if l != nil {
		tr = rt.listenerTracer(l)
	}
	if tr == nil {
		return r
	}
	r, sw.span = tr.StartAt(r, sw.received)
	sw.tracer = tr
	return r
}

// closeTracers stops every policy's tracer (Close).
func (rt *Runtime) closeTracers(ctx context.Context) {
	rt.mu.Lock()
	all := rt.tracers.all
	rt.tracers.all = nil
	rt.tracers.cur.Store(nil)
	rt.mu.Unlock()
	for _, tr := range all {
		if err := tr.Shutdown(ctx); err != nil {
			rt.log.Debug("tracing of an XTelemetryPolicy stopped", zap.Error(err))
		}
	}
}
