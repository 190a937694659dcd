// Package layered holds Map, a map that is never changed once built and
// that the maps edited from it share everything unchanged with: changes go
// to a small overlay on a shared base until the overlay grows past √(2n)
// entries and the two are flattened into a new base, so that a change of
// one entry of 100,000 copies the overlay, not the map.
package layered

import (
	"iter"
	"maps"
	"math"
)

// Map is an immutable map; the zero value is empty. Edit makes a changed
// copy. Maps of one lineage may be read from any number of goroutines.
type Map[K comparable, V any] struct {
	base map[K]V
	over map[K]entry[V]
	n    int
}

type entry[V any] struct {
	v       V
	deleted bool
}

// minFlatten is the overlay no map flattens below: flattening a small map
// costs as little as copying its overlay.
const minFlatten = 64

// flattenAt is the largest overlay kept on a base of n entries. Each
// change copies the overlay (k entries, k/2 on average as it grows), a
// flatten copies the base once every k changes (n/k per change): the sum
// is least at k = √(2n), 447 at 100,000 (as config.EndpointTable's).
func flattenAt(n int) int {
	return max(minFlatten, int(math.Sqrt(2*float64(n))))
}

// Of returns a Map of m's entries. m becomes the Map's: it must not be
// changed afterwards.
func Of[K comparable, V any](m map[K]V) Map[K, V] {
	return Map[K, V]{base: m, n: len(m)}
}

// Get returns the value of k, and whether there is one.
func (m Map[K, V]) Get(k K) (V, bool) {
	if e, ok := m.over[k]; ok {
		return e.v, !e.deleted
	}
	v, ok := m.base[k]
	return v, ok
}

// At returns the value of k, the zero value when there is none.
func (m Map[K, V]) At(k K) V {
	v, _ := m.Get(k)
	return v
}

// Len is the number of entries.
func (m Map[K, V]) Len() int { return m.n }

// All yields every entry, in no particular order: sort the keys where the
// order shows.
func (m Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for k, v := range m.base {
			if _, over := m.over[k]; !over && !yield(k, v) {
				return
			}
		}
		for k, e := range m.over {
			if !e.deleted && !yield(k, e.v) {
				return
			}
		}
	}
}

// Keys yields every key, in no particular order.
func (m Map[K, V]) Keys() iter.Seq[K] {
	return func(yield func(K) bool) {
		for k := range m.All() {
			if !yield(k) {
				return
			}
		}
	}
}

// Base is the flattened part of m, which the maps edited from m share
// until one of them flattens: a cache of something derived from every
// entry can be kept per base (by its identity) and corrected with the
// overlay (Shadows, Overlay). It must not be changed.
func (m Map[K, V]) Base() map[K]V { return m.base }

// Shadows reports whether the overlay sets or deletes k: the value of k in
// Base, if any, is then not m's.
func (m Map[K, V]) Shadows(k K) bool {
	_, ok := m.over[k]
	return ok
}

// Overlay yields the entries the overlay sets.
func (m Map[K, V]) Overlay() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for k, e := range m.over {
			if !e.deleted && !yield(k, e.v) {
				return
			}
		}
	}
}

// Edit collects the changes that make a new Map from one; the Map it was
// made from does not change.
type Edit[K comparable, V any] struct {
	from Map[K, V]
	over map[K]entry[V]
	n    int
}

// Edit starts a changed copy of m.
func (m Map[K, V]) Edit() *Edit[K, V] {
	over := make(map[K]entry[V], len(m.over)+4)
	maps.Copy(over, m.over)
	return &Edit[K, V]{from: m, over: over, n: m.n}
}

// Get returns the value of k as edited so far.
func (e *Edit[K, V]) Get(k K) (V, bool) {
	if x, ok := e.over[k]; ok {
		return x.v, !x.deleted
	}
	v, ok := e.from.base[k]
	return v, ok
}

// Set sets k to v.
func (e *Edit[K, V]) Set(k K, v V) {
	if _, ok := e.Get(k); !ok {
		e.n++
	}
	e.over[k] = entry[V]{v: v}
}

// Delete removes k.
func (e *Edit[K, V]) Delete(k K) {
	if _, ok := e.Get(k); !ok {
		return
	}
	e.n--
	if _, inBase := e.from.base[k]; inBase {
		e.over[k] = entry[V]{deleted: true}
	} else {
		delete(e.over, k)
	}
}

// Done returns the edited map. The Edit must not be used afterwards.
func (e *Edit[K, V]) Done() Map[K, V] {
	if len(e.over) <= flattenAt(len(e.from.base)) {
		return Map[K, V]{base: e.from.base, over: e.over, n: e.n}
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
	return Of(flat)
}
