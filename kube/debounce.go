package kube

import (
	"context"
	"time"
)

// Debouncer coalesces bursts of change events into rebuilds: a rebuild runs
// once events have been quiet for Holdoff, and never later than MaxDelay
// after the first event of a burst, so a steady stream of events cannot
// starve it.
type Debouncer struct {
	Holdoff  time.Duration
	MaxDelay time.Duration
	events   chan struct{}
}

// NewDebouncer returns a Debouncer; Mark may be called from any goroutine.
func NewDebouncer(holdoff, maxDelay time.Duration) *Debouncer {
	if maxDelay < holdoff {
		maxDelay = holdoff
	}
	return &Debouncer{Holdoff: holdoff, MaxDelay: maxDelay, events: make(chan struct{}, 1)}
}

// Mark records that something changed. It never blocks.
func (d *Debouncer) Mark() {
	select {
	case d.events <- struct{}{}:
	default:
	}
}

// Run calls rebuild for each burst of Marks until ctx ends. rebuild runs on
// Run's goroutine, so rebuilds never overlap.
func (d *Debouncer) Run(ctx context.Context, rebuild func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.events:
		}
		deadline := time.NewTimer(d.MaxDelay)
		quiet := time.NewTimer(d.Holdoff)
	burst:
		for {
			select {
			case <-ctx.Done():
				deadline.Stop()
				quiet.Stop()
				return
			case <-d.events:
				quiet.Reset(d.Holdoff)
			case <-quiet.C:
				break burst
			case <-deadline.C:
				break burst
			}
		}
		deadline.Stop()
		quiet.Stop()
		rebuild()
	}
}
