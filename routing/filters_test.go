package routing

import (
	"net/http"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

func ptr[T any](v T) *T { return &v }

// redirectTable compiles one route with one redirect rule per entry, each
// under its own path prefix, attached to a listener with the given port
// and protocol, and returns that listener's table.
func redirectTable(t *testing.T, port gwv1.PortNumber, proto gwv1.ProtocolType, filters map[string]gwv1.HTTPRequestRedirectFilter) *config.Table {
	t.Helper()
	f := loadFixture(t)
	f.in.Listeners = []Listener{{
		ID: 0, Parent: Parent{Kind: "Gateway", Namespace: "infra", Name: "r"}, Name: "l",
		Port: port, Protocol: proto, Accepted: true, SupportedKinds: supportedKinds(proto, nil),
	}}
	f.in.Parents = map[Parent]bool{f.in.Listeners[0].Parent: true}
	r := &gwv1.HTTPRoute{}
	r.Namespace, r.Name = "infra", "redirects"
	r.Spec.ParentRefs = []gwv1.ParentReference{{Name: "r"}}
	for path, rd := range filters {
		r.Spec.Rules = append(r.Spec.Rules, gwv1.HTTPRouteRule{
			Matches: []gwv1.HTTPRouteMatch{prefix(path)},
			Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterRequestRedirect, RequestRedirect: &rd}},
		})
	}
	f.in.Routes = []*gwv1.HTTPRoute{r}
	out := Compile(f.in)
	if c := out.RouteParents[types.NamespacedName{Namespace: r.Namespace, Name: r.Name}][0].Conditions[0]; c.Status != "True" {
		t.Fatalf("route not accepted: %s", c.Message)
	}
	return out.Tables[0]
}

func location(t *testing.T, tb *config.Table, host, target string) (string, int) {
	t.Helper()
	req := request("GET", host, target)
	rule, m := tb.Match(req)
	if rule == nil || len(rule.Filters) != 1 || rule.Filters[0].Redirect == nil {
		t.Fatalf("%s%s: no redirect rule (%+v)", host, target, rule)
	}
	return rule.Filters[0].Redirect.Location(req, m), rule.Filters[0].Redirect.StatusCode
}

