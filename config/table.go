package config

import (
	"cmp"
	"net/http"
	"slices"
	"strings"

	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/shared/slab"
)

// Table holds the routes attached to one listener, compiled for lookup: a
// hostname lookup, then a scan of a few candidates picked by path.
type Table struct {
	// hosts is the hostname lookup of a table with many patterns.
	hosts *hostname.Table[*hostRoutes]
	// few holds the patterns of a table with at most fewHosts of them, most
	// specific first, scanned in order. Most listeners carry the routes of
	// one hostname, and a scan of one or two patterns costs less to build
	// and to look up than a hash table.
	few []hostRoutes
	// over, in an ordered table changed by WithOrdered, holds the exact
	// names changed since hosts was built; exact says that an ordered
	// table holds exact names only (ordered.go).
	over  *orderedOverlay
	exact bool
}

// fewHosts is the number of hostname patterns up to which a table scans
// its patterns instead of building a hostname.Table.
const fewHosts = 4

// hostRoutes is what a request for one hostname pattern can match. Hostname
// specificity comes before every other precedence rule, so the rules of
// each hostname pattern that covers this one are kept as separate levels,
// most specific first, and a level is only consulted when the ones before
// it matched nothing.
type hostRoutes struct {
	pattern string // normalized; "" is the catch-all
	levels  []*pathIndex
}

// pathIndex holds the matches of one hostname pattern. Every slice of
// entries is in precedence order, so the first entry whose remaining
// conditions hold is the answer for its path bucket, and buckets are
// visited from the most to the least specific path.
type pathIndex struct {
	exact map[string][]entry
	// prefixes are grouped by normalized prefix, longest first.
	prefixes []prefixGroup
	// prefixAt indexes prefixes by value when there are many of them, so a
	// lookup costs one map probe per path segment instead of a scan.
	prefixAt map[string]int
	regex    []entry
}

type prefixGroup struct {
	prefix  string
	entries []entry
}

type entry struct {
	rule  *Rule
	match *Match
}

// manyPrefixes is the number of distinct prefixes on one hostname above
// which the per-segment map probe beats a linear scan.
const manyPrefixes = 8

// Match finds the rule for a request among the routes attached to one
// listener, with Gateway API precedence: most specific hostname, then Exact
// path, longest PathPrefix, RegularExpression (longest pattern first), then
// method, most header matches, most query matches, oldest route, route
// namespace/name, rule order and match order. It returns nil when no rule
// matches (the data plane answers 404). The path is r's, normalised with the
// default options; a path that is rejected matches nothing.
func (t *Table) Match(r *http.Request) (*Rule, *Match) {
	path, ok := requestPath(r)
	if !ok {
		return nil, nil
	}
	return t.MatchPath(r, path)
}

// MatchPath is Match for a request whose path the caller has normalised
// (NormalizePath) to path. It does not allocate, except to unescape escaped
// query parameters or to join repeated headers for a regular expression.
func (t *Table) MatchPath(r *http.Request, path string) (*Rule, *Match) {
	if t == nil {
		return nil, nil
	}
	hr := t.lookup(hostname.WithoutPort(r.Host))
	if hr == nil {
		return nil, nil
	}
	for _, ix := range hr.levels {
		if e := ix.find(r, path); e != nil {
			return e.rule, e.match
		}
	}
	return nil, nil
}

// lookup returns the routes of the most specific pattern matching host,
// with hostname.Table's rules: ASCII case folded, one trailing dot
// ignored, an exact name before any wildcard, a longer wildcard suffix
// before a shorter one, the catch-all last.
func (t *Table) lookup(host string) *hostRoutes {
	if t.over != nil {
		if hr, ok := t.over.get(host); ok {
			return hr
		}
	}
	if t.hosts != nil {
		hr, _ := t.hosts.Lookup(host)
		return hr
	}
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	// t.few is ordered so that the first pattern that matches is the most
	// specific one.
	for i := range t.few {
		if patternMatches(t.few[i].pattern, host) {
			return &t.few[i]
		}
	}
	return nil
}

