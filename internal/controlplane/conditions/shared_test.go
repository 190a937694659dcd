package conditions

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pairOf(msg string) [2]metav1.Condition {
	return [2]metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", Message: msg, ObservedGeneration: 1},
		{Type: "ResolvedRefs", Status: metav1.ConditionTrue, Reason: "ResolvedRefs", Message: "ok", ObservedGeneration: 1},
	}
}

func TestSharedHandsOutOneSliceForEqualLists(t *testing.T) {
	var s Shared[[2]metav1.Condition]
	a := pairOf("a")
	if _, ok := s.Get(a); ok {
		t.Fatal("an empty Shared gave a slice")
	}
	backing := make([]metav1.Condition, 4)
	copy(backing, a[:])
	s.Put(a, backing[:2])
	got, ok := s.Get(pairOf("a"))
	if !ok || &got[0] != &backing[0] || len(got) != 2 {
		t.Fatalf("Get of an equal list = %v, %v; want the slice put", got, ok)
	}
	if cap(got) != 2 {
		t.Errorf("cap = %d: an append to a shared slice would write past it", cap(got))
	}
	if _, ok := s.Get(pairOf("b")); ok {
		t.Error("a different list got the slice")
	}
	other := pairOf("a")
	other[1].ObservedGeneration = 2
	if _, ok := s.Get(other); ok {
		t.Error("a list of another generation got the slice")
	}
	// Set copies: the other holders of a shared slice keep what it said.
	changed := Set(got, "Accepted", metav1.ConditionFalse, "Invalid", "no")
	if backing[0].Status != metav1.ConditionTrue || changed[0].Status != metav1.ConditionFalse {
		t.Errorf("Set wrote into the shared slice: %v, %v", backing[0], changed[0])
	}
}

func TestSharedKeepsABoundedNumberOfLists(t *testing.T) {
	var s Shared[[2]metav1.Condition]
	for i := range 2 * maxShared {
		l := pairOf(fmt.Sprint(i))
		s.Put(l, l[:])
	}
	if len(s.m) != maxShared {
		t.Errorf("kept %d lists, want %d", len(s.m), maxShared)
	}
	if _, ok := s.Get(pairOf(fmt.Sprint(maxShared))); ok {
		t.Error("a list put after the bound was kept")
	}
}
