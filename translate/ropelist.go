package translate

import "slices"

// ropeList is keptList with chunks of any length up to keptChunk: the copy
// of the next list shares every chunk before and after the change, even
// when an object inserted or deleted shifts what follows it. KIngresses,
// sorted by name, are created and deleted anywhere in their list, where a
// keptList copies every chunk after the change. Never changed once built.
type ropeList[T comparable] struct {
	chunks [][]T
	n      int
}

func newRopeList[T comparable](now []T) ropeList[T] {
	return ropeList[T]{chunks: ropeChunks(slices.Clone(now)), n: len(now)}
}

// ropeChunks cuts s into chunks of near equal length, at most keptChunk.
func ropeChunks[T any](s []T) [][]T {
	if len(s) == 0 {
		return nil
	}
	k := (len(s) + keptChunk - 1) / keptChunk
	out := make([][]T, 0, k)
	for i := range k {
		out = append(out, slices.Clip(s[i*len(s)/k:(i+1)*len(s)/k]))
	}
	return out
}

// diff lists the objects only in the kept list and only in now, by
// identity, and is the copy of now to keep next: whole chunks equal at
// either end are kept, the others copied. False when what is left between
// the common prefix and suffix is more than a delta handles.
func (r ropeList[T]) diff(now []T) (removed, added []T, next ropeList[T], ok bool) {
	lo, pos := 0, 0
	for lo < len(r.chunks) {
		c := r.chunks[lo]
		if pos+len(c) > len(now) || !slices.Equal(c, now[pos:pos+len(c)]) {
			break
		}
		pos += len(c)
		lo++
	}
	if lo == len(r.chunks) && pos == len(now) {
		return nil, nil, r, true // unchanged: every chunk shared
	}
	hi, end := len(r.chunks), len(now)
	for hi > lo {
		c := r.chunks[hi-1]
		if end-len(c) < pos || !slices.Equal(c, now[end-len(c):end]) {
			break
		}
		end -= len(c)
		hi--
	}
	var old []T
	for _, c := range r.chunks[lo:hi] {
		old = append(old, c...)
	}
	mid := now[pos:end]
	p := 0
	for p < len(old) && p < len(mid) && old[p] == mid[p] {
		p++
	}
	s := 0
	for s < len(old)-p && s < len(mid)-p && old[len(old)-1-s] == mid[len(mid)-1-s] {
		s++
	}
	if len(old)-p-s+len(mid)-p-s > 2*maxDelta {
		return nil, nil, ropeList[T]{}, false
	}
	removed, added = diffMiddle(old[p:len(old)-s], mid[p:len(mid)-s])
	middle := slices.Clone(mid)
	// A middle of less than half a chunk joins a chunk beside it, so that
	// every chunk but a list's only one holds half a chunk or more.
	for len(middle) < keptChunk/2 {
		if lo > 0 {
			middle = append(slices.Clone(r.chunks[lo-1]), middle...)
			lo--
		} else if hi < len(r.chunks) {
			middle = append(middle, r.chunks[hi]...)
			hi++
		} else {
			break
		}
	}
	next = ropeList[T]{n: len(now), chunks: make([][]T, 0, lo+len(r.chunks)-hi+len(middle)/keptChunk+1)}
	next.chunks = append(next.chunks, r.chunks[:lo]...)
	next.chunks = append(next.chunks, ropeChunks(middle)...)
	next.chunks = append(next.chunks, r.chunks[hi:]...)
	return removed, added, next, true
}

// all is the kept list as one slice (tests).
func (r ropeList[T]) all() []T {
	var out []T
	for _, c := range r.chunks {
		out = append(out, c...)
	}
	return out
}