func TestRedirectLocation(t *testing.T) {
	host := gwv1.PreciseHostname("example.org")
	https, http_ := "https", "http"
	portFilters := map[string]gwv1.HTTPRequestRedirectFilter{
		"/scheme-nil-and-port-nil":    {Hostname: &host},
		"/scheme-nil-and-port-80":     {Hostname: &host, Port: ptr[gwv1.PortNumber](80)},
		"/scheme-nil-and-port-443":    {Hostname: &host, Port: ptr[gwv1.PortNumber](443)},
		"/scheme-nil-and-port-8080":   {Hostname: &host, Port: ptr[gwv1.PortNumber](8080)},
		"/scheme-nil-and-port-8443":   {Hostname: &host, Port: ptr[gwv1.PortNumber](8443)},
		"/scheme-https-and-port-nil":  {Hostname: &host, Scheme: &https},
		"/scheme-https-and-port-443":  {Hostname: &host, Scheme: &https, Port: ptr[gwv1.PortNumber](443)},
		"/scheme-https-and-port-8443": {Hostname: &host, Scheme: &https, Port: ptr[gwv1.PortNumber](8443)},
		"/scheme-http-and-port-nil":   {Hostname: &host, Scheme: &http_},
		"/scheme-http-and-port-80":    {Hostname: &host, Scheme: &http_, Port: ptr[gwv1.PortNumber](80)},
		"/scheme-http-and-port-8080":  {Hostname: &host, Scheme: &http_, Port: ptr[gwv1.PortNumber](8080)},
	}
	listeners := []struct {
		port  gwv1.PortNumber
		proto gwv1.ProtocolType
		want  map[string]string
	}{
		{80, gwv1.HTTPProtocolType, map[string]string{
			"/scheme-nil-and-port-nil":    "http://example.org/scheme-nil-and-port-nil",
			"/scheme-nil-and-port-80":     "http://example.org/scheme-nil-and-port-80",
			"/scheme-nil-and-port-8080":   "http://example.org:8080/scheme-nil-and-port-8080",
			"/scheme-https-and-port-nil":  "https://example.org/scheme-https-and-port-nil",
			"/scheme-https-and-port-443":  "https://example.org/scheme-https-and-port-443",
			"/scheme-https-and-port-8443": "https://example.org:8443/scheme-https-and-port-8443",
		}},
		{8080, gwv1.HTTPProtocolType, map[string]string{
			"/scheme-nil-and-port-nil":   "http://example.org:8080/scheme-nil-and-port-nil",
			"/scheme-nil-and-port-80":    "http://example.org/scheme-nil-and-port-80",
			"/scheme-https-and-port-nil": "https://example.org/scheme-https-and-port-nil",
		}},
		{443, gwv1.HTTPSProtocolType, map[string]string{
			"/scheme-nil-and-port-nil":   "https://example.org/scheme-nil-and-port-nil",
			"/scheme-nil-and-port-443":   "https://example.org/scheme-nil-and-port-443",
			"/scheme-nil-and-port-8443":  "https://example.org:8443/scheme-nil-and-port-8443",
			"/scheme-http-and-port-nil":  "http://example.org/scheme-http-and-port-nil",
			"/scheme-http-and-port-80":   "http://example.org/scheme-http-and-port-80",
			"/scheme-http-and-port-8080": "http://example.org:8080/scheme-http-and-port-8080",
		}},
	}
	for _, l := range listeners {
		tb := redirectTable(t, l.port, l.proto, portFilters)
		for path, want := range l.want {
			if got, _ := location(t, tb, "gw.test", path); got != want {
				t.Errorf("listener %d %s: Location %q, want %q", l.port, path, got, want)
			}
		}
	}

	tb := redirectTable(t, 80, gwv1.HTTPProtocolType, map[string]gwv1.HTTPRequestRedirectFilter{
		"/hostname-redirect":        {Hostname: &host},
		"/host-and-status":          {Hostname: &host, StatusCode: ptr(301)},
		"/port":                     {Port: ptr[gwv1.PortNumber](8083)},
		"/scheme":                   {Scheme: &https},
		"/see-other":                {StatusCode: ptr(303)},
		"/original-prefix":          {Path: &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/replacement-prefix")}},
		"/full":                     {Path: &gwv1.HTTPPathModifier{Type: gwv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr("/full-path-replacement")}},
		"/path-and-host":            {Hostname: &host, Path: &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/replacement-prefix")}},
		"/strip":                    {Path: &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("")}},
		"/ipv6-host-keeps-brackets": {},
	})
	for _, c := range []struct {
		host, target, want string
		status             int
	}{
		{"10.0.0.1", "/hostname-redirect", "http://example.org/hostname-redirect", 302},
		{"10.0.0.1:80", "/host-and-status", "http://example.org/host-and-status", 301},
		{"10.0.0.1:80", "/port", "http://10.0.0.1:8083/port", 302},
		{"gw.test", "/scheme", "https://gw.test/scheme", 302},
		{"gw.test", "/see-other?a=1&b=%20", "http://gw.test/see-other?a=1&b=%20", 303},
		{"gw.test", "/original-prefix/lemon", "http://gw.test/replacement-prefix/lemon", 302},
		{"gw.test", "/original-prefix", "http://gw.test/replacement-prefix", 302},
		{"gw.test", "/full/path/original", "http://gw.test/full-path-replacement", 302},
		{"gw.test", "/path-and-host", "http://example.org/replacement-prefix", 302},
		{"gw.test", "/strip/a%20b", "http://gw.test/a%20b", 302},
		{"gw.test", "/strip/a%3Bb", "http://gw.test/a%3Bb", 302},
		{"[::1]:80", "/ipv6-host-keeps-brackets", "http://[::1]/ipv6-host-keeps-brackets", 302},
	} {
		got, status := location(t, tb, c.host, c.target)
		if got != c.want || status != c.status {
			t.Errorf("%s%s: %d %q, want %d %q", c.host, c.target, status, got, c.status, c.want)
		}
	}
}

func TestPrefixReplacement(t *testing.T) {
	// The table in the HTTPPathModifier documentation.
	cases := []struct{ path, prefix, replace, want string }{
		{"/foo/bar", "/foo", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo", "/xyz/", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz/", "/xyz/bar"},
		{"/foo", "/foo", "/xyz", "/xyz"},
		{"/foo/", "/foo", "/xyz", "/xyz/"},
		{"/foo/bar", "/foo", "", "/bar"},
		{"/foo/", "/foo", "", "/"},
		{"/foo", "/foo", "", "/"},
		{"/foo/", "/foo", "/", "/"},
		{"/foo", "/foo", "/", "/"},
		// From httproute-rewrite-path.
		{"/prefix/one/two", "/prefix/one", "/one", "/one/two"},
		{"/strip-prefix/three", "/strip-prefix", "/", "/three"},
		{"/strip-prefix", "/strip-prefix", "/", "/"},
		{"/prefix/rewrite-path-and-modify-headers/one", "/prefix/rewrite-path-and-modify-headers", "/prefix", "/prefix/one"},
		{"/anything", "/", "/api", "/api/anything"},
	}
	for _, c := range cases {
		m := mustMatch(t, prefix(c.prefix))
		pm, p := compilePathModifier(&gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: &c.replace}, true)
		if p != nil {
			t.Fatal(p.msg)
		}
		r := request("GET", "h", c.path)
		(&config.Rewrite{Path: pm}).Apply(r, m)
		if r.URL.Path != c.want || r.URL.RawPath != "" {
			t.Errorf("%s with prefix %q -> %q: got %q (raw %q), want %q", c.path, c.prefix, c.replace, r.URL.Path, r.URL.RawPath, c.want)
		}
	}
}