// patternMatches reports whether the normalized pattern matches name, whose
// ASCII letters may be of either case.
func patternMatches(pattern, name string) bool {
	switch {
	case pattern == "" || pattern == "*":
		return true
	case hostname.IsWildcard(pattern):
		suffix := pattern[1:] // ".example.com"
		return len(name) > len(suffix) && equalFoldASCII(name[len(name)-len(suffix):], suffix)
	default:
		return equalFoldASCII(name, pattern)
	}
}

// equalFoldASCII reports whether s equals the lowercase lower with ASCII
// letters of s folded; other bytes compare as they are, as in
// hostname.Table.
func equalFoldASCII(s, lower string) bool {
	if s == lower {
		return true // the usual case: hosts are sent in lowercase
	}
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

func (ix *pathIndex) find(r *http.Request, path string) *entry {
	if es := ix.exact[path]; len(es) > 0 {
		if e := firstMatching(es, r); e != nil {
			return e
		}
	}
	if ix.prefixAt != nil {
		// The prefixes that cover a path are the path itself and the path
		// cut before each '/', down to the empty (root) prefix.
		end := len(path)
		for {
			if i, ok := ix.prefixAt[path[:end]]; ok {
				if e := firstMatching(ix.prefixes[i].entries, r); e != nil {
					return e
				}
			}
			if end == 0 {
				break
			}
			end = max(strings.LastIndexByte(path[:end], '/'), 0)
		}
	} else {
		for i := range ix.prefixes {
			g := &ix.prefixes[i]
			if pathHasPrefix(path, g.prefix) {
				if e := firstMatching(g.entries, r); e != nil {
					return e
				}
			}
		}
	}
	for i := range ix.regex {
		e := &ix.regex[i]
		if e.match.re.MatchString(path) && e.match.matchesRest(r) {
			return e
		}
	}
	return nil
}

func firstMatching(es []entry, r *http.Request) *entry {
	for i := range es {
		if es[i].match.matchesRest(r) {
			return &es[i]
		}
	}
	return nil
}

// Candidate is a match waiting for its place in a table.
type Candidate struct {
	Rule       *Rule
	Match      *Match
	RouteOrder int // position of the route after sorting by age and name
	MatchIndex int
}

// HostCandidate is a candidate under the effective hostname it serves.
type HostCandidate struct {
	Host string
	Candidate
}

// CompareHostCandidates orders the candidates of one listener by hostname,
// then by precedence, so each hostname's matches form one run in
// precedence order.
func CompareHostCandidates(a, b HostCandidate) int {
	if c := strings.Compare(a.Host, b.Host); c != 0 {
		return c
	}
	return compareCandidates(a.Candidate, b.Candidate)
}

// TableBuilder builds the tables of one compilation. The many small pieces of
// the tables (entries, path indexes, levels) are cut from a few large
// allocations instead of being allocated one by one: thousands of
// listeners with one route each would otherwise cost several allocations
// per listener. Every piece handed out has its capacity capped at its
// length, so nothing appended to it can overwrite a neighbour.
type TableBuilder struct {
	entries slab.Slab[entry]
	groups  slab.Slab[prefixGroup]
	indexes slab.Slab[pathIndex]
	hosts   slab.Slab[hostRoutes]
	levels  slab.Slab[*pathIndex]
	tables  slab.Slab[Table]
	own     []*pathIndex // scratch for build
}

// NewTableBuilder sizes the slabs for tables that hold candidates
// candidates under hosts (listener, hostname) groups in all.
func NewTableBuilder(tables, hosts, candidates int) *TableBuilder {
	return &TableBuilder{
		entries: slab.New[entry](candidates),
		groups:  slab.New[prefixGroup](hosts),
		indexes: slab.New[pathIndex](hosts),
		hosts:   slab.New[hostRoutes](hosts),
		levels:  slab.New[*pathIndex](2 * hosts),
		tables:  slab.New[Table](tables),
	}
}

// Build turns the candidates of one listener, ordered by
// CompareHostCandidates, into its Table.
func (b *TableBuilder) Build(cs []HostCandidate) *Table {
	n := 0 // distinct hostnames
	for i := range cs {
		if i == 0 || cs[i].Host != cs[i-1].Host {
			n++
		}
	}
	hosts := b.hosts.Take(n)
	own := b.own[:0] // own[k] is the index of hosts[k]
	for i := 0; i < len(cs); {
		j := i + 1
		for j < len(cs) && cs[j].Host == cs[i].Host {
			j++
		}
		hosts[len(own)].pattern = cs[i].Host
		own = append(own, b.index(cs[i:j]))
		i = j
	}
	b.own = own
	t := b.tables.One()
	if n <= fewHosts {
		b.levelsFew(hosts, own)
		slices.SortFunc(hosts, compareSpecificity)
		t.few = hosts
		return t
	}
	b.levelsMany(hosts, own)
	patterns := make([]string, n)
	values := make([]*hostRoutes, n)
	for i := range hosts {
		patterns[i], values[i] = hosts[i].pattern, &hosts[i]
	}
	t.hosts = hostname.NewTable(patterns, values)
	return t
}

// levelsFew fills in the levels of each pattern from the patterns that
// cover it, comparing every pair: there are at most fewHosts.
func (b *TableBuilder) levelsFew(hosts []hostRoutes, own []*pathIndex) {
	find := func(wild bool, name string) *pathIndex {
		for i := range hosts {
			p := hosts[i].pattern
			if wild && hostname.IsWildcard(p) && p[2:] == name || !wild && p == name {
				return own[i]
			}
		}
		return nil
	}
	for i := range hosts {
		hosts[i].levels = b.levelsOf(own[i], hosts[i].pattern, find)
	}
}

// levelsMany is levelsFew for many patterns, with the covering patterns
// looked up in a map.
func (b *TableBuilder) levelsMany(hosts []hostRoutes, own []*pathIndex) {
	wild := map[string]*pathIndex{} // "*.example.com" under "example.com"
	var all *pathIndex
	for i := range hosts {
		switch p := hosts[i].pattern; {
		case p == "":
			all = own[i]
		case hostname.IsWildcard(p):
			wild[p[2:]] = own[i]
		}
	}
	find := func(isWild bool, name string) *pathIndex {
		if isWild {
			return wild[name]
		}
		if name == "" {
			return all
		}
		return nil
	}
	for i := range hosts {
		hosts[i].levels = b.levelsOf(own[i], hosts[i].pattern, find)
	}
}

// levelsOf returns the levels of pattern h: its own index, then the index
// of every present pattern that covers it, most specific first: for
// "a.b.c" those are "*.b.c", "*.c" and "", for "*.b.c" "*.c" and "". find
// looks up a wildcard by its suffix after "*." (wild) or another pattern
// by itself.
func (b *TableBuilder) levelsOf(own *pathIndex, h string, find func(wild bool, name string) *pathIndex) []*pathIndex {
	var buf [8]*pathIndex
	levels := append(buf[:0], own)
	if h != "" {
		rest := h
		if hostname.IsWildcard(h) {
			rest = h[2:]
		}
		for {
			i := strings.IndexByte(rest, '.')
			if i < 0 {
				break
			}
			rest = rest[i+1:]
			if ix := find(true, rest); ix != nil {
				levels = append(levels, ix)
			}
		}
		if ix := find(false, ""); ix != nil {
			levels = append(levels, ix)
		}
	}
	out := b.levels.Take(len(levels))
	copy(out, levels)
	return out
}

// compareSpecificity orders the patterns of a table for a scan: exact names,
// then wildcards with the longest suffix first, then the catch-all, so the
// first pattern that matches a name is its most specific one.
func compareSpecificity(a, b hostRoutes) int {
	if c := cmp.Compare(specificityClass(a.pattern), specificityClass(b.pattern)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(b.pattern), len(a.pattern)); c != 0 {
		return c
	}
	return strings.Compare(a.pattern, b.pattern)
}

func specificityClass(p string) int {
	switch {
	case p == "*":
		// hostname.Table treats "*" as the catch-all too; it goes first
		// of the two since "" covers it.
		return 2
	case p == "":
		return 3
	case hostname.IsWildcard(p):
		return 1
	}
	return 0
}

// buildIndex builds the path index of one hostname from its candidates in
// any order.
func buildIndex(cs []Candidate) *pathIndex {
	slices.SortFunc(cs, compareCandidates)
	hcs := make([]HostCandidate, len(cs))
	for i, c := range cs {
		hcs[i].Candidate = c
	}
	return NewTableBuilder(0, 1, len(cs)).index(hcs)
}

// index builds the path index of one hostname from its candidates in
// precedence order.
func (b *TableBuilder) index(cs []HostCandidate) *pathIndex {
	ix := b.indexes.One()
	es := b.entries.Take(len(cs))
	for i := range cs {
		es[i] = entry{rule: cs[i].Rule, match: cs[i].Match}
	}
	// Precedence order puts Exact matches first, grouped by path, then
	// prefixes grouped by normalized prefix, longest first, then regular
	// expressions: each group is a run of es.
	i := 0
	for i < len(es) && es[i].match.PathType == PathMatchExact {
		j := i + 1
		for j < len(es) && es[j].match.PathType == PathMatchExact && es[j].match.path == es[i].match.path {
			j++
		}
		if ix.exact == nil {
			ix.exact = map[string][]entry{}
		}
		ix.exact[es[i].match.path] = es[i:j:j]
		i = j
	}
	ngroups := 0
	for j := i; j < len(es) && es[j].match.PathType == PathMatchPathPrefix; j++ {
		if j == i || es[j].match.path != es[j-1].match.path {
			ngroups++
		}
	}
	if ngroups > 0 {
		ix.prefixes = b.groups.Take(ngroups)
		g := 0
		for i < len(es) && es[i].match.PathType == PathMatchPathPrefix {
			j := i + 1
			for j < len(es) && es[j].match.PathType == PathMatchPathPrefix && es[j].match.path == es[i].match.path {
				j++
			}
			ix.prefixes[g] = prefixGroup{prefix: es[i].match.path, entries: es[i:j:j]}
			g++
			i = j
		}
	}
	if i < len(es) {
		ix.regex = es[i:]
	}
	if len(ix.prefixes) > manyPrefixes {
		ix.prefixAt = make(map[string]int, len(ix.prefixes))
		for i, g := range ix.prefixes {
			ix.prefixAt[g.prefix] = i
		}
	}
	return ix
}

// compareCandidates orders the matches of one hostname by precedence.
// Prefixes are ordered by their normalized value first so that equal
// prefixes form one group; two different prefixes of the same length can
// never both cover a path, so this does not change which one wins.
func compareCandidates(a, b Candidate) int {
	am, bm := a.Match, b.Match
	if c := cmp.Compare(pathKindOrder(am.PathType), pathKindOrder(bm.PathType)); c != 0 {
		return c
	}
	switch am.PathType {
	case PathMatchPathPrefix:
		if c := cmp.Compare(len(bm.path), len(am.path)); c != 0 {
			return c
		}
		if c := strings.Compare(am.path, bm.path); c != 0 {
			return c
		}
		// "/foo/" and "/foo" cover the same paths; the spec counts
		// characters as written.
		if c := cmp.Compare(len(bm.Path), len(am.Path)); c != 0 {
			return c
		}
	case PathMatchExact:
		if c := strings.Compare(am.path, bm.path); c != 0 {
			return c
		}
	case PathMatchRegularExpression:
		if c := cmp.Compare(len(bm.Path), len(am.Path)); c != 0 {
			return c
		}
	}
	if c := cmp.Compare(boolOrder(am.Method != ""), boolOrder(bm.Method != "")); c != 0 {
		return c
	}
	if c := cmp.Compare(len(bm.Headers), len(am.Headers)); c != 0 {
		return c
	}
	if c := cmp.Compare(len(bm.QueryParams), len(am.QueryParams)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.RouteOrder, b.RouteOrder); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Rule.Index, b.Rule.Index); c != 0 {
		return c
	}
	return cmp.Compare(a.MatchIndex, b.MatchIndex)
}

func pathKindOrder(t PathMatchType) int {
	switch t {
	case PathMatchExact:
		return 0
	case PathMatchPathPrefix:
		return 1
	}
	return 2
}

func boolOrder(b bool) int {
	if b {
		return 0
	}
	return 1
}
