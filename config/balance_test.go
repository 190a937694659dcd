package config

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
)

func addrsOf(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.%d.%d:8080", i/200, i%200+1)
	}
	return out
}

// owners maps 10,000 keys to the address each goes to.
func owners(e *Endpoints) []string {
	out := make([]string, 10000)
	for i := range out {
		out[i] = e.Addrs[e.PickHash(HashKey("key-"+strconv.Itoa(i)), 0)]
	}
	return out
}

// TestMaglevDisruption: when one of 10 endpoints goes, the keys it had
// move and about as many others as Maglev's table gives away (a few
// percent of them at most): in all about a tenth of 10,000 keys. Adding
// it back moves them back.
func TestMaglevDisruption(t *testing.T) {
	addrs := addrsOf(10)
	before := owners(NewEndpoints(addrs...))
	rest := append(append([]string(nil), addrs[:7]...), addrs[8:]...)
	after := owners(NewEndpoints(rest...))
	moved, had := 0, 0
	for i := range before {
		if before[i] == addrs[7] {
			had++
		}
		if before[i] != after[i] {
			moved++
		}
	}
	share := float64(moved) / float64(len(before))
	t.Logf("one of 10 endpoints removed: %d of %d keys moved (%.4f); it had %d", moved, len(before), share, had)
	if share < 0.08 || share > 0.12 {
		t.Errorf("%.4f of the keys moved, want about 0.10", share)
	}
	if extra := moved - had; extra > len(before)/100 {
		t.Errorf("%d keys of endpoints that stayed moved, want under 1%%", extra)
	}
	again := owners(NewEndpoints(addrs...))
	for i := range before {
		if again[i] != before[i] {
			t.Fatalf("key %d: %s with the endpoint back, %s before", i, again[i], before[i])
		}
	}
}

// TestMaglevOrderIndependent: the table depends on the addresses, not
// their order, so replicas and reloads agree.
func TestMaglevOrderIndependent(t *testing.T) {
	addrs := addrsOf(37)
	want := owners(NewEndpoints(addrs...))
	for seed := range uint64(5) {
		shuffled := append([]string(nil), addrs...)
		rand.New(rand.NewPCG(seed, 1)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got := owners(NewEndpoints(shuffled...))
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("seed %d: key %d goes to %s, in address order to %s", seed, i, got[i], want[i])
			}
		}
	}
}

// TestMaglevBalance: every endpoint owns its share of the table to within
// 2%, at sizes where the table is at its floor, in its middle and at its
// cap.
func TestMaglevBalance(t *testing.T) {
	for _, n := range []int{2, 3, 10, 100, 1000} {
		e := NewEndpoints(addrsOf(n)...)
		e.PickHash(0, 0)
		table := e.state().table
		counts := make([]int, n)
		for _, i := range table {
			counts[i]++
		}
		fair := float64(len(table)) / float64(n)
		for i, c := range counts {
			if d := float64(c)/fair - 1; d < -0.02 || d > 0.02 {
				t.Errorf("%d endpoints, table of %d: endpoint %d owns %d slots, fair is %.1f", n, len(table), i, c, fair)
			}
		}
	}
}

// TestPickLeast: of two endpoints drawn, the one with fewer requests in
// flight; with one busy endpoint among 10, it is never picked while the
// others are idle... unless drawn with itself, which cannot happen.
func TestPickLeast(t *testing.T) {
	e := NewEndpoints(addrsOf(10)...)
	e.Acquire(4)
	rnd := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		if i := e.PickLeast(rnd.Uint64()); i == 4 {
			t.Fatal("picked the busy endpoint over an idle one")
		}
	}
	e.Release(4)
	if e.InFlight(4) != 0 {
		t.Fatalf("in flight %d after release", e.InFlight(4))
	}
	seen := map[int]bool{}
	for range 1000 {
		seen[e.PickLeast(rnd.Uint64())] = true
	}
	if len(seen) != 10 {
		t.Errorf("idle endpoints picked: %d of 10", len(seen))
	}
}

func BenchmarkPickHash(b *testing.B) {
	e := NewEndpoints(addrsOf(10)...)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.PickHash(uint64(i)*0x9E3779B97F4A7C15, 0)
	}
}

func BenchmarkPickLeast(b *testing.B) {
	e := NewEndpoints(addrsOf(10)...)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e.PickLeast(uint64(i) * 0x9E3779B97F4A7C15)
	}
}

// BenchmarkMaglevBuild is what the first hashed request after a change of
// endpoints pays.
func BenchmarkMaglevBuild(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			addrs := addrsOf(n)
			b.ReportAllocs()
			for b.Loop() {
				maglevTable(addrs)
			}
		})
	}
}
