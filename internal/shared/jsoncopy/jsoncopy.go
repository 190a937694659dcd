// Package jsoncopy deep-copies Portico's own API objects (its CRDs' types)
// by a JSON round trip of their fields. All their fields are JSON fields,
// so the copy is exact and cannot drift from the type as a hand-written
// one could; the objects are small and rarely copied (the caches of a
// cluster hand out shared pointers).
package jsoncopy

import (
	"encoding/json"
	"fmt"
)

// Copy returns a deep copy of p, nil for nil. It panics when p does not
// round-trip, which for plain data cannot happen.
func Copy[T any](p *T) *T {
	if p == nil {
		return nil
	}
	js, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("%T cannot be encoded: %v", p, err))
	}
	out := new(T)
	if err := json.Unmarshal(js, out); err != nil {
		panic(fmt.Sprintf("%T cannot be decoded: %v", p, err))
	}
	return out
}
