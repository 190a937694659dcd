package translate

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestKeptListMatchesDiffObjects changes a list of up to a few chunks at
// random (updates, inserts, deletes, appends, several at once) and
// compares keptList.diff with diffObjects of plain copies; the list it
// keeps must equal the one it was given, and must not change when the
// caller then reuses that slice.
func TestKeptListMatchesDiffObjects(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	next := 0
	fresh := func() *int { next++; v := next; return &v }
	for _, size := range []int{0, 1, keptChunk - 1, keptChunk, 3*keptChunk + 17} {
		list := make([]*int, size)
		for i := range list {
			list[i] = fresh()
		}
		kept := newKeptList(list)
		for step := range 200 {
			now := slices.Clone(list)
			for range 1 + r.IntN(3) {
				switch op := r.IntN(4); {
				case op == 0 && len(now) > 0:
					now[r.IntN(len(now))] = fresh()
				case op == 1:
					now = slices.Insert(now, r.IntN(len(now)+1), fresh())
				case op == 2 && len(now) > 0:
					i := r.IntN(len(now))
					now = slices.Delete(now, i, i+1)
				default:
					now = append(now, fresh())
				}
			}
			wantRemoved, wantAdded, wantOK := diffObjects(list, now)
			removed, added, kept2, ok := kept.diff(now)
			if ok != wantOK || !slices.Equal(removed, wantRemoved) || !slices.Equal(added, wantAdded) {
				t.Fatalf("size %d, step %d: diff = %d removed, %d added, %v; want %d, %d, %v", size, step, len(removed), len(added), ok, len(wantRemoved), len(wantAdded), wantOK)
			}
			// The caller reuses its slice: the kept copy stays as it was.
			given := slices.Clone(now)
			for i := range now {
				now[i] = nil
			}
			if !ok {
				kept2 = newKeptList(given) // as a full translation keeps
			}
			if kept2.n != len(given) {
				t.Fatalf("size %d, step %d: kept %d objects, want %d (ok %v)", size, step, kept2.n, len(given), ok)
			}
			for i, x := range given {
				if kept2.at(i) != x {
					t.Fatalf("size %d, step %d: kept object %d differs", size, step, i)
				}
			}
			list, kept = given, kept2
		}
	}
}

// TestKeptListSharesUnchangedChunks: one object replaced copies one chunk.
func TestKeptListSharesUnchangedChunks(t *testing.T) {
	list := make([]*int, 10*keptChunk+5)
	for i := range list {
		list[i] = new(int)
	}
	kept := newKeptList(list)
	now := slices.Clone(list)
	now[4*keptChunk+7] = new(int)
	_, _, next, ok := kept.diff(now)
	if !ok {
		t.Fatal("one replaced object is more than a delta")
	}
	copied := 0
	for c := range next.chunks {
		if &next.chunks[c][0] != &kept.chunks[c][0] {
			copied++
		}
	}
	if copied != 1 {
		t.Fatalf("%d chunks copied for one replaced object, want 1", copied)
	}
}

// diffObjects is keptList.diff of plain slices, the reference it is
// tested against.
func diffObjects[T comparable](old, new []T) (removed, added []T, ok bool) {
	n := min(len(old), len(new))
	pre := 0
	for pre < n && old[pre] == new[pre] {
		pre++
	}
	suf := 0
	for suf < n-pre && old[len(old)-1-suf] == new[len(new)-1-suf] {
		suf++
	}
	o, nw := old[pre:len(old)-suf], new[pre:len(new)-suf]
	if len(o)+len(nw) > 2*maxDelta {
		return nil, nil, false
	}
	removed, added = diffMiddle(o, nw)
	return removed, added, true
}
