package proxy

import (
	"hash/maphash"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"portico.dev/portico/config"
)

// Local rate limits (ClientTrafficPolicy rateLimit): token buckets kept
// per RateLimit.ID across configuration changes, per key in a sharded
// table whose least recently used buckets go when it is full, so that a
// client making up keys (addresses, header values) costs bounded memory.

// rateLimits holds the limiters of every RateLimit.ID served. The zero
// value is ready.
type rateLimits struct {
	byID sync.Map // string -> *limiter
	// swept is when limiters unused for limiterIdle were last dropped.
	swept atomic.Int64
}

// limiterIdle is how long a limiter no request used is kept: a policy
// removed (or changed) leaves one behind until then.
const limiterIdle = 10 * time.Minute

// allow takes a token of r's bucket under rl; false when there is none,
// having answered 429 with Retry-After and the RateLimit headers.
func (ls *rateLimits) allow(w http.ResponseWriter, r *http.Request, rl *config.RateLimit) bool {
	now := time.Now()
	l := ls.limiter(rl, now)
	var b *bucket
	switch rl.Key {
	case config.RateLimitByClient:
		b = l.buckets.get(l.keyOf(clientIP(r.RemoteAddr)), now, l.burst)
	case config.RateLimitByHeader:
		var v string
		if vs := r.Header[rl.Header]; len(vs) > 0 {
			v = vs[0]
		}
		b = l.buckets.get(l.keyOf(v), now, l.burst)
	default:
		b = &l.whole
	}
	ok, remaining, wait, full := b.take(l, now)
	if ok {
		return true
	}
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(ceilSeconds(wait), 10))
	h.Set("RateLimit-Policy", l.policyHeader)
	h.Set("RateLimit", `"`+l.name+`";r=`+strconv.FormatInt(remaining, 10)+";t="+strconv.FormatInt(ceilSeconds(full), 10))
	noteOutcome(w, outcomeRateLimited)
	writeErrorFor(w, r, http.StatusTooManyRequests)
	return false
}

// outcomeRateLimited: 429 from a local rate limit.
const outcomeRateLimited = "rate_limited"

func ceilSeconds(d time.Duration) int64 {
	return max(1, int64(math.Ceil(d.Seconds())))
}

// limiter returns the limiter of rl.ID, anew when its settings changed.
func (ls *rateLimits) limiter(rl *config.RateLimit, now time.Time) *limiter {
	if v, ok := ls.byID.Load(rl.ID); ok {
		l := v.(*limiter)
		if l.settings == *rl {
			l.used.Store(now.Unix())
			return l
		}
	}
	l := newLimiter(rl, now)
	ls.byID.Store(rl.ID, l)
	ls.sweep(now)
	return l
}

// sweep drops the limiters no request used for limiterIdle, at most once
// a minute.
func (ls *rateLimits) sweep(now time.Time) {
	last := ls.swept.Load()
	if now.Unix()-last < 60 || !ls.swept.CompareAndSwap(last, now.Unix()) {
		return
	}
	ls.byID.Range(func(k, v any) bool {
		if now.Unix()-v.(*limiter).used.Load() > int64(limiterIdle/time.Second) {
			ls.byID.CompareAndDelete(k, v)
		}
		return true
	})
}

// limiter is one RateLimit's buckets.
type limiter struct {
	settings config.RateLimit
	// perToken is the time one token takes to come back.
	perToken     time.Duration
	burst        float64
	whole        bucket
	buckets      bucketTable
	seed         maphash.Seed
	name         string
	policyHeader string
	used         atomic.Int64
}

func newLimiter(rl *config.RateLimit, now time.Time) *limiter {
	l := &limiter{settings: *rl, burst: float64(max(rl.Burst, 1)), seed: maphash.MakeSeed()}
	l.perToken = rl.Per / time.Duration(max(rl.Requests, 1))
	// The draft's policy name is a token of Portico's own: the client
	// learns the quota, not the policy's name.
	l.name = "local"
	l.policyHeader = `"local";q=` + strconv.FormatInt(rl.Requests, 10) + ";w=" + strconv.FormatInt(ceilSeconds(rl.Per), 10)
	l.whole.init(l, now)
	maxKeys := rl.MaxKeys
	if maxKeys <= 0 {
		maxKeys = config.DefaultRateLimitKeys
	}
	l.buckets.init(maxKeys)
	l.used.Store(now.Unix())
	return l
}

func (l *limiter) keyOf(s string) uint64 { return maphash.String(l.seed, s) }

// bucket is a token bucket.
type bucket struct {
	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func (b *bucket) init(l *limiter, now time.Time) {
	b.tokens, b.last = l.burst, now
}

// take takes a token; it reports whether there was one, the whole tokens
// left, how long until the next one and until the bucket is full.
func (b *bucket) take(l *limiter, now time.Time) (ok bool, remaining int64, wait, full time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(l.burst, b.tokens+float64(d)/float64(l.perToken))
		b.last = now
	}
	if b.tokens >= 1 {
		b.tokens--
		ok = true
	} else {
		wait = time.Duration((1 - b.tokens) * float64(l.perToken))
	}
	full = time.Duration((l.burst - b.tokens) * float64(l.perToken))
	return ok, int64(b.tokens), wait, full
}

// bucketShards is the number of locks over the keyed buckets.
const bucketShards = 32

// bucketTable holds the buckets by key: bucketShards tables, each an LRU
// of at most its share of MaxKeys.
type bucketTable struct {
	shards [bucketShards]bucketShard
}

type bucketShard struct {
	mu    sync.Mutex
	max   int
	byKey map[uint64]*keyedBucket
	// head is the most recently used, tail the least (a ring with a
	// sentinel).
	ring keyedBucket
}

type keyedBucket struct {
	bucket
	key        uint64
	prev, next *keyedBucket
}

func (t *bucketTable) init(maxKeys int) {
	for i := range t.shards {
		s := &t.shards[i]
		// maxKeys split over the shards, at least one each.
		s.max = max(1, maxKeys/bucketShards)
		if i < maxKeys%bucketShards {
			s.max++
		}
		s.byKey = make(map[uint64]*keyedBucket)
		s.ring.prev, s.ring.next = &s.ring, &s.ring
	}
}

// get returns key's bucket, made full when it is new (or was dropped).
func (t *bucketTable) get(key uint64, now time.Time, burst float64) *bucket {
	s := &t.shards[key%bucketShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.byKey[key]; b != nil {
		b.unlink()
		s.pushFront(b)
		return &b.bucket
	}
	var b *keyedBucket
	if len(s.byKey) >= s.max {
		// Reuse the least recently used: no allocation once full.
		b = s.ring.prev
		b.unlink()
		delete(s.byKey, b.key)
	} else {
		b = &keyedBucket{}
	}
	b.key = key
	// A request that got this bucket before it was dropped may still
	// take from it: under its lock.
	b.mu.Lock()
	b.tokens, b.last = burst, now
	b.mu.Unlock()
	s.byKey[key] = b
	s.pushFront(b)
	return &b.bucket
}

// size is the number of keyed buckets held.
func (t *bucketTable) size() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.byKey)
		s.mu.Unlock()
	}
	return n
}

func (b *keyedBucket) unlink() {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
}

func (s *bucketShard) pushFront(b *keyedBucket) {
	b.prev, b.next = &s.ring, s.ring.next
	s.ring.next.prev = b
	s.ring.next = b
}
