package conditions

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSetCopiesAndKeepsGeneration(t *testing.T) {
	in := []metav1.Condition{
		{Type: "Accepted", Status: metav1.ConditionTrue, Reason: "Accepted", ObservedGeneration: 3},
		{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed", ObservedGeneration: 3},
	}
	out := Set(in, "Programmed", metav1.ConditionFalse, "Pending", "port in use")
	if in[1].Status != metav1.ConditionTrue {
		t.Fatal("Set modified the slice it was given")
	}
	if c := out[1]; c.Status != metav1.ConditionFalse || c.Reason != "Pending" || c.Message != "port in use" || c.ObservedGeneration != 3 {
		t.Errorf("Programmed = %+v", c)
	}
	if out[0] != in[0] {
		t.Errorf("Accepted changed: %+v", out[0])
	}
	if got := Set(in, "Missing", metav1.ConditionFalse, "X", ""); len(got) != 2 {
		t.Errorf("Set added a condition: %+v", got)
	}
}

func TestDemoteLeavesFalseAlone(t *testing.T) {
	in := []metav1.Condition{{Type: "Programmed", Status: metav1.ConditionFalse, Reason: "Invalid", Message: "why"}}
	if got := Demote(in, "Programmed", "Pending", "other"); got[0].Reason != "Invalid" || got[0].Message != "why" {
		t.Errorf("a False condition was rewritten: %+v", got[0])
	}
	in[0].Status = metav1.ConditionTrue
	if got := Demote(in, "Programmed", "Pending", "other"); got[0].Status != metav1.ConditionFalse || got[0].Reason != "Pending" {
		t.Errorf("a True condition was not demoted: %+v", got[0])
	}
}
