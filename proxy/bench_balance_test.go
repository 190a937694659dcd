package proxy

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
	"portico.dev/portico/routing"
)

// BenchmarkForwardBalanced is BenchmarkForwardOnly with a
// BackendTrafficPolicy's load balancing on the rule, over 10 endpoints:
// what each algorithm costs a request beyond the default round robin
// (its sub-benchmark "none").
func BenchmarkForwardBalanced(b *testing.B) {
	const base = "GET / HTTP/1.1\r\nHost: app.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n"
	cases := []struct {
		name string
		lb   *config.LoadBalancer
		req  string
	}{
		{"none", nil, base + "\r\n"},
		{"RoundRobin", &config.LoadBalancer{Algorithm: config.LBRoundRobin}, base + "\r\n"},
		{"Random", &config.LoadBalancer{Algorithm: config.LBRandom}, base + "\r\n"},
		{"LeastRequest", &config.LoadBalancer{Algorithm: config.LBLeastRequest}, base + "\r\n"},
		{"HashHeader", &config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashHeader, HashName: "X-User"}, base + "X-User: alice\r\n\r\n"},
		{"HashCookie", &config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashCookie, HashName: "session"}, base + "Cookie: theme=dark; session=0123456789abcdef\r\n\r\n"},
		{"HashSourceIP", &config.LoadBalancer{Algorithm: config.LBConsistentHash, HashOn: config.HashSourceIP}, base + "\r\n"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			var eps []string
			for range 10 {
				a, _ := rawBackend(b)
				eps = append(eps, a)
			}
			rt := New(DefaultOptions(), zap.NewNop())
			b.Cleanup(func() { _ = rt.Close(b.Context()) })
			port := freePort(b)
			if err := rt.Apply(balancedConfig(b, port, tc.lb, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": eps})); err != nil {
				b.Fatal(err)
			}
			rawLoadOf(b, fmt.Sprintf("127.0.0.1:%d", port), []byte(tc.req))
		})
	}
}

// BenchmarkPickEndpoint is what each algorithm adds to a request, alone:
// the key read from the request, the backend and endpoint picked, the
// request counted in flight and released; "none" is the default path.
func BenchmarkPickEndpoint(b *testing.B) {
	var addrs []string
	for i := range 10 {
		addrs = append(addrs, fmt.Sprintf("10.0.0.%d:8080", i+1))
	}
	r, err := http.NewRequest(http.MethodGet, "http://app.example.com/", nil)
	if err != nil {
		b.Fatal(err)
	}
	r.RemoteAddr = "192.0.2.7:51234"
	r.Header.Set("X-User", "alice")
	r.Header.Set("Cookie", "theme=dark; session=0123456789abcdef")
	for _, lb := range []*config.LoadBalancer{
		nil,
		{Algorithm: config.LBRoundRobin},
		{Algorithm: config.LBRandom},
		{Algorithm: config.LBLeastRequest},
		{Algorithm: config.LBConsistentHash, HashOn: config.HashHeader, HashName: "X-User"},
		{Algorithm: config.LBConsistentHash, HashOn: config.HashCookie, HashName: "session"},
		{Algorithm: config.LBConsistentHash, HashOn: config.HashSourceIP},
	} {
		name := "none"
		if lb != nil {
			name = string(lb.Algorithm) + string(lb.HashOn)
		}
		b.Run(name, func(b *testing.B) {
			eps := config.NewEndpoints(addrs...)
			rule := &config.Rule{Backends: []config.Backend{{Weight: 1}}, TotalWeight: 1, LB: lb}
			var down downSet
			var outliers outlierSet
			health := newHealthChecks(zap.NewNop(), nil)
			eps.PickHash(0, 0) // the table is made once per set of endpoints, not per request
			b.ReportAllocs()
			for b.Loop() {
				now := time.Now()
				if lb == nil {
					pickBackend(rule)
					down.pickUp(eps, now)
					continue
				}
				bal := &balancing{lb: lb, held: -1}
				if lb.Algorithm == config.LBConsistentHash {
					bal.key, bal.hasKey = requestKey(r, lb)
				}
				pickBalanced(rule, bal.key, bal.hasKey)
				_, i := down.pickWith(eps, bal, &outliers, health, now)
				bal.hold(eps, i)
				bal.release(eps)
			}
		})
	}
}

