package conditions

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// maxShared bounds the lists a Shared keeps: statuses repeat a few lists
// (every listener programmed, every route accepted), and a translation
// whose lists all differ (a message naming each object) should not build
// a map of them.
const maxShared = 64

// Shared hands out one slice for equal lists of conditions of one
// translation. At 100,000 hostnames every ListenerSet's listener says the
// same four conditions and every route the same two: one slice each instead
// of 100,000 copies (about 73 MB). A shared slice is never written to:
// conditions are changed only through Set and Demote, which copy. A is an
// array of conditions, such as [4]metav1.Condition.
type Shared[A comparable] struct {
	m map[A][]metav1.Condition
}

// Get returns the slice handed out for conds, if any.
func (s *Shared[A]) Get(conds A) ([]metav1.Condition, bool) {
	out, ok := s.m[conds]
	return out, ok
}

// Put makes out (which holds conds) the slice Get returns for conds, while
// fewer than maxShared lists are kept.
func (s *Shared[A]) Put(conds A, out []metav1.Condition) {
	if s.m == nil {
		s.m = make(map[A][]metav1.Condition)
	}
	if len(s.m) < maxShared {
		s.m[conds] = out[:len(out):len(out)]
	}
}
