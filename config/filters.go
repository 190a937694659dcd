package config

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"portico.dev/portico/internal/shared/hostname"
)

// Filter is one compiled HTTPRouteFilter. Type says which one of the
// pointers is set. ExtensionRef and unsupported filters never reach a
// Filter: they make the rule Invalid instead.
type Filter struct {
	Type            FilterType
	RequestHeaders  *HeaderModifier // RequestHeaderModifier
	ResponseHeaders *HeaderModifier // ResponseHeaderModifier
	Redirect        *Redirect       // RequestRedirect
	Rewrite         *Rewrite        // URLRewrite
	Mirror          *Mirror         // RequestMirror
	CORS            *CORS           // CORS
	ExtAuth         *ExtAuth        // ExternalAuth
}

// Header is one header name (canonical form) and value.
type Header struct {
	Name  string
	Value string
}

// HeaderModifier sets, appends and removes headers. The spec allows one
// action per header name, so the order of the three does not matter.
type HeaderModifier struct {
	Set    []Header
	Add    []Header
	Remove []string
}

// Apply modifies h in place.
func (f *HeaderModifier) Apply(h http.Header) {
	for _, s := range f.Set {
		h[s.Name] = []string{s.Value}
	}
	for _, a := range f.Add {
		h[a.Name] = append(h[a.Name], a.Value)
	}
	for _, name := range f.Remove {
		delete(h, name)
	}
}

// ApplyRequest modifies the headers of a request about to be forwarded.
// Host is not in r.Header in Go, so setting it changes r.Host instead.
func (f *HeaderModifier) ApplyRequest(r *http.Request) {
	for _, s := range f.Set {
		if s.Name == "Host" {
			r.Host = s.Value
		}
	}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	f.Apply(r.Header)
	delete(r.Header, "Host")
}

// PathModifier replaces a request path, fully or the matched prefix.
type PathModifier struct {
	Type PathModifierType
	// Value is the replacement in normal escaped form (CanonicalPathValue):
	// the full path, or the new prefix without a trailing slash ("" replaces
	// the prefix with "/").
	Value string
}

// apply returns the new path, escaped, for the normalised path of a request
// that matched m. The part kept after a replaced prefix stays in its normal
// form, escapes included ("%3B" stays "%3B").
func (p *PathModifier) apply(path string, m *Match) string {
	if p.Type == FullPathModifier {
		return p.Value
	}
	kept := path
	if m != nil && m.PathType == PathMatchPathPrefix && pathHasPrefix(path, m.path) {
		kept = path[len(m.path):]
	}
	out := p.Value + kept
	if out == "" || out[0] != '/' {
		out = "/" + out
	}
	return out
}

// setEscapedPath makes the escaped path of u exactly p, which is in normal
// form (valid escapes only). RawPath is left empty when Go's own escaping
// of the decoded path gives p, as url.Parse leaves it.
func setEscapedPath(u *url.URL, p string) {
	dec, err := url.PathUnescape(p)
	if err != nil {
		// Not reached with a normal form; keep the URL as it was rather
		// than send something else.
		return
	}
	u.Path, u.RawPath = dec, ""
	if u.EscapedPath() != p {
		u.RawPath = p
	}
}

// Redirect answers a request with a redirection.
type Redirect struct {
	Scheme     string // "" keeps the listener's scheme
	Hostname   string // "" keeps the request's host
	Port       int32  // 0 derives it (see Location)
	Path       *PathModifier
	StatusCode int
	// ListenerScheme and ListenerPort describe the listener the rule is
	// attached to; they fill in what the filter leaves unset.
	ListenerScheme string
	ListenerPort   int32
}

