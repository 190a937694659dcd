package proxy

import (
	"net/http"
	"testing"
)

// TestRemoveHopByHop: the hop-by-hop fields, and those the Connection
// field names, go whatever the size of the head (a small head takes a
// shorter path than a large one), and nothing else does.
func TestRemoveHopByHop(t *testing.T) {
	for _, name := range hopHeaders {
		if !isHopHeader(name) {
			t.Errorf("isHopHeader(%q) = false", name)
		}
	}
	for _, extra := range []int{0, 3, 20} {
		for _, hop := range append(hopHeaders[:], "") {
			h := http.Header{"Content-Type": {"text/plain"}, "X-Listed": {"1"}}
			for i := range extra {
				h.Set("X-Extra-"+string(rune('a'+i)), "v")
			}
			if hop != "" {
				h[hop] = []string{"x"}
			}
			if hop == "Connection" {
				h[hop] = []string{"close, x-listed"}
			}
			removeHopByHop(h)
			for _, name := range hopHeaders {
				if _, ok := h[name]; ok {
					t.Errorf("extra %d, hop %q: %s kept", extra, hop, name)
				}
			}
			_, listed := h["X-Listed"]
			if listed == (hop == "Connection") {
				t.Errorf("extra %d, hop %q: X-Listed kept = %v", extra, hop, listed)
			}
			if h.Get("Content-Type") != "text/plain" || len(h) != 1+extra+btoi(listed) {
				t.Errorf("extra %d, hop %q: other fields changed: %v", extra, hop, h)
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
