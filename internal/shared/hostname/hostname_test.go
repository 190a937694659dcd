package hostname

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestLookup(t *testing.T) {
	patterns := []string{
		"foo.example.com",
		"*.example.com",
		"*.b.example.com",
		"*.c.b.example.com",
		"Upper.Example.ORG.",
		"*.Wild.Example.ORG",
		"my_svc@[x]^.example.com",
		"",
	}
	values := []string{"exact", "wild1", "wild2", "wild3", "upper", "wildorg", "odd", "fallback"}
	tab := NewTable(patterns, values)
	if got := tab.Len(); got != len(patterns) {
		t.Fatalf("Len = %d, want %d", got, len(patterns))
	}
	tests := []struct{ name, want string }{
		{"foo.example.com", "exact"},
		{"FOO.Example.Com", "exact"},
		{"foo.example.com.", "exact"},
		{"bar.example.com", "wild1"},       // depth 1
		{"x.bar.example.com", "wild1"},     // depth 2
		{"x.y.bar.example.com", "wild1"},   // depth 3
		{"x.foo.example.com", "wild1"},     // below an exact name: the exact one does not cover it
		{"x.b.example.com", "wild2"},       // longer suffix wins
		{"x.B.example.com", "wild2"},       // capitals in the longer suffix
		{"X.b.example.com", "wild2"},       // capitals in front of the suffix
		{"X.foo.example.com", "wild1"},     // capitals in front of the suffix
		{"x.y.b.example.com", "wild2"},     // depth 2 under the longer suffix
		{"b.example.com", "wild1"},         // *.b.example.com does not match b.example.com
		{"x.c.b.example.com", "wild3"},     // longest of three
		{"c.b.example.com", "wild2"},       // not its own wildcard
		{"example.com", "fallback"},        // *.example.com does not match example.com
		{"upper.example.org", "upper"},     // pattern was normalized
		{"a.WILD.example.org.", "wildorg"}, // case and trailing dot on a wildcard hit
		{"wild.example.org", "fallback"},
		{"", "fallback"},
		{".", "fallback"},
		{"other.net", "fallback"},
		{"com", "fallback"},
		// Bytes from 0x40 to 0x5f that are not capitals, and bytes over
		// 0x7f, make a name look as if it may have capitals.
		{"my_svc@[x]^.example.com", "odd"},
		{"MY_svc@[X]^.example.com", "odd"},
		{"my_svc@[x]^.b.example.com", "wild2"},
		{"a_b.example.com", "wild1"},
		{"\xc3\xa9t\xc3\xa9.example.com", "wild1"},
		{"\xc3\x89T\xc3\x89.example.com", "wild1"},
	}
	for _, tt := range tests {
		got, ok := tab.Lookup(tt.name)
		if !ok || got != tt.want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", tt.name, got, ok, tt.want)
		}
	}
}

