package main

import (
	"errors"
	"syscall"
	"testing"

	"go.uber.org/zap"
)

// TestRaiseFileLimit: the soft limit of open files ends at the hard one,
// and what is returned is the limit in force.
func TestRaiseFileLimit(t *testing.T) {
	got := raiseFileLimit(zap.NewNop())
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if got != lim.Cur || lim.Cur != lim.Max {
		t.Errorf("returned %d; soft limit %d, hard %d", got, lim.Cur, lim.Max)
	}
}

// TestReadinessNeedsEveryPortAccepting: /readyz fails while no
// configuration is applied, and while a port cannot accept.
func TestReadinessNeedsEveryPortAccepting(t *testing.T) {
	ok := func() error { return nil }
	notApplied, failing := errors.New("no configuration applied yet"), errors.New("port 80 cannot accept connections")
	if err := readiness(ok, ok)(); err != nil {
		t.Errorf("all well: %v", err)
	}
	if err := readiness(func() error { return notApplied }, ok)(); !errors.Is(err, notApplied) {
		t.Errorf("nothing applied: %v", err)
	}
	if err := readiness(ok, func() error { return failing })(); !errors.Is(err, failing) {
		t.Errorf("a port failing: %v", err)
	}
}
