package proxy

import (
	"context"
	"sync"
	"sync/atomic"

	"portico.dev/portico/config"
)

// Circuit breaking (config.CircuitBreaker): counts per backend (Service
// port) and set of limits, shared by every rule and route that sends to
// it, kept across Configs. A request is admitted when the backend's
// requests are below MaxParallelRequests; it is then sent when one of
// MaxConnections slots is free (HTTP/1.1 carries one request per
// connection, so at most that many connections are ever needed at once),
// or waits for one as one of at most MaxPendingRequests. A request past
// a limit is answered 503 at once; an admitted one is sent, however long
// it waits (within the route's timeouts and the client's patience).

// The outcomes of requests a circuit breaker refused, in the access log
// and the requests metric.
const (
	outcomeBreakerRequests = "breaker_requests" // 503: maxParallelRequests reached
	outcomeBreakerPending  = "breaker_pending"  // 503: maxConnections busy and maxPendingRequests waiting
	outcomeBreakerRetries  = "breaker_retries"  // 503: a retry past maxParallelRetries
)

// breakerKey names the counts of one backend under one set of limits.
type breakerKey struct {
	backend config.BackendKey
	id      string
}

// breakers holds the counts.
type breakers struct{ m sync.Map } // breakerKey -> *breaker

// breaker is the counts of one backend under limits.
type breaker struct {
	limits   *config.CircuitBreaker
	requests atomic.Int32
	pending  atomic.Int32
	retries  atomic.Int32
	// slots holds a token per request being sent, at most MaxConnections.
	slots chan struct{}
}

// get returns the counts of backend under cb.
func (bs *breakers) get(backend config.BackendKey, cb *config.CircuitBreaker) *breaker {
	k := breakerKey{backend, cb.ID}
	if v, ok := bs.m.Load(k); ok {
		return v.(*breaker)
	}
	v, _ := bs.m.LoadOrStore(k, &breaker{limits: cb, slots: make(chan struct{}, max(cb.MaxConnections, 1))})
	return v.(*breaker)
}

// prune forgets the counts that count nothing: a later request makes them
// anew, at zero as they were. Called by Apply, so that the limits of
// policies gone do not stay.
func (bs *breakers) prune() {
	bs.m.Range(func(k, v any) bool {
		if b := v.(*breaker); b.requests.Load() == 0 && b.retries.Load() == 0 {
			bs.m.CompareAndDelete(k, v)
		}
		return true
	})
}

// admit admits a request, waiting for a connection slot when slotted
// (HTTP/1.1 backends) and every one is taken. It returns the outcome of a
// refusal ("" when admitted), or ctx's error when ctx ended while the
// request waited; release ends what an admitted request holds.
func (b *breaker) admit(ctx context.Context, slotted bool) (refused string, err error) {
	if b.requests.Add(1) > b.limits.MaxParallelRequests {
		b.requests.Add(-1)
		return outcomeBreakerRequests, nil
	}
	if !slotted {
		return "", nil
	}
	select {
	case b.slots <- struct{}{}:
		return "", nil
	default:
	}
	if b.pending.Add(1) > b.limits.MaxPendingRequests {
		b.pending.Add(-1)
		b.requests.Add(-1)
		return outcomeBreakerPending, nil
	}
	defer b.pending.Add(-1)
	select {
	case b.slots <- struct{}{}:
		return "", nil
	case <-ctx.Done():
		b.requests.Add(-1)
		return "", ctx.Err()
	}
}

// release ends what admit gave.
func (b *breaker) release(slotted bool) {
	if slotted {
		<-b.slots
	}
	b.requests.Add(-1)
}

// retry takes a retry, if one is free; endRetry gives it back.
func (b *breaker) retry() bool {
	if b.retries.Add(1) > b.limits.MaxParallelRetries {
		b.retries.Add(-1)
		return false
	}
	return true
}

func (b *breaker) endRetry() { b.retries.Add(-1) }

// retriesFull reports whether a retry would be refused now.
func (b *breaker) retriesFull() bool { return b.retries.Load() >= b.limits.MaxParallelRetries }
