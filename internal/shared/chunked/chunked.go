// Package chunked holds List, an ordered sequence that is never changed
// once built and that the lists made from it by an insert or a delete
// share all but one chunk with: one change to a list of 100,000 copies a
// chunk and the index of chunks, not the list.
package chunked

import (
	"iter"
	"slices"
	"sort"
)

// Size is the length of the chunks Of makes, and half the most a chunk
// grows to before an insert splits it.
const Size = 1024

// List is an immutable sequence in chunks; the zero value is empty. Every
// chunk holds at least one item, and at most 2×Size.
type List[T any] struct {
	chunks [][]T
	// ends[c] is the index one past chunk c's last item.
	ends []int
}

// Of is a List holding a copy of items.
func Of[T any](items []T) List[T] {
	var l List[T]
	for start := 0; start < len(items); start += Size {
		end := min(start+Size, len(items))
		l.chunks = append(l.chunks, slices.Clone(items[start:end]))
		l.ends = append(l.ends, end)
	}
	return l
}

// Len is the number of items.
func (l List[T]) Len() int {
	if len(l.ends) == 0 {
		return 0
	}
	return l.ends[len(l.ends)-1]
}

// At is item i; it panics unless 0 <= i < Len, as a slice does.
func (l List[T]) At(i int) T {
	c := l.chunkOf(i)
	return l.chunks[c][i-l.start(c)]
}

// Values yields the items in order.
func (l List[T]) Values() iter.Seq[T] {
	return func(yield func(T) bool) {
		for _, c := range l.chunks {
			for _, v := range c {
				if !yield(v) {
					return
				}
			}
		}
	}
}

// Slice is a copy of the items in one slice.
func (l List[T]) Slice() []T {
	out := make([]T, 0, l.Len())
	for _, c := range l.chunks {
		out = append(out, c...)
	}
	return out
}

// Search is where an item for which cmp returns 0 is, or would be inserted
// in a list sorted by cmp, and whether it is there: cmp(v) says how v
// compares with what is searched for, and the list must be sorted
// accordingly (as for slices.BinarySearchFunc).
func (l List[T]) Search(cmp func(T) int) (int, bool) {
	// The first chunk whose last item is not before the target holds
	// the place.
	c := sort.Search(len(l.chunks), func(c int) bool {
		chunk := l.chunks[c]
		return cmp(chunk[len(chunk)-1]) >= 0
	})
	if c == len(l.chunks) {
		return l.Len(), false
	}
	at, found := slices.BinarySearchFunc(l.chunks[c], 0, func(v T, _ int) int { return cmp(v) })
	return l.start(c) + at, found
}

// Insert is l with v at index i (0 <= i <= Len), the items from i on
// after it.
func (l List[T]) Insert(i int, v T) List[T] {
	if i < 0 || i > l.Len() {
		panic("chunked: Insert index out of range")
	}
	if len(l.chunks) == 0 {
		return List[T]{chunks: [][]T{{v}}, ends: []int{1}}
	}
	c := len(l.chunks) - 1
	if i < l.Len() {
		c = l.chunkOf(i)
	}
	at, old := i-l.start(c), l.chunks[c]
	chunk := make([]T, 0, len(old)+1)
	chunk = append(append(append(chunk, old[:at]...), v), old[at:]...)
	return l.replace(c, 1, split(chunk))
}

// Delete is l without item i (0 <= i < Len).
func (l List[T]) Delete(i int) List[T] {
	c := l.chunkOf(i)
	at, old := i-l.start(c), l.chunks[c]
	chunk := make([]T, 0, len(old)-1)
	chunk = append(append(chunk, old[:at]...), old[at+1:]...)
	switch {
	case len(chunk) == 0:
		return l.replace(c, 1, nil)
	case len(chunk) < Size/2 && c+1 < len(l.chunks):
		// A small chunk joins a neighbour, so that deletes leave no trail
		// of small chunks behind.
		return l.replace(c, 2, split(append(chunk, l.chunks[c+1]...)))
	case len(chunk) < Size/2 && c > 0:
		return l.replace(c-1, 2, split(append(slices.Clone(l.chunks[c-1]), chunk...)))
	default:
		return l.replace(c, 1, [][]T{chunk})
	}
}

// split is chunk, or its two halves when it is longer than a chunk may be.
func split[T any](chunk []T) [][]T {
	if len(chunk) <= 2*Size {
		return [][]T{chunk}
	}
	half := len(chunk) / 2
	return [][]T{chunk[:half:half], chunk[half:]}
}

// replace is l with its count chunks from first replaced by those given,
// in an index of chunks of its own: every other chunk is shared.
func (l List[T]) replace(first, count int, chunks [][]T) List[T] {
	out := List[T]{chunks: make([][]T, 0, len(l.chunks)-count+len(chunks))}
	out.chunks = append(append(append(out.chunks, l.chunks[:first]...), chunks...), l.chunks[first+count:]...)
	out.ends = make([]int, len(out.chunks))
	copy(out.ends, l.ends[:first])
	end := l.start(first)
	for c := first; c < len(out.chunks); c++ {
		end += len(out.chunks[c])
		out.ends[c] = end
	}
	return out
}

// chunkOf is the chunk holding item i.
func (l List[T]) chunkOf(i int) int {
	if i < 0 || i >= l.Len() {
		panic("chunked: index out of range")
	}
	return sort.SearchInts(l.ends, i+1)
}

// start is the index of chunk c's first item.
func (l List[T]) start(c int) int {
	if c == 0 {
		return 0
	}
	return l.ends[c-1]
}
