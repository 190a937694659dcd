package proxy

import (
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"portico.dev/portico/config"
)

// Load balancing of BackendTrafficPolicies (config.LoadBalancer). A rule
// without a policy takes none of these paths: backends at random by
// weight, endpoints round robin, as pickBackend and downSet.pickUp do.

// balancing is what a request's policy asks of the picks: the rule's LB
// picks the backend; the backend's own LB (its Service's policy), else
// the rule's, picks the endpoint.
type balancing struct {
	lb *config.LoadBalancer // for the endpoint; nil: round robin
	// outlier is the passive health check of the backend, nil for none:
	// its ejected endpoints are left out.
	outlier *config.OutlierDetection
	// active is the active health check of the backend, nil for none:
	// the endpoints it finds unhealthy are left out.
	active *config.ActiveHealthCheck
	// breaker holds the counts of the backend's circuit breaker, nil for
	// none.
	breaker *breaker
	// key is the hash of the request's key for a consistent hash; hasKey
	// is false when the request has none (no such header or cookie).
	key    uint64
	hasKey bool
	// held is the endpoint whose in-flight count the attempt holds
	// (LeastRequest), -1 for none.
	held int
}

// requestKey is the hash of what lb hashes in r, and false when r does
// not carry it.
func requestKey(r *http.Request, lb *config.LoadBalancer) (uint64, bool) {
	switch lb.HashOn {
	case config.HashHeader:
		if v := r.Header[lb.HashName]; len(v) > 0 {
			return config.HashKey(v[0]), true
		}
	case config.HashCookie:
		if v, ok := cookieValue(r.Header["Cookie"], lb.HashName); ok {
			return config.HashKey(v), true
		}
	case config.HashSourceIP:
		return config.HashKey(clientIP(r.RemoteAddr)), true
	}
	return 0, false
}

// cookieValue finds the first cookie called name in Cookie header lines
// ("a=1; b=2"), without parsing the others as http.Request.Cookie does
// (which allocates every cookie of every request).
func cookieValue(lines []string, name string) (string, bool) {
	for _, line := range lines {
		for len(line) > 0 {
			part := line
			if i := strings.IndexByte(line, ';'); i >= 0 {
				part, line = line[:i], line[i+1:]
			} else {
				line = ""
			}
			part = strings.TrimSpace(part)
			if len(part) > len(name) && part[len(name)] == '=' && part[:len(name)] == name {
				v := part[len(name)+1:]
				if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
					v = v[1 : len(v)-1]
				}
				return v, true
			}
		}
	}
	return "", false
}

// clientIP is the address of "ip:port" or "[ip]:port" without the port.
func clientIP(remote string) string {
	if i := strings.LastIndexByte(remote, ':'); i >= 0 && !strings.Contains(remote[i:], "]") {
		remote = remote[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(remote, "["), "]")
}

// pickBalanced chooses a backend of rule as rule.LB says (non-nil): in
// a fixed interleaving by weight for RoundRobin, by the request's key for
// a ConsistentHash, else at random by weight. nil when every weight is
// zero.
func pickBalanced(rule *config.Rule, key uint64, hasKey bool) *config.Backend {
	switch {
	case len(rule.Backends) == 0 || rule.TotalWeight <= 0:
		return nil
	case len(rule.Backends) == 1:
		return &rule.Backends[0]
	}
	var n int32
	switch {
	case rule.LB.Algorithm == config.LBRoundRobin:
		// A Weyl sequence: turn × the golden ratio, modulo 1, is spread
		// evenly over [0, 1) at every prefix, so each backend gets its
		// share of every window of requests, interleaved.
		x := uint64(rule.LB.Turn()) * 0x9E3779B97F4A7C15
		n = int32(((x >> 32) * uint64(rule.TotalWeight)) >> 32)
	case rule.LB.Algorithm == config.LBConsistentHash && hasKey:
		// Other bits of the key than the endpoint's table slot uses.
		n = int32(((key >> 32) * uint64(rule.TotalWeight)) >> 32)
	default:
		n = rand.Int32N(rule.TotalWeight)
	}
	for i := range rule.Backends {
		b := &rule.Backends[i]
		if n < b.Weight {
			return b
		}
		n -= b.Weight
	}
	return nil
}

// pickWith returns an endpoint of e as bal.lb says, one that is neither
// down nor, with bal.outlier, ejected by outliers nor, with bal.active,
// unhealthy by its active check, if there is one (or the first pick when
// all are: trying one beats failing every request, as Envoy's panic mode
// does), and its index; "" when e has none.
func (down *downSet) pickWith(e *config.Endpoints, bal *balancing, outliers *outlierSet, health *healthChecks, now time.Time) (string, int) {
	if e == nil || len(e.Addrs) == 0 {
		return "", -1
	}
	n := len(e.Addrs)
	var alg config.LBAlgorithm // "": round robin, with only a health check
	if bal.lb != nil {
		alg = bal.lb.Algorithm
	}
	pick := func(k int) int {
		switch alg {
		case "":
			return e.PickIndex()
		case config.LBRoundRobin:
			return e.PickIndex()
		case config.LBLeastRequest:
			return e.PickLeast(rand.Uint64())
		case config.LBConsistentHash:
			if bal.hasKey {
				return e.PickHash(bal.key, k)
			}
		}
		return e.PickRandom(rand.Uint64())
	}
	i := pick(0)
	checkOutliers := bal.outlier != nil && outliers.any(now)
	checkHealth := bal.active != nil && health.any()
	if n == 1 || !down.any(now) && !checkOutliers && !checkHealth {
		return e.Addrs[i], i
	}
	bad := func(a string) bool {
		return down.isDown(a, now) || checkOutliers && outliers.ejected(a, now) || checkHealth && health.down(bal.active, a)
	}
	first := i
	// A hash walks on through its table, whose next slots belong to
	// other endpoints at random: a few more tries than endpoints find
	// one that is up.
	for k := 1; k <= 2*n; k++ {
		if !bad(e.Addrs[i]) {
			return e.Addrs[i], i
		}
		i = pick(k)
	}
	return e.Addrs[first], first
}

// hold counts the attempt in flight to endpoint i of e, for LeastRequest.
func (bal *balancing) hold(e *config.Endpoints, i int) {
	if bal.lb != nil && bal.lb.Algorithm == config.LBLeastRequest && i >= 0 && bal.held < 0 {
		e.Acquire(i)
		bal.held = i
	}
}

// release ends hold's count; it may be called again.
func (bal *balancing) release(e *config.Endpoints) {
	if bal.held >= 0 {
		e.Release(bal.held)
		bal.held = -1
	}
}
