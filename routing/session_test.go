package routing

import (
	"strings"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// TestCompileSession: the defaults the type comments give (Cookie, Path
// "/", a generated cookie name, Session lifetime) and the refusals of
// shapes the CRD refuses, for objects admitted without its rules.
func TestCompileSession(t *testing.T) {
	ptr := func(s string) *string { return &s }
	cookie, header := gwv1.CookieBasedSessionPersistence, gwv1.HeaderBasedSessionPersistence
	permanent := gwv1.PermanentCookieLifetimeType
	dur := func(s string) *gwv1.Duration { d := gwv1.Duration(s); return &d }
	name := func(s string) *gwv1.CookieName { n := gwv1.CookieName(s); return &n }

	rule := func() *config.Rule { return &config.Rule{RouteName: "ns/r", Index: 2} }
	r := rule()
	if p := compileSession(r, &gwv1.SessionPersistence{}); p != nil {
		t.Fatalf("empty sessionPersistence: %s", p.msg)
	}
	s := r.Session
	if s.Type != config.SessionCookie || s.Path != "/" || !strings.HasPrefix(s.Name, "portico-session-") || s.Permanent || s.AbsoluteTimeout != 0 {
		t.Fatalf("defaults: %+v", s)
	}
	other := &config.Rule{RouteName: "ns/r", Index: 3}
	compileSession(other, &gwv1.SessionPersistence{})
	if other.Session.Name == s.Name {
		t.Fatalf("two rules got the cookie name %s", s.Name)
	}

	r = rule()
	if p := compileSession(r, &gwv1.SessionPersistence{Type: &cookie, AbsoluteTimeout: dur("90s"),
		Cookie: &gwv1.CookieConfig{Name: name("sid"), Path: ptr("/app"), LifetimeType: &permanent}}); p != nil {
		t.Fatal(p.msg)
	}
	if want := (config.SessionPersistence{Type: config.SessionCookie, Name: "sid", Path: "/app", Permanent: true, AbsoluteTimeout: 90 * time.Second}); *r.Session != want {
		t.Fatalf("permanent cookie: %+v, want %+v", *r.Session, want)
	}

	r = rule()
	if p := compileSession(r, &gwv1.SessionPersistence{Type: &header, Header: &gwv1.HeaderConfig{Name: "x-sess"}}); p != nil {
		t.Fatal(p.msg)
	}
	if want := (config.SessionPersistence{Type: config.SessionHeader, Name: "X-Sess"}); *r.Session != want {
		t.Fatalf("header: %+v, want %+v", *r.Session, want)
	}

	for what, sp := range map[string]*gwv1.SessionPersistence{
		"permanent without absoluteTimeout": {Type: &cookie, Cookie: &gwv1.CookieConfig{LifetimeType: &permanent}},
		"header without header":             {Type: &header},
		"header with cookie":                {Type: &header, Header: &gwv1.HeaderConfig{Name: "x"}, Cookie: &gwv1.CookieConfig{}},
		"cookie with header":                {Type: &cookie, Header: &gwv1.HeaderConfig{Name: "x"}},
		"bad duration":                      {AbsoluteTimeout: dur("1d")},
		"bad cookie name":                   {Cookie: &gwv1.CookieConfig{Name: name("a b")}},
		"bad cookie path":                   {Cookie: &gwv1.CookieConfig{Path: ptr("/a;Domain=evil")}},
	} {
		r := rule()
		p := compileSession(r, sp)
		if p == nil || p.reason != gwv1.RouteReasonUnsupportedValue || r.Session != nil {
			t.Errorf("%s: %+v, session %+v; want UnsupportedValue and no session", what, p, r.Session)
		}
	}
}
