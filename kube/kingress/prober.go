package kingress

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/config"
	"portico.dev/portico/translate"
)

// probeWant is one KIngress version waiting until every replica answers
// the probes of its hosts with its hash.
type probeWant struct {
	hash     string
	external []string
	local    []string
	since    time.Time // when it was first wanted, for the grace
	next     time.Time // not probed again before
	pause    time.Duration
	passed   map[probeTarget]bool // answered with hash: not asked again
	inRound  bool                 // taken by the round under way
}

// probeTarget is one host on one replica's gateway port.
type probeTarget struct {
	addr, host string
}

// probeTask is one probe of a round, for the version want.
type probeTask struct {
	key    types.NamespacedName
	want   *probeWant
	target probeTarget
}

// wantProbe asks the prober for r's version of key unless it is already
// wanted, and returns what is wanted; the caller holds w.mu.
func (w *kingressWriter) wantProbe(key types.NamespacedName, r translate.KIngressResult, now time.Time) *probeWant {
	if p := w.want[key]; p != nil && p.hash == r.Hash {
		return p
	}
	p := &probeWant{hash: r.Hash, external: r.External, local: r.Local, since: now, next: now,
		pause: w.opts.Interval, passed: map[probeTarget]bool{}}
	w.want[key] = p
	if w.opts.Grace > 0 {
		// Its status is written at the latest when the grace ends:
		// LoadBalancerReady=Unknown then, unless the probes passed.
		time.AfterFunc(w.opts.Grace, func() { w.markDirty(key) })
	}
	select {
	case w.probeWake <- struct{}{}:
	default:
	}
	return p
}

// probeLoop runs probe rounds until ctx ends: each takes every wanted
// version that is due, whatever rebuild it came from, and probes every
// target of theirs that has not yet answered with their hash, on every
// ready replica, at most opts.Parallel at once.
func (w *kingressWriter) probeLoop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		tasks, gen, wait := w.dueTasks(time.Now())
		if len(tasks) > 0 {
			w.round(ctx, tasks, gen)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-w.probeWake:
		case <-timer.C:
		}
	}
}

// dueTasks lists the probes of the versions that are due, with the
// generation of the replicas they cover, or, when none is, how long until
// the first one will be.
func (w *kingressWriter) dueTasks(now time.Time) ([]probeTask, int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.k.Settings
	wait := time.Hour
	if len(w.replicas) == 0 {
		return nil, w.replicaGen, wait // submit wakes the prober when some are ready
	}
	var tasks []probeTask
	for key, p := range w.want {
		if d := p.next.Sub(now); d > 0 {
			wait = min(wait, d)
			continue
		}
		before := len(tasks)
		for _, ip := range w.replicas {
			ext := net.JoinHostPort(ip, strconv.Itoa(int(s.ExternalHTTPPort)))
			local := net.JoinHostPort(ip, strconv.Itoa(int(s.LocalHTTPPort)))
			for _, h := range p.external {
				if t := (probeTarget{ext, h}); !p.passed[t] {
					tasks = append(tasks, probeTask{key, p, t})
				}
			}
			for _, h := range p.local {
				if t := (probeTarget{local, h}); !p.passed[t] {
					tasks = append(tasks, probeTask{key, p, t})
				}
			}
		}
		if len(tasks) == before {
			// Every ready replica answered already (the others have
			// gone since).
			w.probedLocked(key, p)
			continue
		}
		p.inRound = true
	}
	return tasks, w.replicaGen, wait
}

// probedLocked records that every replica serves p; the caller holds w.mu.
func (w *kingressWriter) probedLocked(key types.NamespacedName, p *probeWant) {
	delete(w.want, key)
	w.probed[key] = p.hash
	w.dirty[key] = struct{}{}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// round sends the probes of tasks and records what they found: a version
// whose every target answered with its hash is probed.
func (w *kingressWriter) round(ctx context.Context, tasks []probeTask, gen int) {
	w.rounds.Add(1)
	ok := make([]bool, len(tasks))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(w.opts.Parallel, len(tasks)) {
		wg.Go(func() {
			for i := range next {
				t := tasks[i]
				ok[i] = w.probeOne(ctx, t.target.addr, t.target.host, t.want.hash)
			}
		})
	}
feed:
	for i := range tasks {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()

	now := time.Now()
	failed := map[*probeWant]bool{}
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, t := range tasks {
		if ok[i] {
			// A pass counts only while the replicas are those the round
			// was made for: an address that left during the round may
			// be a new pod by now, which was not asked.
			if gen == w.replicaGen {
				t.want.passed[t.target] = true
			}
		} else {
			failed[t.want] = true
		}
	}
	for _, t := range tasks {
		p := t.want
		if !p.inRound {
			continue // decided already
		}
		p.inRound = false
		switch {
		case w.want[t.key] != p:
			// Superseded by a newer version, or no longer wanted.
		case !failed[p] && gen == w.replicaGen:
			// The round had every target not yet passed, on every
			// replica (the same ones still).
			w.probedLocked(t.key, p)
		case failed[p]:
			p.next = now.Add(p.pause)
			p.pause = min(2*p.pause, 16*w.opts.Interval)
		}
		// Else the replicas changed during the round: it is due again, for
		// those not yet asked.
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
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
	// Read to the end so that the connection is kept for the next probe.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && resp.Header.Get(config.KnativeHashHeader) == hash
}