// TestDomainFilter covers the names the domain filter turns away before any
// probe, and the tables it must stay off for.
func TestDomainFilter(t *testing.T) {
	patterns := []string{"svc-1.ns-1.example.com", "*.ns-2.example.com", "a.io", "*.Big.Example.NET"}
	tab := NewTable(patterns, []string{"svc", "wild", "short", "net"})
	if tab.domains == nil {
		t.Fatal("filter off; every wildcard suffix is 8 bytes or longer")
	}
	for _, tt := range []struct{ name, want string }{
		{"svc-1.ns-1.example.com", "svc"},
		{"SVC-1.NS-1.EXAMPLE.COM", "svc"}, // capitals in the bytes the filter hashes
		{"svc-1.ns-1.example.com.", "svc"},
		{"x.ns-2.exAMPLE.cOm", "wild"},
		{"a.b.BIG.example.net.", "net"},
		{"a.io", "short"}, // shorter than the filter's 8 bytes
		{"A.IO", "short"},
		{"svc-1.ns-1.example.org", ""},
		{"svc-1.ns-1.example.co", ""},
		{"x.ns-2.example.comx", ""},
		{"10.11.12.13", ""},
		{"b.io", ""},
	} {
		got, ok := tab.Lookup(tt.name)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", tt.name, got, ok, tt.want)
		}
	}

	// A name the filter turns away still gets the fallback.
	withFallback := NewTable(append(patterns, ""), []string{"svc", "wild", "short", "net", "fallback"})
	if got, ok := withFallback.Lookup("svc-1.ns-1.example.org"); !ok || got != "fallback" {
		t.Errorf("with fallback: Lookup(svc-1.ns-1.example.org) = %q, %v; want fallback", got, ok)
	}

	// A wildcard suffix under 8 bytes matches names of any ending: no
	// filter. At 8 bytes the filter covers it.
	for _, tt := range []struct {
		wildcard, name string
		filtered       bool
	}{
		{"*.a.io", "svc.b.a.io", false},
		{"*.abc.def", "svc.x.abc.def", false}, // 7 bytes
		{"*.abcd.efg", "svc.x.abcd.efg", true},
	} {
		tab := NewTable(append(patterns, tt.wildcard), []string{"svc", "wild", "short", "net", "new"})
		if (tab.domains != nil) != tt.filtered {
			t.Errorf("with %s: filter on = %v, want %v", tt.wildcard, tab.domains != nil, tt.filtered)
		}
		if got, ok := tab.Lookup(tt.name); !ok || got != "new" {
			t.Errorf("with %s: Lookup(%q) = %q, %v; want new", tt.wildcard, tt.name, got, ok)
		}
	}

	// Keys longer than the hash indexes hold are in the filter too.
	long := strings.Repeat("x", 300) + ".example.com"
	longTab := NewTable(append(patterns, long), []string{"svc", "wild", "short", "net", "long"})
	if longTab.domains == nil {
		t.Fatal("filter off with a long key")
	}
	for _, name := range []string{long, strings.ToUpper(long) + "."} {
		if got, ok := longTab.Lookup(name); !ok || got != "long" {
			t.Errorf("Lookup(%d-byte name) = %q, %v; want long", len(name), got, ok)
		}
	}
}

// TestLongMixedCaseTrailingDots: past 256 bytes a mixed-case name is
// lowercased on the heap; only one trailing dot is ignored there too.
func TestLongMixedCaseTrailingDots(t *testing.T) {
	key := strings.Repeat("a", 300)
	// The short wildcard turns the domain filter off, which would turn
	// the names with two dots away before the folded lookup.
	patterns := []string{key, "*.io"}
	tab := NewTable(patterns, []int{1, 2})
	for name, want := range map[string]bool{
		strings.Repeat("A", 300):        true,
		strings.Repeat("A", 300) + ".":  true,
		strings.Repeat("A", 300) + "..": false,
		key + "..":                      false,
	} {
		if _, ok := tab.Lookup(name); ok != want {
			t.Errorf("Lookup(%q...%q) = %v, want %v", name[:3], name[len(name)-3:], ok, want)
		}
		if _, ref := refLookup(patterns, name); ref != want {
			t.Errorf("reference for %q...%q = %v, want %v", name[:3], name[len(name)-3:], ref, want)
		}
	}
}

func TestLookupWithoutFallback(t *testing.T) {
	tab := NewTable([]string{"a.example.com", "*.example.net"}, []int{1, 2})
	for _, name := range []string{"", "example.net", "b.example.com", "a.example.com.x", "xa.example.com"} {
		if v, ok := tab.Lookup(name); ok {
			t.Errorf("Lookup(%q) = %d, want no match", name, v)
		}
	}
	if v, ok := tab.Lookup("a.b.example.net"); !ok || v != 2 {
		t.Errorf("Lookup(a.b.example.net) = %d, %v; want 2", v, ok)
	}
	var nilTable *Table[int]
	if _, ok := nilTable.Lookup("a.example.com"); ok || nilTable.Len() != 0 {
		t.Error("nil table matched")
	}
}

func TestFirstPatternWins(t *testing.T) {
	tab := NewTable(
		[]string{"a.example.com", "A.EXAMPLE.COM.", "*.example.com", "*.Example.com", "", "*"},
		[]int{1, 2, 3, 4, 5, 6},
	)
	if tab.Len() != 3 {
		t.Errorf("Len = %d, want 3 distinct patterns", tab.Len())
	}
	for name, want := range map[string]int{"a.example.com": 1, "b.example.com": 3, "example.org": 5} {
		if v, _ := tab.Lookup(name); v != want {
			t.Errorf("Lookup(%q) = %d, want %d", name, v, want)
		}
	}
}

