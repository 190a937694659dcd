package source

import (
	"sync"

	"k8s.io/client-go/tools/cache"
)

// arrivals keeps one kind's cached objects in the order they first
// arrived, so that consecutive snapshots list them in the same order.
//
// A lister lists a cache's map, in a new order every time. Translate finds
// what changed between two snapshots by comparing them position by
// position (a changed object is a new pointer in the same place, an added
// one is at the end, a deleted one leaves a gap); in a new order every
// object looks changed and every rebuild is a full one.
type arrivals[T comparable] struct {
	mu    sync.Mutex
	items []T            // zero where an object was deleted
	at    map[string]int // cache key -> index in items
	holes int
	// keep, when set, says that an update changed nothing snapshots are
	// read for: the object listed stays the one before it. Translate tells
	// changes by identity, and a Gateway's status, written after every
	// change of its ListenerSets, would otherwise make every next change
	// a full translation.
	keep func(old, new T) bool
	// listed is the last list made, until the kind changes: snapshots in
	// between share it, rather than each copying 100,000 pointers of a
	// kind the change that asked for them did not touch. No reader of a
	// snapshot writes its lists, and its capacity is its length, so an
	// append makes a copy.
	listed []T
	fresh  bool
}

func newArrivals[T comparable]() *arrivals[T] {
	return &arrivals[T]{at: map[string]int{}}
}

// handler keeps the order from a cache's events, then passes each event on
// to inner. Both happen in one handler so that the order is up to date
// before inner can ask for a rebuild.
func (a *arrivals[T]) handler(inner cache.ResourceEventHandler) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			a.set(obj)
			inner.OnAdd(obj, false)
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, okOld := oldObj.(T)
			n, okNew := newObj.(T)
			if a.keep == nil || !okOld || !okNew || !a.keep(o, n) {
				a.set(newObj)
			}
			inner.OnUpdate(oldObj, newObj)
		},
		DeleteFunc: func(obj any) {
			a.remove(obj)
			inner.OnDelete(obj)
		},
	}
}

func (a *arrivals[T]) set(obj any) {
	t, ok := obj.(T)
	if !ok {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.fresh = false
	if i, ok := a.at[key]; ok {
		a.items[i] = t
		return
	}
	a.at[key] = len(a.items)
	a.items = append(a.items, t)
}

func (a *arrivals[T]) remove(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	i, ok := a.at[key]
	if !ok {
		return
	}
	var zero T
	a.items[i] = zero
	a.fresh = false
	delete(a.at, key)
	a.holes++
	// Gaps are closed once they are a quarter of the list: closing moves
	// the objects after each gap, which is one more position change for
	// the next comparison, so it is done rarely.
	if a.holes > 64 && a.holes > len(a.items)/4 {
		a.compact()
	}
}

func (a *arrivals[T]) compact() {
	var zero T
	kept := a.items[:0]
	for _, t := range a.items {
		if t != zero {
			kept = append(kept, t)
		}
	}
	clear(a.items[len(kept):])
	a.items = kept
	a.holes = 0
	for i, t := range a.items {
		if key, err := cache.MetaNamespaceKeyFunc(t); err == nil {
			a.at[key] = i
		}
	}
}

// list returns the objects in arrival order. The slice is shared with
// other snapshots: read it, never write it.
func (a *arrivals[T]) list() []T {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fresh {
		return a.listed
	}
	var zero T
	out := make([]T, 0, len(a.items)-a.holes)
	for _, t := range a.items {
		if t != zero {
			out = append(out, t)
		}
	}
	a.listed, a.fresh = out, true
	return out
}
