// Package slab hands out pieces of one large allocation, so that the many
// small slices of a compiled result (conditions, statuses, rules, table
// entries) cost a few allocations instead of one each.
package slab

// Slab is the unused rest of an allocation. A piece has capacity equal to
// its length: appending to it copies instead of overwriting a neighbour.
type Slab[T any] []T

// New returns a slab with room for n elements before it allocates again.
func New[T any](n int) Slab[T] { return make(Slab[T], 0, n) }

// Take returns a piece of n elements. When the slab runs out it allocates
// another, at least half as large as the last one, so that a wrong first
// estimate costs a few allocations, not one per piece.
func (s *Slab[T]) Take(n int) []T {
	if cap(*s)-len(*s) < n {
		*s = make([]T, 0, max(n, 64, cap(*s)/2))
	}
	l := len(*s)
	*s = (*s)[:l+n]
	return (*s)[l : l+n : l+n]
}

// One returns a pointer to a single element.
func (s *Slab[T]) One() *T { return &s.Take(1)[0] }
