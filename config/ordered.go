package config

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/shared/pmap"
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
	routes := orderedRoutes(hosts)
	t := &Table{exact: true}
	for i := range routes {
		if !isExactName(routes[i].pattern) {
			t.exact = false
			break
		}
	}
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

// orderedRoutes are the routes of hosts, a hostname listed twice keeping
// its first entry list.
func orderedRoutes(hosts []OrderedHost) []hostRoutes {
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
	return routes
}

// WithOrdered returns an ordered table (NewOrderedTable) holding t's
// hosts without those of remove, then hosts; t is not changed. On a table
// of many exact names it costs in proportion to the change, not to the
// table: the names changed are kept in a persistent map over t's hostname
// lookup, which the two tables share, and a change copies the path to its
// names in that map (a kilobyte or so each); the lookup is built again once
// the names changed pass an eighth of it, a cost that is then the same per
// change whatever the size. Removing a host t does not hold does nothing;
// adding one it holds keeps the one it holds. t must be an ordered table.
func (t *Table) WithOrdered(remove []string, hosts []OrderedHost) *Table {
	if t != nil && len(remove) == 0 && len(hosts) == 0 {
		return t
	}
	if t == nil || t.hosts == nil || !t.exact || !allExact(remove) {
		return NewOrderedTable(t.withOrderedHosts(remove, hosts))
	}
	for _, h := range hosts {
		if !isExactName(h.Hostname) {
			return NewOrderedTable(t.withOrderedHosts(remove, hosts))
		}
	}
	o := &orderedOverlay{}
	if t.over != nil {
		o.hosts, o.n = t.over.hosts, t.over.n
	} else {
		o.n = t.hosts.Len()
	}
	e := o.hosts.Edit()
	for _, h := range remove {
		name := orderedName(h)
		if hr, ok := e.Get(name); ok {
			if hr != nil {
				e.Set(name, nil)
				o.n--
			}
		} else if _, held := t.hosts.Lookup(name); held {
			e.Set(name, nil)
			o.n--
		}
	}
	routes := orderedRoutes(hosts)
	for i := range routes {
		name := routes[i].pattern
		if hr, ok := e.Get(name); ok {
			if hr == nil {
				e.Set(name, &routes[i])
				o.n++
			}
		} else if _, held := t.hosts.Lookup(name); !held {
			e.Set(name, &routes[i])
			o.n++
		}
	}
	o.hosts = e.Done()
	next := &Table{hosts: t.hosts, over: o, exact: true}
	if o.hosts.Len() > max(minOrderedOverlay, t.hosts.Len()/orderedOverlayShare) || o.n <= fewHosts {
		return NewOrderedTable(next.OrderedHosts())
	}
	return next
}

// minOrderedOverlay and orderedOverlayShare bound the names an ordered table keeps over
// its hostname lookup: past both, WithOrdered builds the lookup again.
const (
	minOrderedOverlay   = 256
	orderedOverlayShare = 8
)

// orderedOverlay is what WithOrdered changed in an ordered table of exact
// names: the routes of each name changed, nil for a name removed; n is the
// number of names the table holds.
type orderedOverlay struct {
	hosts pmap.Map[string, *hostRoutes]
	n     int
}

// get returns the routes of host when the overlay knows it (nil for a
// name removed), with the lookup's rules: ASCII case folded, one trailing
// dot ignored.
func (o *orderedOverlay) get(host string) (*hostRoutes, bool) {
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; 'A' <= c && c <= 'Z' {
			host = strings.ToLower(host)
			break
		}
	}
	return o.hosts.Get(host)
}

func allExact(names []string) bool {
	for _, n := range names {
		if !isExactName(n) {
			return false
		}
	}
	return true
}

func isExactName(h string) bool {
	h = orderedName(h)
	return h != "" && h != "*" && !strings.HasPrefix(h, "*.")
}

func orderedName(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }

// withOrderedHosts is t's hosts without remove, then hosts.
func (t *Table) withOrderedHosts(remove []string, hosts []OrderedHost) []OrderedHost {
	gone := make(map[string]bool, len(remove))
	for _, h := range remove {
		gone[orderedName(h)] = true
	}
	var out []OrderedHost
	for _, h := range t.OrderedHosts() {
		if !gone[h.Hostname] {
			out = append(out, h)
		}
	}
	return append(out, hosts...)
}

// OrderedHosts lists the hosts of an ordered table (NewOrderedTable) with
// their entries, lowercase, in no particular order: NewOrderedTable of
// them matches as t does.
func (t *Table) OrderedHosts() []OrderedHost {
	if t == nil {
		return nil
	}
	var routes []*hostRoutes
	if t.hosts != nil {
		_, routes = t.hosts.Entries()
	} else {
		for i := range t.few {
			routes = append(routes, &t.few[i])
		}
	}
	if t.over != nil {
		routes = slices.DeleteFunc(routes, func(hr *hostRoutes) bool {
			_, changed := t.over.hosts.Get(hr.pattern)
			return changed
		})
		for _, hr := range t.over.hosts.All() {
			if hr != nil {
				routes = append(routes, hr)
			}
		}
	}
	out := make([]OrderedHost, 0, len(routes))
	for _, hr := range routes {
		h := OrderedHost{Hostname: hr.pattern}
		for _, l := range hr.levels {
			for _, e := range l.regex {
				h.Entries = append(h.Entries, OrderedEntry{Rule: e.rule, Match: e.match})
			}
		}
		out = append(out, h)
	}
	return out
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
