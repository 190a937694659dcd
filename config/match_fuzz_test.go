package config

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// refPrefix is the PathPrefix rule written the slow, obvious way: split
// both paths at '/', ignore the prefix's trailing slash, compare element by
// element. Both are in normal form.
func refPrefix(prefix, path string) bool {
	if prefix == "/" {
		return true
	}
	ps := strings.Split(strings.TrimSuffix(prefix, "/"), "/")
	xs := strings.Split(path, "/")
	if len(xs) < len(ps) {
		return false
	}
	for i := range ps {
		if ps[i] != xs[i] {
			return false
		}
	}
	return true
}

// refWinner returns the index of the prefix (as written) that should win
// for path: among those that match, the longest decoded prefix without its
// trailing slash, then the longest as written, then the first; -1 if none.
func refWinner(values []string, path string) int {
	best, bestNorm, bestRaw := -1, -1, -1
	for i, v := range values {
		dec, _ := CanonicalPathValue(v)
		if !refPrefix(dec, path) {
			continue
		}
		norm := len(strings.TrimSuffix(dec, "/"))
		if norm > bestNorm || (norm == bestNorm && len(v) > bestRaw) {
			best, bestNorm, bestRaw = i, norm, len(v)
		}
	}
	return best
}

// indexOf builds a path index with one rule per prefix value.
func indexOf(t *testing.T, values []string) *pathIndex {
	var cs []Candidate
	for i, v := range values {
		cs = append(cs, Candidate{Rule: &Rule{Index: i}, Match: pathMatch(t, PathMatchPathPrefix, v)})
	}
	return buildIndex(cs)
}

// fillerPrefixes push a path index past manyPrefixes, so it uses the
// per-segment map instead of a scan.
var fillerPrefixes = []string{"/a", "/a/b", "/b", "/b/c/d", "/c", "/x/y", "/a/b/c", "/d/", "/e/f/"}

func FuzzPathMatch(f *testing.F) {
	for _, seed := range [][2]string{
		{"/", "/"}, {"/foo", "/foo"}, {"/foo", "/foo/"}, {"/foo", "/foo/bar"}, {"/foo", "/foobar"},
		{"/foo/", "/foo"}, {"/foo/", "/foo/bar"}, {"/a/b", "/a/b/c"}, {"/a/b", "/a/bc"}, {"/a%20b", "/a%20b/c"}, {"/a%20b", "/a b/c"},
		{"/x/y", "/x//y"}, {"/abc", "/ab"}, {"/", ""}, {"/a/b/c", "/a/b"}, {"/a/", "/a/b"}, {"/%61", "/a/b"},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, value, rawPath string) {
		dec, err := CanonicalPathValue(value)
		if err != nil || !strings.HasPrefix(value, "/") || strings.Contains(dec, "//") {
			return // not a value the API accepts
		}
		// Routes see normalised paths only.
		path, err := NormalizePath(rawPath, PathOptions{})
		if err != nil {
			return
		}
		want := refPrefix(dec, path)
		m := pathMatch(t, PathMatchPathPrefix, value)
		if got := m.matchesPath(path); got != want {
			t.Fatalf("PathPrefix %q on %q: got %v, reference %v", value, path, got, want)
		}
		if got := pathMatch(t, PathMatchExact, value).matchesPath(path); got != (path == dec) {
			t.Fatalf("Exact %q on %q: got %v", value, path, got)
		}

		// Through an index, scanned (one prefix) and per segment (with the
		// fillers): the most specific matching prefix wins.
		for _, values := range [][]string{{value}, append([]string{value}, fillerPrefixes...)} {
			e := indexOf(t, values).find(request("GET", "h", "/"), path)
			got := -1
			if e != nil {
				got = e.rule.Index
			}
			if w := refWinner(values, path); got != w {
				t.Fatalf("prefixes %q on %q: winner %d, reference %d", values, path, got, w)
			}
		}

		// Through a request: routes see the normal form of the path sent.
		if u, err := url.ParseRequestURI(rawPath); err == nil && u.Path != "" {
			r := request("GET", "h", "/")
			r.URL = u
			if got := m.Matches(r); got != refPrefix(dec, path) {
				t.Fatalf("request %q (path %q): got %v", rawPath, path, got)
			}
		}
	})
}

// pathMatch is a Match of one path condition.
func pathMatch(t testing.TB, typ PathMatchType, value string) *Match {
	t.Helper()
	m := &Match{}
	if err := m.SetPath(typ, value); err != nil {
		t.Fatalf("SetPath(%s, %q): %v", typ, value, err)
	}
	return m
}

// request is a request for target on host, with headers as name, value
// pairs.
func request(method, host, target string, headers ...string) *http.Request {
	r := httptest.NewRequest(method, "http://"+host+target, nil)
	r.Host = host
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}
