package proxy

import (
	"fmt"
	"testing"

	"go.uber.org/zap"

	"portico.dev/portico/config"
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
			rt := New(testOptions(DefaultOptions()), zap.NewNop())
			b.Cleanup(func() { _ = rt.Close(b.Context()) })
			port := freePort(b)
			if err := rt.Apply(balancedConfig(b, port, tc.lb, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": eps})); err != nil {
				b.Fatal(err)
			}
			rawLoadOf(b, fmt.Sprintf("127.0.0.1:%d", port), []byte(tc.req))
		})
	}
}
