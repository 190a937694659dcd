package config

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// Match is one compiled HTTPRouteMatch: every condition in it must hold for
// its rule to apply.
//
// Paths are compared in their normal escaped form (see NormalizePath): the
// data plane normalises the request path before matching and forwards that
// same form, and path values from the route are brought to the same form
// at compile time, so "/%7Ea%20b" in a route and "/~a%20b" on the wire
// agree. A regular expression sees the normal form too: escapes stay
// escaped ("%20", not a space). An encoded slash that is kept
// (EscapedSlashKeep) is part of its segment, never a separator.
type Match struct {
	PathType PathMatchType
	// Path is the path value as written in the route.
	Path string
	// path is what the request path is compared with: in normal form, and
	// for PathPrefix without a trailing slash ("" for "/", which matches
	// any path).
	path string
	re   *regexp.Regexp // RegularExpression paths, anchored at both ends

	Method      string // "" matches any method
	Headers     []HeaderMatch
	QueryParams []QueryParamMatch
}

// HeaderMatch is one header condition. Name is in canonical form; a header
// sent several times is compared as its values joined with ",". "Host" is
// compared with the request's Host.
type HeaderMatch struct {
	Name   string
	Value  string
	Regexp *regexp.Regexp // set for RegularExpression; anchored full match
}

// QueryParamMatch is one query parameter condition, compared with the first
// value of the parameter.
type QueryParamMatch struct {
	Name   string
	Value  string
	Regexp *regexp.Regexp
}

// Prefix returns the matched path prefix of a PathPrefix match, without a
// trailing slash ("" for "/"); "" for other match types.
func (m *Match) Prefix() string {
	if m == nil || m.PathType != PathMatchPathPrefix {
		return ""
	}
	return m.path
}

// Matches reports whether the request satisfies every condition of m; its
// path is normalised with the default options first.
func (m *Match) Matches(r *http.Request) bool {
	path, ok := requestPath(r)
	return ok && m.matchesPath(path) && m.matchesRest(r)
}

func (m *Match) matchesPath(path string) bool {
	switch m.PathType {
	case PathMatchExact:
		return path == m.path
	case PathMatchPathPrefix:
		return pathHasPrefix(path, m.path)
	case PathMatchRegularExpression:
		return m.re.MatchString(path)
	}
	return false
}

// matchesRest checks everything but the path, cheapest first.
func (m *Match) matchesRest(r *http.Request) bool {
	if m.Method != "" && r.Method != m.Method {
		return false
	}
	for i := range m.Headers {
		if !m.Headers[i].matches(r) {
			return false
		}
	}
	if len(m.QueryParams) > 0 {
		for i := range m.QueryParams {
			if !m.QueryParams[i].matches(r.URL.RawQuery) {
				return false
			}
		}
	}
	return true
}

func (h *HeaderMatch) matches(r *http.Request) bool {
	if h.Name == "Host" {
		return r.Host != "" && h.matchOne(r.Host)
	}
	vals := r.Header[h.Name]
	switch len(vals) {
	case 0:
		return false
	case 1:
		return h.matchOne(vals[0])
	}
	if h.Regexp == nil {
		return joinedEqual(vals, h.Value)
	}
	return h.Regexp.MatchString(strings.Join(vals, ","))
}

func (h *HeaderMatch) matchOne(v string) bool {
	if h.Regexp != nil {
		return h.Regexp.MatchString(v)
	}
	return v == h.Value
}

// joinedEqual reports whether strings.Join(vals, ",") == want without
// building the joined string.
func joinedEqual(vals []string, want string) bool {
	pos := 0
	for i, v := range vals {
		if i > 0 {
			if pos >= len(want) || want[pos] != ',' {
				return false
			}
			pos++
		}
		if !strings.HasPrefix(want[pos:], v) {
			return false
		}
		pos += len(v)
	}
	return pos == len(want)
}

func (q *QueryParamMatch) matches(rawQuery string) bool {
	v, ok := queryValue(rawQuery, q.Name)
	if !ok {
		return false
	}
	if q.Regexp != nil {
		return q.Regexp.MatchString(v)
	}
	return v == q.Value
}

// queryValue returns the first value of the query parameter name, parsing
// the raw query the way url.ParseQuery does (pairs with ';' or bad escapes
// are skipped) but without allocating unless a key or value is escaped.
func queryValue(raw, name string) (string, bool) {
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		if needsQueryUnescape(k) {
			var err error
			if k, err = url.QueryUnescape(k); err != nil {
				continue
			}
		}
		if k != name {
			continue
		}
		if needsQueryUnescape(v) {
			var err error
			if v, err = url.QueryUnescape(v); err != nil {
				continue
			}
		}
		return v, true
	}
	return "", false
}

func needsQueryUnescape(s string) bool {
	return strings.IndexByte(s, '%') >= 0 || strings.IndexByte(s, '+') >= 0
}

// requestPath is the normal form of r's path with the default options, for
// callers that match a request the data plane has not normalised (tests,
// tools); ok is false when the path is rejected.
func requestPath(r *http.Request) (path string, ok bool) {
	if r.URL == nil {
		return "/", true
	}
	p := r.URL.EscapedPath()
	if p == "" {
		return "/", true
	}
	p, err := NormalizePath(p, PathOptions{})
	return p, err == nil
}

// pathHasPrefix reports whether path lies under prefix, element by element:
// prefix "/foo" (normalized, no trailing slash) covers "/foo", "/foo/" and
// "/foo/bar" but not "/foobar". The empty prefix covers every path.
func pathHasPrefix(path, prefix string) bool {
	if prefix == "" {
		return true
	}
	return strings.HasPrefix(path, prefix) && (len(path) == len(prefix) || path[len(prefix)] == '/')
}

// NormalizePrefix drops the trailing slash the spec says to ignore; "/"
// becomes "", the prefix of everything.
func NormalizePrefix(p string) string {
	return strings.TrimRight(p, "/")
}

// Anchored compiles an RE2 expression that must match the whole input.
func Anchored(expr string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// PathMatchType is how a Match compares the request path. The values are
// the Gateway API's, so that translate converts one type into the other.
type PathMatchType string

const (
	PathMatchExact             PathMatchType = "Exact"
	PathMatchPathPrefix        PathMatchType = "PathPrefix"
	PathMatchRegularExpression PathMatchType = "RegularExpression"
)

// SetPath sets m's path condition: value, as written in the route, compared
// as typ says. The error says why the value cannot be served.
func (m *Match) SetPath(typ PathMatchType, value string) error {
	m.PathType, m.Path = typ, value
	switch typ {
	case PathMatchExact, PathMatchPathPrefix:
		if !strings.HasPrefix(value, "/") {
			return fmt.Errorf("path %q does not start with '/'", value)
		}
		c, err := CanonicalPathValue(value)
		if err != nil {
			return fmt.Errorf("path %q: %w", value, err)
		}
		m.path = c
		if typ == PathMatchPathPrefix {
			m.path = NormalizePrefix(c)
		}
	case PathMatchRegularExpression:
		re, err := Anchored(value)
		if err != nil {
			return fmt.Errorf("path regular expression %q: %w", value, err)
		}
		m.re = re
	default:
		return fmt.Errorf("unsupported path match type %q", typ)
	}
	return nil
}
