package config

import "fmt"

// CircuitBreaker is a BackendTrafficPolicy's circuit breaker: limits of
// what one backend (a Service port) takes from this data plane at once,
// shared by every rule that sends to it with the same limits. A request
// past a limit is answered 503 at once. Every limit is set (translate
// fills in the defaults); 0 pending requests or retries allows none.
type CircuitBreaker struct {
	// ID is the same for the same limits in every Config: the data plane
	// keeps the counts per backend and ID, across Configs.
	ID string
	// MaxConnections bounds the connections to the backend's endpoints
	// (HTTP/1.1: the requests being sent at once, one per connection);
	// a request that finds them all busy waits, as one of at most
	// MaxPendingRequests, for one to be free.
	MaxConnections     int32
	MaxPendingRequests int32
	// MaxParallelRequests bounds the requests admitted at once, whether
	// sent or waiting.
	MaxParallelRequests int32
	// MaxParallelRetries bounds the requests that are retrying at once: a
	// request that would retry past it gets its last answer as it is.
	MaxParallelRetries int32
	// Policy is the policy's "namespace/name", for logs and dumps.
	Policy string
}

// MakeID sets cb.ID from its limits.
func (cb *CircuitBreaker) MakeID() {
	cb.ID = fmt.Sprintf("%d|%d|%d|%d", cb.MaxConnections, cb.MaxPendingRequests, cb.MaxParallelRequests, cb.MaxParallelRetries)
}
