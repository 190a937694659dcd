package hostname

import (
	"strings"
	"unsafe"
)

// overlay is what With changed in a table since it was built: exact
// patterns only, which a lookup tries before the built table. Wildcards
// and the fallback are few and change rarely; a change to one rebuilds.
type overlay[V any] struct {
	exact map[string]V        // added, not in the built table
	gone  map[string]struct{} // exact patterns of the built table removed
}

// minRebuild and rebuildShare bound an overlay: once it holds more than
// minRebuild entries and more than 1/rebuildShare of the table, With
// rebuilds. Lookups in a large overlay cost a map probe more, and a
// rebuild of 100,000 names costs tens of milliseconds: rebuilding after
// every 1/64 of the table changed keeps both small.
const (
	minRebuild   = 256
	rebuildShare = 64
)

// With returns a table holding t's patterns without those of remove, then
// patterns (values[i] belongs to patterns[i]), as NewTable would build from
// that list. t is not changed. A change of exact names only, the common
// one, costs in proportion to the change, not to the table: it is kept in
// an overlay on t's built index, shared by both tables, until the overlay
// grows past a share of the table and the table is rebuilt. Removing a
// pattern t does not hold does nothing; adding one it holds keeps the one
// it holds (the first wins, as in NewTable).
func (t *Table[V]) With(remove []string, patterns []string, values []V) *Table[V] {
	if len(patterns) != len(values) {
		panic("hostname.Table.With: patterns and values differ in length")
	}
	if t == nil {
		return NewTable(patterns, values)
	}
	for _, p := range remove {
		if !isExact(Normalize(p)) {
			return t.rebuilt(remove, patterns, values)
		}
	}
	for _, p := range patterns {
		if !isExact(Normalize(p)) {
			return t.rebuilt(remove, patterns, values)
		}
	}
	var o overlay[V]
	if t.over != nil {
		o.exact = make(map[string]V, len(t.over.exact)+len(patterns))
		for k, v := range t.over.exact {
			o.exact[k] = v
		}
		o.gone = make(map[string]struct{}, len(t.over.gone)+len(remove))
		for k := range t.over.gone {
			o.gone[k] = struct{}{}
		}
	} else {
		o.exact = make(map[string]V, len(patterns))
		o.gone = make(map[string]struct{}, len(remove))
	}
	for _, p := range remove {
		p = Normalize(p)
		if _, ok := o.exact[p]; ok {
			delete(o.exact, p)
		} else if t.exact.find(p) >= 0 {
			o.gone[p] = struct{}{}
		}
	}
	for i, p := range patterns {
		p = Normalize(p)
		if _, ok := o.exact[p]; ok {
			continue
		}
		if _, removed := o.gone[p]; removed {
			// Back in the table, with what may be another value.
			o.exact[p] = values[i]
			continue
		}
		if t.exact.find(p) >= 0 {
			continue
		}
		o.exact[p] = values[i]
	}
	next := *t
	next.over = &o
	if len(o.exact) == 0 && len(o.gone) == 0 {
		next.over = nil
	}
	if size := len(o.exact) + len(o.gone); size > minRebuild && size > t.n/rebuildShare {
		return next.rebuilt(nil, nil, nil)
	}
	return &next
}

// rebuilt builds the table of t's patterns, less remove, plus patterns.
func (t *Table[V]) rebuilt(remove []string, patterns []string, values []V) *Table[V] {
	ps, vs := t.entries()
	if len(remove) > 0 {
		drop := make(map[string]struct{}, len(remove))
		for _, p := range remove {
			drop[normalPattern(p)] = struct{}{}
		}
		kept := 0
		for i, p := range ps {
			if _, ok := drop[p]; !ok {
				ps[kept], vs[kept] = p, vs[i]
				kept++
			}
		}
		ps, vs = ps[:kept], vs[:kept]
	}
	for i, p := range ps {
		ps[i] = denormal(p)
	}
	return NewTable(append(ps, patterns...), append(vs, values...))
}

// Entries returns the table's patterns and their values: the table
// NewTable(Entries()) builds matches as t does. The slices are the
// caller's.
func (t *Table[V]) Entries() (patterns []string, values []V) {
	patterns, values = t.entries()
	for i, p := range patterns {
		patterns[i] = denormal(p)
	}
	return patterns, values
}

// denormal is a normalized pattern as NewTable takes it: one that ends in
// a dot gets the dot Normalize takes away.
func denormal(p string) string {
	if strings.HasSuffix(p, ".") {
		return p + "."
	}
	return p
}

// entries is Entries with the patterns normalized ("" for the fallback).
func (t *Table[V]) entries() (patterns []string, values []V) {
	if t == nil {
		return nil, nil
	}
	patterns = make([]string, 0, t.Len())
	values = make([]V, 0, t.Len())
	for i, p := range t.patterns {
		if t.over != nil {
			if _, removed := t.over.gone[p]; removed {
				continue
			}
		}
		patterns = append(patterns, p)
		values = append(values, t.values[i])
	}
	if t.over != nil {
		for p, v := range t.over.exact {
			patterns = append(patterns, p)
			values = append(values, v)
		}
	}
	return patterns, values
}

// normalPattern is a pattern as Entries lists it.
func normalPattern(p string) string {
	p = Normalize(p)
	if p == "*" {
		return ""
	}
	return p
}

func isExact(p string) bool {
	return p != "" && p != "*" && !isWildcard(p)
}

// lookupLayered is Lookup in a table with an overlay: an exact name the
// overlay adds wins, one it removed falls through to the wildcards and the
// fallback of the built table, and any other name is looked up in the built
// table.
func (t *Table[V]) lookupLayered(name string) (v V, ok bool) {
	if n := len(name); n > 0 && name[n-1] == '.' {
		name = name[:n-1]
	}
	lowered := name
	if mayHaveUpper(name) {
		if len(name) > maxStackName {
			lowered = lowerASCII(name)
		} else {
			var buf [maxStackName]byte
			b := buf[:len(name)]
			for i := range b {
				b[i] = lower(name[i])
			}
			// Views buf for this call only, as in lookupFolded.
			lowered = unsafe.String(unsafe.SliceData(b), len(b))
		}
	}
	if v, ok := t.over.exact[lowered]; ok {
		return v, true
	}
	if _, removed := t.over.gone[lowered]; !removed {
		return t.lookupBase(name)
	}
	if i := t.findWild(lowered); i >= 0 {
		return t.wildVals[i], true
	}
	if t.hasFallback {
		return t.fallback, true
	}
	return v, false
}
