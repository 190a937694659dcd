package proxy

import (
	"sync"
	"time"

	"portico.dev/portico/config"
)

// Retry budgets (config.RetryBudget, an XBackendTrafficPolicy's
// retryConstraint). Each Service with a budget has counts of the requests
// sent to it and of the retries among them over the last interval, in a
// ring of windowSlots slots (the window slides by a tenth of the
// interval), and of the retries over the last minRetryRate interval. A
// retry is sent when, counted, the retries stay within the percent of
// the requests, or when fewer than minRetryRate's count were sent over
// its interval; otherwise the client gets 503 (outcome retry_budget).
// Counts are kept across configurations, by Service and intervals, so a
// reload does not hand a failing Service a fresh budget.

// outcomeRetryBudget is the outcome of a request whose retry the budget
// of its Service refused (503), in the access log and the metrics.
const outcomeRetryBudget = "retry_budget"

// windowSlots is how many slots a window is counted in.
const windowSlots = 10

// window counts over a sliding interval.
type window struct {
	width time.Duration // of one slot
	slots [windowSlots]slot
}

// slot counts over one width of a window.
type slot struct {
	epoch             int64 // the slot's start, in widths since the Unix epoch
	requests, retries int64
}

// slot is the slot of now, emptied when it last counted an older epoch,
// and now's epoch.
func (w *window) slot(now time.Time) (*slot, int64) {
	e := now.UnixNano() / int64(w.width)
	s := &w.slots[e%windowSlots]
	if s.epoch != e {
		s.epoch, s.requests, s.retries = e, 0, 0
	}
	return s, e
}

// sums are the requests and retries of the slots within the window at
// epoch e.
func (w *window) sums(e int64) (requests, retries int64) {
	for i := range w.slots {
		if s := &w.slots[i]; s.epoch > e-windowSlots && s.epoch <= e {
			requests += s.requests
			retries += s.retries
		}
	}
	return requests, retries
}

// retryBudget is the counts of one Service.
type retryBudget struct {
	mu      sync.Mutex
	share   window // requests and retries, over Interval
	minimum window // retries, over MinInterval
}

// budgetKey names the counts of one Service under one pair of intervals.
type budgetKey struct {
	service               config.NamespacedName
	interval, minInterval time.Duration
}

// retryBudgets holds the counts, kept across configurations.
type retryBudgets struct{ m sync.Map } // budgetKey -> *retryBudget

// get returns the counts of the Service of backend under rb.
func (bs *retryBudgets) get(backend config.BackendKey, rb *config.RetryBudget) *retryBudget {
	k := budgetKey{backend.Service, rb.Interval, rb.MinInterval}
	if v, ok := bs.m.Load(k); ok {
		return v.(*retryBudget)
	}
	b := &retryBudget{}
	b.share.width = max(rb.Interval/windowSlots, time.Millisecond)
	b.minimum.width = max(rb.MinInterval/windowSlots, time.Millisecond)
	v, _ := bs.m.LoadOrStore(k, b)
	return v.(*retryBudget)
}

// prune forgets the counts of budgets no Config has any more, and of those
// whose windows have passed: a later request makes them anew.
func (bs *retryBudgets) prune(now time.Time) {
	bs.m.Range(func(k, v any) bool {
		b := v.(*retryBudget)
		b.mu.Lock()
		_, e := b.share.slot(now)
		requests, _ := b.share.sums(e)
		_, me := b.minimum.slot(now)
		_, minRetries := b.minimum.sums(me)
		b.mu.Unlock()
		if requests == 0 && minRetries == 0 {
			bs.m.CompareAndDelete(k, v)
		}
		return true
	})
}

// request counts a first attempt sent to the Service.
func (b *retryBudget) request(now time.Time) {
	b.mu.Lock()
	s, _ := b.share.slot(now)
	s.requests++
	b.mu.Unlock()
}

// retry tells whether a retry may be sent to the Service under rb, and
// counts it (as a request too) when it may.
func (b *retryBudget) retry(rb *config.RetryBudget, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, e := b.share.slot(now)
	requests, retries := b.share.sums(e)
	ok := (retries+1)*100 <= int64(rb.Percent)*(requests+1)
	m, me := b.minimum.slot(now)
	if !ok && rb.MinRetries > 0 {
		_, minRetries := b.minimum.sums(me)
		ok = minRetries < int64(rb.MinRetries)
	}
	if ok {
		s.requests++
		s.retries++
		m.retries++
	}
	return ok
}
