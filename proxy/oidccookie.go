package proxy

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// oidcKeyLabel is the HKDF info that makes the OIDC cookie key from the
// session key: a key of its own, so that no value sealed for session
// persistence opens as an OIDC cookie, nor the other way.
const oidcKeyLabel = "portico oidc cookie v1"

// Errors of opening a sealed cookie; neither says more than that to a
// client.
var (
	errCookieInvalid = errors.New("cookie does not open with the key (tampered, another key, another purpose)")
	errCookieExpired = errors.New("cookie has expired")
)

// cookieSealer encrypts and authenticates cookie values (AES-256-GCM)
// with a key every replica derives from the same session key.
type cookieSealer struct {
	aead cipher.AEAD
}

// newCookieSealer derives the key from sessionKey (32 bytes; empty: a
// random key of the process, as session persistence does).
func newCookieSealer(sessionKey []byte) (*cookieSealer, error) {
	if len(sessionKey) == 0 {
		sessionKey = make([]byte, 32)
		rand.Read(sessionKey) // never fails (crypto/rand)
	}
	if len(sessionKey) != 32 {
		return nil, fmt.Errorf("oidc cookie key: session key of %d bytes, want 32", len(sessionKey))
	}
	key, err := hkdf.Key(sha256.New, sessionKey, nil, oidcKeyLabel, 32)
	if err != nil {
		return nil, fmt.Errorf("oidc cookie key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("oidc cookie key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("oidc cookie key: %w", err)
	}
	return &cookieSealer{aead: aead}, nil
}

// seal is payload sealed until exp, for purpose (what the cookie is) and
// scope (whose it is: the provider and client), both authenticated and
// neither carried: a value sealed for one purpose or scope does not open
// for another.
func (s *cookieSealer) seal(purpose, scope string, exp time.Time, payload []byte) string {
	ns := s.aead.NonceSize()
	plain := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint64(plain, uint64(exp.Unix()))
	plain = append(plain, payload...)
	buf := make([]byte, ns, ns+len(plain)+s.aead.Overhead())
	rand.Read(buf[:ns]) // never fails (crypto/rand)
	buf = s.aead.Seal(buf, buf[:ns], plain, []byte(purpose+"\x00"+scope))
	return base64.RawURLEncoding.EncodeToString(buf)
}

// open is the payload of a value seal made for purpose and scope, if it
// has not expired at now.
func (s *cookieSealer) open(purpose, scope, value string, now time.Time) ([]byte, error) {
	raw, err := base64.RawURLEncoding.DecodeString(value)
	ns := s.aead.NonceSize()
	if err != nil || len(raw) < ns+8+s.aead.Overhead() {
		return nil, errCookieInvalid
	}
	plain, err := s.aead.Open(nil, raw[:ns], raw[ns:], []byte(purpose+"\x00"+scope))
	if err != nil || len(plain) < 8 {
		return nil, errCookieInvalid
	}
	exp := int64(binary.BigEndian.Uint64(plain))
	if now.Unix() >= exp {
		return nil, errCookieExpired
	}
	return plain[8:], nil
}

// Chunks of a cookie too large for one: browsers keep about 4096 bytes
// of name and value per cookie.
const (
	cookieChunkBytes = 3800
	cookieMaxChunks  = 9
)

// chunkName is the name of chunk i of cookie name.
func chunkName(name string, i int) string {
	if i == 0 {
		return name
	}
	return name + "-" + strconv.Itoa(i)
}

// setChunked sets cookie name to value, in chunks when it is large: the
// first carries their count ("3.…"), so that a stale chunk of a longer
// value never joins a shorter one. Chunks of a longer value the request
// had (had) are cleared. False when the value is too large for
// cookieMaxChunks chunks.
func setChunked(h http.Header, base http.Cookie, value string, had int) bool {
	n := (len(value) + 2 + cookieChunkBytes - 1) / cookieChunkBytes
	if n > cookieMaxChunks {
		return false
	}
	value = strconv.Itoa(n) + "." + value
	name := base.Name
	for i := 0; i < n; i++ {
		end := min(len(value), (i+1)*cookieChunkBytes)
		c := base
		c.Name, c.Value = chunkName(name, i), value[i*cookieChunkBytes:end]
		h.Add("Set-Cookie", c.String())
	}
	for i := n; i < had; i++ {
		c := base
		c.Name, c.Value, c.MaxAge = chunkName(name, i), "", -1
		h.Add("Set-Cookie", c.String())
	}
	return true
}

// clearChunked clears the had chunks of cookie name.
func clearChunked(h http.Header, base http.Cookie, had int) {
	for i := 0; i < max(had, 1); i++ {
		c := base
		c.Name, c.Value, c.MaxAge = chunkName(base.Name, i), "", -1
		h.Add("Set-Cookie", c.String())
	}
}

// readChunked is the value of cookie name in r, joined from its chunks,
// and how many chunks of that name r holds (to clear them).
func readChunked(r *http.Request, name string) (value string, had int) {
	first, err := r.Cookie(name)
	if err != nil {
		return "", 0
	}
	count, rest, ok := strings.Cut(first.Value, ".")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n < 1 || n > cookieMaxChunks {
		return "", 1
	}
	var b strings.Builder
	b.WriteString(rest)
	for i := 1; i < n; i++ {
		c, err := r.Cookie(chunkName(name, i))
		if err != nil {
			return "", i
		}
		b.WriteString(c.Value)
	}
	return b.String(), n
}

// stripCookies removes from r's Cookie headers those whose name starts
// with prefix, leaving the others as they were sent: the backend never
// sees the session.
func stripCookies(r *http.Request, prefix string) {
	vals := r.Header["Cookie"]
	if len(vals) == 0 {
		return
	}
	var kept []string
	for _, v := range vals {
		for part := range strings.SplitSeq(v, ";") {
			p := strings.TrimSpace(part)
			if p == "" || strings.HasPrefix(p, prefix) {
				continue
			}
			kept = append(kept, p)
		}
	}
	if len(kept) == 0 {
		delete(r.Header, "Cookie")
		return
	}
	r.Header["Cookie"] = []string{strings.Join(kept, "; ")}
}