func TestRewrite(t *testing.T) {
	full, _ := compilePathModifier(&gwv1.HTTPPathModifier{Type: gwv1.FullPathHTTPPathModifier, ReplaceFullPath: ptr("/one")}, false)
	strip, _ := compilePathModifier(&gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: ptr("/new")}, true)
	cases := []struct {
		name     string
		rw       config.Rewrite
		match    gwv1.HTTPRouteMatch
		target   string
		wantHost string
		wantPath string
		wantRaw  string
		wantURI  string
	}{
		{"host", config.Rewrite{Hostname: "one.example.org"}, prefix("/one"), "/one", "one.example.org", "/one", "", "/one"},
		{"full path", config.Rewrite{Path: full}, prefix("/full/one"), "/full/one/two?x=1", "rewrite.example", "/one", "", "/one?x=1"},
		{"prefix keeps an encoded delimiter", config.Rewrite{Path: strip}, prefix("/old"), "/old/a%3Bb", "rewrite.example", "/new/a;b", "/new/a%3Bb", "/new/a%3Bb"},
		{"prefix re-escapes", config.Rewrite{Path: strip}, prefix("/old"), "/old/a%20b", "rewrite.example", "/new/a b", "", "/new/a%20b"},
	}
	for _, c := range cases {
		r := request("GET", "rewrite.example", c.target)
		c.rw.Apply(r, mustMatch(t, c.match))
		if r.Host != c.wantHost || r.URL.Path != c.wantPath || r.URL.RawPath != c.wantRaw || r.URL.RequestURI() != c.wantURI {
			t.Errorf("%s: host %q path %q raw %q uri %q; want %q %q %q %q", c.name,
				r.Host, r.URL.Path, r.URL.RawPath, r.URL.RequestURI(), c.wantHost, c.wantPath, c.wantRaw, c.wantURI)
		}
	}
}

