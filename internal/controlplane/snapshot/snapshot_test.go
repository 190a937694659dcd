package snapshot

import (
	"cmp"
	"strings"
	"testing"
)

// TestCompareNames: the shortcut orders like the joined strings it avoids
// building, including namespaces that are prefixes of one another.
func TestCompareNames(t *testing.T) {
	parts := []string{"", "a", "a-b", "a.b", "ab", "a0", "b", "team", "team-b", "teamb", "z"}
	sign := func(c int) int { return cmp.Compare(c, 0) }
	for _, ans := range parts {
		for _, an := range parts {
			for _, bns := range parts {
				for _, bn := range parts {
					want := strings.Compare(ans+"/"+an, bns+"/"+bn)
					if got := CompareNames(ans, an, bns, bn); sign(got) != want {
						t.Fatalf("CompareNames(%q, %q, %q, %q) = %d, want %d", ans, an, bns, bn, got, want)
					}
				}
			}
		}
	}
}
