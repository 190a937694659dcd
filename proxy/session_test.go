package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// sessionProxy is a proxy of one rule over Service svc with endpoints
// eps, picked at random by a BackendTrafficPolicy, and the session
// persistence sp.
func sessionProxy(t *testing.T, sp *gwv1.SessionPersistence, eps []string) (*balanced, func([]string)) {
	lb := &config.LoadBalancer{Algorithm: config.LBRandom}
	cfg := func(eps []string) func(int) *config.Config {
		return func(port int) *config.Config {
			return persistentConfig(t, port, lb, sp, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": eps})
		}
	}
	p := startBalanced(t, cfg(eps))
	return p, func(eps []string) {
		if err := p.rt.Apply(cfg(eps)(p.port)); err != nil {
			t.Fatal(err)
		}
	}
}

// answer is who answered a request and the session it was given.
type answer struct {
	by        string
	setCookie []string
	header    string
}

func (p *balanced) ask(c *http.Client, h http.Header) answer {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodGet, p.url, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header = h
	resp, err := c.Do(req)
	if err != nil {
		p.t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		p.t.Fatalf("GET: %d %s", resp.StatusCode, b)
	}
	return answer{by: string(b), setCookie: resp.Header.Values("Set-Cookie"), header: resp.Header.Get("X-Session")}
}

func cookieSP(name string, permanent bool, absolute string) *gwv1.SessionPersistence {
	typ := gwv1.CookieBasedSessionPersistence
	sp := &gwv1.SessionPersistence{Type: &typ, Cookie: &gwv1.CookieConfig{}}
	if name != "" {
		n := gwv1.CookieName(name)
		sp.Cookie.Name = &n
	}
	if permanent {
		lt := gwv1.PermanentCookieLifetimeType
		sp.Cookie.LifetimeType = &lt
	}
	if absolute != "" {
		d := gwv1.Duration(absolute)
		sp.AbsoluteTimeout = &d
	}
	return sp
}

// sessionCookie parses the one Set-Cookie of a, failing without one.
func sessionCookie(t *testing.T, a answer) *http.Cookie {
	t.Helper()
	if len(a.setCookie) != 1 {
		t.Fatalf("answer of %s set cookies %q, want one", a.by, a.setCookie)
	}
	c, err := http.ParseSetCookie(a.setCookie[0])
	if err != nil {
		t.Fatalf("Set-Cookie %q: %v", a.setCookie[0], err)
	}
	return c
}

// TestSessionCookieAffinity: under a random load balancing over 10
// endpoints, the first answer sets a session cookie that names no address
// in clear; 1,000 requests carrying it reach the same endpoint and are
// given no new cookie, also after a reload that reorders the endpoints;
// when that endpoint is removed, the request goes elsewhere and gets a new
// cookie, which then holds.
func TestSessionCookieAffinity(t *testing.T) {
	addrs, byAddr := namedBackends(t, "e", 10)
	p, apply := sessionProxy(t, cookieSP("sid", false, ""), addrs)
	c := keptAliveClient()

	first := p.ask(c, http.Header{})
	ck := sessionCookie(t, first)
	if ck.Name != "sid" || ck.Path != "/" || !ck.HttpOnly || ck.MaxAge != 0 || !ck.Expires.IsZero() {
		t.Fatalf("session cookie %q: want sid, Path=/, HttpOnly, no Max-Age or Expires", first.setCookie[0])
	}
	for a := range byAddr {
		_, port, _ := strings.Cut(a, ":")
		if strings.Contains(ck.Value, "127.0.0.1") || strings.Contains(ck.Value, port) {
			t.Fatalf("cookie value %q names an endpoint", ck.Value)
		}
	}
	with := http.Header{"Cookie": {"other=1; sid=" + ck.Value}}
	stick := func(phase string, want string) {
		t.Helper()
		for i := range 1000 {
			a := p.ask(c, with)
			if a.by != want || len(a.setCookie) != 0 {
				t.Fatalf("%s: request %d went to %s (cookie %q), the session's endpoint is %s", phase, i, a.by, a.setCookie, want)
			}
		}
	}
	stick("first", first.by)

	shuffled := append([]string(nil), addrs...)
	rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	apply(shuffled)
	stick("after a reload", first.by)

	var rest []string
	for _, a := range addrs {
		if byAddr[a] != first.by {
			rest = append(rest, a)
		}
	}
	apply(rest)
	moved := p.ask(c, with)
	if moved.by == first.by {
		t.Fatalf("request went to the removed endpoint %s", moved.by)
	}
	ck2 := sessionCookie(t, moved)
	if ck2.Value == ck.Value {
		t.Fatal("new endpoint, same cookie")
	}
	with = http.Header{"Cookie": {"sid=" + ck2.Value}}
	stick("new session", moved.by)
}

// TestSessionCookieInvalid: a changed, made-up, or expired session value
// counts as none: the request is balanced as usual and given a new one.
func TestSessionCookieInvalid(t *testing.T) {
	addrs, _ := namedBackends(t, "e", 10)
	p, _ := sessionProxy(t, cookieSP("sid", false, "300ms"), addrs)
	c := keptAliveClient()
	ck := sessionCookie(t, p.ask(c, http.Header{}))

	v := []byte(ck.Value)
	i := len(v) / 2
	v[i] = "AB"[b2i(v[i] == 'A')]
	for _, bad := range []string{string(v), "garbage", ck.Value + "AAAA", strings.Repeat("A", 4096)} {
		// Ten tries: a value that kept the session would never be answered
		// with a new cookie.
		for range 10 {
			a := p.ask(c, http.Header{"Cookie": {"sid=" + bad}})
			sessionCookie(t, a)
		}
	}
	// Within its absolute timeout the value holds; past it, it is over.
	if a := p.ask(c, http.Header{"Cookie": {"sid=" + ck.Value}}); len(a.setCookie) != 0 {
		t.Fatalf("valid session answered with a new cookie %q", a.setCookie)
	}
	time.Sleep(350 * time.Millisecond)
	a := p.ask(c, http.Header{"Cookie": {"sid=" + ck.Value}})
	sessionCookie(t, a)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSessionPermanentCookie: a Permanent cookie carries its absolute
// timeout as Max-Age and Expires; a rule without a cookie name gets one of
// its own.
func TestSessionPermanentCookie(t *testing.T) {
	addrs, _ := namedBackends(t, "e", 3)
	p, _ := sessionProxy(t, cookieSP("", true, "1h"), addrs)
	before := time.Now()
	ck := sessionCookie(t, p.ask(keptAliveClient(), http.Header{}))
	if !strings.HasPrefix(ck.Name, "portico-session-") || ck.Path != "/" || !ck.HttpOnly || ck.MaxAge != 3600 {
		t.Fatalf("cookie %+v: want a generated name, Path=/, HttpOnly, Max-Age=3600", ck)
	}
	if ck.Expires.Before(before.Add(time.Hour-2*time.Second)) || ck.Expires.After(time.Now().Add(time.Hour+time.Second)) {
		t.Fatalf("Expires %v, want an hour from now", ck.Expires)
	}
}

// TestSessionHeader: with a header session the answer carries the value
// in that header, and requests sending it back stay on one endpoint.
func TestSessionHeader(t *testing.T) {
	addrs, _ := namedBackends(t, "e", 10)
	typ := gwv1.HeaderBasedSessionPersistence
	p, _ := sessionProxy(t, &gwv1.SessionPersistence{Type: &typ, Header: &gwv1.HeaderConfig{Name: "x-session"}}, addrs)
	c := keptAliveClient()
	first := p.ask(c, http.Header{})
	if first.header == "" || len(first.setCookie) != 0 {
		t.Fatalf("first answer: header %q, cookies %q; want a header, no cookie", first.header, first.setCookie)
	}
	for i := range 1000 {
		a := p.ask(c, http.Header{"X-Session": {first.header}})
		if a.by != first.by || a.header != "" {
			t.Fatalf("request %d went to %s (new session %q), the session's endpoint is %s", i, a.by, a.header, first.by)
		}
	}
	if a := p.ask(c, http.Header{"X-Session": {first.header[1:]}}); a.header == "" {
		t.Fatal("a changed session header was not answered with a new one")
	}
}

// TestSessionSharedKey: data planes given the same SessionKey (replicas,
// or one process and the next) honour each other's sessions; one with
// another key treats them as none.
func TestSessionSharedKey(t *testing.T) {
	addrs, _ := namedBackends(t, "e", 10)
	sp := cookieSP("sid", false, "")
	key := make([]byte, 32)
	key[0] = 7
	start := func(key []byte) *balanced {
		opts := DefaultOptions()
		opts.BindAddress, opts.DrainTimeout, opts.SessionKey = "127.0.0.1", 5*time.Second, key
		rt := New(opts, zap.NewNop())
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = rt.Close(ctx)
		})
		port := freePort(t)
		lb := &config.LoadBalancer{Algorithm: config.LBRandom}
		if err := rt.Apply(persistentConfig(t, port, lb, sp, map[string]int32{"svc": 1}, nil, map[string][]string{"svc": addrs})); err != nil {
			t.Fatal(err)
		}
		return &balanced{t: t, rt: rt, port: port, url: fmt.Sprintf("http://127.0.0.1:%d/", port)}
	}
	a, b, other := start(key), start(key), start(nil)
	c := keptAliveClient()
	first := a.ask(c, http.Header{})
	with := http.Header{"Cookie": {"sid=" + sessionCookie(t, first).Value}}
	for i := range 100 {
		if got := b.ask(c, with); got.by != first.by || len(got.setCookie) != 0 {
			t.Fatalf("request %d to the other replica went to %s (cookie %q), the session's endpoint is %s", i, got.by, got.setCookie, first.by)
		}
	}
	sessionCookie(t, other.ask(c, with))
}
