package config

import (
	"slices"
	"strings"
	"testing"

	"portico.dev/portico/internal/shared/hostname"
)

// patternPool is what the hostname lookup tests pick table patterns from:
// exact names, wildcards at several depths, and the catch-all.
var patternPool = []string{
	"a.b.example.com", "b.example.com", "example.com", "x.example.net",
	"*.b.example.com", "*.example.com", "*.com", "*.example.net", "*.a.b.example.com",
	"",
}

// lookupNames are the request hosts the lookup tests try, in several
// spellings: mixed case, trailing dot, deeper and shallower than the
// patterns, and names no pattern covers.
var lookupNames = []string{
	"a.b.example.com", "A.B.Example.COM", "a.b.example.com.", "c.a.b.example.com",
	"b.example.com", "c.b.example.com", "x.y.b.example.com", "example.com", "EXAMPLE.com.",
	"other.example.com", "x.example.net", "y.example.net", "example.net", "com", "foo.com",
	".example.com", "", "localhost", "b.example.co", "xb.example.com",
}

// refLevels is the reference answer for a lookup of name in a table of
// patterns: the most specific pattern matching it (as hostname.Table
// picks it), followed by every pattern of the table that covers that one,
// most specific first. It builds the covering patterns as strings, the
// plain way.
func refLevels(patterns []string, name string) []string {
	won, ok := hostname.NewTable(patterns, patterns).Lookup(name)
	if !ok {
		return nil
	}
	out := []string{won}
	if won == "" {
		return out
	}
	rest := strings.TrimPrefix(won, "*.")
	for {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			break
		}
		rest = rest[i+1:]
		if slices.Contains(patterns, "*."+rest) {
			out = append(out, "*."+rest)
		}
	}
	if slices.Contains(patterns, "") {
		out = append(out, "")
	}
	return out
}

// tableOf builds a table with one rule per pattern, named after it.
func tableOf(patterns []string) *Table {
	m := &Match{PathType: PathMatchPathPrefix, Path: "/"}
	var cs []HostCandidate
	for i, p := range patterns {
		cs = append(cs, HostCandidate{Host: p, Candidate: Candidate{Rule: &Rule{Name: p}, Match: m, RouteOrder: i}})
	}
	slices.SortFunc(cs, CompareHostCandidates)
	return NewTableBuilder(1, len(cs), len(cs)).Build(cs)
}

// gotLevels names the levels a lookup of name finds in t.
func gotLevels(t *Table, name string) []string {
	hr := t.lookup(name)
	if hr == nil {
		return nil
	}
	var out []string
	for _, ix := range hr.levels {
		out = append(out, ix.prefixes[0].entries[0].rule.Name)
	}
	return out
}

// Tables with few patterns scan them, larger ones use a hostname.Table;
// both must find the pattern hostname.Table finds and the same levels.
func TestHostLookup(t *testing.T) {
	// Every subset of the pool: sizes on both sides of fewHosts.
	for mask := 1; mask < 1<<len(patternPool); mask++ {
		var patterns []string
		for i, p := range patternPool {
			if mask&(1<<i) != 0 {
				patterns = append(patterns, p)
			}
		}
		tb := tableOf(patterns)
		if few := len(patterns) <= fewHosts; few != (tb.hosts == nil) {
			t.Fatalf("%q: scanned %v, want %v", patterns, tb.hosts == nil, few)
		}
		for _, name := range lookupNames {
			if got, want := gotLevels(tb, name), refLevels(patterns, name); !slices.Equal(got, want) {
				t.Fatalf("patterns %q, host %q: levels %q, want %q", patterns, name, got, want)
			}
		}
	}
}

func FuzzHostLookup(f *testing.F) {
	f.Add(uint16(0b1000010001), "c.a.b.example.com")
	f.Add(uint16(0b0000110000), "X.B.EXAMPLE.COM.")
	f.Add(uint16(0b1111111111), "b.example.com")
	f.Fuzz(func(t *testing.T, mask uint16, name string) {
		var patterns []string
		for i, p := range patternPool {
			if mask&(1<<i) != 0 {
				patterns = append(patterns, p)
			}
		}
		if len(patterns) == 0 {
			return
		}
		if got, want := gotLevels(tableOf(patterns), name), refLevels(patterns, name); !slices.Equal(got, want) {
			t.Fatalf("patterns %q, host %q: levels %q, want %q", patterns, name, got, want)
		}
	})
}

// More than manyPrefixes prefixes on one hostname are looked up by path
// segment rather than scanned; the match fuzz test holds both ways to the
// same answers.
func TestManyPrefixesIndexBySegment(t *testing.T) {
	values := []string{"/", "/a", "/a/", "/a/b", "/a/b/c", "/b", "/b/c/", "/c", "/c/d/e/f", "/ab", "/x/y"}
	ix := indexOf(t, values)
	if ix.prefixAt == nil {
		t.Fatal("expected the per-segment index")
	}
	e := ix.find(request("GET", "h", "/"), "/a/b/c/d")
	if e == nil || e.rule.Index != 4 {
		t.Fatalf("/a/b/c/d: got %+v, want the rule of /a/b/c", e)
	}
}