func TestLongNames(t *testing.T) {
	long := strings.Repeat("a", 300) + ".example.com"
	tab := NewTable([]string{long, "*.example.com"}, []int{1, 2})
	if v, _ := tab.Lookup(strings.ToUpper(long)); v != 1 {
		t.Errorf("exact long name = %d, want 1", v)
	}
	if v, _ := tab.Lookup("b" + long); v != 2 {
		t.Errorf("wildcard long name = %d, want 2", v)
	}
}

// TestLengths checks names and keys of every length from 1 to 80 bytes,
// across the lengths where Lookup changes how it reads them (8, 16, 32, 64),
// against the linear-scan reference.
func TestLengths(t *testing.T) {
	label := func(n int, c byte) string { return strings.Repeat(string(c), n) }
	for n := 1; n <= 80; n++ {
		// An exact name of n bytes, a wildcard whose suffix has n bytes,
		// and a shorter wildcard under both.
		exact := label(n, 'e')
		suffix := label(max(n-3, 1), 's') + ".zz"
		if n < 4 {
			suffix = label(n, 's')
		}
		patterns := []string{exact, "*." + suffix, "*.zz"}
		names := []string{
			exact, strings.ToUpper(exact), exact + ".",
			label(n-1, 'e') + "f", "f" + label(n-1, 'e'), // one byte off at either end
			"a." + suffix, "A." + strings.ToUpper(suffix), "a.b." + suffix,
			"a." + suffix[1:], "." + suffix, suffix,
			"a.zz", "a.Zz",
		}
		tab := NewTable(patterns, []int{0, 1, 2})
		for _, name := range names {
			got, ok := tab.Lookup(name)
			want, wantOK := refLookup(patterns, name)
			if ok != wantOK || ok && got != want {
				t.Errorf("n=%d: Lookup(%q) = %d, %v; reference %d, %v", n, name, got, ok, want, wantOK)
			}
		}
	}
}

// TestRepeatedBytes: names of one repeated byte read as the same words
// whatever their length, so only the stored length tells them apart when
// their tags collide. Every table has new random seeds; 200 of them make a
// collision inside a probe run near certain.
func TestRepeatedBytes(t *testing.T) {
	var patterns []string
	for n := 8; n <= 70; n += 2 { // short (8-31), wide (32-63) and other keys
		patterns = append(patterns, strings.Repeat("a", n), "*."+strings.Repeat("b", n))
	}
	values := make([]int, len(patterns))
	for i := range values {
		values[i] = i
	}
	for range 200 {
		tab := NewTable(patterns, values)
		for n := 1; n <= 72; n++ {
			for _, name := range []string{strings.Repeat("a", n), "x." + strings.Repeat("b", n)} {
				got, ok := tab.Lookup(name)
				want, wantOK := refLookup(patterns, name)
				if ok != wantOK || ok && got != want {
					t.Fatalf("Lookup(%q) = %d, %v; reference %d, %v", name, got, ok, want, wantOK)
				}
			}
		}
	}
}

// TestEveryByteCompared builds tables of keys that differ in two bytes only,
// at every position of every length up to 70, and looks up keys that are
// not there: those land on the keys' tags now and then, and must then fail
// the record compare. It catches a byte that no compared word covers.
func TestEveryByteCompared(t *testing.T) {
	const present = 64
	for n := 8; n <= 70; n++ {
		for p := 0; p+2 <= n; p++ {
			key := func(i int) string {
				b := []byte(strings.Repeat("a", n))
				b[p], b[p+1] = byte('a'+i/26), byte('a'+i%26)
				return string(b)
			}
			patterns := make([]string, present)
			values := make([]int, present)
			for i := range patterns {
				patterns[i], values[i] = key(i), i
			}
			tab := NewTable(patterns, values)
			for i := range 26 * 10 {
				got, ok := tab.Lookup(key(i))
				if want := i < present; ok != want || ok && got != i {
					t.Fatalf("n=%d, bytes %d-%d: Lookup(%q) = %d, %v; want %d, %v", n, p, p+1, key(i), got, ok, i, want)
				}
			}
		}
	}
}

