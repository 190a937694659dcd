package routing

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// Builders for routes written inline.

type testRoute struct {
	ns, name string
	age      int // seconds after a fixed epoch; smaller is older
	hosts    []string
	rules    [][]gwv1.HTTPRouteMatch
}

func pathMatch(t gwv1.PathMatchType, v string, opts ...func(*gwv1.HTTPRouteMatch)) gwv1.HTTPRouteMatch {
	m := gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{Type: &t, Value: &v}}
	for _, o := range opts {
		o(&m)
	}
	return m
}

func prefix(v string, opts ...func(*gwv1.HTTPRouteMatch)) gwv1.HTTPRouteMatch {
	return pathMatch(gwv1.PathMatchPathPrefix, v, opts...)
}

func exact(v string, opts ...func(*gwv1.HTTPRouteMatch)) gwv1.HTTPRouteMatch {
	return pathMatch(gwv1.PathMatchExact, v, opts...)
}

func regex(v string, opts ...func(*gwv1.HTTPRouteMatch)) gwv1.HTTPRouteMatch {
	return pathMatch(gwv1.PathMatchRegularExpression, v, opts...)
}

func method(m string) func(*gwv1.HTTPRouteMatch) {
	return func(x *gwv1.HTTPRouteMatch) { x.Method = (*gwv1.HTTPMethod)(&m) }
}

func header(n, v string) func(*gwv1.HTTPRouteMatch) {
	return func(x *gwv1.HTTPRouteMatch) {
		x.Headers = append(x.Headers, gwv1.HTTPHeaderMatch{Name: gwv1.HTTPHeaderName(n), Value: v})
	}
}

func headerRE(n, v string) func(*gwv1.HTTPRouteMatch) {
	t := gwv1.HeaderMatchRegularExpression
	return func(x *gwv1.HTTPRouteMatch) {
		x.Headers = append(x.Headers, gwv1.HTTPHeaderMatch{Type: &t, Name: gwv1.HTTPHeaderName(n), Value: v})
	}
}

func query(n, v string) func(*gwv1.HTTPRouteMatch) {
	return func(x *gwv1.HTTPRouteMatch) {
		x.QueryParams = append(x.QueryParams, gwv1.HTTPQueryParamMatch{Name: gwv1.HTTPHeaderName(n), Value: v})
	}
}

func queryRE(n, v string) func(*gwv1.HTTPRouteMatch) {
	t := gwv1.QueryParamMatchRegularExpression
	return func(x *gwv1.HTTPRouteMatch) {
		x.QueryParams = append(x.QueryParams, gwv1.HTTPQueryParamMatch{Type: &t, Name: gwv1.HTTPHeaderName(n), Value: v})
	}
}

var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func (tr testRoute) build(parent string) *gwv1.HTTPRoute {
	r := &gwv1.HTTPRoute{}
	r.Namespace, r.Name = tr.ns, tr.name
	if r.Namespace == "" {
		r.Namespace = "infra"
	}
	r.CreationTimestamp = metav1.NewTime(epoch.Add(time.Duration(tr.age) * time.Second))
	// The fixture's Gateways live in "infra"; routes elsewhere name it.
	infra := gwv1.Namespace("infra")
	r.Spec.ParentRefs = []gwv1.ParentReference{{Name: gwv1.ObjectName(parent), Namespace: &infra}}
	for _, h := range tr.hosts {
		r.Spec.Hostnames = append(r.Spec.Hostnames, gwv1.Hostname(h))
	}
	for _, ms := range tr.rules {
		r.Spec.Rules = append(r.Spec.Rules, gwv1.HTTPRouteRule{Matches: ms})
	}
	return r
}

// tableFor compiles routes attached to the "all-ns" Gateway of the base
// fixture (one listener, no hostname) and returns that listener's table.
func tableFor(t testing.TB, routes ...testRoute) *config.Table {
	t.Helper()
	f := loadFixture(t)
	for _, tr := range routes {
		f.in.Routes = append(f.in.Routes, tr.build("all-ns"))
	}
	out := Compile(f.in)
	for _, r := range f.in.Routes {
		rs := out.RouteParents[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}]
		if len(rs) == 0 {
			t.Fatalf("route %s/%s has no parent status", r.Namespace, r.Name)
		}
		for _, s := range rs {
			if s.Conditions[0].Status != metav1.ConditionTrue {
				t.Fatalf("route %s/%s not accepted: %+v", r.Namespace, r.Name, s.Conditions)
			}
		}
	}
	return out.Tables[f.listener(t, "Gateway/infra/all-ns", "http")]
}

