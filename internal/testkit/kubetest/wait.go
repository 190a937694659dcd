package kubetest

import (
	"testing"
	"time"
)

// WaitFor polls check until it returns nil, and fails the test with what
// and check's last error once timeout has passed. Objects written to the
// API server reach informers, and through them Portico, some time later:
// tests of a cluster wait for the outcome rather than sleep.
func WaitFor(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
