package routing

import (
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// Tries must list what Match tries, in its order: for every request, the
// first listed match whose conditions hold is the one Match returns.
func TestTriesAgreesWithMatch(t *testing.T) {
	rules := [][]gwv1.HTTPRouteMatch{
		{exact("/a"), prefix("/a", method("POST")), prefix("/a/b", header("x-v", "1"))},
		{prefix("/"), regex("/a/[0-9]+"), prefix("/a", query("q", "1"))},
	}
	tb := tableFor(t,
		testRoute{name: "exact", age: 4, hosts: []string{"a.b.example.com"}, rules: rules},
		testRoute{name: "deep", age: 3, hosts: []string{"*.b.example.com"}, rules: rules[1:]},
		testRoute{name: "wild", age: 2, hosts: []string{"*.example.com"}, rules: rules},
		testRoute{name: "any", age: 1, rules: rules[:1]},
	)
	hosts := []string{"a.b.example.com", "c.b.example.com", "c.example.com", "other.net", "A.B.Example.COM."}
	targets := []string{"/", "/a", "/a/", "/a/b", "/a/12", "/a?q=1", "/z"}
	for _, host := range hosts {
		_, levels, ok := tb.Tries(host)
		if !ok {
			t.Fatalf("%s: no pattern, want the catch-all at least", host)
		}
		for _, target := range targets {
			for _, m := range []string{"GET", "POST"} {
				for _, headers := range [][]string{nil, {"x-v", "1"}} {
					r := request(m, host, target, headers...)
					wantRule, wantMatch := tb.Match(r)
					var gotRule *config.Rule
					var gotMatch *config.Match
				search:
					for _, level := range levels {
						for _, rm := range level {
							if rm.Match.Matches(r) {
								gotRule, gotMatch = rm.Rule, rm.Match
								break search
							}
						}
					}
					if gotRule != wantRule || gotMatch != wantMatch {
						t.Errorf("%s %s%s %v: Tries finds %v, Match %v", m, host, target, headers, gotRule, wantRule)
					}
				}
			}
		}
	}
	if pattern, levels, _ := tb.Tries("c.b.example.com"); pattern != "*.b.example.com" || len(levels) != 3 {
		t.Errorf("c.b.example.com: pattern %q with %d levels, want *.b.example.com, then *.example.com and the catch-all", pattern, len(levels))
	}
	var none *config.Table
	if _, _, ok := none.Tries("a.example.com"); ok {
		t.Error("a nil table has a pattern")
	}
}
