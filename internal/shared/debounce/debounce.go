// Package debounce coalesces bursts of change events into rebuilds.
package debounce

import (
	"context"
	"sync/atomic"
	"time"
)

// Debouncer coalesces bursts of change events into rebuilds: a rebuild runs
// once events have been quiet for the holdoff, and never later than
// MaxDelay after the first event of a burst, so a steady stream of events
// cannot starve it.
//
// With MinHoldoff set, the holdoff follows the time the last rebuild Run
// made took (or what RunCosted's rebuild says it cost), between MinHoldoff and Holdoff: where a rebuild costs a few
// milliseconds (hundreds or thousands of hostnames, or any number once
// changes are translated incrementally), a change is served a few
// milliseconds after it, and where it costs more than Holdoff, bursts are
// coalesced as with a fixed holdoff. Under a steady stream of changes that
// spends at most about half the time rebuilding. It starts at MinHoldoff:
// the first rebuild, which loads everything, is not Run's, and its cost
// says nothing about a change's.
type Debouncer struct {
	Holdoff    time.Duration
	MinHoldoff time.Duration // 0: the holdoff is always Holdoff
	MaxDelay   time.Duration
	events     chan struct{}
	// holdoff is the quiet wait of the next burst, in nanoseconds.
	holdoff atomic.Int64
}

// New returns a Debouncer with a fixed holdoff; Mark may be called
// from any goroutine.
func New(holdoff, maxDelay time.Duration) *Debouncer {
	return NewAdaptive(0, holdoff, maxDelay)
}

// NewAdaptive returns a Debouncer whose holdoff follows the
// rebuilds, between minHoldoff and holdoff (see Debouncer). Until the first
// rebuild it is minHoldoff (holdoff when minHoldoff is 0).
func NewAdaptive(minHoldoff, holdoff, maxDelay time.Duration) *Debouncer {
	holdoff = max(holdoff, minHoldoff)
	d := &Debouncer{Holdoff: holdoff, MinHoldoff: minHoldoff, MaxDelay: max(maxDelay, holdoff), events: make(chan struct{}, 1)}
	d.holdoff.Store(int64(d.holdoffAfter(0)))
	return d
}

// Mark records that something changed. It never blocks.
func (d *Debouncer) Mark() {
	select {
	case d.events <- struct{}{}:
	default:
	}
}

// CurrentHoldoff is the quiet wait the next burst gets.
func (d *Debouncer) CurrentHoldoff() time.Duration {
	return time.Duration(d.holdoff.Load())
}

// holdoffAfter is the holdoff that follows a rebuild that took took.
func (d *Debouncer) holdoffAfter(took time.Duration) time.Duration {
	if d.MinHoldoff <= 0 {
		return d.Holdoff
	}
	return min(max(took, d.MinHoldoff), d.Holdoff)
}

// Run calls rebuild for each burst of Marks until ctx ends. rebuild runs on
// Run's goroutine, so rebuilds never overlap.
func (d *Debouncer) Run(ctx context.Context, rebuild func()) {
	d.RunCosted(ctx, func() time.Duration {
		start := time.Now()
		rebuild()
		return time.Since(start)
	})
}

// RunCosted is Run with a rebuild that says what it cost: the holdoff
// follows that rather than the time the call took. A rebuild that knows
// its work was small (a change translated as a delta) says so even when a
// busy machine made it take long, which would otherwise hold the next
// change back by up to Holdoff.
func (d *Debouncer) RunCosted(ctx context.Context, rebuild func() time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.events:
		}
		holdoff := d.CurrentHoldoff()
		deadline := time.NewTimer(d.MaxDelay)
		quiet := time.NewTimer(holdoff)
	burst:
		for {
			select {
			case <-ctx.Done():
				deadline.Stop()
				quiet.Stop()
				return
			case <-d.events:
				quiet.Reset(holdoff)
			case <-quiet.C:
				break burst
			case <-deadline.C:
				break burst
			}
		}
		deadline.Stop()
		quiet.Stop()
		d.holdoff.Store(int64(d.holdoffAfter(rebuild())))
	}
}
