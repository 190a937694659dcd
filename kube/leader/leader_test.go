package leader

import "testing"

func TestValidate(t *testing.T) {
	ok := Default("portico-system", "pod-0")
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mod := range map[string]func(*Election){
		"no namespace":           func(l *Election) { l.Namespace = "" },
		"no identity":            func(l *Election) { l.Identity = "" },
		"renew deadline ≥ lease": func(l *Election) { l.RenewDeadline = l.LeaseDuration },
		"retry period too long":  func(l *Election) { l.RetryPeriod = l.RenewDeadline },
		"no retry period":        func(l *Election) { l.RetryPeriod = 0 },
	} {
		le := ok
		mod(&le)
		if err := le.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
