package translate

// layered is a map that is never changed once built: with returns a new
// one sharing everything unchanged. Changes go to a small overlay on a
// shared base until the overlay grows past a share of the base, and the
// two are flattened into a new base: a one-object change to a map of
// 100,000 entries copies the overlay, not the map.
type layered[K comparable, V any] struct {
	base map[K]V
	over map[K]layeredEntry[V]
	n    int
}

type layeredEntry[V any] struct {
	v       V
	deleted bool
}

// layeredFlatten: an overlay larger than minFlatten entries and 1/16 of
// the base is flattened.
const (
	minFlatten   = 64
	flattenShare = 16
)

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
	m := layered[K, V]{base: e.from.base, over: e.over, n: e.n}
	if len(e.over) > minFlatten && len(e.over) > len(e.from.base)/flattenShare {
		flat := make(map[K]V, m.n)
		m.each(func(k K, v V) { flat[k] = v })
		return newLayered(flat)
	}
	return m
}
