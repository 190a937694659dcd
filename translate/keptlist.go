package translate

import "slices"

// keptList is a copy of a snapshot's list of one kind, kept to compare the
// next snapshot's with, in chunks: the copy of the next list shares the
// chunks it holds unchanged, so that one object changed of 100,000 costs a
// copy of one chunk, not of the list. A copy rather than the caller's
// slice, as for the other kinds (snapshotCopy): a caller may reuse a slice.
// Endpoints keep their Services and EndpointSlices in these
// (endpointsmemo.go), a delta the kinds it re-derives (keptLists).
type keptList[T comparable] struct {
	chunks [][]T
	n      int
}

// keptChunk is the length of a keptList's chunks: 8 KB of pointers.
const keptChunk = 1024

func newKeptList[T comparable](now []T) keptList[T] {
	return keptList[T]{}.next(now, 0, 0)
}

func (k keptList[T]) at(i int) T { return k.chunks[i/keptChunk][i%keptChunk] }

// diff lists the objects only in the kept list and only in now, by
// identity, and is the copy of now to keep next. The common prefix and
// suffix are skipped by comparing pointers; false when what is left is
// more than a delta handles.
func (k keptList[T]) diff(now []T) (removed, added []T, next keptList[T], ok bool) {
	n := min(k.n, len(now))
	pre := 0
	// Whole chunks first, then objects: the prefix is most of the list.
	for _, c := range k.chunks {
		if pre+len(c) > n || !slices.Equal(c, now[pre:pre+len(c)]) {
			break
		}
		pre += len(c)
	}
	for pre < n && k.at(pre) == now[pre] {
		pre++
	}
	if pre == k.n && k.n == len(now) {
		return nil, nil, k, true // unchanged: every chunk shared
	}
	suf := 0
	if k.n == len(now) {
		// Aligned: the suffix by whole chunks too.
		for c := len(k.chunks) - 1; c >= 0 && c*keptChunk >= pre && slices.Equal(k.chunks[c], now[c*keptChunk:c*keptChunk+len(k.chunks[c])]); c-- {
			suf += len(k.chunks[c])
		}
	}
	for suf < n-pre && k.at(k.n-1-suf) == now[len(now)-1-suf] {
		suf++
	}
	if k.n-pre-suf+len(now)-pre-suf > 2*maxDelta {
		return nil, nil, keptList[T]{}, false
	}
	old := make([]T, 0, k.n-pre-suf)
	for i := pre; i < k.n-suf; i++ {
		old = append(old, k.at(i))
	}
	removed, added = diffMiddle(old, now[pre:len(now)-suf])
	return removed, added, k.next(now, pre, suf), true
}

// next is the copy of now to keep, given that now begins with pre objects
// of k and ends with suf: the chunks of k within those are shared.
func (k keptList[T]) next(now []T, pre, suf int) keptList[T] {
	out := keptList[T]{chunks: make([][]T, 0, (len(now)+keptChunk-1)/keptChunk), n: len(now)}
	for start := 0; start < len(now); start += keptChunk {
		end := min(start+keptChunk, len(now))
		c := start / keptChunk
		kept := c < len(k.chunks) && len(k.chunks[c]) == end-start &&
			(end <= pre || k.n == len(now) && start >= len(now)-suf)
		if kept {
			out.chunks = append(out.chunks, k.chunks[c])
		} else {
			out.chunks = append(out.chunks, slices.Clone(now[start:end]))
		}
	}
	return out
}
