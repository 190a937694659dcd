package config

import (
	"iter"
	"maps"
	"math"
)

// EndpointTable holds the endpoints of every backend. It is never changed
// once built: With returns a new table sharing what it leaves alone, so
// that one Service's change at 100,000 Services does not copy the other
// 99,999 while the data plane still reads the table it replaces. The zero
// value is an empty table.
type EndpointTable struct {
	base map[BackendKey]*Endpoints
	// over holds what With changed since base was built, nil for a
	// backend of base removed. Lookups try it first; With copies it, and
	// folds it into a new base once it passes overlayLimit.
	over map[BackendKey]*Endpoints
	n    int
}

// NewEndpointTable returns the table of m's entries; an entry whose value
// is nil is no entry. m becomes the table's: the caller must not change it.
func NewEndpointTable(m map[BackendKey]*Endpoints) EndpointTable {
	n := 0
	for _, e := range m {
		if e != nil {
			n++
		}
	}
	return EndpointTable{base: m, n: n}
}

// Lookup returns the endpoints of k, nil when there are none. It runs for
// every request: one map read without an overlay, and with one, a read of
// a small map more.
func (t EndpointTable) Lookup(k BackendKey) *Endpoints {
	if len(t.over) > 0 {
		if e, ok := t.over[k]; ok {
			return e
		}
	}
	return t.base[k]
}

// Len is the number of backends with endpoints.
func (t EndpointTable) Len() int { return t.n }

// All yields every backend and its endpoints, in no particular order.
func (t EndpointTable) All() iter.Seq2[BackendKey, *Endpoints] {
	return func(yield func(BackendKey, *Endpoints) bool) {
		for k, e := range t.base {
			if _, changed := t.over[k]; changed || e == nil {
				continue
			}
			if !yield(k, e) {
				return
			}
		}
		for k, e := range t.over {
			if e != nil && !yield(k, e) {
				return
			}
		}
	}
}

// With returns t with the entries of set: a nil value removes its
// backend's. Neither t nor set is changed, and set is not kept. A change
// costs a copy of the overlay, not of the table, until the overlay passes
// overlayLimit and the two are folded into a new base.
func (t EndpointTable) With(set map[BackendKey]*Endpoints) EndpointTable {
	if len(set) == 0 {
		return t
	}
	over := make(map[BackendKey]*Endpoints, len(t.over)+len(set))
	maps.Copy(over, t.over)
	n := t.n
	for k, e := range set {
		if had := t.Lookup(k) != nil; had != (e != nil) {
			if had {
				n--
			} else {
				n++
			}
		}
		if e == nil && t.base[k] == nil {
			delete(over, k) // nothing in base to hide
			continue
		}
		over[k] = e
	}
	next := EndpointTable{base: t.base, over: over, n: n}
	if len(over) > overlayLimit(len(t.base)) {
		return next.folded()
	}
	return next
}

// folded is t as one map, without an overlay.
func (t EndpointTable) folded() EndpointTable {
	base := maps.Clone(t.base)
	if base == nil {
		base = make(map[BackendKey]*Endpoints, len(t.over))
	}
	for k, e := range t.over {
		if e == nil {
			delete(base, k)
		} else {
			base[k] = e
		}
	}
	return EndpointTable{base: base, n: t.n}
}

// minOverlay is the overlay no table folds below: folding a small table
// costs as little as copying its overlay.
const minOverlay = 64

// overlayLimit is the largest overlay kept on a base of n entries. With
// copies the overlay (k entries, about k/2 on average as it grows), a fold
// copies the base once every k changes (n/k per change): the sum is least
// at k = √(2n), 447 entries at 100,000, where a change copies about 450
// entries on average, against 100,000 for a copy of the whole map.
func overlayLimit(n int) int {
	return max(minOverlay, int(math.Sqrt(2*float64(n))))
}
