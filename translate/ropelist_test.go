package translate

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRopeListMatchesDiffObjects changes a list of up to a few chunks at
// random (updates, inserts, deletes, appends, several at once) and
// compares ropeList.diff with diffObjects of plain copies; the list it
// keeps must equal the one it was given, must not change when the caller
// then reuses that slice, and must keep its chunks large.
func TestRopeListMatchesDiffObjects(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 7))
	next := 0
	fresh := func() *int { next++; v := next; return &v }
	for _, size := range []int{0, 1, keptChunk - 1, keptChunk, 3*keptChunk + 17} {
		list := make([]*int, size)
		for i := range list {
			list[i] = fresh()
		}
		kept := newRopeList(list)
		for step := range 400 {
			now := slices.Clone(list)
			for range 1 + r.IntN(3) {
				switch op := r.IntN(5); {
				case op == 0 && len(now) > 0:
					now[r.IntN(len(now))] = fresh()
				case op == 1:
					now = slices.Insert(now, r.IntN(len(now)+1), fresh())
				case op == 2 && len(now) > 0:
					i := r.IntN(len(now))
					now = slices.Delete(now, i, i+1)
				case op == 3 && len(now) > 40:
					i := r.IntN(len(now) - 40)
					now = slices.Delete(now, i, i+r.IntN(40))
				default:
					now = append(now, fresh())
				}
			}
			wantRemoved, wantAdded, wantOK := diffObjects(list, now)
			removed, added, kept2, ok := kept.diff(now)
			if ok != wantOK || !slices.Equal(removed, wantRemoved) || !slices.Equal(added, wantAdded) {
				t.Fatalf("size %d, step %d: diff = %d removed, %d added, %v; want %d, %d, %v", size, step, len(removed), len(added), ok, len(wantRemoved), len(wantAdded), wantOK)
			}
			given := slices.Clone(now)
			for i := range now {
				now[i] = nil
			}
			if !ok {
				kept2 = newRopeList(given) // as a full translation keeps
			}
			if kept2.n != len(given) || !slices.Equal(kept2.all(), given) {
				t.Fatalf("size %d, step %d: the kept list differs from the one given (ok %v)", size, step, ok)
			}
			if most := 2*len(given)/keptChunk + 2; len(kept2.chunks) > most {
				t.Fatalf("size %d, step %d: %d chunks for %d objects", size, step, len(kept2.chunks), len(given))
			}
			list, kept = given, kept2
		}
	}
}

// TestRopeListSharesUnchangedChunks: one object inserted in the middle of
// a long list copies the chunk it lands in, not those after it.
func TestRopeListSharesUnchangedChunks(t *testing.T) {
	list := make([]*int, 10*keptChunk+5)
	for i := range list {
		list[i] = new(int)
	}
	kept := newRopeList(list)
	now := slices.Insert(slices.Clone(list), 4*keptChunk+7, new(int))
	_, added, next, ok := kept.diff(now)
	if !ok || len(added) != 1 {
		t.Fatal("one inserted object is not a delta of one")
	}
	copied := 0
	for _, c := range next.chunks {
		found := false
		for _, o := range kept.chunks {
			if &c[0] == &o[0] && len(c) == len(o) {
				found = true
			}
		}
		if !found {
			copied++
		}
	}
	if copied != 1 {
		t.Fatalf("%d chunks copied for one inserted object, want 1", copied)
	}
}
