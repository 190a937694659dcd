package tlsrouting

import (
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// TestPickByWeight: connections go to backends in proportion to their
// weights, an invalid backend keeping its share.
func TestPickByWeight(t *testing.T) {
	r := &config.StreamRoute{TotalWeight: 6, Backends: []config.StreamBackend{{Weight: 3}, {Weight: 1}, {Weight: 2, Invalid: "not found"}}}
	counts := map[int]int{}
	for n := range uint32(600) {
		b := r.Pick(n)
		for i := range r.Backends {
			if b == &r.Backends[i] {
				counts[i]++
			}
		}
	}
	if counts[0] != 300 || counts[1] != 100 || counts[2] != 200 {
		t.Fatalf("picks %v, want 300/100/200", counts)
	}
	if (&config.StreamRoute{}).Pick(1) != nil {
		t.Fatal("a route without weight picked a backend")
	}
}

// TestIntersect: the hostnames a route serves on a listener, each with the
// route hostname it came from.
func TestIntersect(t *testing.T) {
	for _, tc := range []struct {
		listener string
		route    []gwv1.Hostname
		want     [][2]string
	}{
		{"", []gwv1.Hostname{"a.example.com", "*.example.org"}, [][2]string{{"a.example.com", "a.example.com"}, {"*.example.org", "*.example.org"}}},
		{"*.example.com", []gwv1.Hostname{"a.example.com", "a.example.net", "*.example.com"}, [][2]string{{"a.example.com", "a.example.com"}, {"*.example.com", "*.example.com"}}},
		{"a.example.com", []gwv1.Hostname{"*.example.com"}, [][2]string{{"a.example.com", "*.example.com"}}},
		{"*.a.example.com", []gwv1.Hostname{"*.example.com"}, [][2]string{{"*.a.example.com", "*.example.com"}}},
		{"a.example.com", []gwv1.Hostname{"b.example.com", "example.com"}, nil},
		{"a.example.com", nil, [][2]string{{"a.example.com", "a.example.com"}}},
	} {
		got := intersect(tc.listener, tc.route)
		if len(got) != len(tc.want) {
			t.Errorf("listener %q, route %v: %v, want %v", tc.listener, tc.route, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("listener %q, route %v: %v, want %v", tc.listener, tc.route, got, tc.want)
			}
		}
	}
}