func TestHeaderModifier(t *testing.T) {
	hm, p := compileHeaderModifier(&gwv1.HTTPHeaderFilter{
		Set:    []gwv1.HTTPHeader{{Name: "x-header-set", Value: "set-overwrites-values"}, {Name: "X-Header-Set", Value: "ignored"}},
		Add:    []gwv1.HTTPHeader{{Name: "x-header-add", Value: "add-appends-values"}},
		Remove: []string{"x-header-remove"},
	})
	if p != nil {
		t.Fatal(p.msg)
	}
	h := http.Header{}
	h.Add("X-Header-Set", "some-other-value")
	h.Add("X-Header-Add", "some-other-value")
	h.Add("X-Header-Remove", "val")
	h.Add("Another-Header", "val")
	hm.Apply(h)
	want := http.Header{
		"X-Header-Set":   {"set-overwrites-values"},
		"X-Header-Add":   {"some-other-value", "add-appends-values"},
		"Another-Header": {"val"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %v, want %v", h, want)
	}

	// Host lives outside r.Header in Go.
	hostSet, _ := compileHeaderModifier(&gwv1.HTTPHeaderFilter{Set: []gwv1.HTTPHeader{{Name: "host", Value: "backend.internal"}}})
	r := request("GET", "front.example", "/")
	hostSet.ApplyRequest(r)
	if r.Host != "backend.internal" || r.Header.Get("Host") != "" {
		t.Errorf("Host %q, header %q", r.Host, r.Header.Get("Host"))
	}

	// One action per header name.
	if _, p := compileHeaderModifier(&gwv1.HTTPHeaderFilter{
		Set:    []gwv1.HTTPHeader{{Name: "a", Value: "1"}},
		Remove: []string{"A"},
	}); p == nil {
		t.Error("set and remove of one header: want a problem")
	}
}

func TestCORS(t *testing.T) {
	cors, p := compileCORS(&gwv1.HTTPCORSFilter{
		AllowOrigins:     []gwv1.CORSOrigin{"https://www.foo.com", "https://*.bar.com", "http://local:8080"},
		AllowMethods:     []gwv1.HTTPMethodWithWildcard{"GET", "OPTIONS"},
		AllowHeaders:     []gwv1.HTTPHeaderName{"x-header-1", "x-header-2"},
		ExposeHeaders:    []gwv1.HTTPHeaderName{"x-header-3", "x-header-4"},
		AllowCredentials: ptr(true),
		MaxAge:           3600,
	})
	if p != nil {
		t.Fatal(p.msg)
	}
	for origin, want := range map[string]bool{
		"https://www.foo.com":      true,
		"https://www.foo.com:443":  true,
		"https://WWW.FOO.COM":      true,
		"http://www.foo.com":       false,
		"https://www.foo.com:8443": false,
		"https://www.bar.com":      true,
		"https://xpto.www.bar.com": true,
		"https://bar.com":          false,
		"https://foobar.com":       false,
		"http://local:8080":        true,
		"http://local":             false,
		"null":                     false,
	} {
		if got := cors.AllowsOrigin(origin); got != want {
			t.Errorf("AllowsOrigin(%q) = %v, want %v", origin, got, want)
		}
	}

	pre := request("OPTIONS", "h", "/", "Origin", "https://www.bar.com",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "x-header-1, x-header-2")
	if !cors.Preflight(pre) {
		t.Fatal("preflight not recognized")
	}
	h := http.Header{}
	cors.Apply(pre, h)
	want := http.Header{
		"Access-Control-Allow-Origin":      {"https://www.bar.com"},
		"Vary":                             {"Origin"},
		"Access-Control-Allow-Credentials": {"true"},
		"Access-Control-Expose-Headers":    {"x-header-3, x-header-4"},
		"Access-Control-Allow-Methods":     {"GET, OPTIONS"},
		"Access-Control-Allow-Headers":     {"x-header-1, x-header-2"},
		"Access-Control-Max-Age":           {"3600"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("preflight headers\n got %v\nwant %v", h, want)
	}

	h = http.Header{}
	cors.Apply(request("GET", "h", "/", "Origin", "https://foobar.com"), h)
	if len(h) != 0 {
		t.Errorf("disallowed origin got headers %v", h)
	}
	h = http.Header{}
	simple := request("GET", "h", "/", "Origin", "https://www.foo.com")
	cors.Apply(simple, h)
	if cors.Preflight(simple) || h.Get("Access-Control-Allow-Origin") != "https://www.foo.com" || h.Get("Access-Control-Allow-Methods") != "" {
		t.Errorf("simple request headers %v", h)
	}

	wild, _ := compileCORS(&gwv1.HTTPCORSFilter{
		AllowOrigins: []gwv1.CORSOrigin{"*"}, AllowMethods: []gwv1.HTTPMethodWithWildcard{"*"},
		AllowHeaders: []gwv1.HTTPHeaderName{"*"}, ExposeHeaders: []gwv1.HTTPHeaderName{"*"},
	})
	h = http.Header{}
	wild.Apply(request("OPTIONS", "h", "/", "Origin", "https://foobar.com:12345",
		"Access-Control-Request-Method", "PUT", "Access-Control-Request-Headers", "x-header-1"), h)
	want = http.Header{
		"Access-Control-Allow-Origin":   {"https://foobar.com:12345"},
		"Vary":                          {"Origin"},
		"Access-Control-Expose-Headers": {"*"},
		"Access-Control-Allow-Methods":  {"PUT"},
		"Access-Control-Allow-Headers":  {"x-header-1"},
		"Access-Control-Max-Age":        {"5"},
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("wildcard preflight headers\n got %v\nwant %v", h, want)
	}

	if _, p := compileCORS(&gwv1.HTTPCORSFilter{AllowOrigins: []gwv1.CORSOrigin{"ftp://x"}}); p == nil {
		t.Error("ftp origin: want a problem")
	}
}

func TestMirrorTake(t *testing.T) {
	for _, c := range []struct {
		m    config.Mirror
		want int // of 1000 consecutive numbers
	}{
		{config.Mirror{Numerator: 1, Denominator: 1}, 1000},
		{config.Mirror{Numerator: 0, Denominator: 100}, 0},
		{config.Mirror{Numerator: 20, Denominator: 100}, 200},
		{config.Mirror{Numerator: 25, Denominator: 50}, 500},
	} {
		n := 0
		for i := uint64(0); i < 1000; i++ {
			if c.m.Take(i) {
				n++
			}
		}
		if n != c.want {
			t.Errorf("%d/%d: took %d of 1000, want %d", c.m.Numerator, c.m.Denominator, n, c.want)
		}
	}
}
