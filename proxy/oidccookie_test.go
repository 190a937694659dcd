package proxy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestCookieSealerOpensWhatItSealed(t *testing.T) {
	s, err := newCookieSealer(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	v := s.seal("p", "scope", now.Add(time.Minute), []byte("payload"))
	got, err := s.open("p", "scope", v, now)
	if err != nil || string(got) != "payload" {
		t.Fatalf("open = %q, %v", got, err)
	}
	if strings.Contains(v, "payload") || strings.Contains(string(mustB64(t, v)), "payload") {
		t.Fatal("the sealed value shows its payload")
	}
}

func mustB64(t *testing.T, v string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCookieSealerRefuses(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	s, _ := newCookieSealer(key)
	other, _ := newCookieSealer(bytes.Repeat([]byte{2}, 32))
	now := time.Unix(1_700_000_000, 0)
	v := s.seal("p", "scope", now.Add(time.Minute), []byte(`{"a":"token"}`))
	raw := mustB64(t, v)
	flipped := func(i int) string {
		b := bytes.Clone(raw)
		b[i] ^= 1
		return base64.RawURLEncoding.EncodeToString(b)
	}
	cases := []struct {
		name                  string
		sealer                *cookieSealer
		purpose, scope, value string
		at                    time.Time
		want                  error
	}{
		{"a bit of the nonce flipped", s, "p", "scope", flipped(0), now, errCookieInvalid},
		{"a bit of the ciphertext flipped", s, "p", "scope", flipped(len(raw) / 2), now, errCookieInvalid},
		{"a bit of the tag flipped", s, "p", "scope", flipped(len(raw) - 1), now, errCookieInvalid},
		{"truncated", s, "p", "scope", v[:len(v)-4], now, errCookieInvalid},
		{"not base64", s, "p", "scope", "!!" + v, now, errCookieInvalid},
		{"empty", s, "p", "scope", "", now, errCookieInvalid},
		{"another key", other, "p", "scope", v, now, errCookieInvalid},
		{"another purpose", s, "q", "scope", v, now, errCookieInvalid},
		{"another scope (provider or client)", s, "p", "scope2", v, now, errCookieInvalid},
		{"expired", s, "p", "scope", v, now.Add(time.Minute), errCookieExpired},
	}
	for _, c := range cases {
		if _, err := c.sealer.open(c.purpose, c.scope, c.value, c.at); !errors.Is(err, c.want) {
			t.Errorf("%s: open = %v, want %v", c.name, err, c.want)
		}
	}
}

func TestCookieKeyIsDerivedNotShared(t *testing.T) {
	// The same session key gives the same OIDC key on every replica, and
	// a value session persistence seals never opens as an OIDC cookie.
	key := bytes.Repeat([]byte{3}, 32)
	a, _ := newCookieSealer(key)
	b, _ := newCookieSealer(key)
	now := time.Now()
	if _, err := b.open("p", "s", a.seal("p", "s", now.Add(time.Hour), []byte("x")), now); err != nil {
		t.Fatalf("a replica with the same session key cannot open the cookie: %v", err)
	}
	persist, err := newSessionSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.open(sealSession, "s", persist.seal("name", "10.0.0.1:80", now), now); err == nil {
		t.Fatal("a session-persistence value opened as an OIDC cookie")
	}
	if _, err := newCookieSealer(make([]byte, 16)); err == nil {
		t.Fatal("a 16-byte session key was taken")
	}
}

func TestChunkedCookiesRoundTrip(t *testing.T) {
	base := http.Cookie{Name: "p-session", Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
	for _, size := range []int{10, cookieChunkBytes - 2, cookieChunkBytes, 3*cookieChunkBytes + 7} {
		value := strings.Repeat("a", size-1) + "z"
		rec := httptest.NewRecorder()
		if !setChunked(rec.Header(), base, value, 0) {
			t.Fatalf("%d bytes: not set", size)
		}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		for _, c := range (&http.Response{Header: rec.Header()}).Cookies() {
			if len(c.Name)+len(c.Value) > 4000 {
				t.Fatalf("%d bytes: a chunk of %d bytes", size, len(c.Value))
			}
			if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode {
				t.Fatalf("chunk %s is not HttpOnly SameSite=Lax", c.Name)
			}
			req.AddCookie(c)
		}
		got, n := readChunked(req, "p-session")
		if got != value {
			t.Fatalf("%d bytes: read back %d bytes in %d chunks", size, len(got), n)
		}
	}
	if setChunked(httptest.NewRecorder().Header(), base, strings.Repeat("a", cookieMaxChunks*cookieChunkBytes), 0) {
		t.Fatal("a value larger than every chunk together was set")
	}
}

func TestChunkedCookiesRefuseStaleChunks(t *testing.T) {
	// A first chunk that announces two, with the second missing, is no
	// value: a stale chunk never joins a shorter value either, as the
	// count bounds what is read.
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(&http.Cookie{Name: "p-session", Value: "2.abc"})
	if v, _ := readChunked(req, "p-session"); v != "" {
		t.Fatalf("a value with a missing chunk was read: %q", v)
	}
	req = httptest.NewRequest(http.MethodGet, "/", nil)
	req.AddCookie(&http.Cookie{Name: "p-session", Value: "1.abc"})
	req.AddCookie(&http.Cookie{Name: "p-session-1", Value: "stale"})
	if v, _ := readChunked(req, "p-session"); v != "abc" {
		t.Fatalf("read %q, want abc without the stale chunk", v)
	}
	// Shrinking clears the chunks the request had beyond the new count.
	rec := httptest.NewRecorder()
	setChunked(rec.Header(), http.Cookie{Name: "p-session"}, "short", 3)
	cleared := 0
	for _, c := range (&http.Response{Header: rec.Header()}).Cookies() {
		if c.MaxAge < 0 {
			cleared++
		}
	}
	if cleared != 2 {
		t.Fatalf("%d stale chunks cleared, want 2", cleared)
	}
}

func TestStripCookiesKeepsOthers(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header["Cookie"] = []string{"a=1; portico-oidc-session=1.x; b=2", "portico-oidc-session-1=y;c=3"}
	stripCookies(req, "portico-oidc-")
	if got := req.Header["Cookie"]; len(got) != 1 || got[0] != "a=1; b=2; c=3" {
		t.Fatalf("Cookie = %q", got)
	}
	req.Header["Cookie"] = []string{"portico-oidc-session=1.x"}
	stripCookies(req, "portico-oidc-")
	if _, ok := req.Header["Cookie"]; ok {
		t.Fatal("an empty Cookie header was left")
	}
}