// TestRandomTables compares Lookup with the linear-scan reference on tables
// of 1,500 random patterns over a small alphabet, so that names share
// suffixes, wildcards nest, probe runs grow long and tags collide, and on
// names built from the patterns' own suffixes.
//
// Seeds 4 to 7 end every pattern in one of a few domains of 8 bytes or more,
// so that the domain filter is on, and ask for names in other domains too.
func TestRandomTables(t *testing.T) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 7))
		word := func() string {
			const alphabet = "abAB0-"
			b := make([]byte, 1+r.IntN(12))
			for i := range b {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
			return string(b)
		}
		name := func() string {
			labels := make([]string, 1+r.IntN(6))
			for i := range labels {
				labels[i] = word()
			}
			return strings.Join(labels, ".")
		}
		filtered := seed >= 4
		domains := []string{"example.com", "Example.NET", "b-a.example"}
		inDomain := func(n string) string {
			if filtered {
				return n + "." + domains[r.IntN(len(domains))]
			}
			return n
		}
		patterns := make([]string, 1000)
		for i := range patterns {
			switch p := inDomain(name()); r.IntN(4) {
			case 0:
				patterns[i] = "*." + p
			case 1:
				patterns[i] = strings.Repeat("x", r.IntN(70)) + p // long keys too
			default:
				patterns[i] = p
			}
		}
		if seed%2 == 0 {
			patterns = append(patterns, "")
		}
		values := make([]int, len(patterns))
		for i := range values {
			values[i] = i
		}
		tab := NewTable(patterns, values)
		if filtered != (tab.domains != nil) {
			t.Fatalf("seed %d: domain filter on = %v", seed, tab.domains != nil)
		}
		for range 2000 {
			var q string
			p := strings.TrimPrefix(patterns[r.IntN(len(patterns))], "*.")
			switch r.IntN(5) {
			case 0:
				q = p
			case 1:
				q = word() + "." + p
			case 2:
				q = strings.ToUpper(word()) + "." + p[r.IntN(len(p)+1):]
			case 3:
				q = inDomain(name())
			default:
				q = name() + "." + word() // mostly in no domain of the table
			}
			got, ok := tab.Lookup(q)
			want, wantOK := refLookup(patterns, q)
			if ok != wantOK || ok && got != want {
				t.Fatalf("seed %d: Lookup(%q) = %d, %v; reference %d, %v", seed, q, got, ok, want, wantOK)
			}
		}
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	tab := NewTable([]string{"a.example.com", "*.example.com", "*.x.y.example.net", "service.namespace.apps.example.org"}, []int{1, 2, 3, 4})
	for _, name := range []string{"A.Example.Com.", "q.r.s.example.com", "Q.r.s.example.com", "miss.example.org", "MISS.example.org", "q.x.y.example.net",
		"service.namespace.apps.example.org", "Service.Namespace.apps.example.org", strings.Repeat("Ab.", 60) + "example.com"} {
		if n := testing.AllocsPerRun(100, func() { tab.Lookup(name) }); n != 0 {
			t.Errorf("Lookup(%q) allocates %v times", name, n)
		}
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"", "anything", true},
		{"*", "", true},
		{"a.example.com", "A.example.com.", true},
		{"a.example.com", "b.example.com", false},
		{"*.example.com", "a.example.com", true},
		{"*.example.com", "a.b.c.example.com", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", ".example.com", false},
		{"*.example.com", "aexample.com", false},
		{"*.EXAMPLE.com.", "x.example.COM", true},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.name); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.name, got, tt.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"":                 "",
		".":                "",
		"a.b.":             "a.b",
		"a.b..":            "a.b.",
		"Foo.EXAMPLE.com.": "foo.example.com",
		"ÄB":               "Äb", // only ASCII letters fold
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// refLookup is the reference for the fuzz test: a linear scan that ranks every
// matching pattern and keeps the best, the first one on ties.
func refLookup(patterns []string, name string) (int, bool) {
	best, bestRank := -1, -1
	n := refNormalize(name)
	for i, p := range patterns {
		p = refNormalize(p)
		rank := -1
		switch {
		case p == "" || p == "*":
			rank = 0
		case strings.HasPrefix(p, "*.") && len(p) > 2:
			suffix := p[1:]
			if len(n) > len(suffix) && strings.HasSuffix(n, suffix) {
				rank = 1 + len(suffix) // longer suffix = more specific
			}
		case p == n:
			rank = math.MaxInt // exact beats every wildcard
		}
		if rank > bestRank {
			best, bestRank = i, rank
		}
	}
	return best, best >= 0
}

func refNormalize(s string) string {
	s = strings.TrimSuffix(s, ".")
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'A' && c <= 'Z' {
			c += 32
		}
		b.WriteByte(c)
	}
	return b.String()
}

