package config

import "time"

// RateLimit is a local rate limit (ClientTrafficPolicy rateLimit): a token
// bucket per key, holding at most Burst requests and filled with Requests
// every Per. A request finding its bucket empty is answered 429.
type RateLimit struct {
	// ID names the buckets: two RateLimits of one ID (the same policy and
	// target, in consecutive Configs) share them while their settings are
	// the same, so a configuration change does not refill them.
	ID       string
	Requests int64
	Per      time.Duration
	Burst    int64
	// Key is what a bucket is kept for; Header names the header of
	// RateLimitByHeader (canonical form).
	Key    RateLimitKey
	Header string
	// MaxKeys bounds the buckets kept (the least recently used go first):
	// a client making up keys costs bounded memory.
	MaxKeys int
	// Policy is the "namespace/name" of the policy, for logs and dumps.
	Policy string
}

// RateLimitKey is what a rate limit's buckets are kept for.
type RateLimitKey string

const (
	// RateLimitWhole: one bucket for everything the target receives.
	RateLimitWhole RateLimitKey = "Target"
	// RateLimitByClient: a bucket per client address (as detected).
	RateLimitByClient RateLimitKey = "ClientAddress"
	// RateLimitByHeader: a bucket per value of a request header; requests
	// without it share one.
	RateLimitByHeader RateLimitKey = "Header"
)

// DefaultRateLimitKeys is MaxKeys when a policy does not say.
const DefaultRateLimitKeys = 100_000
