package config

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"portico.dev/portico/internal/testkit/usage"
)

// withEndpoints is t with k's endpoints set to e.
func withEndpoints(t EndpointTable, k BackendKey, e *Endpoints) EndpointTable {
	return t.With(map[BackendKey]*Endpoints{k: e})
}

func backendKey(i int) BackendKey {
	return BackendKey{Service: NamespacedName{Namespace: fmt.Sprintf("ns-%d", i/100), Name: fmt.Sprintf("svc-%d", i)}, Port: int32(80 + i%3)}
}

// checkTable fails unless t holds exactly want, by Lookup over every key
// of keys, by Len and by All.
func checkTable(t *testing.T, step int, tbl EndpointTable, want map[BackendKey]*Endpoints, keys int) {
	t.Helper()
	for i := range keys {
		k := backendKey(i)
		if got := tbl.Lookup(k); got != want[k] {
			t.Fatalf("step %d: Lookup(%v) = %v, want %v", step, k, got, want[k])
		}
	}
	if tbl.Len() != len(want) {
		t.Fatalf("step %d: Len() = %d, want %d", step, tbl.Len(), len(want))
	}
	all := map[BackendKey]*Endpoints{}
	for k, e := range tbl.All() {
		if _, twice := all[k]; twice {
			t.Fatalf("step %d: All yields %v twice", step, k)
		}
		all[k] = e
	}
	if !maps.Equal(all, want) {
		t.Fatalf("step %d: All() holds %d entries, want %d", step, len(all), len(want))
	}
}

// TestEndpointTableMatchesMap applies random batches of changes, past
// several folds, to a table and to a plain map, and compares them after
// every batch; every earlier table must still hold what it held.
func TestEndpointTableMatchesMap(t *testing.T) {
	for _, size := range []int{0, 10, 1000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(size), 7))
			keys := size + 200
			initial := map[BackendKey]*Endpoints{}
			for i := range size {
				initial[backendKey(i)] = NewEndpoints(fmt.Sprintf("10.1.0.%d:80", i%250))
			}
			tbl := NewEndpointTable(maps.Clone(initial))
			want := initial
			type kept struct {
				tbl  EndpointTable
				want map[BackendKey]*Endpoints
			}
			var history []kept
			folded := 0
			for step := range 400 {
				batch := 1 + r.IntN(8)
				want = maps.Clone(want)
				set := map[BackendKey]*Endpoints{}
				for range batch {
					k := backendKey(r.IntN(keys))
					if r.IntN(3) == 0 {
						set[k] = nil
						delete(want, k)
					} else {
						e := NewEndpoints(fmt.Sprintf("10.2.%d.%d:80", step%250, r.IntN(250)))
						set[k] = e
						want[k] = e
					}
				}
				tbl = tbl.With(set)
				if tbl.over == nil { // only a fold leaves no overlay
					folded++
				}
				checkTable(t, step, tbl, want, keys)
				history = append(history, kept{tbl, want})
			}
			for i, h := range history {
				checkTable(t, i, h.tbl, h.want, keys)
			}
			if folded == 0 {
				t.Fatal("no change folded the overlay: the test does not cover folding")
			}
		})
	}
}

// TestEndpointTableZero: the zero table is empty and takes changes.
func TestEndpointTableZero(t *testing.T) {
	var zero EndpointTable
	if zero.Lookup(backendKey(1)) != nil || zero.Len() != 0 {
		t.Fatal("the zero table is not empty")
	}
	for range zero.All() {
		t.Fatal("the zero table yields an entry")
	}
	e := NewEndpoints("10.0.0.1:80")
	one := withEndpoints(zero, backendKey(1), e)
	if one.Lookup(backendKey(1)) != e || one.Len() != 1 {
		t.Fatal("a change to the zero table is lost")
	}
	if none := withEndpoints(one, backendKey(1), nil); none.Lookup(backendKey(1)) != nil || none.Len() != 0 {
		t.Fatal("a removal is lost")
	}
	if nilEntry := NewEndpointTable(map[BackendKey]*Endpoints{backendKey(2): nil}); nilEntry.Len() != 0 {
		t.Fatal("a nil entry counts")
	}
}

