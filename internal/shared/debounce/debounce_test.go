package debounce

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestHoldoffFollowsRebuilds(t *testing.T) {
	d := NewAdaptive(10*time.Millisecond, 100*time.Millisecond, time.Second)
	for took, want := range map[time.Duration]time.Duration{
		time.Millisecond:       10 * time.Millisecond,
		30 * time.Millisecond:  30 * time.Millisecond,
		100 * time.Millisecond: 100 * time.Millisecond,
		2 * time.Second:        100 * time.Millisecond,
	} {
		if got := d.holdoffAfter(took); got != want {
			t.Errorf("after a rebuild of %v: holdoff %v, want %v", took, got, want)
		}
	}
	fixed := New(100*time.Millisecond, time.Second)
	if got := fixed.holdoffAfter(time.Millisecond); got != 100*time.Millisecond {
		t.Errorf("fixed: %v", got)
	}
}

// TestDebouncerAdapts: the first burst waits the minimum (what loaded
// everything before Run says nothing about what a change costs); a slow
// rebuild brings the wait up, and once a rebuild has shown it is quick
// again, the next bursts wait the minimum.
func TestDebouncerAdapts(t *testing.T) {
	d := NewAdaptive(5*time.Millisecond, 50*time.Millisecond, time.Second)
	if got := d.CurrentHoldoff(); got != 5*time.Millisecond {
		t.Fatalf("before any rebuild: %v, want the minimum", got)
	}
	if got := New(50*time.Millisecond, time.Second).CurrentHoldoff(); got != 50*time.Millisecond {
		t.Fatalf("fixed, before any rebuild: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Buffered: a quick rebuild must not wait for the test to take its news.
	rebuilt := make(chan struct{}, 1)
	slow := make(chan time.Duration, 1)
	go d.Run(ctx, func() {
		select {
		case s := <-slow:
			time.Sleep(s)
		default:
		}
		rebuilt <- struct{}{}
	})
	wait := func() {
		t.Helper()
		select {
		case <-rebuilt:
		case <-time.After(10 * time.Second):
			t.Fatal("no rebuild")
		}
	}

	d.Mark()
	wait()
	waitFor(t, 5*time.Second, "holdoff at the minimum", func() error {
		if got := d.CurrentHoldoff(); got != 5*time.Millisecond {
			return fmt.Errorf("holdoff %v", got)
		}
		return nil
	})

	slow <- 20 * time.Millisecond
	d.Mark()
	wait()
	waitFor(t, 5*time.Second, "holdoff after a slow rebuild", func() error {
		if got := d.CurrentHoldoff(); got < 20*time.Millisecond || got > 50*time.Millisecond {
			return fmt.Errorf("holdoff %v, want the rebuild time", got)
		}
		return nil
	})

	d.Mark()
	wait()
	waitFor(t, 5*time.Second, "holdoff back at the minimum", func() error {
		if got := d.CurrentHoldoff(); got != 5*time.Millisecond {
			return fmt.Errorf("holdoff %v", got)
		}
		return nil
	})
}

// waitFor polls check until it returns nil, failing the test with the last
// error after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHoldoffFollowsTheCostSaid: with RunCosted, the holdoff follows what
// the rebuild says it cost, not how long it took.
func TestHoldoffFollowsTheCostSaid(t *testing.T) {
	d := NewAdaptive(5*time.Millisecond, 50*time.Millisecond, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	costs := make(chan time.Duration, 1)
	rebuilt := make(chan struct{}, 1)
	go d.RunCosted(ctx, func() time.Duration {
		c := <-costs
		time.Sleep(30 * time.Millisecond) // slow, whatever it says
		rebuilt <- struct{}{}
		return c
	})
	for _, c := range []struct{ cost, want time.Duration }{{40 * time.Millisecond, 40 * time.Millisecond}, {0, 5 * time.Millisecond}} {
		costs <- c.cost
		d.Mark()
		select {
		case <-rebuilt:
		case <-time.After(10 * time.Second):
			t.Fatal("no rebuild")
		}
		waitFor(t, 5*time.Second, "holdoff", func() error {
			if got := d.CurrentHoldoff(); got != c.want {
				return fmt.Errorf("after a rebuild said to cost %v: holdoff %v, want %v", c.cost, got, c.want)
			}
			return nil
		})
	}
}
