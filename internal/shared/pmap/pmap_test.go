package pmap

import (
	"maps"
	"math/rand/v2"
	"testing"
)

// TestEditsMatchMapAndLeaveEarlierMapsAlone: through random sets and
// deletes (buckets splitting, nodes shared and copied), every Map holds
// what a plain map given the same changes holds, and every earlier Map
// still holds what it held when it was made.
func TestEditsMatchMapAndLeaveEarlierMapsAlone(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	want := map[int]int{}
	for i := range 500 {
		want[i] = i
	}
	m := Of(maps.Clone(want))
	type kept struct {
		m    Map[int, int]
		want map[int]int
	}
	var history []kept
	for step := range 3000 {
		e := m.Edit()
		for range 1 + r.IntN(4) {
			k := r.IntN(700)
			if r.IntN(3) == 0 {
				e.Delete(k)
				delete(want, k)
			} else {
				e.Set(k, step)
				want[k] = step
			}
			wv, wok := want[k]
			if v, ok := e.Get(k); ok != wok || ok && v != wv {
				t.Fatalf("step %d: the edit reads %d=%d,%v", step, k, v, ok)
			}
		}
		m = e.Done()
		if got := maps.Collect(m.All()); !maps.Equal(got, want) || m.Len() != len(want) {
			t.Fatalf("step %d: %d entries (Len %d), want %d", step, len(got), m.Len(), len(want))
		}
		if step%100 == 0 {
			history = append(history, kept{m, maps.Clone(want)})
		}
	}
	for i, h := range history {
		if got := maps.Collect(h.m.All()); !maps.Equal(got, h.want) || h.m.Len() != len(h.want) {
			t.Fatalf("map %d of the history changed after later edits", i)
		}
		for k, v := range h.want {
			if got, ok := h.m.Get(k); !ok || got != v || h.m.At(k) != v {
				t.Fatalf("map %d of the history: %d=%d,%v, want %d", i, k, got, ok, v)
			}
		}
	}
}

// TestZeroMap: the zero Map is empty and can be edited.
func TestZeroMap(t *testing.T) {
	var m Map[string, int]
	if _, ok := m.Get("a"); ok || m.Len() != 0 || m.At("a") != 0 {
		t.Fatal("the zero Map is not empty")
	}
	e := m.Edit()
	e.Set("a", 1)
	e.Delete("b")
	if n := e.Done(); n.Len() != 1 || n.At("a") != 1 || m.Len() != 0 {
		t.Fatalf("edited: Len %d, a=%d; zero Len %d", n.Len(), n.At("a"), m.Len())
	}
}

// BenchmarkEditOne is one change to a map of 100,000 entries, as a delta
// makes to the status map of 100,000 ListenerSets: it copies the path to
// the key, not the map.
func BenchmarkEditOne(b *testing.B) {
	base := map[int]int{}
	for i := range 100_000 {
		base[i] = i
	}
	m := Of(base)
	i := 0
	for b.Loop() {
		e := m.Edit()
		e.Set(i%100_000, i)
		m = e.Done()
		i++
	}
}