// Location computes the Location header for a request that matched m, whose
// path the data plane has normalised:
// scheme, host, port and path from the filter where set, otherwise from the
// request and listener. Without an explicit port, a scheme change implies
// that scheme's well-known port and no scheme change means the listener's
// port; port 80 for http and 443 for https are left out. The query string
// is kept.
func (f *Redirect) Location(r *http.Request, m *Match) string {
	scheme := f.Scheme
	if scheme == "" {
		scheme = f.ListenerScheme
	}
	host := f.Hostname
	if host == "" {
		host = hostname.WithoutPort(r.Host)
	}
	port := f.Port
	if port == 0 {
		if f.Scheme != "" {
			port = wellKnownPort(f.Scheme)
		}
		if port == 0 {
			port = f.ListenerPort
		}
	}
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	if f.Path != nil {
		path = f.Path.apply(path, m)
	}
	var b strings.Builder
	b.WriteString(scheme)
	b.WriteString("://")
	b.WriteString(host)
	if port != 0 && port != wellKnownPort(scheme) {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(int(port)))
	}
	b.WriteString(path)
	if r.URL.RawQuery != "" {
		b.WriteByte('?')
		b.WriteString(r.URL.RawQuery)
	}
	return b.String()
}

func wellKnownPort(scheme string) int32 {
	switch scheme {
	case "http":
		return 80
	case "https":
		return 443
	}
	return 0
}

// Rewrite changes the host and path of a request before it is forwarded.
type Rewrite struct {
	Hostname string // "" keeps the Host header
	Path     *PathModifier
}

// Apply rewrites r in place; m is the match the request was routed by (a
// prefix replacement needs the matched prefix), and r's path is in normal
// form, as the data plane leaves it.
func (f *Rewrite) Apply(r *http.Request, m *Match) {
	if f.Hostname != "" {
		r.Host = f.Hostname
	}
	if f.Path != nil {
		p := r.URL.EscapedPath()
		if p == "" {
			p = "/"
		}
		setEscapedPath(r.URL, f.Path.apply(p, m))
	}
}

// Mirror sends a copy of a share of the requests to another backend and
// ignores its answers.
type Mirror struct {
	Backend     BackendKey
	AppProtocol string
	TLS         *BackendTLS // the backend's BackendTLSPolicy, nil for plain text
	// Numerator/Denominator is the share of requests mirrored (1/1 when the
	// route sets neither percent nor fraction).
	Numerator   int32
	Denominator int32
}

// Take reports whether the request with random number rnd is mirrored.
func (f *Mirror) Take(rnd uint64) bool {
	if f.Numerator <= 0 {
		return false
	}
	if f.Numerator >= f.Denominator {
		return true
	}
	return rnd%uint64(f.Denominator) < uint64(f.Numerator)
}

// CORS is a compiled HTTPCORSFilter.
type CORS struct {
	AllowAllOrigins  bool
	AllowOrigins     []string // as written, lowercased
	AllowCredentials bool
	AllowAllMethods  bool
	AllowMethods     []string
	AllowAllHeaders  bool
	AllowHeaders     []string
	ExposeAllHeaders bool
	ExposeHeaders    []string
	MaxAge           int32 // seconds; 5 when unset

	origins       []corsOrigin
	allowMethods  string
	allowHeaders  string
	exposeHeaders string
	maxAge        string
}

type corsOrigin struct {
	scheme string
	host   string // "*" any host; "*.x" any name ending in ".x"
	port   string
}

// AllowsOrigin reports whether a request Origin header value is allowed.
func (c *CORS) AllowsOrigin(origin string) bool {
	if c.AllowAllOrigins {
		return origin != ""
	}
	o, ok := parseOrigin(origin)
	if !ok {
		return false
	}
	for _, a := range c.origins {
		if a.scheme != o.scheme || a.port != o.port {
			continue
		}
		switch {
		case a.host == "*":
			return true
		case strings.HasPrefix(a.host, "*."):
			if len(o.host) > len(a.host)-1 && strings.HasSuffix(o.host, a.host[1:]) {
				return true
			}
		case a.host == o.host:
			return true
		}
	}
	return false
}

// Preflight reports whether r is a CORS preflight request, which the data
// plane answers itself (204, after Apply) instead of forwarding.
func (c *CORS) Preflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" &&
		r.Header.Get("Access-Control-Request-Method") != ""
}

