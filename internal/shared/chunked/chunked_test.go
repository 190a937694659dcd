package chunked

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// check fails unless l holds want and its chunks keep their bounds.
func check(t *testing.T, l List[int], want []int, what string) {
	t.Helper()
	if l.Len() != len(want) {
		t.Fatalf("%s: Len %d, want %d", what, l.Len(), len(want))
	}
	if got := l.Slice(); !slices.Equal(got, want) {
		t.Fatalf("%s: holds %v, want %v", what, got, want)
	}
	if got := slices.Collect(l.Values()); !slices.Equal(got, want) {
		t.Fatalf("%s: Values yields %v, want %v", what, got, want)
	}
	for i, v := range want {
		if l.At(i) != v {
			t.Fatalf("%s: At(%d) = %d, want %d", what, i, l.At(i), v)
		}
	}
	end := 0
	for c, chunk := range l.chunks {
		if len(chunk) == 0 || len(chunk) > 2*Size {
			t.Fatalf("%s: chunk %d holds %d items", what, c, len(chunk))
		}
		end += len(chunk)
		if l.ends[c] != end {
			t.Fatalf("%s: chunk %d ends at %d, want %d", what, c, l.ends[c], end)
		}
	}
}

// TestListMatchesSlice inserts and deletes at random in sorted lists of a
// few chunks and compares each version with a slice edited the same way,
// Search with slices.BinarySearch; every earlier version must still hold
// what it held.
func TestListMatchesSlice(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for _, size := range []int{0, 1, Size - 1, Size, 2*Size + 1, 5*Size + 17} {
		want := make([]int, size)
		for i := range want {
			want[i] = 2 * i
		}
		l := Of(want)
		check(t, l, want, "Of")
		type version struct {
			l    List[int]
			want []int
		}
		var versions []version
		for step := range 3000 {
			v := r.IntN(4*size + 8)
			at, found := slices.BinarySearch(want, v)
			gotAt, gotFound := l.Search(func(x int) int { return cmp.Compare(x, v) })
			if gotAt != at || gotFound != found {
				t.Fatalf("size %d, step %d: Search(%d) = %d, %v; want %d, %v", size, step, v, gotAt, gotFound, at, found)
			}
			// Deletes as often as inserts, but the list does not grow
			// past what it started with by much, nor empty for long.
			if len(want) > 0 && (found || r.IntN(2) == 0 && len(want) > size/2) {
				i := at
				if !found {
					i = r.IntN(len(want))
				}
				l, want = l.Delete(i), slices.Delete(slices.Clone(want), i, i+1)
			} else {
				l, want = l.Insert(at, v), slices.Insert(slices.Clone(want), at, v)
			}
			check(t, l, want, "after a change")
			if step%97 == 0 {
				versions = append(versions, version{l, want})
			}
		}
		for k, v := range versions {
			check(t, v.l, v.want, fmt.Sprintf("size %d, version %d", size, k))
		}
	}
}

// TestListSharesUntouchedChunks: an insert or a delete copies the chunk it
// changes (two when a small chunk joins its neighbour) and shares the rest.
func TestListSharesUntouchedChunks(t *testing.T) {
	items := make([]int, 10*Size+5)
	for i := range items {
		items[i] = i
	}
	l := Of(items)
	copied := func(a, b List[int]) int {
		n := 0
		for _, c := range b.chunks {
			shared := false
			for _, d := range a.chunks {
				if &c[0] == &d[0] && len(c) == len(d) {
					shared = true
				}
			}
			if !shared {
				n++
			}
		}
		return n
	}
	ins := l.Insert(4*Size+7, -1)
	if n := copied(l, ins); n != 1 {
		t.Fatalf("an insert made %d new chunks, want 1", n)
	}
	del := ins.Delete(7 * Size)
	if n := copied(ins, del); n != 1 {
		t.Fatalf("a delete made %d new chunks, want 1", n)
	}
	// Appending to the last, short chunk copies only it.
	app := l.Insert(l.Len(), -2)
	if n := copied(l, app); n != 1 {
		t.Fatalf("an append made %d new chunks, want 1", n)
	}
}

// TestListChurnKeepsChunksFull: a list of constant length under
// thousands of inserts at its end (a new object is the newest) and
// deletes anywhere keeps about as many chunks as it started with, not one
// more per 1,024 inserts.
func TestListChurnKeepsChunksFull(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 8 * Size
	l := Of(make([]int, n))
	for range 50 * Size {
		l = l.Insert(l.Len(), 1)
		l = l.Delete(r.IntN(l.Len()))
	}
	if l.Len() != n {
		t.Fatalf("Len %d, want %d", l.Len(), n)
	}
	// A delete joins a chunk left under Size/2 with a neighbour, so every
	// chunk but the short last one of Of holds Size/2 items or more.
	if got, most := len(l.chunks), 2*n/Size+1; got > most {
		t.Fatalf("%d chunks for %d items, want at most %d", got, n, most)
	}
}

// TestListIndexOutOfRange: At, Insert and Delete outside the list panic
// as a slice would, rather than answer for another index.
func TestListIndexOutOfRange(t *testing.T) {
	l := Of([]int{1, 2, 3})
	for name, f := range map[string]func(){
		"At(3)":      func() { l.At(3) },
		"At(-1)":     func() { l.At(-1) },
		"Delete(3)":  func() { l.Delete(3) },
		"Insert(4)":  func() { l.Insert(4, 0) },
		"Insert(-1)": func() { l.Insert(-1, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s did not panic", name)
				}
			}()
			f()
		}()
	}
}
