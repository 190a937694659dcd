package routing

import (
	"cmp"
	"net/http"
	"slices"
	"strings"

	"portico.dev/portico/hostname"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
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
	hr := t.lookup(hostOnly(r.Host))
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

// hostOnly strips the port from a Host header; the spec says to ignore it.
func hostOnly(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		return host[:i]
	}
	return host
}

// candidate is a match waiting for its place in a table.
type candidate struct {
	rule       *Rule
	match      *Match
	routeOrder int // position of the route after sorting by age and name
	matchIndex int
}

// hostCandidate is a candidate under the effective hostname it serves.
type hostCandidate struct {
	host string
	candidate
}

// compareHostCandidates orders the candidates of one listener by hostname,
// then by precedence, so each hostname's matches form one run in
// precedence order.
func compareHostCandidates(a, b hostCandidate) int {
	if c := strings.Compare(a.host, b.host); c != 0 {
		return c
	}
	return compareCandidates(a.candidate, b.candidate)
}

// tableBuilder builds the tables of one Compile. The many small pieces of
// the tables (entries, path indexes, levels) are cut from a few large
// allocations instead of being allocated one by one: thousands of
// listeners with one route each would otherwise cost several allocations
// per listener. Every piece handed out has its capacity capped at its
// length, so nothing appended to it can overwrite a neighbour.
type tableBuilder struct {
	entries slab[entry]
	groups  slab[prefixGroup]
	indexes slab[pathIndex]
	hosts   slab[hostRoutes]
	levels  slab[*pathIndex]
	tables  slab[Table]
	own     []*pathIndex // scratch for build
}

// newTableBuilder sizes the slabs for tables that hold candidates
// candidates under hosts (listener, hostname) groups in all.
func newTableBuilder(tables, hosts, candidates int) *tableBuilder {
	return &tableBuilder{
		entries: newSlab[entry](candidates),
		groups:  newSlab[prefixGroup](hosts),
		indexes: newSlab[pathIndex](hosts),
		hosts:   newSlab[hostRoutes](hosts),
		levels:  newSlab[*pathIndex](2 * hosts),
		tables:  newSlab[Table](tables),
	}
}

// slab hands out pieces of one allocation, and allocates another when it
// runs out. A piece's capacity is its length.
type slab[T any] []T

func newSlab[T any](n int) slab[T] { return make(slab[T], 0, n) }

func (s *slab[T]) take(n int) []T {
	if cap(*s)-len(*s) < n {
		*s = make([]T, 0, max(n, 64, cap(*s)/2))
	}
	l := len(*s)
	*s = (*s)[:l+n]
	return (*s)[l : l+n : l+n]
}

func (s *slab[T]) one() *T { return &s.take(1)[0] }

// build turns the candidates of one listener, ordered by
// compareHostCandidates, into its Table.
func (b *tableBuilder) build(cs []hostCandidate) *Table {
	n := 0 // distinct hostnames
	for i := range cs {
		if i == 0 || cs[i].host != cs[i-1].host {
			n++
		}
	}
	hosts := b.hosts.take(n)
	own := b.own[:0] // own[k] is the index of hosts[k]
	for i := 0; i < len(cs); {
		j := i + 1
		for j < len(cs) && cs[j].host == cs[i].host {
			j++
		}
		hosts[len(own)].pattern = cs[i].host
		own = append(own, b.index(cs[i:j]))
		i = j
	}
	b.own = own
	t := b.tables.one()
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
func (b *tableBuilder) levelsFew(hosts []hostRoutes, own []*pathIndex) {
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
func (b *tableBuilder) levelsMany(hosts []hostRoutes, own []*pathIndex) {
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
func (b *tableBuilder) levelsOf(own *pathIndex, h string, find func(wild bool, name string) *pathIndex) []*pathIndex {
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
	out := b.levels.take(len(levels))
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
func buildIndex(cs []candidate) *pathIndex {
	slices.SortFunc(cs, compareCandidates)
	hcs := make([]hostCandidate, len(cs))
	for i, c := range cs {
		hcs[i].candidate = c
	}
	return newTableBuilder(0, 1, len(cs)).index(hcs)
}

// index builds the path index of one hostname from its candidates in
// precedence order.
func (b *tableBuilder) index(cs []hostCandidate) *pathIndex {
	ix := b.indexes.one()
	es := b.entries.take(len(cs))
	for i := range cs {
		es[i] = entry{rule: cs[i].rule, match: cs[i].match}
	}
	// Precedence order puts Exact matches first, grouped by path, then
	// prefixes grouped by normalized prefix, longest first, then regular
	// expressions: each group is a run of es.
	i := 0
	for i < len(es) && es[i].match.PathType == gwv1.PathMatchExact {
		j := i + 1
		for j < len(es) && es[j].match.PathType == gwv1.PathMatchExact && es[j].match.path == es[i].match.path {
			j++
		}
		if ix.exact == nil {
			ix.exact = map[string][]entry{}
		}
		ix.exact[es[i].match.path] = es[i:j:j]
		i = j
	}
	ngroups := 0
	for j := i; j < len(es) && es[j].match.PathType == gwv1.PathMatchPathPrefix; j++ {
		if j == i || es[j].match.path != es[j-1].match.path {
			ngroups++
		}
	}
	if ngroups > 0 {
		ix.prefixes = b.groups.take(ngroups)
		g := 0
		for i < len(es) && es[i].match.PathType == gwv1.PathMatchPathPrefix {
			j := i + 1
			for j < len(es) && es[j].match.PathType == gwv1.PathMatchPathPrefix && es[j].match.path == es[i].match.path {
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
func compareCandidates(a, b candidate) int {
	am, bm := a.match, b.match
	if c := cmp.Compare(pathKindOrder(am.PathType), pathKindOrder(bm.PathType)); c != 0 {
		return c
	}
	switch am.PathType {
	case gwv1.PathMatchPathPrefix:
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
	case gwv1.PathMatchExact:
		if c := strings.Compare(am.path, bm.path); c != 0 {
			return c
		}
	case gwv1.PathMatchRegularExpression:
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
	if c := cmp.Compare(a.routeOrder, b.routeOrder); c != 0 {
		return c
	}
	if c := cmp.Compare(a.rule.Index, b.rule.Index); c != 0 {
		return c
	}
	return cmp.Compare(a.matchIndex, b.matchIndex)
}

func pathKindOrder(t gwv1.PathMatchType) int {
	switch t {
	case gwv1.PathMatchExact:
		return 0
	case gwv1.PathMatchPathPrefix:
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