// FuzzLookup compares Table and Match with the linear-scan reference.
// The first argument is a newline-separated list of patterns.
func FuzzLookup(f *testing.F) {
	f.Add("a.example.com\n*.example.com\n*.b.example.com\n", "x.b.example.com")
	f.Add("*.example.com\n\nfoo.example.com", "FOO.example.com.")
	f.Add("*.com\n*.a.com\n*.b.a.com", "c.b.a.com")
	f.Add("*.example.com", "example.com")
	f.Add("*..\n*.\n..", "a...")
	f.Add("*.example.com\nEXAMPLE.com", ".example.com")
	f.Add("svc.example.com\n*.ns.example.com", "a.ns.EXAMPLE.COM")
	f.Add("svc.example.com\n*.ns.example.com", "a.ns.example.net")
	f.Fuzz(func(t *testing.T, list, name string) {
		patterns := strings.Split(list, "\n")
		idx := make([]int, len(patterns))
		for i := range idx {
			idx[i] = i
		}
		tab := NewTable(patterns, idx)
		got, gotOK := tab.Lookup(name)
		want, wantOK := refLookup(patterns, name)
		if gotOK != wantOK || (wantOK && got != want) {
			t.Fatalf("Lookup(%q) over %q = %d,%v; reference %d,%v", name, patterns, got, gotOK, want, wantOK)
		}
		for _, p := range patterns {
			_, refOK := refLookup([]string{p}, name)
			if Match(p, name) != refOK {
				t.Fatalf("Match(%q, %q) = %v, reference %v", p, name, !refOK, refOK)
			}
		}
	})
}

// BenchmarkLookup is a quick check of the three lookup paths at 1,000 and
// 100,000 patterns (one wildcard per 20 names); bench/ has the full
// comparison.
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		patterns := make([]string, n)
		for i := range patterns {
			if i%20 == 0 {
				patterns[i] = fmt.Sprintf("*.ns-%d.example.com", i/20)
			} else {
				patterns[i] = fmt.Sprintf("svc-%d.ns-%d.example.com", i, i/20)
			}
		}
		tab := NewTable(patterns, make([]int, n))
		kinds := map[string]func(i int) string{
			"exact":    func(i int) string { return patterns[i|1] },
			"wildcard": func(i int) string { return fmt.Sprintf("a.b.ns-%d.example.com", i/20) },
			"miss":     func(i int) string { return fmt.Sprintf("svc-%d.nsx-%d.example.com", i, i/20) },
		}
		for _, kind := range []string{"exact", "wildcard", "miss"} {
			qs := make([]string, 1<<14)
			for j := range qs {
				qs[j] = kinds[kind]((j * 7919) % (n - 1))
			}
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					if _, ok := tab.Lookup(qs[i&(len(qs)-1)]); ok != (kind != "miss") {
						b.Fatal("wrong result")
					}
				}
			})
		}
	}
}

// BenchmarkLookupWide is the exact-hit case of BenchmarkLookup for names of
// 32 to 63 bytes, like "service-7.namespace-0.knative.example.com": Knative
// names under a cluster domain are often that long.
func BenchmarkLookupWide(b *testing.B) {
	const form = "service-%d.namespace-%d.knative.example.com"
	for _, n := range []int{1000, 100000} {
		patterns := make([]string, n)
		for i := range patterns {
			patterns[i] = fmt.Sprintf(form, i, i/20)
		}
		tab := NewTable(patterns, make([]int, n))
		qs := make([]string, 1<<14)
		for j := range qs {
			qs[j] = patterns[(j*7919)%n]
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, ok := tab.Lookup(qs[i&(len(qs)-1)]); !ok {
					b.Fatal("wrong result")
				}
			}
		})
	}
}

func TestWithoutPort(t *testing.T) {
	for in, want := range map[string]string{
		"a.example.com":      "a.example.com",
		"a.example.com:8080": "a.example.com",
		"a.example.com:":     "a.example.com",
		"[::1]:8080":         "[::1]",
		"[::1]":              "[::1]",
		"[::1":               "[::1",
		"::1":                "::1",
		"2001:db8::1":        "2001:db8::1",
		"192.0.2.1:80":       "192.0.2.1",
		"":                   "",
	} {
		if got := WithoutPort(in); got != want {
			t.Errorf("WithoutPort(%q) = %q, want %q", in, got, want)
		}
	}
}
