package translate

import (
	"maps"
	"math"
)

// layered is a map that is never changed once built: with returns a new
// one sharing everything unchanged. Changes go to a small overlay on a
// shared base until the overlay grows past flattenAt, and the two are
// flattened into a new base: a one-object change to a map of 100,000
// entries copies the overlay, not the map.
type layered[K comparable, V any] struct {
	base map[K]V
	over map[K]layeredEntry[V]
	n    int
}

type layeredEntry[V any] struct {
	v       V
	deleted bool
}

// minFlatten is the overlay no map flattens below: flattening a small map
// costs as little as copying its overlay.
const minFlatten = 64

// flattenAt is the largest overlay kept on a base of n entries. Each
// change copies the overlay (k entries, k/2 on average as it grows), a
// flatten copies the base once every k changes (n/k per change): the sum
// is least at k = √(2n), 447 at 100,000 (as proxy.EndpointTable's).
func flattenAt(n int) int {
	return max(minFlatten, int(math.Sqrt(2*float64(n))))
}

func newLayered[K comparable, V any](base map[K]V) layered[K, V] {
	return layered[K, V]{base: base, n: len(base)}
}

func (m layered[K, V]) get(k K) (V, bool) {
	if e, ok := m.over[k]; ok {
		return e.v, !e.deleted
	}
	v, ok := m.base[k]
	return v, ok
}

func (m layered[K, V]) len() int { return m.n }

// each calls f for every entry, in no particular order.
func (m layered[K, V]) each(f func(K, V)) {
	for k, v := range m.base {
		if _, over := m.over[k]; !over {
			f(k, v)
		}
	}
	for k, e := range m.over {
		if !e.deleted {
			f(k, e.v)
		}
	}
}

// layeredEdit collects the changes of one with.
type layeredEdit[K comparable, V any] struct {
	from layered[K, V]
	over map[K]layeredEntry[V]
	n    int
}

func (m layered[K, V]) edit() *layeredEdit[K, V] {
	over := make(map[K]layeredEntry[V], len(m.over)+4)
	for k, e := range m.over {
		over[k] = e
	}
	return &layeredEdit[K, V]{from: m, over: over, n: m.n}
}

func (e *layeredEdit[K, V]) get(k K) (V, bool) {
	if x, ok := e.over[k]; ok {
		return x.v, !x.deleted
	}
	v, ok := e.from.base[k]
	return v, ok
}

func (e *layeredEdit[K, V]) set(k K, v V) {
	if _, ok := e.get(k); !ok {
		e.n++
	}
	e.over[k] = layeredEntry[V]{v: v}
}

func (e *layeredEdit[K, V]) delete(k K) {
	if _, ok := e.get(k); !ok {
		return
	}
	e.n--
	if _, inBase := e.from.base[k]; inBase {
		e.over[k] = layeredEntry[V]{deleted: true}
	} else {
		delete(e.over, k)
	}
}

// done returns the edited map.
func (e *layeredEdit[K, V]) done() layered[K, V] {
	if len(e.over) <= flattenAt(len(e.from.base)) {
		return layered[K, V]{base: e.from.base, over: e.over, n: e.n}
	}
	flat := maps.Clone(e.from.base)
	if flat == nil {
		flat = make(map[K]V, len(e.over))
	}
	for k, x := range e.over {
		if x.deleted {
			delete(flat, k)
		} else {
			flat[k] = x.v
		}
	}
	return newLayered(flat)
}
