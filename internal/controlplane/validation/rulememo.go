// Rules already passed by the same value.
//
// A rule sees only its node's value (self; there is no oldSelf on create)
// and CEL is deterministic: a value that passed a subtree's rules once
// passes them again, at the same cost. Large configurations repeat
// themselves (the same rules, matches and backends in thousands of
// routes), so each subtree of rules remembers the values that passed it,
// with what they cost, and takes that cost from the budget instead of
// evaluating them again. A value remembered is one that broke nothing and
// left budget: one that broke a rule is evaluated each time (its errors
// name its path), and a remembered cost is used only while the budget
// stays above it, so that the budget runs out exactly where the
// evaluation would have run out. A subtree whose values rarely repeat (a
// resource's root, which holds its name) stops looking after a while.

package validation

import (
	"encoding/binary"
	"math"
	"slices"
	"sync"
	"sync/atomic"
)

const (
	// memoMaxKey bounds the encoding of a value that is remembered: a
	// longer one is evaluated.
	memoMaxKey = 2048
	// memoMaxEntries bounds what one subtree remembers.
	memoMaxEntries = 4096
	// memoTrial is how many values a subtree looks up before it keeps
	// looking only if at least a quarter of them were found.
	memoTrial = 256
)

// ruleMemo is what one subtree of rules remembers.
type ruleMemo struct {
	mu    sync.RWMutex
	costs map[string]int64

	lookups, hits atomic.Int64
	off           atomic.Bool
}

// lookup returns the cost with which v passed, and the key to remember it
// by (empty: v is not to be remembered).
func (m *ruleMemo) lookup(v any) (key string, cost int64, found bool) {
	if m.off.Load() {
		return "", 0, false
	}
	n := m.lookups.Add(1)
	if n == memoTrial && m.hits.Load() < memoTrial/4 {
		m.off.Store(true)
		m.mu.Lock()
		m.costs = nil
		m.mu.Unlock()
		return "", 0, false
	}
	buf, ok := appendValue(make([]byte, 0, 256), v)
	if !ok {
		return "", 0, false
	}
	m.mu.RLock()
	cost, found = m.costs[string(buf)]
	m.mu.RUnlock()
	if found {
		m.hits.Add(1)
		return "", cost, true
	}
	return string(buf), 0, false
}

// remember notes that the value of key passed at cost.
func (m *ruleMemo) remember(key string, cost int64) {
	if key == "" || m.off.Load() {
		return
	}
	m.mu.Lock()
	if m.costs == nil {
		m.costs = map[string]int64{}
	}
	if len(m.costs) < memoMaxEntries {
		m.costs[key] = cost
	}
	m.mu.Unlock()
}

// appendValue appends an encoding of v, a value decoded from JSON, that
// tells apart every two values CEL tells apart (types included); false
// when it would be longer than memoMaxKey or v is of another type.
func appendValue(b []byte, v any) ([]byte, bool) {
	if len(b) > memoMaxKey {
		return b, false
	}
	switch v := v.(type) {
	case nil:
		return append(b, 'n'), true
	case bool:
		if v {
			return append(b, 't'), true
		}
		return append(b, 'f'), true
	case int64:
		return binary.AppendVarint(append(b, 'i'), v), true
	case float64:
		return binary.BigEndian.AppendUint64(append(b, 'd'), math.Float64bits(v)), true
	case string:
		return append(binary.AppendUvarint(append(b, 's'), uint64(len(v))), v...), true
	case []any:
		b = binary.AppendUvarint(append(b, 'l'), uint64(len(v)))
		for _, e := range v {
			var ok bool
			if b, ok = appendValue(b, e); !ok {
				return b, false
			}
		}
		return b, true
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = binary.AppendUvarint(append(b, 'm'), uint64(len(v)))
		for _, k := range keys {
			b = append(binary.AppendUvarint(b, uint64(len(k))), k...)
			var ok bool
			if b, ok = appendValue(b, v[k]); !ok {
				return b, false
			}
		}
		return b, true
	}
	return b, false
}

// memoHits counts the subtrees of t and below passed from memory.
func (t *ruleTree) memoHits() int64 {
	if t == nil {
		return 0
	}
	n := t.memo.hits.Load() + t.items.memoHits() + t.additional.memoHits()
	for _, p := range t.properties {
		n += p.memoHits()
	}
	return n
}
