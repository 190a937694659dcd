package routing

import (
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

func mustMatch(t *testing.T, spec gwv1.HTTPRouteMatch) *config.Match {
	t.Helper()
	m, p := compileMatch(&spec)
	if p != nil {
		t.Fatalf("compileMatch: %s", p.msg)
	}
	return m
}

func TestPathMatching(t *testing.T) {
	cases := []struct {
		match gwv1.HTTPRouteMatch
		yes   []string
		no    []string
	}{
		{prefix("/"), []string{"/", "/a", "/a/b/"}, nil},
		{prefix("/abc"), []string{"/abc", "/abc/", "/abc/def"}, []string{"/abcd", "/ab", "/", "/ABC", "/x/abc"}},
		{prefix("/abc/"), []string{"/abc", "/abc/", "/abc/def"}, []string{"/abcd"}},
		{prefix("/a%20b"), []string{"/a%20b", "/a%20b/c"}, []string{"/a", "/a%2520b"}},
		{exact("/abc"), []string{"/abc"}, []string{"/abc/", "/Abc", "/abcd", "/ab"}},
		{exact("/"), []string{"/"}, []string{"/a"}},
		{regex("/a[0-9]+"), []string{"/a1", "/a123"}, []string{"/a", "/a1/", "/xa1", "/a1x"}},
		{regex(".*"), []string{"/", "/anything/at/all"}, nil},
	}
	for _, c := range cases {
		m := mustMatch(t, c.match)
		for _, p := range c.yes {
			if !m.Matches(request("GET", "h", p)) {
				t.Errorf("%s %s should match %s", m.PathType, m.Path, p)
			}
		}
		for _, p := range c.no {
			if m.Matches(request("GET", "h", p)) {
				t.Errorf("%s %s should not match %s", m.PathType, m.Path, p)
			}
		}
	}
}

func TestHeaderMatching(t *testing.T) {
	cases := []struct {
		name    string
		match   gwv1.HTTPRouteMatch
		headers []string
		want    bool
	}{
		{"name is case-insensitive", prefix("/", header("x-version", "v2")), []string{"X-VERSION", "v2"}, true},
		{"value is case-sensitive", prefix("/", header("x-version", "v2")), []string{"X-Version", "V2"}, false},
		{"missing header", prefix("/", header("x-version", "v2")), nil, false},
		{"all headers must match", prefix("/", header("a", "1"), header("b", "2")), []string{"A", "1"}, false},
		{"all headers match", prefix("/", header("a", "1"), header("b", "2")), []string{"A", "1", "B", "2"}, true},
		{"repeated header compared joined", prefix("/", header("a", "1,2")), []string{"A", "1", "A", "2"}, true},
		{"repeated header is not any-of", prefix("/", header("a", "1")), []string{"A", "1", "A", "2"}, false},
		{"repeated header, prefix only", prefix("/", header("a", "1,")), []string{"A", "1", "A", "2"}, false},
		{"only the first entry for a name counts", prefix("/", header("a", "1"), header("A", "2")), []string{"A", "1"}, true},
		{"regex is anchored", prefix("/", headerRE("a", "v[0-9]")), []string{"A", "xv1"}, false},
		{"regex", prefix("/", headerRE("a", "v[0-9]+")), []string{"A", "v12"}, true},
		{"regex over repeated header", prefix("/", headerRE("a", "1,2")), []string{"A", "1", "A", "2"}, true},
		{"host header", prefix("/", header("host", "h")), nil, true},
	}
	for _, c := range cases {
		m := mustMatch(t, c.match)
		if got := m.Matches(request("GET", "h", "/", c.headers...)); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestQueryAndMethodMatching(t *testing.T) {
	cases := []struct {
		name   string
		match  gwv1.HTTPRouteMatch
		method string
		target string
		want   bool
	}{
		{"exact", prefix("/", query("animal", "whale")), "GET", "/?animal=whale", true},
		{"value is case-sensitive", prefix("/", query("animal", "whale")), "GET", "/?animal=Whale", false},
		{"name is case-sensitive", prefix("/", query("animal", "whale")), "GET", "/?Animal=whale", false},
		{"first value counts", prefix("/", query("animal", "whale")), "GET", "/?animal=dolphin&animal=whale", false},
		{"escaped", prefix("/", query("a b", "c&d")), "GET", "/?a+b=c%26d", true},
		{"missing", prefix("/", query("animal", "whale")), "GET", "/?color=blue", false},
		{"all must match", prefix("/", query("animal", "whale"), query("color", "blue")), "GET", "/?color=blue&animal=whale", true},
		{"regex", prefix("/", queryRE("id", "[0-9]+")), "GET", "/?id=42", true},
		{"regex is anchored", prefix("/", queryRE("id", "[0-9]+")), "GET", "/?id=42x", false},
		{"semicolon pairs are skipped", prefix("/", query("a", "1")), "GET", "/?a=1;b=2", false},
		{"method", prefix("/", method("POST")), "POST", "/", true},
		{"wrong method", prefix("/", method("POST")), "GET", "/", false},
	}
	for _, c := range cases {
		m := mustMatch(t, c.match)
		if got := m.Matches(request(c.method, "h", c.target)); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestInvalidMatches(t *testing.T) {
	bad := gwv1.PathMatchType("Glob")
	badHeader := gwv1.HeaderMatchType("Prefix")
	for name, spec := range map[string]gwv1.HTTPRouteMatch{
		"unknown path type":   {Path: &gwv1.HTTPPathMatch{Type: &bad}},
		"bad path regex":      regex("/a("),
		"relative path":       prefix("a"),
		"bad escape":          exact("/a%zz"),
		"unknown method":      prefix("/", method("BREW")),
		"unknown header type": {Headers: []gwv1.HTTPHeaderMatch{{Type: &badHeader, Name: "a", Value: "b"}}},
		"bad header regex":    prefix("/", headerRE("a", "(")),
		"bad query regex":     prefix("/", queryRE("a", "[")),
	} {
		if _, p := compileMatch(&spec); p == nil || p.reason != gwv1.RouteReasonUnsupportedValue {
			t.Errorf("%s: got %+v, want UnsupportedValue", name, p)
		}
	}
}
