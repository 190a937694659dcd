package config

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestOrderedTable checks the first-match order, literal prefixes, header
// presence and host lookup (with and without a port, any case, a trailing
// dot) of ordered tables, below and above fewHosts hostnames.
func TestOrderedTable(t *testing.T) {
	for _, n := range []int{1, fewHosts, 3 * fewHosts} {
		t.Run(fmt.Sprint(n, " hosts"), func(t *testing.T) {
			var pm PrefixMatcher
			match := func(prefix string, headers map[string]string) *Match {
				m, err := pm.Match(prefix, headers)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			var hosts []OrderedHost
			for i := range n {
				hosts = append(hosts, OrderedHost{Hostname: fmt.Sprintf("H%d.example.com", i), Entries: []OrderedEntry{
					{Rule: &Rule{Index: 0, Name: fmt.Sprint(i)}, Match: match("/foo", nil)},
					{Rule: &Rule{Index: 1, Name: fmt.Sprint(i)}, Match: match("", map[string]string{"x-present": ""})},
					{Rule: &Rule{Index: 2, Name: fmt.Sprint(i)}, Match: match("/f", map[string]string{"X-Exact": "v"})},
					{Rule: &Rule{Index: 3, Name: fmt.Sprint(i)}, Match: match("/", nil)},
				}})
			}
			table := NewOrderedTable(hosts)
			for i := range n {
				for _, c := range []struct {
					host, path string
					header     map[string]string
					index      int
				}{
					{fmt.Sprintf("h%d.example.com", i), "/foobar", nil, 0},
					{fmt.Sprintf("H%d.EXAMPLE.com:80", i), "/fo", map[string]string{"X-Present": ""}, 1},
					{fmt.Sprintf("h%d.example.com.", i), "/fo", map[string]string{"X-Exact": "v"}, 2},
					{fmt.Sprintf("h%d.example.com", i), "/fo", map[string]string{"X-Exact": "w"}, 3},
					{fmt.Sprintf("h%d.example.com", i), "/foo", map[string]string{"X-Present": "1"}, 0},
				} {
					r := httptest.NewRequest("GET", "http://x"+c.path, nil)
					r.Host = c.host
					for k, v := range c.header {
						r.Header.Set(k, v)
					}
					rule, _ := table.Match(r)
					if rule == nil || rule.Index != c.index || rule.Name != fmt.Sprint(i) {
						t.Errorf("%s %s %v: %+v, want entry %d of host %d", c.host, c.path, c.header, rule, c.index, i)
					}
				}
			}
			r := httptest.NewRequest("GET", "http://other.example.com/", nil)
			if rule, _ := table.Match(r); rule != nil {
				t.Errorf("unknown host matched %+v", rule)
			}
			if a, b := match("/foo", nil), match("/foo", nil); a != b {
				t.Error("the same prefix was compiled twice")
			}
		})
	}
}

// TestOrderedTableWith changes ordered tables at random, few hosts and
// enough that the names changed outgrow what a table keeps over its
// lookup, and checks after every change that each host, present or gone,
// matches in the changed table (in any case, with a trailing dot) as in
// one built anew from the same list.
func TestOrderedTableWith(t *testing.T) {
	var pm PrefixMatcher
	slash, _ := pm.Match("/", nil)
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{40, 700} {
		names := make([]string, size)
		for i := range names {
			names[i] = fmt.Sprintf("h%d.example.com", i)
		}
		for round := range 3 {
			want := map[string]int{} // host -> the version its rule has
			var table *Table
			for step := range 300 {
				var remove []string
				var add []OrderedHost
				for range 1 + r.IntN(size/8) {
					h := names[r.IntN(len(names))]
					if _, ok := want[h]; ok && r.IntN(2) == 0 {
						remove = append(remove, h)
						delete(want, h)
						continue
					}
					// Removed first, then added anew: a changed host.
					remove = append(remove, h)
					version := step*1000 + len(add)
					add = append(add, OrderedHost{Hostname: h, Entries: []OrderedEntry{{Rule: &Rule{Index: version}, Match: slash}}})
					want[h] = version
				}
				// A host added twice in one change keeps the first.
				seen := map[string]bool{}
				for _, h := range add {
					if !seen[h.Hostname] {
						seen[h.Hostname] = true
						want[h.Hostname] = h.Entries[0].Rule.Index
					}
				}
				table = table.WithOrdered(remove, add)
				if got := len(table.OrderedHosts()); got != len(want) {
					t.Fatalf("%d names, round %d step %d: %d hosts, want %d", size, round, step, got, len(want))
				}
				for _, h := range names {
					req := httptest.NewRequest("GET", "http://x/", nil)
					req.Host = h
					switch r.IntN(3) {
					case 0:
						req.Host = strings.ToUpper(h)
					case 1:
						req.Host = h + ".:8080"
					}
					rule, _ := table.Match(req)
					v, ok := want[h]
					if ok != (rule != nil) || ok && rule.Index != v {
						t.Fatalf("%d names, round %d step %d: %s matched %+v, want version %d (%v)", size, round, step, req.Host, rule, v, ok)
					}
				}
			}
		}
	}
}
