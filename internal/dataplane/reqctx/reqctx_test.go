package reqctx

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var errGone = errors.New("client gone")

// TestCancelRunsHookOnce: the hook runs once, after the context is done,
// with the cause readable through context.Cause; a second Cancel changes
// nothing.
func TestCancelRunsHookOnce(t *testing.T) {
	var c Ctx
	c.Init(context.Background())
	var runs atomic.Int32
	var doneAtHook bool
	if !c.Hook(func() {
		runs.Add(1)
		doneAtHook = c.Err() != nil
	}) {
		t.Fatal("Hook refused on a fresh context")
	}
	if c.Err() != nil {
		t.Fatal("done before Cancel")
	}
	c.Cancel(errGone)
	c.Cancel(errors.New("later"))
	if runs.Load() != 1 || !doneAtHook {
		t.Fatalf("hook ran %d times, context done when it ran: %v", runs.Load(), doneAtHook)
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed")
	}
	if !errors.Is(c.Err(), context.Canceled) || context.Cause(&c) != errGone {
		t.Fatalf("Err %v, Cause %v", c.Err(), context.Cause(&c))
	}
	if c.Unhook() {
		t.Fatal("Unhook after the hook ran reported it stopped it")
	}
}

// TestUnhookStopsHook: a hook removed before the cancel never runs, and a
// new one can be set after.
func TestUnhookStopsHook(t *testing.T) {
	var c Ctx
	c.Init(context.Background())
	ran := false
	c.Hook(func() { ran = true })
	if !c.Unhook() {
		t.Fatal("Unhook of a pending hook reported false")
	}
	if c.Unhook() {
		t.Fatal("second Unhook reported true")
	}
	ran2 := false
	if !c.Hook(func() { ran2 = true }) {
		t.Fatal("Hook refused after Unhook")
	}
	c.Cancel(nil)
	if ran || !ran2 {
		t.Fatalf("removed hook ran: %v; second hook ran: %v", ran, ran2)
	}
	if context.Cause(&c) != context.Canceled {
		t.Fatalf("Cause %v after Cancel(nil)", context.Cause(&c))
	}
}

// TestHookAfterCancelRunsAtOnce: a hook set on a cancelled context runs
// before Hook returns (a backend request started after its client left
// is aborted at once).
func TestHookAfterCancelRunsAtOnce(t *testing.T) {
	var c Ctx
	c.Init(context.Background())
	c.Cancel(errGone)
	ran := false
	if !c.Hook(func() { ran = true }) || !ran {
		t.Fatalf("hook on a cancelled context: ran %v", ran)
	}
}

// TestHookRefused: one hook at a time, and none when the parent can be
// cancelled (its cancellation would bypass Cancel and never run the hook).
func TestHookRefused(t *testing.T) {
	var c Ctx
	c.Init(context.Background())
	c.Hook(func() {})
	if c.Hook(func() {}) {
		t.Fatal("a second hook was taken")
	}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var d Ctx
	d.Init(parent)
	if d.Hook(func() {}) {
		t.Fatal("hook taken under a parent that can be cancelled")
	}
	cancel()
	select {
	case <-d.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("parent's cancellation did not reach the child")
	}
}

// TestChildrenFollow: contexts made from a Ctx (a backend timeout, an
// AfterFunc) end with it and see its cause.
func TestChildrenFollow(t *testing.T) {
	var c Ctx
	c.Init(context.WithValue(context.Background(), errGone, "v"))
	child, stop := context.WithTimeout(&c, time.Hour)
	defer stop()
	after := make(chan struct{})
	context.AfterFunc(&c, func() { close(after) })
	if child.Value(errGone) != "v" {
		t.Fatal("value of the parent not seen")
	}
	c.Cancel(errGone)
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("child not cancelled")
	}
	<-after
	if context.Cause(child) != errGone {
		t.Fatalf("child's cause %v", context.Cause(child))
	}
}

// TestCancelUnhookRace: when Cancel and Unhook race, exactly one of them
// wins: either the hook ran or Unhook reported it stopped it, never both
// or neither.
func TestCancelUnhookRace(t *testing.T) {
	for range 2000 {
		var c Ctx
		c.Init(context.Background())
		var ran atomic.Bool
		c.Hook(func() { ran.Store(true) })
		var wg sync.WaitGroup
		var stopped bool
		wg.Add(2)
		go func() { defer wg.Done(); c.Cancel(errGone) }()
		go func() { defer wg.Done(); stopped = c.Unhook() }()
		wg.Wait()
		if ran.Load() == stopped {
			t.Fatalf("hook ran %v, Unhook reported %v", ran.Load(), stopped)
		}
	}
}
