// Package pmap holds Map, a persistent hash map: never changed once built,
// and a map edited from it shares everything the edit did not touch. A Map
// is a plain Go map it was made of (Of, which copies nothing) under a hash
// trie of the changes since: a change copies the path to its key in the
// trie (a few nodes of 16 pointers, and a bucket of at most 8 entries),
// whatever the size of the map: one status changed among 100,000 copies a
// kilobyte or two, and a full translation's maps are taken as they are.
package pmap

import (
	"hash/maphash"
	"iter"
)

const (
	bits       = 4
	fanout     = 1 << bits
	bucketSize = 8
	maxDepth   = 64 / bits // past it every hash bit is used: buckets grow
)

// Map is an immutable map; the zero value is empty. Edit makes a changed
// copy. Maps may be read from any number of goroutines.
type Map[K comparable, V any] struct {
	// base holds the entries the Map was made of; the trie under root,
	// every change since, deletions of base's entries included. A key
	// changes at most once in the trie, however often it changes: the
	// trie never holds more than base.
	base map[K]V
	root *node[K, V]
	n    int
	seed *maphash.Seed // shared by the maps edited from one another
}

// node is a bucket of entries (kids nil) or an inner node.
type node[K comparable, V any] struct {
	kids    *[fanout]*node[K, V]
	entries []entry[K, V]
	// owner is the edit that made the node: that edit may change it in
	// place, as no Map holds it yet.
	owner *Edit[K, V]
}

type entry[K comparable, V any] struct {
	hash    uint64
	k       K
	v       V
	deleted bool // k is in base, and deleted
}

func (m Map[K, V]) hash(k K) uint64 { return maphash.Comparable(*m.seed, k) }

// Get returns the value of k, and whether there is one.
func (m Map[K, V]) Get(k K) (V, bool) {
	if e := m.changed(k); e != nil {
		return e.v, !e.deleted
	}
	v, ok := m.base[k]
	return v, ok
}

// changed is k's entry in the trie, nil when k did not change since base.
func (m Map[K, V]) changed(k K) *entry[K, V] {
	if m.root == nil {
		return nil
	}
	h := m.hash(k)
	n := m.root
	for depth := 0; n.kids != nil; depth++ {
		n = n.kids[(h>>(depth*bits))%fanout]
		if n == nil {
			return nil
		}
	}
	for i := range n.entries {
		if e := &n.entries[i]; e.hash == h && e.k == k {
			return e
		}
	}
	return nil
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
			if m.changed(k) == nil && !yield(k, v) {
				return
			}
		}
		if m.root != nil {
			m.root.each(yield)
		}
	}
}

func (n *node[K, V]) each(yield func(K, V) bool) bool {
	if n.kids == nil {
		for _, e := range n.entries {
			if !e.deleted && !yield(e.k, e.v) {
				return false
			}
		}
		return true
	}
	for _, kid := range n.kids {
		if kid != nil && !kid.each(yield) {
			return false
		}
	}
	return true
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

// Of returns a Map of m's entries. m becomes the Map's: it must not be
// changed afterwards.
func Of[K comparable, V any](m map[K]V) Map[K, V] {
	return Map[K, V]{base: m, n: len(m)}
}

// Edit collects the changes that make a new Map from one; the Map it was
// made from does not change.
type Edit[K comparable, V any] struct {
	m Map[K, V]
}

// Edit starts a changed copy of m.
func (m Map[K, V]) Edit() *Edit[K, V] {
	if m.seed == nil {
		s := maphash.MakeSeed()
		m.seed = &s
	}
	return &Edit[K, V]{m: m}
}

// Get returns the value of k as edited so far.
func (e *Edit[K, V]) Get(k K) (V, bool) { return e.m.Get(k) }

// own returns n, or a copy of it that e may change.
func (e *Edit[K, V]) own(n *node[K, V]) *node[K, V] {
	if n == nil {
		return &node[K, V]{owner: e}
	}
	if n.owner == e {
		return n
	}
	c := &node[K, V]{owner: e}
	if n.kids != nil {
		kids := *n.kids
		c.kids = &kids
	} else {
		c.entries = make([]entry[K, V], len(n.entries), len(n.entries)+1)
		copy(c.entries, n.entries)
	}
	return c
}

// Set sets k to v.
func (e *Edit[K, V]) Set(k K, v V) {
	if _, ok := e.m.Get(k); !ok {
		e.m.n++
	}
	e.put(entry[K, V]{hash: e.m.hash(k), k: k, v: v})
}

// put puts x in the trie, in place of k's entry if it has one.
func (e *Edit[K, V]) put(x entry[K, V]) {
	h := x.hash
	e.m.root = e.own(e.m.root)
	n := e.m.root
	depth := 0
	for n.kids != nil {
		slot := &n.kids[(h>>(depth*bits))%fanout]
		*slot = e.own(*slot)
		n = *slot
		depth++
	}
	for i := range n.entries {
		if n.entries[i].hash == h && n.entries[i].k == x.k {
			n.entries[i] = x
			return
		}
	}
	n.entries = append(n.entries, x)
	if len(n.entries) > bucketSize && depth < maxDepth {
		e.split(n, depth)
	}
}

// split turns the bucket n, at depth, into an inner node.
func (e *Edit[K, V]) split(n *node[K, V], depth int) {
	entries := n.entries
	n.entries, n.kids = nil, &[fanout]*node[K, V]{}
	for _, x := range entries {
		slot := &n.kids[(x.hash>>(depth*bits))%fanout]
		if *slot == nil {
			*slot = &node[K, V]{owner: e}
		}
		(*slot).entries = append((*slot).entries, x)
	}
	for _, kid := range n.kids {
		if kid != nil && len(kid.entries) > bucketSize && depth+1 < maxDepth {
			e.split(kid, depth+1)
		}
	}
}

// Delete removes k.
func (e *Edit[K, V]) Delete(k K) {
	if _, ok := e.m.Get(k); !ok {
		return
	}
	e.m.n--
	h := e.m.hash(k)
	if _, inBase := e.m.base[k]; inBase {
		var zero V
		e.put(entry[K, V]{hash: h, k: k, v: zero, deleted: true})
		return
	}
	e.m.root = e.own(e.m.root)
	n := e.m.root
	for depth := 0; n.kids != nil; depth++ {
		slot := &n.kids[(h>>(depth*bits))%fanout]
		*slot = e.own(*slot)
		n = *slot
	}
	for i := range n.entries {
		if n.entries[i].hash == h && n.entries[i].k == k {
			n.entries = append(n.entries[:i], n.entries[i+1:]...)
			return
		}
	}
}

// Done returns the edited map. The Edit must not be used afterwards.
func (e *Edit[K, V]) Done() Map[K, V] {
	m := e.m
	e.m = Map[K, V]{}
	return m
}
