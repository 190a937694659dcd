package admin

import (
	"hash/maphash"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counterShards is how many maps a counterCache spreads its routes over,
// so that adding one copies a small map: at 100,000 routes, about 400
// entries.
const counterShards = 256

// counterCache finds the child counter of a (route, code) pair of a
// CounterVec without its label hashing and variadic call on every request.
// With 10,000 routes a sync.Map took about 700 ns a lookup (a trie walked
// pointer by pointer); here it is a hash and a probe of a small map that
// is never written, so cores reading it share its cache lines. A pair
// seen for the first time copies its shard. Entries are never removed, as
// the CounterVec keeps its children too.
//
// Only the first maxRoutes routes seen get a route label of their own; the
// requests of further routes are counted under route="other", so that
// 100,000 routes do not make 100,000 series per code. The choice is made
// when a pair is first seen, under mu: no cost per request.
type counterCache struct {
	vec    *prometheus.CounterVec
	seed   maphash.Seed
	mu     sync.Mutex // serialises the copies, guards named
	shards [counterShards]atomic.Pointer[map[requestKey]prometheus.Counter]
	// maxRoutes bounds named; negative: no bound.
	maxRoutes atomic.Int64
	named     map[string]bool // routes with a label of their own
}

// DefaultMaxRoutes is how many routes get a route label of their own in
// the request metrics (see counterCache).
const DefaultMaxRoutes = 1000

// otherRoutes is the route label of the routes past the limit.
const otherRoutes = "other"

func newCounterCache(vec *prometheus.CounterVec) *counterCache {
	c := &counterCache{vec: vec, seed: maphash.MakeSeed(), named: map[string]bool{}}
	c.maxRoutes.Store(DefaultMaxRoutes)
	return c
}

// label is the route label of route; c.mu is held.
func (c *counterCache) label(route string) string {
	if route == "" || c.named[route] {
		return route
	}
	if limit := c.maxRoutes.Load(); limit >= 0 && int64(len(c.named)) >= limit {
		return otherRoutes
	}
	c.named[route] = true
	return route
}

func (c *counterCache) get(route string, code int, outcome string) prometheus.Counter {
	key := requestKey{route, code, outcome}
	sh := &c.shards[maphash.String(c.seed, route)%counterShards]
	if m := sh.Load(); m != nil {
		if ctr, ok := (*m)[key]; ok {
			return ctr
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := sh.Load()
	if old != nil {
		if ctr, ok := (*old)[key]; ok {
			return ctr
		}
	}
	m := make(map[requestKey]prometheus.Counter, 1)
	if old != nil {
		m = maps.Clone(*old)
	}
	var ctr prometheus.Counter
	label := c.label(route)
	if outcome == "" {
		ctr = c.vec.WithLabelValues(label, strconv.Itoa(code))
	} else {
		ctr = c.vec.WithLabelValues(label, strconv.Itoa(code), outcome)
	}
	m[key] = ctr
	sh.Store(&m)
	return ctr
}
