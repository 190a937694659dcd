package hostname

import (
	"fmt"
	"runtime"
	"syscall"
	"testing"
)

func threadCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func cpuLoop(b *testing.B, f func(i int)) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := threadCPU()
	i := 0
	for b.Loop() {
		f(i)
		i++
	}
	b.ReportMetric(float64(threadCPU()-start)/float64(i), "cpu-ns/op")
}

type oldTable[V any] struct {
	exact, wild   map[string]V
	wildLabels    uint64
	minWildLabels int
}

func newOld[V any](patterns []string, values []V) *oldTable[V] {
	t := &oldTable[V]{exact: map[string]V{}, wild: map[string]V{}}
	for i, p := range patterns {
		p = Normalize(p)
		if isWildcard(p) {
			s := p[2:]
			t.wild[s] = values[i]
			l := min(countDotsAB(s)+1, 63)
			t.wildLabels |= 1 << l
			if t.minWildLabels == 0 || l < t.minWildLabels {
				t.minWildLabels = l
			}
		} else {
			t.exact[p] = values[i]
		}
	}
	return t
}
func countDotsAB(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			n++
		}
	}
	return n
}

func (t *oldTable[V]) Lookup(name string) (v V, ok bool) {
	n := len(name)
	if n > 0 && name[n-1] == '.' {
		n--
	}
	var buf [256]byte
	b := buf[:n]
	dots := 0
	for i := range b {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		} else if c == '.' {
			dots++
		}
		b[i] = c
	}
	if v, ok := t.exact[string(b)]; ok {
		return v, true
	}
	seen := 0
	for i := 1; i < len(b); i++ {
		if b[i] != '.' {
			continue
		}
		seen++
		labels := dots - seen + 1
		if labels < t.minWildLabels {
			break
		}
		if t.wildLabels&(1<<min(labels, 63)) == 0 {
			continue
		}
		if v, ok := t.wild[string(b[i+1:])]; ok {
			return v, true
		}
	}
	return v, false
}

func BenchmarkAB(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		patterns := make([]string, 0, n)
		for i := range n {
			if i%10 == 0 {
				patterns = append(patterns, fmt.Sprintf("*.ns%d.example.com", i))
			} else {
				patterns = append(patterns, fmt.Sprintf("svc%d.ns%d.example.com", i, i%97))
			}
		}
		values := make([]int, n)
		tab := NewTable(patterns, values)
		old := newOld(patterns, values)
		qs := make([]string, 1<<14)
		for i := range qs {
			k := (i * 7919) % n
			switch i % 4 {
			case 0, 1:
				k = k/10*10 + 1
				qs[i] = fmt.Sprintf("svc%d.ns%d.example.com", k, k%97)
			case 2:
				qs[i] = fmt.Sprintf("a.b.ns%d.example.com", k/10*10)
			case 3:
				qs[i] = fmt.Sprintf("miss%d.ns3.example.com", i)
			}
		}
		for kind := 0; kind < 4; kind++ {
			var sub []string
			for i := kind; i < len(qs); i += 4 {
				sub = append(sub, qs[i])
			}
			sub = sub[:1<<12]
			b.Run(fmt.Sprint("kind", kind, "new", n), func(b *testing.B) {
				cpuLoop(b, func(i int) { tab.Lookup(sub[i&(len(sub)-1)]) })
			})
			b.Run(fmt.Sprint("kind", kind, "old", n), func(b *testing.B) {
				cpuLoop(b, func(i int) { old.Lookup(sub[i&(len(sub)-1)]) })
			})
		}
		b.Run(fmt.Sprint("new", n), func(b *testing.B) {
			cpuLoop(b, func(i int) { tab.Lookup(qs[i&(len(qs)-1)]) })
		})
		b.Run(fmt.Sprint("old", n), func(b *testing.B) {
			cpuLoop(b, func(i int) { old.Lookup(qs[i&(len(qs)-1)]) })
		})
	}
}
