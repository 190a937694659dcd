package config

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"portico.dev/portico/internal/shared/hostname"
)

// OrderedEntry is a rule and the match that selects it.
type OrderedEntry struct {
	Rule  *Rule
	Match *Match
}

// OrderedHost is the entries of one exact hostname, in the order they are
// tried.
type OrderedHost struct {
	Hostname string
	Entries  []OrderedEntry
}

// NewOrderedTable builds a table of exact hostnames whose entries are tried
// in the order given, the first whose match holds winning: Knative's rule
// for a KIngress's paths, where the Gateway API orders by specificity
// instead. Every match must come from a PrefixMatcher. A hostname listed twice
// keeps its first entry list.
func NewOrderedTable(hosts []OrderedHost) *Table {
	seen := make(map[string]bool, len(hosts))
	routes := make([]hostRoutes, 0, len(hosts))
	indexes := make([]pathIndex, len(hosts))
	levels := make([]*pathIndex, len(hosts))
	for i, h := range hosts {
		name := strings.ToLower(strings.TrimSuffix(h.Hostname, "."))
		if seen[name] {
			continue
		}
		seen[name] = true
		ix := &indexes[i]
		ix.regex = make([]entry, len(h.Entries))
		for j, e := range h.Entries {
			ix.regex[j] = entry{rule: e.Rule, match: e.Match}
		}
		levels[i] = ix
		routes = append(routes, hostRoutes{pattern: name, levels: levels[i : i+1 : i+1]})
	}
	t := &Table{}
	if len(routes) <= fewHosts {
		slices.SortFunc(routes, compareSpecificity)
		t.few = routes
		return t
	}
	patterns := make([]string, len(routes))
	values := make([]*hostRoutes, len(routes))
	for i := range routes {
		patterns[i], values[i] = routes[i].pattern, &routes[i]
	}
	t.hosts = hostname.NewTable(patterns, values)
	return t
}

// PrefixMatcher makes the matches of ordered tables. Matches are
// immutable: one is made per distinct prefix and headers and shared, so
// that thousands of KIngresses on "/" compile one expression.
type PrefixMatcher struct {
	made map[string]*Match
}

// Match matches paths that begin with prefix as written, not by segment
// ("/foo" covers "/foobar"; "" covers every path), and requests that carry
// every header of headers with exactly its value, "" meaning only that
// the header is present.
func (pm *PrefixMatcher) Match(prefix string, headers map[string]string) (*Match, error) {
	if prefix == "" {
		prefix = "/"
	}
	if len(headers) == 0 {
		// The usual path: no header to put in the key.
		if m, ok := pm.made[prefix]; ok {
			return m, nil
		}
	}
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	slices.Sort(names)
	var key strings.Builder
	key.WriteString(prefix)
	for _, name := range names {
		key.WriteByte(0)
		key.WriteString(name)
		key.WriteByte(0)
		key.WriteString(headers[name])
	}
	if m, ok := pm.made[key.String()]; ok {
		return m, nil
	}
	if !strings.HasPrefix(prefix, "/") {
		return nil, fmt.Errorf("path %q does not start with '/'", prefix)
	}
	c, err := CanonicalPathValue(prefix)
	if err != nil {
		return nil, fmt.Errorf("path %q: %w", prefix, err)
	}
	m := &Match{PathType: PathMatchRegularExpression, Path: prefix}
	m.re = regexp.MustCompile(`^` + regexp.QuoteMeta(c) + `(?s:.*)$`)
	for _, name := range names {
		hm := HeaderMatch{Name: http.CanonicalHeaderKey(name), Value: headers[name]}
		if hm.Value == "" {
			hm.Regexp = anyValue
		}
		m.Headers = append(m.Headers, hm)
	}
	if pm.made == nil {
		pm.made = map[string]*Match{}
	}
	pm.made[key.String()] = m
	return m, nil
}

// anyValue matches every value of a header that is present.
var anyValue = regexp.MustCompile(`(?s:.*)`)
