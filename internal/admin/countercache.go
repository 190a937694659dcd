package admin

import (
	"hash/maphash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counterShards is how many maps a counterCache spreads its routes over,
// so that adding one copies a small map: at 100,000 routes, about 400
// entries.
const counterShards = 256

// counterCache finds the child counter of a (route, code, outcome) of a
// CounterVec without its label hashing and variadic call on every request.
// With 10,000 routes a sync.Map took about 700 ns a lookup (a trie walked
// pointer by pointer); here it is one hash of the route's name, which
// picks the shard and the slot in it (a runtime map would hash the name
// again, and scan up to eight slots of a small one, each a likely cache
// miss among thousands of routes), and a scan of the few codes and
// outcomes that route answered with. Nothing read on a
// request is ever written, so cores reading it share its cache lines: a
// route seen for the first time copies its shard, a code or outcome new to
// a route copies the route's short list. Entries are never removed, as the
// CounterVec keeps its children too.
//
// Only the first maxRoutes routes seen get a route label of their own; the
// requests of further routes are counted under route="other", so that
// 100,000 routes do not make 100,000 series per code. The choice is made
// when a route is first seen, under mu: no cost per request.
type counterCache struct {
	vec    *prometheus.CounterVec
	seed   maphash.Seed
	mu     sync.Mutex // serialises the copies, guards named
	shards [counterShards]atomic.Pointer[routeTable]
	// maxRoutes bounds named; negative: no bound.
	maxRoutes atomic.Int64
	named     map[string]bool // routes with a label of their own
}

// routeTable is a shard's routes: an open-addressed table, at most half
// full, of slots found by the hash of the route's name. A table is never
// written once published; adding a route copies it.
type routeTable struct {
	slots []routeSlot // a power of two of them
	n     int         // slots in use
}

// routeSlot is one route's: tag is its hash with the lowest bit set (0:
// an empty slot).
type routeSlot struct {
	tag   uint64
	route string
	e     routeEntry
}

// find is the entry of route, whose hash tagged is tag; nil when the
// table has none.
func (t *routeTable) find(tag uint64, route string) *routeEntry {
	mask := uint64(len(t.slots) - 1)
	for i := (tag >> 8) & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.tag == 0 {
			return nil
		}
		if s.tag == tag && s.route == route {
			return &s.e
		}
	}
}

// with is a copy of t (nil: empty) with route's entry added; route is not
// in t.
func (t *routeTable) with(tag uint64, route string, e routeEntry) *routeTable {
	n := 1
	if t != nil {
		n += t.n
	}
	size := 8
	for size < 2*n {
		size *= 2
	}
	nt := &routeTable{slots: make([]routeSlot, size), n: n}
	if t != nil {
		for i := range t.slots {
			if s := &t.slots[i]; s.tag != 0 {
				nt.put(*s)
			}
		}
	}
	nt.put(routeSlot{tag: tag, route: route, e: e})
	return nt
}

func (t *routeTable) put(s routeSlot) {
	mask := uint64(len(t.slots) - 1)
	i := (s.tag >> 8) & mask
	for t.slots[i].tag != 0 {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

// routeEntry is what a route's name finds: the counter of the first code
// and outcome it answered with, held in the table's own slot (the request
// finds it with no further pointer to follow: with many routes, each
// pointer is a likely cache miss), and the others.
type routeEntry struct {
	first codeCounter
	more  *routeCounters
}

// routeCounters are a route's label and its counters past the first.
type routeCounters struct {
	label string // the route's name, or otherRoutes
	codes atomic.Pointer[[]codeCounter]
}

type codeCounter struct {
	code    int
	outcome string // "" for gRPC calls, whose metric has no outcome
	ctr     prometheus.Counter
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
	h := maphash.String(c.seed, route)
	tag := h | 1
	sh := &c.shards[h%counterShards]
	if t := sh.Load(); t != nil {
		if e := t.find(tag, route); e != nil {
			if e.first.code == code && e.first.outcome == outcome {
				return e.first.ctr
			}
			if ctr := e.more.find(code, outcome); ctr != nil {
				return ctr
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := sh.Load()
	var e routeEntry
	var ok bool
	if old != nil {
		if p := old.find(tag, route); p != nil {
			e, ok = *p, true
		}
	}
	if ok {
		if e.first.code == code && e.first.outcome == outcome {
			return e.first.ctr
		}
		if ctr := e.more.find(code, outcome); ctr != nil {
			return ctr
		}
		ctr := c.counter(e.more.label, code, outcome)
		var codes []codeCounter
		if l := e.more.codes.Load(); l != nil {
			codes = slices.Clone(*l)
		}
		codes = append(codes, codeCounter{code, outcome, ctr})
		e.more.codes.Store(&codes)
		return ctr
	}
	more := &routeCounters{label: c.label(route)}
	ctr := c.counter(more.label, code, outcome)
	sh.Store(old.with(tag, route, routeEntry{first: codeCounter{code, outcome, ctr}, more: more}))
	return ctr
}

// counter is the vector's child of a label, code and outcome; c.mu is
// held.
func (c *counterCache) counter(label string, code int, outcome string) prometheus.Counter {
	if outcome == "" {
		return c.vec.WithLabelValues(label, strconv.Itoa(code))
	}
	return c.vec.WithLabelValues(label, strconv.Itoa(code), outcome)
}

// find is the counter of code and outcome among the route's counters past
// the first, nil when it has none yet. A route answers with few codes and
// outcomes: a scan beats a hash.
func (rc *routeCounters) find(code int, outcome string) prometheus.Counter {
	if codes := rc.codes.Load(); codes != nil {
		for i := range *codes {
			if e := &(*codes)[i]; e.code == code && e.outcome == outcome {
				return e.ctr
			}
		}
	}
	return nil
}
