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
	hosts *hostname.Table[*hostRoutes]
}

// hostRoutes is what a request for one hostname pattern can match. Hostname
// specificity comes before every other precedence rule, so the rules of
// each hostname pattern that covers this one are kept as separate levels,
// most specific first, and a level is only consulted when the ones before
// it matched nothing.
type hostRoutes struct {
	levels []*pathIndex
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
// matches (the data plane answers 404). It does not allocate, except to
// unescape escaped query parameters or to join repeated headers for a
// regular expression.
func (t *Table) Match(r *http.Request) (*Rule, *Match) {
	if t == nil {
		return nil, nil
	}
	hr, ok := t.hosts.Lookup(hostOnly(r.Host))
	if !ok {
		return nil, nil
	}
	path := requestPath(r)
	for _, ix := range hr.levels {
		if e := ix.find(r, path); e != nil {
			return e.rule, e.match
		}
	}
	return nil, nil
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

// buildTable turns candidates grouped by effective hostname into a Table.
func buildTable(byHost map[string][]candidate) *Table {
	indexes := make(map[string]*pathIndex, len(byHost))
	for h, cs := range byHost {
		indexes[h] = buildIndex(cs)
	}
	patterns := make([]string, 0, len(byHost))
	values := make([]*hostRoutes, 0, len(byHost))
	for h, ix := range indexes {
		hr := &hostRoutes{levels: []*pathIndex{ix}}
		for _, c := range coveringPatterns(h) {
			if cix, ok := indexes[c]; ok {
				hr.levels = append(hr.levels, cix)
			}
		}
		patterns = append(patterns, h)
		values = append(values, hr)
	}
	return &Table{hosts: hostname.NewTable(patterns, values)}
}

// coveringPatterns lists the less specific patterns that match every name
// the pattern h matches, most specific first: for "a.b.c" that is "*.b.c",
// "*.c" and ""; for "*.b.c" it is "*.c" and "".
func coveringPatterns(h string) []string {
	var out []string
	rest := h
	if hostname.IsWildcard(h) {
		rest = h[2:]
	}
	if h != "" {
		for {
			i := strings.IndexByte(rest, '.')
			if i < 0 {
				break
			}
			rest = rest[i+1:]
			out = append(out, "*."+rest)
		}
		out = append(out, "")
	}
	return out
}

func buildIndex(cs []candidate) *pathIndex {
	slices.SortFunc(cs, compareCandidates)
	ix := &pathIndex{}
	for _, c := range cs {
		e := entry{rule: c.rule, match: c.match}
		switch c.match.PathType {
		case gwv1.PathMatchExact:
			if ix.exact == nil {
				ix.exact = map[string][]entry{}
			}
			ix.exact[c.match.path] = append(ix.exact[c.match.path], e)
		case gwv1.PathMatchPathPrefix:
			if n := len(ix.prefixes); n > 0 && ix.prefixes[n-1].prefix == c.match.path {
				ix.prefixes[n-1].entries = append(ix.prefixes[n-1].entries, e)
			} else {
				ix.prefixes = append(ix.prefixes, prefixGroup{prefix: c.match.path, entries: []entry{e}})
			}
		case gwv1.PathMatchRegularExpression:
			ix.regex = append(ix.regex, e)
		}
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
