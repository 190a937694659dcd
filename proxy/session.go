package proxy

import (
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
	"time"

	"portico.dev/portico/config"
)

// Session persistence (config.SessionPersistence). A session's value is
// the endpoint's address and the time the session was opened, sealed with
// AES-GCM under the data plane's key, the session's name (cookie or
// header) as associated data: the address is not readable, and a value a
// client changed, made up or took from another session name fails to
// open and counts as none. Its time is what absoluteTimeout is measured
// from, so no cookie attribute a client rewrites extends it.

// sessionSealer seals and opens session values. It is the forwarder's,
// kept across configurations, so sessions survive a reload.
type sessionSealer struct {
	aead cipher.AEAD
}

// newSessionSealer makes a sealer of a 32-byte key, or of a random one
// when key is empty.
func newSessionSealer(key []byte) (*sessionSealer, error) {
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("session key: %w", err)
		}
	}
	if len(key) != 32 {
		return nil, fmt.Errorf("session key: %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("session key: %w", err)
	}
	return &sessionSealer{aead: aead}, nil
}

// seal is the value of a session of name to addr opened at now.
func (s *sessionSealer) seal(name, addr string, now time.Time) string {
	ns := s.aead.NonceSize()
	buf := make([]byte, ns, ns+8+len(addr)+s.aead.Overhead())
	rand.Read(buf) // never fails (crypto/rand)
	pt := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(addr)), uint64(now.UnixMilli()))
	pt = append(pt, addr...)
	return base64.RawURLEncoding.EncodeToString(s.aead.Seal(buf, buf, pt, []byte(name)))
}

// maxSessionValue bounds what is decoded of a client's value: an IPv6
// address with a port sealed is far shorter.
const maxSessionValue = 256

// open is the address and opening time of value, false when it is not a
// value seal made for name.
func (s *sessionSealer) open(name, value string) (string, time.Time, bool) {
	if len(value) > maxSessionValue {
		return "", time.Time{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(value)
	ns := s.aead.NonceSize()
	if err != nil || len(raw) < ns+8+s.aead.Overhead() {
		return "", time.Time{}, false
	}
	pt, err := s.aead.Open(nil, raw[:ns], raw[ns:], []byte(name))
	if err != nil || len(pt) < 8 {
		return "", time.Time{}, false
	}
	return string(pt[8:]), time.UnixMilli(int64(binary.BigEndian.Uint64(pt))), true
}

// session is what a request of a rule with session persistence keeps:
// the endpoint its valid session names, if any, and the value to answer
// with when the request goes elsewhere (a new session).
type session struct {
	sp *config.SessionPersistence
	// pinned is the session's endpoint, its index in its Endpoints; ""
	// when the request carries no valid session.
	pinned string
	index  int
	// header and value are added to the answer; value "" adds nothing.
	header, value string
}

// valueOf is the session value r carries, "" for none.
func valueOf(r *http.Request, sp *config.SessionPersistence) string {
	if sp.Type == config.SessionHeader {
		if v := r.Header[sp.Name]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	v, _ := cookieValue(r.Header["Cookie"], sp.Name)
	return v
}

// stick opens the session r carries for rule and returns the backend and
// endpoint it names, when it is still valid: within its absolute
// timeout, the endpoint one of a backend of the rule, neither down nor
// ejected. The backend is nil otherwise.
func (f *forwarder) stick(r *http.Request, rule *config.Rule, cfg *config.Config, s *session, now time.Time) *config.Backend {
	return f.stickIn(r, rule, rule.Backends, rule.Session, cfg, s, now)
}

// stickBackends is stick for a rule without a Session whose backends have
// sessions of their own (their Services' XBackendTrafficPolicies): the
// first backend whose session r carries, valid, and s takes its
// settings. Nil when there is none.
func (f *forwarder) stickBackends(r *http.Request, rule *config.Rule, cfg *config.Config, s *session, now time.Time) *config.Backend {
	for i := range rule.Backends {
		sp := rule.Backends[i].Session
		if sp == nil {
			continue
		}
		if b := f.stickIn(r, rule, rule.Backends[i:i+1], sp, cfg, s, now); b != nil {
			s.sp = sp
			return b
		}
	}
	return nil
}

// stickIn is stick among backends, for the session sp.
func (f *forwarder) stickIn(r *http.Request, rule *config.Rule, backends []config.Backend, sp *config.SessionPersistence, cfg *config.Config, s *session, now time.Time) *config.Backend {
	v := valueOf(r, sp)
	if v == "" {
		return nil
	}
	addr, opened, ok := f.sessions.Load().open(sp.Name, v)
	if !ok || sp.AbsoluteTimeout > 0 && now.Sub(opened) >= sp.AbsoluteTimeout || now.Before(opened.Add(-time.Minute)) {
		return nil
	}
	for i := range backends {
		b := &backends[i]
		if b.Weight <= 0 || b.Invalid != "" || b.Dispatch != 0 || b.Address != "" {
			continue
		}
		eps := cfg.Endpoints.Lookup(b.Key)
		if eps == nil {
			continue
		}
		j := slices.Index(eps.Addrs, addr)
		if j < 0 {
			continue
		}
		if f.down.isDown(addr, now) {
			return nil
		}
		if od := cmp.Or(b.Outlier, rule.Outlier); od != nil && f.outliers.ejected(addr, now) {
			return nil
		}
		if hc := cmp.Or(b.Active, rule.Active); hc != nil && f.health.any() && f.health.down(hc, addr) {
			return nil // unhealthy by its active check: a new session elsewhere
		}
		s.pinned, s.index = addr, j
		return b
	}
	return nil
}

// issue decides what the answer of an attempt to addr carries: nothing
// when addr is the session's endpoint, else a new session to addr.
func (s *session) issue(f *forwarder, r *http.Request, addr string, now time.Time) {
	if addr == s.pinned || addr == "" {
		s.value = ""
		return
	}
	v := f.sessions.Load().seal(s.sp.Name, addr, now)
	if s.sp.Type == config.SessionHeader {
		s.header, s.value = s.sp.Name, v
		return
	}
	c := http.Cookie{Name: s.sp.Name, Value: v, Path: s.sp.Path, HttpOnly: true, Secure: r.TLS != nil}
	if s.sp.Permanent {
		c.MaxAge = int(max(s.sp.AbsoluteTimeout/time.Second, 1))
		c.Expires = now.Add(s.sp.AbsoluteTimeout).UTC()
	}
	s.header, s.value = "Set-Cookie", c.String()
}

// apply adds the new session, if any, to the answer's header h.
func (s *session) apply(h http.Header) {
	switch {
	case s == nil || s.value == "":
	case s.header == "Set-Cookie":
		h["Set-Cookie"] = append(h["Set-Cookie"], s.value)
	default:
		h[s.header] = []string{s.value}
	}
}
