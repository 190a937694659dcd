package config

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// LBAlgorithm names how a BackendTrafficPolicy picks an endpoint.
type LBAlgorithm string

const (
	// LBRoundRobin takes the endpoints in turn and, across a rule's
	// backends, follows their weights in a fixed interleaved order
	// rather than at random.
	LBRoundRobin LBAlgorithm = "RoundRobin"
	// LBLeastRequest takes the one of two endpoints drawn at random with
	// fewer requests in flight from this process (power of two choices).
	LBLeastRequest LBAlgorithm = "LeastRequest"
	// LBRandom draws an endpoint at random.
	LBRandom LBAlgorithm = "Random"
	// LBConsistentHash maps a key of the request (a header, a cookie or
	// the client's address) to an endpoint through a Maglev table, so
	// that the same key reaches the same endpoint while the endpoints
	// stay, and few keys move when one comes or goes.
	LBConsistentHash LBAlgorithm = "ConsistentHash"
)

// HashSource is what a consistent hash is computed over.
type HashSource string

const (
	HashHeader   HashSource = "Header"
	HashCookie   HashSource = "Cookie"
	HashSourceIP HashSource = "SourceIP"
)

// LoadBalancer is the load balancing a BackendTrafficPolicy asks for. A
// rule's is its own (made for it, never shared), since it holds the turn
// of its weighted round robin.
type LoadBalancer struct {
	Algorithm LBAlgorithm
	// HashOn and HashName say what ConsistentHash hashes: a header (its
	// canonical name), a cookie (its name) or the client's IP address.
	HashOn   HashSource
	HashName string
	// Policy is the policy's "namespace/name", for logs and dumps.
	Policy string

	turn atomic.Uint32
}

// Turn counts the requests a round-robin rule has picked a backend for.
func (lb *LoadBalancer) Turn() uint32 { return lb.turn.Add(1) - 1 }

// balanceState is what the policies' ways of picking keep per set of
// endpoints. It lives as long as the Endpoints: a change of endpoints
// starts anew, which for a consistent hash gives the same table for the
// same addresses.
type balanceState struct {
	inflight []atomic.Int32 // by index of Addrs
	once     sync.Once
	table    []int32 // Maglev lookup table: slot -> index of Addrs
}

func (e *Endpoints) state() *balanceState {
	if s := e.balance.Load(); s != nil {
		return s
	}
	s := &balanceState{inflight: make([]atomic.Int32, len(e.Addrs))}
	if e.balance.CompareAndSwap(nil, s) {
		return s
	}
	return e.balance.Load()
}

// PickRandom returns the index of the endpoint r (a random number)
// draws; -1 when there is none.
func (e *Endpoints) PickRandom(r uint64) int {
	if e == nil || len(e.Addrs) == 0 {
		return -1
	}
	return int(reduce(r, len(e.Addrs)))
}

// PickLeast draws two endpoints from r (a random number) and returns the
// index of the one with fewer requests in flight (Acquire, Release); the
// first on a tie. -1 when there is none.
func (e *Endpoints) PickLeast(r uint64) int {
	n := 0
	if e != nil {
		n = len(e.Addrs)
	}
	switch n {
	case 0:
		return -1
	case 1:
		return 0
	}
	s := e.state()
	i := int(reduce(r, n))
	j := int(reduce(r>>32|r<<32, n-1))
	if j >= i {
		j++ // two different endpoints
	}
	if s.inflight[j].Load() < s.inflight[i].Load() {
		return j
	}
	return i
}

// Acquire and Release count a request in flight to endpoint i, for
// PickLeast.
func (e *Endpoints) Acquire(i int) { e.state().inflight[i].Add(1) }

// Release is Acquire's end.
func (e *Endpoints) Release(i int) { e.state().inflight[i].Add(-1) }

// InFlight is the number of requests in flight to endpoint i.
func (e *Endpoints) InFlight(i int) int32 { return e.state().inflight[i].Load() }

// PickHash returns the index of the endpoint that hash h maps to, or,
// with k > 0, the k-th endpoint after it in the table (where a request
// goes when that one is down); -1 when there is none.
func (e *Endpoints) PickHash(h uint64, k int) int {
	if e == nil || len(e.Addrs) == 0 {
		return -1
	}
	if len(e.Addrs) == 1 {
		return 0
	}
	s := e.state()
	s.once.Do(func() { s.table = maglevTable(e.Addrs) })
	m := uint64(len(s.table))
	return int(s.table[(h%m+uint64(k))%m])
}

// maglevTable builds a Maglev lookup table (Eisenbud et al., NSDI 2016)
// over addrs: each address fills the slots of its own permutation of the
// table in turn, so every address owns an equal share of the slots and
// removing one hands only its own slots to the others. The permutations
// come from the addresses, not their positions, and are filled in address
// order: the same addresses give the same table in every process.
func maglevTable(addrs []string) []int32 {
	n := len(addrs)
	m := tableSize(n)
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(addrs[a], addrs[b]) })
	offset, skip, next := make([]uint64, n), make([]uint64, n), make([]uint64, n)
	for i, a := range addrs {
		offset[i] = mix64(HashString(a)) % m
		skip[i] = mix64(HashString(a)^0x5bd1e9955bd1e995)%(m-1) + 1
	}
	table := make([]int32, m)
	for i := range table {
		table[i] = -1
	}
	for filled := uint64(0); ; {
		for _, i := range order {
			c := (offset[i] + next[i]*skip[i]) % m
			for table[c] >= 0 {
				next[i]++
				c = (offset[i] + next[i]*skip[i]) % m
			}
			table[c] = int32(i)
			next[i]++
			if filled++; filled == m {
				return table
			}
		}
	}
}

// tableSize is 65537 slots (256 KiB), as long as that is 100 or more
// per endpoint (each endpoint's share is then even to about 1%), else the
// first prime past 100 per endpoint. A smaller table for few endpoints
// would cost less, but its size would change with their number, and a
// table of another size deals every key anew; and the smaller the table,
// the more keys of endpoints that stay move when one goes (13% of the
// keys rather than 10% with 1021 slots and 10 endpoints, 10.2% with
// 65537, where Maglev's ideal is 10%). It is made on the first request a
// consistent hash picks for, once per set of endpoints.
func tableSize(n int) uint64 {
	if 100*n <= 65537 {
		return 65537
	}
	for p := 100 * n; ; p++ {
		if isPrime(p) {
			return uint64(p)
		}
	}
}

func isPrime(p int) bool {
	if p < 2 {
		return false
	}
	for d := 2; d*d <= p; d++ {
		if p%d == 0 {
			return false
		}
	}
	return true
}

// HashString is 64-bit FNV-1a: the same in every process and release, so
// that replicas agree on where a key goes.
func HashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 spreads FNV's weak low bits (the finalizer of SplitMix64).
func mix64(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// HashKey is the hash of a request's key as a consistent hash uses it.
func HashKey(s string) uint64 { return mix64(HashString(s)) }

// reduce maps r to [0, n) without a division (Lemire), from r's high bits.
func reduce(r uint64, n int) uint64 {
	return ((r >> 32) * uint64(n)) >> 32
}