// BenchmarkPickHealthChecked is BenchmarkPickEndpoint's round robin
// with an active health check over the 10 endpoints: "healthy" when every
// endpoint is (one atomic load more), "oneUnhealthy" when one is not
// (a map lookup per endpoint tried).
func BenchmarkPickHealthChecked(b *testing.B) {
	var addrs []string
	for i := range 10 {
		addrs = append(addrs, fmt.Sprintf("10.0.0.%d:8080", i+1))
	}
	hc := &config.ActiveHealthCheck{Type: config.HealthCheckTCP, ID: "tcp"}
	for _, unhealthy := range []int{0, 1} {
		name := map[int]string{0: "healthy", 1: "oneUnhealthy"}[unhealthy]
		b.Run(name, func(b *testing.B) {
			eps := config.NewEndpoints(addrs...)
			health := newHealthChecks(zap.NewNop(), nil)
			view := map[hcKey]*endpointHealth{}
			for i, a := range addrs {
				st := &endpointHealth{}
				st.healthy.Store(i >= unhealthy)
				view[hcKey{hc.ID, a}] = st
			}
			health.view.Store(&view)
			health.unhealthy.Store(int32(unhealthy))
			var down downSet
			var outliers outlierSet
			rule := &config.Rule{Backends: []config.Backend{{Weight: 1}}, TotalWeight: 1}
			b.ReportAllocs()
			for b.Loop() {
				now := time.Now()
				pickBackend(rule)
				bal := &balancing{active: hc, held: -1}
				down.pickWith(eps, bal, &outliers, health, now)
			}
		})
	}
}

// BenchmarkForwardBackendPolicy is BenchmarkForwardOnly's request to a
// backend under a circuit breaker whose limits are never reached
// ("breaker": what admitting and releasing a request cost), under a
// first-byte timeout and TCP keepalive of a policy ("timeouts"), under
// an XBackendTrafficPolicy's retry budget ("budget": the request
// counted), and the same configuration without a policy ("none").
func BenchmarkForwardBackendPolicy(b *testing.B) {
	const req = "GET / HTTP/1.1\r\nHost: app.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"
	cb := &config.CircuitBreaker{MaxConnections: 1 << 20, MaxPendingRequests: 1 << 20, MaxParallelRequests: 1 << 20, MaxParallelRetries: 3}
	cb.MakeID()
	// An XBackendTrafficPolicy's retry budget: each request counted.
	budget := &config.RetryBudget{Percent: 20, Interval: 10 * time.Second, MinRetries: 10, MinInterval: time.Second}
	conn := &config.BackendConn{ResponseHeaderTimeout: 30 * time.Second, KeepAlive: &config.TCPKeepalive{Idle: time.Minute, Interval: 10 * time.Second, Probes: 3}}
	for _, tc := range []struct {
		name string
		svc  routing.Service
	}{{"none", routing.Service{}}, {"breaker", routing.Service{Breaker: cb}}, {"timeouts", routing.Service{Conn: conn}},
		{"budget", routing.Service{Budget: budget}}} {
		b.Run(tc.name, func(b *testing.B) {
			a, _ := rawBackend(b)
			rt := New(DefaultOptions(), zap.NewNop())
			b.Cleanup(func() { _ = rt.Close(b.Context()) })
			port := freePort(b)
			if err := rt.Apply(serviceConfig(b, port, tc.svc, false, []string{a})); err != nil {
				b.Fatal(err)
			}
			rawLoadOf(b, fmt.Sprintf("127.0.0.1:%d", port), []byte(req))
		})
	}
}

// BenchmarkForwardSession is BenchmarkForwardBalanced's "none" with the
// rule's sessionPersistence (a cookie) over 10 endpoints: "held" sends a
// valid session (opened, endpoint found), "opens" none, so that every
// answer opens one (sealed, Set-Cookie).
func BenchmarkForwardSession(b *testing.B) {
	const base = "GET / HTTP/1.1\r\nHost: app.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n"
	key := make([]byte, 32)
	sealer, err := newSessionSealer(key)
	if err != nil {
		b.Fatal(err)
	}
	for _, held := range []bool{true, false} {
		name := map[bool]string{true: "held", false: "opens"}[held]
		b.Run(name, func(b *testing.B) {
			var eps []string
			for range 10 {
				a, _ := rawBackend(b)
				eps = append(eps, a)
			}
			opts := DefaultOptions()
			opts.SessionKey = key
			rt := New(opts, zap.NewNop())
			b.Cleanup(func() { _ = rt.Close(b.Context()) })
			port := freePort(b)
			if err := rt.Apply(persistentConfig(b, port, nil, cookieSP("sid", false, "1h"), map[string]int32{"svc": 1}, nil, map[string][]string{"svc": eps})); err != nil {
				b.Fatal(err)
			}
			req := base + "\r\n"
			if held {
				req = base + "Cookie: theme=dark; sid=" + sealer.seal("sid", eps[3], time.Now()) + "\r\n\r\n"
			}
			rawLoadOf(b, fmt.Sprintf("127.0.0.1:%d", port), []byte(req))
		})
	}
}