// FuzzEndpointTable applies the changes the input encodes to a table and to
// a plain map, in batches of the first byte's size, and compares them.
func FuzzEndpointTable(f *testing.F) {
	f.Add([]byte{1, 1, 2, 2, 3, 0, 1, 4})
	f.Add([]byte{3, 200, 7, 0, 200, 9, 0, 1, 1, 0, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const keys = 96
		if len(ops) == 0 {
			return
		}
		batch := 1 + int(ops[0]%8)
		initial := map[BackendKey]*Endpoints{}
		for i := range keys / 2 {
			initial[backendKey(i)] = NewEndpoints(fmt.Sprintf("10.1.0.%d:80", i))
		}
		tbl := NewEndpointTable(maps.Clone(initial))
		want := maps.Clone(initial)
		ops = ops[1:]
		for i := 0; i+1 < len(ops); i += 2 * batch {
			chunk := ops[i:min(len(ops), i+2*batch)]
			set := map[BackendKey]*Endpoints{}
			for j := 0; j+1 < len(chunk); j += 2 {
				k := backendKey(int(chunk[j]) % keys)
				if chunk[j+1]%4 == 0 {
					set[k] = nil
					delete(want, k)
					continue
				}
				e := NewEndpoints(fmt.Sprintf("10.0.%d.%d:80", chunk[j], chunk[j+1]))
				set[k] = e
				want[k] = e
			}
			tbl = tbl.With(set)
			checkTable(t, i, tbl, want, keys)
		}
	})
}

// BenchmarkEndpointLookup is the request path's read of a backend's
// endpoints at 100,000 backends: from a plain map (what Config held
// before), from a table without an overlay, and from one whose overlay is
// as large as it gets before a fold; the keys looked up are spread over
// the whole table.
func BenchmarkEndpointLookup(b *testing.B) {
	const n = 100_000
	m := make(map[BackendKey]*Endpoints, n)
	keys := make([]BackendKey, n)
	for i := range n {
		keys[i] = backendKey(i)
		m[keys[i]] = NewEndpoints("10.0.0.1:80")
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	flat := NewEndpointTable(maps.Clone(m))
	layered := flat
	for i := range overlayLimit(n) {
		layered = withEndpoints(layered, keys[i*7%n], NewEndpoints("10.0.0.2:80"))
	}
	if len(layered.over) < overlayLimit(n)/2 {
		b.Fatalf("overlay of %d entries, want about %d", len(layered.over), overlayLimit(n))
	}
	b.Run("map", func(b *testing.B) {
		benchLookups(b, func(k BackendKey) *Endpoints { return m[k] }, keys)
	})
	b.Run("table", func(b *testing.B) { benchLookups(b, flat.Lookup, keys) })
	b.Run("overlay", func(b *testing.B) { benchLookups(b, layered.Lookup, keys) })
}

// benchLookups looks keys up in turn with lookup. Besides ns/op it reports
// cpu-ns/op, the process's CPU time per lookup, which other work on a
// shared machine does not inflate.
func benchLookups(b *testing.B, lookup func(BackendKey) *Endpoints, keys []BackendKey) {
	b.ReportAllocs()
	start := usage.CPU()
	found := 0
	for i := 0; b.Loop(); i++ {
		if lookup(keys[i%len(keys)]) != nil {
			found++
		}
	}
	b.ReportMetric(float64(usage.CPU()-start)/float64(b.N), "cpu-ns/op")
	if found != b.N {
		b.Fatalf("%d of %d lookups found their endpoints", found, b.N)
	}
}

// BenchmarkEndpointTableWith is one backend's change at 100,000, past
// folds: what a one-Service change costs the table.
func BenchmarkEndpointTableWith(b *testing.B) {
	const n = 100_000
	m := make(map[BackendKey]*Endpoints, n)
	for i := range n {
		m[backendKey(i)] = NewEndpoints("10.0.0.1:80")
	}
	tbl := NewEndpointTable(m)
	e := NewEndpoints("10.0.0.2:80")
	b.ReportAllocs()
	start := usage.CPU()
	for i := 0; b.Loop(); i++ {
		tbl = withEndpoints(tbl, backendKey(i*7919%n), e)
	}
	b.ReportMetric(float64(usage.CPU()-start)/float64(b.N), "cpu-ns/op")
}
