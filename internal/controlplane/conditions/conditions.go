// Package conditions rewrites the conditions of computed statuses. Every
// place that changes a condition after it was built (a listener that could
// not be put on a port, a Gateway without its addresses, a port that failed
// to bind, CRDs of another version) goes through Set or Demote, so a
// rewrite means one thing everywhere: same observedGeneration, new status,
// reason and message, and the slice it was given left alone.
package conditions

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Set returns conds with the condition of type typ given status, reason
// and message. conds itself is not modified: statuses may share their
// slices with the translation they came from. The condition keeps its
// observedGeneration and lastTransitionTime (the status writer stamps
// times). A condition that is not there is not added: every status is
// built with all the conditions it reports.
func Set[T, R ~string](conds []metav1.Condition, typ T, status metav1.ConditionStatus, reason R, msg string) []metav1.Condition {
	return rewrite(conds, string(typ), false, status, string(reason), msg)
}

// Put is Set for a condition a status reports only once it is decided
// (a Gateway's AddressesAssigned): one that is not there is added, with
// the observedGeneration of the status's first condition.
func Put[T, R ~string](conds []metav1.Condition, typ T, status metav1.ConditionStatus, reason R, msg string) []metav1.Condition {
	if slices.ContainsFunc(conds, func(c metav1.Condition) bool { return c.Type == string(typ) }) {
		return Set(conds, typ, status, reason, msg)
	}
	c := metav1.Condition{Type: string(typ), Status: status, Reason: string(reason), Message: msg}
	if len(conds) > 0 {
		c.ObservedGeneration = conds[0].ObservedGeneration
	}
	return append(slices.Clip(conds), c)
}

// Demote is Set to False for a condition that is True; a False one is left
// as it is, since it already says why.
func Demote[T, R ~string](conds []metav1.Condition, typ T, reason R, msg string) []metav1.Condition {
	return rewrite(conds, string(typ), true, metav1.ConditionFalse, string(reason), msg)
}

func rewrite(conds []metav1.Condition, typ string, onlyTrue bool, status metav1.ConditionStatus, reason, msg string) []metav1.Condition {
	i := slices.IndexFunc(conds, func(c metav1.Condition) bool { return c.Type == typ })
	if i < 0 || (onlyTrue && conds[i].Status != metav1.ConditionTrue) {
		return conds
	}
	out := slices.Clone(conds)
	out[i].Status, out[i].Reason, out[i].Message = status, reason, msg
	return out
}
