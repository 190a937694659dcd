package config

import (
	"fmt"
	"net/http/httptest"
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