// winner names the rule a request lands on as "route#rule", "-" for none.
func winner(tb *config.Table, method, host, target string, headers ...string) (string, *config.Match) {
	rule, m := tb.Match(request(method, host, target, headers...))
	if rule == nil {
		return "-", nil
	}
	return fmt.Sprintf("%s#%d", rule.Route.Name, rule.Index), m
}

func TestPrecedence(t *testing.T) {
	type req struct {
		method, host, target string
		headers              []string
		want                 string
	}
	get := func(host, target, want string, headers ...string) req {
		return req{"GET", host, target, headers, want}
	}
	cases := []struct {
		name   string
		routes []testRoute
		reqs   []req
	}{{
		name: "exact hostname beats wildcard, longer wildcard beats shorter, any host last",
		routes: []testRoute{
			{name: "any", age: 0, rules: [][]gwv1.HTTPRouteMatch{{exact("/x")}}},
			{name: "short", age: 1, hosts: []string{"*.com"}, rules: [][]gwv1.HTTPRouteMatch{{exact("/x")}}},
			{name: "long", age: 2, hosts: []string{"*.example.com"}, rules: [][]gwv1.HTTPRouteMatch{{exact("/x")}}},
			{name: "exact", age: 3, hosts: []string{"a.example.com"}, rules: [][]gwv1.HTTPRouteMatch{{exact("/x")}}},
		},
		reqs: []req{
			get("a.example.com", "/x", "exact#0"),
			get("b.example.com", "/x", "long#0"),
			get("a.b.example.com", "/x", "long#0"),
			get("b.com", "/x", "short#0"),
			get("b.org", "/x", "any#0"),
		},
	}, {
		name: "a less specific hostname still serves what the more specific one does not",
		routes: []testRoute{
			{name: "wild", age: 0, hosts: []string{"*.example.com"}, rules: [][]gwv1.HTTPRouteMatch{{prefix("/")}}},
			{name: "exact", age: 1, hosts: []string{"a.example.com"}, rules: [][]gwv1.HTTPRouteMatch{{prefix("/api")}}},
		},
		reqs: []req{
			get("a.example.com", "/api/v1", "exact#0"),
			get("a.example.com", "/other", "wild#0"),
			get("c.example.com", "/api", "wild#0"),
			get("example.com", "/api", "-"),
		},
	}, {
		name: "hostname specificity comes before path specificity",
		routes: []testRoute{
			{name: "wild", age: 0, hosts: []string{"*.example.com"}, rules: [][]gwv1.HTTPRouteMatch{{exact("/a/b")}}},
			{name: "exact", age: 1, hosts: []string{"a.example.com"}, rules: [][]gwv1.HTTPRouteMatch{{prefix("/")}}},
		},
		reqs: []req{get("a.example.com", "/a/b", "exact#0")},
	}, {
		name: "Exact path beats any prefix, even an older and longer one",
		routes: []testRoute{
			{name: "old", age: 0, rules: [][]gwv1.HTTPRouteMatch{{prefix("/a/b")}}},
			{name: "new", age: 1, rules: [][]gwv1.HTTPRouteMatch{{exact("/a/b")}}},
		},
		reqs: []req{
			get("h", "/a/b", "new#0"),
			get("h", "/a/b/", "old#0"),
		},
	}, {
		name: "longest prefix wins regardless of age or order",
		routes: []testRoute{
			{name: "old", age: 0, rules: [][]gwv1.HTTPRouteMatch{{prefix("/")}, {prefix("/a")}}},
			{name: "new", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/a/b")}}},
		},
		reqs: []req{
			get("h", "/a/b/c", "new#0"),
			get("h", "/a/bc", "old#1"),
			get("h", "/a", "old#1"),
			get("h", "/ab", "old#0"),
		},
	}, {
		name: "a trailing slash counts as a character",
		routes: []testRoute{
			{name: "old", age: 0, rules: [][]gwv1.HTTPRouteMatch{{prefix("/a")}}},
			{name: "new", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/a/")}}},
		},
		reqs: []req{get("h", "/a", "new#0"), get("h", "/a/x", "new#0")},
	}, {
		name: "prefixes beat regular expressions, longer expressions first",
		routes: []testRoute{
			{name: "re-short", age: 0, rules: [][]gwv1.HTTPRouteMatch{{regex("/a.*")}}},
			{name: "re-long", age: 1, rules: [][]gwv1.HTTPRouteMatch{{regex("/a/[0-9]+")}}},
			{name: "re-tie", age: 2, rules: [][]gwv1.HTTPRouteMatch{{regex("/a/[0-9]*")}}},
			{name: "pre", age: 3, rules: [][]gwv1.HTTPRouteMatch{{prefix("/a/b")}}},
		},
		reqs: []req{
			get("h", "/a/b", "pre#0"),
			get("h", "/a/12", "re-long#0"),
			get("h", "/a/", "re-tie#0"),
			get("h", "/ax", "re-short#0"),
			get("h", "/b", "-"),
		},
	}, {
		name: "method match beats header and query counts",
		routes: []testRoute{
			{name: "old", age: 0, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p", header("a", "1"), header("b", "2"), query("q", "1"))}}},
			{name: "new", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p", method("GET"))}}},
		},
		reqs: []req{
			{"GET", "h", "/p?q=1", []string{"A", "1", "B", "2"}, "new#0"},
			{"POST", "h", "/p?q=1", []string{"A", "1", "B", "2"}, "old#0"},
			{"POST", "h", "/p", nil, "-"},
		},
	}, {
		name: "more header matches beat more query matches",
		routes: []testRoute{
			{name: "old", age: 0, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p", header("a", "1"), query("x", "1"), query("y", "1"))}}},
			{name: "new", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p", header("a", "1"), header("b", "1"))}}},
		},
		reqs: []req{
			get("h", "/p?x=1&y=1", "new#0", "A", "1", "B", "1"),
			get("h", "/p?x=1&y=1", "old#0", "A", "1"),
		},
	}, {
		name: "more query matches beat an older route",
		routes: []testRoute{
			{name: "old", age: 0, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p", query("x", "1"))}}},
			{name: "new", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p", query("x", "1"), query("y", "2"))}}},
		},
		reqs: []req{
			get("h", "/p?y=2&x=1", "new#0"),
			get("h", "/p?x=1", "old#0"),
		},
	}, {
		name: "then the oldest route",
		routes: []testRoute{
			{name: "a-new", age: 5, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p")}}},
			{name: "z-old", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p")}}},
		},
		reqs: []req{get("h", "/p", "z-old#0")},
	}, {
		name: "then namespace/name",
		routes: []testRoute{
			{ns: "web", name: "a", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p")}}},
			{ns: "infra", name: "b", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p")}}},
			{ns: "infra", name: "c", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p")}}},
		},
		reqs: []req{get("h", "/p", "b#0")},
	}, {
		name: "namespace/name is compared as one string",
		routes: []testRoute{
			{ns: "a", name: "y", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p")}}},
			{ns: "a-b", name: "z", age: 1, rules: [][]gwv1.HTTPRouteMatch{{prefix("/p")}}},
		},
		// "a-b/z" < "a/y": '-' sorts before '/'.
		reqs: []req{get("h", "/p", "z#0")},
	}, {
		name: "then rule order within the route",
		routes: []testRoute{
			{name: "r", rules: [][]gwv1.HTTPRouteMatch{{prefix("/q")}, {prefix("/p", header("a", "1"))}, {prefix("/p", header("b", "1"))}}},
		},
		reqs: []req{
			get("h", "/p", "r#1", "A", "1", "B", "1"),
			get("h", "/p", "r#2", "B", "1"),
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := tableFor(t, c.routes...)
			for _, r := range c.reqs {
				if got, _ := winner(tb, r.method, r.host, r.target, r.headers...); got != r.want {
					t.Errorf("%s %s%s %v: got %s, want %s", r.method, r.host, r.target, r.headers, got, r.want)
				}
			}
		})
	}
}

func TestPrecedenceMatchOrder(t *testing.T) {
	tb := tableFor(t, testRoute{name: "r", rules: [][]gwv1.HTTPRouteMatch{{
		prefix("/p", query("b", "1")),
		prefix("/p", query("a", "1")),
	}}})
	_, m := winner(tb, "GET", "h", "/p?a=1&b=1")
	if m == nil || m.QueryParams[0].Name != "b" {
		t.Fatalf("got match %+v, want the first one (query b)", m)
	}
	_, m = winner(tb, "GET", "h", "/p?a=1")
	if m == nil || m.QueryParams[0].Name != "a" {
		t.Fatalf("got match %+v, want the second one (query a)", m)
	}
}

// Matches split over several routes, as httproute-matching-across-routes
// sets them up: a match with only headers has the default "/" prefix.
func TestMatchingAcrossRoutes(t *testing.T) {
	tb := tableFor(t,
		testRoute{name: "part1", hosts: []string{"example.com", "example.net"}, rules: [][]gwv1.HTTPRouteMatch{{
			prefix("/"), {Headers: []gwv1.HTTPHeaderMatch{{Name: "version", Value: "one"}}},
		}}},
		testRoute{name: "part2", hosts: []string{"example.com"}, rules: [][]gwv1.HTTPRouteMatch{{
			prefix("/v2"), {Headers: []gwv1.HTTPHeaderMatch{{Name: "version", Value: "two"}}},
		}}},
	)
	for _, c := range []struct {
		host, path string
		headers    []string
		want       string
	}{
		{"example.com", "/", nil, "part1#0"},
		{"example.com", "/example", nil, "part1#0"},
		{"example.net", "/example", nil, "part1#0"},
		{"example.com", "/example", []string{"Version", "one"}, "part1#0"},
		{"example.com", "/v2", nil, "part2#0"},
		{"example.net", "/v2", nil, "part1#0"},
		{"example.com", "/v2/example", nil, "part2#0"},
		{"example.com", "/", []string{"Version", "two"}, "part2#0"},
	} {
		if got, _ := winner(tb, "GET", c.host, c.path, c.headers...); got != c.want {
			t.Errorf("%s%s %v: got %s, want %s", c.host, c.path, c.headers, got, c.want)
		}
	}
}

// The conformance path-match-order rules, in one route.
func TestPathMatchOrder(t *testing.T) {
	tb := tableFor(t, testRoute{name: "r", rules: [][]gwv1.HTTPRouteMatch{
		{exact("/match")}, {exact("/match/exact")}, {exact("/match/exact/one")},
		{prefix("/match/")}, {prefix("/match/prefix/")}, {prefix("/match/prefix/one")},
	}})
	for path, want := range map[string]string{
		"/match/exact/one":      "r#2",
		"/match/exact":          "r#1",
		"/match":                "r#0",
		"/match/prefix/one/any": "r#5",
		"/match/prefix/any":     "r#4",
		"/match/any":            "r#3",
	} {
		if got, _ := winner(tb, "GET", "h", path); got != want {
			t.Errorf("%s: got %s, want %s", path, got, want)
		}
	}
}

// Many prefixes on one hostname switch the index to per-segment lookups
// (config's TestManyPrefixesIndexBySegment); the answers must not change.
func TestManyPrefixes(t *testing.T) {
	var rules [][]gwv1.HTTPRouteMatch
	paths := []string{"/", "/a", "/a/", "/a/b", "/a/b/c", "/b", "/b/c/", "/c", "/c/d/e/f", "/ab", "/x/y"}
	for _, p := range paths {
		rules = append(rules, []gwv1.HTTPRouteMatch{prefix(p)})
	}
	tb := tableFor(t, testRoute{name: "r", rules: rules})
	for target, want := range map[string]string{
		"/":          "r#0",
		"/a":         "r#2", // "/a/" is longer as written
		"/a/":        "r#2",
		"/a/b":       "r#3",
		"/a/b/c/d":   "r#4",
		"/a/bc":      "r#2",
		"/b/c":       "r#6",
		"/c/d/e":     "r#7",
		"/c/d/e/f/g": "r#8",
		"/abc":       "r#0",
		"/x/y/":      "r#10",
		"/x":         "r#0",
		"":           "r#0",
	} {
		if target == "" {
			target = "/"
		}
		if got, _ := winner(tb, "GET", "h", target); got != want {
			t.Errorf("%s: got %s, want %s", target, got, want)
		}
	}
}
