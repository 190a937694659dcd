package leader

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunWhileLeadingStartsATermUnwoken: a replica that gains the lease
// looks at everything (a fresh pass) without a wake or a tick, which may
// be far off, and again after each new term; while it leads, only a wake
// or a tick makes a pass.
func TestRunWhileLeadingStartsATermUnwoken(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var leading atomic.Bool
	passes := make(chan bool, 16)
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runWhileLeading(ctx, wake, leading.Load, func(_ context.Context, fresh bool) { passes <- fresh }, time.Hour)
	}()
	expect := func(what string, want bool) {
		t.Helper()
		select {
		case fresh := <-passes:
			if fresh != want {
				t.Fatalf("%s: pass fresh=%v, want %v", what, fresh, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no pass", what)
		}
	}
	for term := range 2 {
		leading.Store(true)
		expect("term begun", true)
		time.Sleep(3 * notice)
		if len(passes) != 0 {
			t.Fatalf("term %d: %d passes while leading with no wake", term, len(passes))
		}
		wake <- struct{}{}
		expect("woken while leading", false)
		leading.Store(false)
		time.Sleep(3 * notice)
	}
	cancel()
	<-done
}
