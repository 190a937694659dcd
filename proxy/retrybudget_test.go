package proxy

import (
	"testing"
	"time"

	"portico.dev/portico/config"
)

// TestRetryBudgetWindowSlides: the share is of the requests and retries of
// the last interval only: once the interval has passed, the retries that
// spent the budget no longer count, and neither do the requests that
// earned it.
func TestRetryBudgetWindowSlides(t *testing.T) {
	rb := &config.RetryBudget{Percent: 50, Interval: 10 * time.Second}
	b := (&retryBudgets{}).get(config.BackendKey{}, rb)
	now := time.Unix(1_000_000, 0)
	for range 4 {
		b.request(now)
	}
	// 4 requests: retries may make up half of all sent, 4 of 8.
	allowed := 0
	for b.retry(rb, now) {
		allowed++
	}
	if allowed != 4 {
		t.Fatalf("%d retries allowed after 4 requests at 50%%, want 4", allowed)
	}
	// Half an interval later the counts still hold.
	if b.retry(rb, now.Add(5*time.Second)) {
		t.Fatal("a retry allowed within the interval past the budget")
	}
	// An interval later they are gone: no request, no budget.
	later := now.Add(11 * time.Second)
	if b.retry(rb, later) {
		t.Fatal("a retry allowed with no request in the interval")
	}
	b.request(later)
	if !b.retry(rb, later) {
		t.Fatal("no retry allowed after a request of the new interval")
	}
}

// TestRetryBudgetPrune: counts whose windows have passed are forgotten by
// prune; those still counting are kept.
func TestRetryBudgetPrune(t *testing.T) {
	bs := &retryBudgets{}
	rb := &config.RetryBudget{Percent: 20, Interval: time.Second, MinRetries: 1, MinInterval: time.Second}
	now := time.Now()
	bs.get(config.BackendKey{Service: config.NamespacedName{Name: "a"}}, rb).request(now)
	bs.get(config.BackendKey{Service: config.NamespacedName{Name: "b"}}, rb).request(now.Add(-time.Minute))
	bs.prune(now)
	n := 0
	bs.m.Range(func(k, _ any) bool {
		n++
		if k.(budgetKey).service.Name != "a" {
			t.Errorf("kept %v, whose window passed", k)
		}
		return true
	})
	if n != 1 {
		t.Errorf("%d budgets kept, want 1", n)
	}
}
