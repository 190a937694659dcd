package config

import (
	"maps"
	"slices"

	"portico.dev/portico/internal/shared/hostname"
)

// RuleMatch is one match of a rule, as a Table holds it.
type RuleMatch struct {
	Rule  *Rule
	Match *Match
}

// Tries lists what Match tries for a request to host, so that tests and
// debugging can see a compiled table: the hostname pattern host selects
// ("" for the catch-all; ok is false when none does), then one list per
// pattern consulted, that pattern's own first and then each less specific
// pattern covering it. Each list is in precedence order, except that Exact
// matches, of which at most one path applies to a request, are ordered by
// path. Requests use Match, which allocates nothing; this allocates.
func (t *Table) Tries(host string) (pattern string, levels [][]RuleMatch, ok bool) {
	if t == nil {
		return "", nil, false
	}
	hr := t.lookup(hostname.WithoutPort(host))
	if hr == nil {
		return "", nil, false
	}
	for _, ix := range hr.levels {
		var level []RuleMatch
		add := func(es []entry) {
			for _, e := range es {
				level = append(level, RuleMatch{e.rule, e.match})
			}
		}
		for _, path := range slices.Sorted(maps.Keys(ix.exact)) {
			add(ix.exact[path])
		}
		for _, g := range ix.prefixes {
			add(g.entries)
		}
		add(ix.regex)
		levels = append(levels, level)
	}
	return hr.pattern, levels, true
}
