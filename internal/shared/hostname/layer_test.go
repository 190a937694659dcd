package hostname

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// withReference applies a With to the list it stands for: the patterns
// removed leave it, the new ones go at its end.
func withReference(list []string, vals []int, remove, add []string, addVals []int) ([]string, []int) {
	var ps []string
	var vs []int
	for i, p := range list {
		if !slices.ContainsFunc(remove, func(r string) bool { return normalPattern(r) == normalPattern(p) }) {
			ps, vs = append(ps, p), append(vs, vals[i])
		}
	}
	return append(ps, add...), append(vs, addVals...)
}

// checkAgainst compares tab with the linear reference over list on names
// near the universe's patterns, and its Len with the distinct patterns.
func checkAgainst(t *testing.T, tab *Table[int], list []string, vals []int, queries []string) {
	t.Helper()
	distinct := map[string]bool{}
	for _, p := range list {
		distinct[normalPattern(p)] = true
	}
	if tab.Len() != len(distinct) {
		t.Fatalf("Len() = %d, want %d (list %q)", tab.Len(), len(distinct), list)
	}
	for _, q := range queries {
		got, ok := tab.Lookup(q)
		i, wantOK := refLookup(list, q)
		if ok != wantOK || ok && got != vals[i] {
			t.Fatalf("Lookup(%q) = %d, %v; reference %v (list %q)", q, got, ok, wantOK, list)
		}
	}
	ps, vs := tab.Entries()
	again := NewTable(ps, vs)
	for _, q := range queries {
		a, aok := tab.Lookup(q)
		b, bok := again.Lookup(q)
		if a != b || aok != bok {
			t.Fatalf("the table of Entries() differs at %q", q)
		}
	}
}

// TestWithMatchesNewTable applies random changes with With and compares
// each table with the reference over the list the changes leave, across
// overlays and the rebuilds they grow into.
func TestWithMatchesNewTable(t *testing.T) {
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 11))
		universe := make([]string, 600)
		for i := range universe {
			switch r.IntN(20) {
			case 0:
				universe[i] = "*.d" + string(rune('a'+r.IntN(5))) + ".example.com"
			case 1:
				universe[i] = ""
			default:
				universe[i] = "h" + string(rune('a'+r.IntN(26))) + string(rune('a'+r.IntN(26))) + ".d" + string(rune('a'+r.IntN(5))) + ".example.com"
			}
			if r.IntN(7) == 0 {
				universe[i] = strings.ToUpper(universe[i]) + "."
			}
		}
		var queries []string
		for _, p := range universe {
			p = strings.TrimPrefix(p, "*.")
			queries = append(queries, p, "x."+p, strings.ToUpper(p), "zz.nowhere.org")
		}
		n := 300
		if seed%2 == 1 {
			n = 10 // small: every change of size goes past the overlay bound
		}
		list := slices.Clone(universe[:n])
		vals := make([]int, len(list))
		for i := range vals {
			vals[i] = i
		}
		tab := NewTable(list, vals)
		next := len(vals)
		for step := range 400 {
			var remove, add []string
			var addVals []int
			for range r.IntN(4) {
				if len(list) > 0 {
					remove = append(remove, list[r.IntN(len(list))])
				}
			}
			for range r.IntN(4) {
				add = append(add, universe[r.IntN(len(universe))])
				addVals = append(addVals, next)
				next++
			}
			before := tab
			beforeList, beforeVals := slices.Clone(list), slices.Clone(vals)
			tab = tab.With(remove, add, addVals)
			list, vals = withReference(list, vals, remove, add, addVals)
			sample := make([]string, 60)
			for i := range sample {
				sample[i] = queries[r.IntN(len(queries))]
			}
			checkAgainst(t, tab, list, vals, sample)
			if step%50 == 0 {
				// The table With started from is unchanged.
				checkAgainst(t, before, beforeList, beforeVals, sample)
			}
		}
	}
}

// FuzzWith applies changes coded in ops to a table and compares it with the
// reference: each byte picks a pattern of the list below (high bit: remove).
func FuzzWith(f *testing.F) {
	f.Add("a.example.com\n*.example.com\nb.example.com\n\nA.b.example.com.", []byte{0, 1, 0x80, 2, 0x82, 3, 4, 0x84})
	f.Add("x.y\n*.y\nz.y", []byte{0x80, 0x81, 0x82, 0, 1, 2})
	f.Fuzz(func(t *testing.T, patternList string, ops []byte) {
		universe := strings.Split(patternList, "\n")
		if len(universe) > 64 || len(ops) > 256 {
			return
		}
		var queries []string
		for _, p := range universe {
			p = strings.TrimPrefix(p, "*.")
			queries = append(queries, p, "q."+p, strings.ToUpper(p))
		}
		var tab *Table[int]
		var list []string
		var vals []int
		for i, op := range ops {
			p := universe[int(op&0x7f)%len(universe)]
			if op&0x80 != 0 {
				tab = tab.With([]string{p}, nil, nil)
				list, vals = withReference(list, vals, []string{p}, nil, nil)
			} else {
				tab = tab.With(nil, []string{p}, []int{i})
				list, vals = withReference(list, vals, nil, []string{p}, []int{i})
			}
			checkAgainst(t, tab, list, vals, queries)
		}
	})
}

// BenchmarkLookupLayered is BenchmarkLookup's exact hits and misses at
// 100,000 names on a table that took 1,000 changes with With (500 names
// removed, 500 added): the overlay a table carries between rebuilds, as
// large as it gets at that size before a rebuild.
func BenchmarkLookupLayered(b *testing.B) {
	const n = 100000
	patterns := make([]string, n)
	for i := range patterns {
		patterns[i] = fmt.Sprintf("svc-%d.ns-%d.example.com", i, i/20)
	}
	built := NewTable(patterns, make([]int, n))
	var remove, add []string
	for i := range 500 {
		remove = append(remove, patterns[i*97])
		add = append(add, fmt.Sprintf("new-%d.ns-%d.example.com", i, i))
	}
	layered := built.With(remove, add, make([]int, len(add)))
	if layered.over == nil {
		b.Fatal("the change was rebuilt, not layered")
	}
	qs := make([]string, 1<<14)
	for j := range qs {
		if j%2 == 0 {
			qs[j] = patterns[(j*7919)%n|1]
		} else {
			qs[j] = fmt.Sprintf("svc-%d.nsx-%d.example.com", j, j)
		}
	}
	for name, tab := range map[string]*Table[int]{"built": built, "layered": layered} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				tab.Lookup(qs[i&(len(qs)-1)])
			}
		})
	}
}