// Apply adds the CORS response headers for request r to h. A request whose
// Origin is not allowed gets none. The allowed origin, and with wildcards
// the requested method and headers, are echoed rather than answered with
// "*", which is correct with and without credentials.
func (c *CORS) Apply(r *http.Request, h http.Header) {
	origin := r.Header.Get("Origin")
	if origin == "" || !c.AllowsOrigin(origin) {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Add("Vary", "Origin")
	if c.AllowCredentials {
		h.Set("Access-Control-Allow-Credentials", "true")
	}
	if c.exposeHeaders != "" {
		h.Set("Access-Control-Expose-Headers", c.exposeHeaders)
	}
	if !c.Preflight(r) {
		return
	}
	if c.AllowAllMethods {
		h.Set("Access-Control-Allow-Methods", r.Header.Get("Access-Control-Request-Method"))
	} else if c.allowMethods != "" {
		h.Set("Access-Control-Allow-Methods", c.allowMethods)
	}
	if c.AllowAllHeaders {
		if rh := r.Header.Values("Access-Control-Request-Headers"); len(rh) > 0 {
			h.Set("Access-Control-Allow-Headers", strings.Join(rh, ", "))
		}
	} else if c.allowHeaders != "" {
		h.Set("Access-Control-Allow-Headers", c.allowHeaders)
	}
	h.Set("Access-Control-Max-Age", c.maxAge)
}

// ValidOrigin reports whether s, lowercased, is an origin a CORS filter
// may allow: "scheme://host[:port]", the host "*" or "*.suffix" allowed.
func ValidOrigin(s string) bool {
	_, ok := parseOrigin(s)
	return ok
}

// Prepare computes what the data plane sends from c's exported fields, once,
// so that no request joins or parses them; origins that are not valid
// (ValidOrigin) are left out.
func (c *CORS) Prepare() {
	c.maxAge = strconv.Itoa(int(c.MaxAge))
	c.origins = c.origins[:0]
	for _, o := range c.AllowOrigins {
		if co, ok := parseOrigin(o); ok {
			c.origins = append(c.origins, co)
		}
	}
	c.allowMethods = strings.Join(c.AllowMethods, ", ")
	c.allowHeaders = strings.Join(c.AllowHeaders, ", ")
	c.exposeHeaders = strings.Join(c.ExposeHeaders, ", ")
	// With credentials a browser takes "*" literally, so it is only sent
	// without them; the named headers are exposed either way.
	if c.ExposeAllHeaders && !c.AllowCredentials {
		c.exposeHeaders = "*"
	}
}

// parseOrigin splits "scheme://host[:port]" (lowercased, default port
// filled in). The host may be "*" or start with "*." only in configuration.
func parseOrigin(s string) (corsOrigin, bool) {
	s = strings.ToLower(s)
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || (scheme != "http" && scheme != "https") || rest == "" {
		return corsOrigin{}, false
	}
	host, port := rest, ""
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && !strings.Contains(rest[i:], "]") {
		host, port = rest[:i], rest[i+1:]
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return corsOrigin{}, false
		}
		port = strconv.Itoa(n)
	}
	if host == "" || strings.ContainsAny(host, "/?#@") {
		return corsOrigin{}, false
	}
	if port == "" {
		port = strconv.Itoa(int(wellKnownPort(scheme)))
	}
	return corsOrigin{scheme: scheme, host: host, port: port}, true
}

// FilterType says which filter a Filter is. The values are the Gateway
// API's HTTPRouteFilterType values.
type FilterType string

const (
	FilterRequestHeaderModifier  FilterType = "RequestHeaderModifier"
	FilterResponseHeaderModifier FilterType = "ResponseHeaderModifier"
	FilterRequestRedirect        FilterType = "RequestRedirect"
	FilterURLRewrite             FilterType = "URLRewrite"
	FilterRequestMirror          FilterType = "RequestMirror"
	FilterCORS                   FilterType = "CORS"
	FilterExternalAuth           FilterType = "ExternalAuth"
)

// PathModifierType says what a PathModifier replaces: the Gateway API's
// HTTPPathModifierType values.
type PathModifierType string

const (
	FullPathModifier    PathModifierType = "ReplaceFullPath"
	PrefixMatchModifier PathModifierType = "ReplacePrefixMatch"
)
