package slab

import "testing"

// TestTakeDoesNotOverlap: pieces never share elements, and appending to one
// leaves its neighbour alone, whether it came from the first allocation or
// a later one.
func TestTakeDoesNotOverlap(t *testing.T) {
	s := New[int](3)
	a := s.Take(2)
	b := s.Take(2) // does not fit: a new allocation
	c := s.One()
	a[0], a[1], b[0], b[1], *c = 1, 2, 3, 4, 5
	a = append(a, 9)
	if a[0] != 1 || a[1] != 2 || b[0] != 3 || b[1] != 4 || *c != 5 || len(a) != 3 {
		t.Fatalf("pieces overlap: a=%v b=%v c=%d", a, b, *c)
	}
	if cap(b) != 2 {
		t.Errorf("cap of a piece = %d, want its length", cap(b))
	}
}
