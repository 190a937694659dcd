package sockio

import (
	"sync"
	"sync/atomic"
	"time"
)

// KeepPeriod is the longest the runtime's monitor thread sleeps while a
// Keeper counts an open connection: its own longest nap, and the time
// after which it preempts a goroutine that has not yielded.
const KeepPeriod = 10 * time.Millisecond

// Keeper keeps the runtime's monitor thread (sysmon) from sleeping for
// longer than KeepPeriod while any connection it counts is open.
//
// The monitor preempts a goroutine that has run for 10 ms and polls the
// network when no processor has for as long. It sleeps once every
// processor is idle, until the next timer is due or a goroutine enters a
// system call, and a Conn's reads and writes no longer do. A process that
// the network wakes would then run with its monitor asleep, and a goroutine
// that computes for long (the translation of a large configuration) would
// not be preempted: with one processor (GOMAXPROCS=1, a container limited
// to one CPU) every connection would wait for it to finish. A timer due
// every KeepPeriod bounds that sleep, at 100 wake-ups a second where the
// system calls' entries caused tens of thousands; with no connection open
// there is no timer, and an idle process is not woken.
type Keeper struct {
	open atomic.Int64
	wake chan struct{}
	stop chan struct{}
	once sync.Once
}

// NewKeeper starts a Keeper; Stop ends it.
func NewKeeper() *Keeper {
	k := &Keeper{wake: make(chan struct{}, 1), stop: make(chan struct{})}
	go k.run()
	return k
}

// Opened counts a connection in; Closed must follow once.
func (k *Keeper) Opened() {
	if k.open.Add(1) == 1 {
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
}

// Closed counts a connection out.
func (k *Keeper) Closed() { k.open.Add(-1) }

// Stop ends the Keeper's goroutine.
func (k *Keeper) Stop() { k.once.Do(func() { close(k.stop) }) }

func (k *Keeper) run() {
	t := time.NewTimer(KeepPeriod)
	defer t.Stop()
	for {
		var due <-chan time.Time // nil: no timer while no connection is open
		if k.open.Load() > 0 {
			t.Reset(KeepPeriod)
			due = t.C
		} else {
			t.Stop()
		}
		select {
		case <-due:
		case <-k.wake:
		case <-k.stop:
			return
		}
	}
}
