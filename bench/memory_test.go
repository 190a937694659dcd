package bench_test

// The host's memory latency, to read the SNI lookup figures against: at
// 100,000 names an exact hit fetches a record from a 5 MB array, and what
// that costs is set by how much of the last-level cache this machine
// really gets, which on a shared host is far less than lscpu says.

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMemoryLatency reads one 8-byte word per 64-byte line of an array
// of the given size, in a random cyclic order:
//   - dependent: each read's address comes from the read before, so an op
//     is one full load-to-use latency;
//   - independent: the addresses come from a precomputed list, so the core
//     overlaps as many reads as it can, as it does across lookups.
func BenchmarkMemoryLatency(b *testing.B) {
	const line = 64 / 8 // words per cache line
	for _, kb := range []int{256, 512, 1 << 10, 2 << 10, 4 << 10, 8 << 10, 32 << 10} {
		lines := kb << 10 / 64
		r := rand.New(rand.NewPCG(uint64(kb), 7))
		order := r.Perm(lines)
		next := make([]uint32, lines*line*2) // uint32 words: 2 per 8 bytes
		for i, l := range order {
			next[l*line*2] = uint32(order[(i+1)%lines] * line * 2)
		}
		addrs := make([]uint32, 1<<16)
		for i := range addrs {
			addrs[i] = uint32(r.IntN(lines) * line * 2)
		}
		b.Run(fmt.Sprintf("dependent/size=%dKB", kb), func(b *testing.B) {
			p := uint32(0)
			for b.Loop() {
				p = next[p]
			}
			if p == 1 { // never: keeps the chain from being optimized away
				b.Log(p)
			}
		})
		b.Run(fmt.Sprintf("independent/size=%dKB", kb), func(b *testing.B) {
			var sum uint32
			for i := 0; b.Loop(); i++ {
				sum += next[addrs[i&(len(addrs)-1)]]
			}
			if sum == 1 {
				b.Log(sum)
			}
		})
	}
}
