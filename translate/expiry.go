package translate

import (
	"reflect"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"portico.dev/portico/internal/shared/layered"
)

// expiries sorts the key pairs of a layered map's base by expiry, once per
// base: the earliest of the map is then the first of them its overlay does
// not shadow, or one of the overlay's. Every rebuild reports the earliest
// expiry (a metric), and looking at 100,000 key pairs for it cost more
// than translating the change. Memories of one lineage share it; it sorts
// again when their base changed (a flatten, a full translation).
type expiries struct {
	mu     sync.Mutex
	base   uintptr // the base map sorted, by identity
	sorted []expiring
}

type expiring struct {
	notAfter time.Time
	key      types.NamespacedName
}

// earliest is the earliest expiry of the key pairs of certs; the zero
// time when none has a parsed leaf.
func (x *expiries) earliest(certs layered.Map[types.NamespacedName, parsedCert]) time.Time {
	var earliest time.Time
	consider := func(t time.Time) {
		if earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	for _, e := range x.sortedFor(certs.Base()) {
		if !certs.Shadows(e.key) {
			consider(e.notAfter)
			break
		}
	}
	for _, p := range certs.Overlay() {
		if p.cert != nil {
			consider(p.notAfter)
		}
	}
	return earliest
}

// sortedFor is base's key pairs with a parsed leaf, earliest first.
func (x *expiries) sortedFor(base map[types.NamespacedName]parsedCert) []expiring {
	x.mu.Lock()
	defer x.mu.Unlock()
	id := reflect.ValueOf(base).Pointer()
	if x.sorted != nil && x.base == id {
		return x.sorted
	}
	sorted := make([]expiring, 0, len(base))
	for k, p := range base {
		if p.cert != nil {
			sorted = append(sorted, expiring{p.notAfter, k})
		}
	}
	slices.SortFunc(sorted, func(a, b expiring) int { return a.notAfter.Compare(b.notAfter) })
	x.base, x.sorted = id, sorted
	return sorted
}
