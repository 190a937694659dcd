package config

import "time"

// OutlierDetection is a BackendTrafficPolicy's passive health check: an
// endpoint whose answers fail that many times in a row is left out for
// BaseEjectionTime times the number of times it was left out in a row
// (at most MaxEjectionTime), while no more than MaxEjectionPercent of its
// backend's endpoints are. A threshold of 0 counts nothing.
type OutlierDetection struct {
	// Consecutive5xx counts answers of status 500 to 599.
	Consecutive5xx int32
	// ConsecutiveGatewayErrors counts answers of status 502, 503 and 504.
	ConsecutiveGatewayErrors int32
	// ConsecutiveLocalOriginFailures counts attempts that got no answer:
	// the endpoint refused or dropped the connection, or did not answer
	// in time.
	ConsecutiveLocalOriginFailures int32
	BaseEjectionTime               time.Duration
	MaxEjectionPercent             int32
	// Policy is the policy's "namespace/name", for logs and dumps.
	Policy string
}

// MaxEjectionTime bounds how long an endpoint is left out, however often
// it was in a row.
const MaxEjectionTime = 5 * time.Minute

// RuleTraffic is what BackendTrafficPolicies and ClientTrafficPolicies give
// a rule as served on one listener.
type RuleTraffic struct {
	LB      *LoadBalancer
	Outlier *OutlierDetection
	Active  *ActiveHealthCheck
	Breaker *CircuitBreaker
	Conn    *BackendConn
	// RateLimit is a ClientTrafficPolicy's, of the rule's route or of
	// the listener.
	RateLimit *RateLimit
	// RequestTimeout is a ClientTrafficPolicy's of the listener, for
	// rules whose route sets none.
	RequestTimeout time.Duration
}
