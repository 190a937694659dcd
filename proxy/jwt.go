package proxy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/jose"
)

// Bounds of remote JWKS fetching.
const (
	// jwksMaxBytes bounds a JWKS answer.
	jwksMaxBytes = 1 << 20
	// jwksTimeout bounds one fetch.
	jwksTimeout = 5 * time.Second
	// jwksMinRefetch is the least time between two fetches a token of an
	// unknown key ID asks for: a rotation is picked up within it, and a
	// flood of made-up key IDs costs one fetch per period.
	jwksMinRefetch = 10 * time.Second
)

// Bounds of the cache of verified tokens: entries, and the memory their
// claims take (an estimate, tokenCost).
const (
	tokensMax      = 16384
	tokensMaxBytes = 32 << 20
)

// errTokenPlace: a token of a provider that does not look where it was
// found (a cookie's token for a provider that reads only headers).
var errTokenPlace = errors.New("token found where its provider does not look for one")

// jwt checks the request's token against j.
func (g *guard) jwt(w http.ResponseWriter, r *http.Request, j *config.JWTAuth) bool {
	const challenge = `Bearer realm="portico"`
	found, ok := findToken(r, j)
	if !ok {
		// Two values in one place, or two different tokens: which one a
		// backend or a log would take is not ours to guess.
		g.note(w, "jwt", securityMalformed)
		g.refuse(w, r, http.StatusBadRequest, "")
		return false
	}
	if found.token == "" {
		g.note(w, "jwt", securityMissing)
		g.refuse(w, r, http.StatusUnauthorized, challenge)
		return false
	}
	claims, p, err := g.verifyToken(r.Context(), j, found.token, time.Now())
	if err == nil && !found.readBy(p) {
		err = errTokenPlace
	}
	if err != nil {
		if g.log != nil {
			g.log.Debug("token refused", zap.Error(err))
		}
		g.note(w, "jwt", securityDenied)
		g.refuse(w, r, http.StatusUnauthorized, challenge+`, error="invalid_token"`)
		return false
	}
	if !claimsSatisfy(claims, j) {
		g.note(w, "jwt", securityForbidden)
		g.refuse(w, r, http.StatusForbidden, "")
		return false
	}
	if !j.ForwardToken {
		found.remove(r)
	}
	for _, ch := range p.ClaimToHeaders {
		delete(r.Header, ch.Header)
		if v, ok := claims.Lookup(ch.ClaimPath()); ok {
			if s, ok := claimHeaderValue(v); ok {
				r.Header[ch.Header] = []string{s}
			}
		}
	}
	g.note(w, "jwt", securityAllowed)
	return true
}

// securityForbidden: a verified token without a required claim or scope.
const securityForbidden = "forbidden"

// foundToken is the request's token and the places that hold it (in an
// array: no allocation for the usual one or two).
type foundToken struct {
	token string
	first [2]config.TokenSource
	n     int
	more  []config.TokenSource
}

func (f *foundToken) add(src config.TokenSource) {
	if f.n < len(f.first) {
		f.first[f.n] = src
		f.n++
		return
	}
	f.more = append(f.more, src)
}

func (f *foundToken) holds(src config.TokenSource) bool {
	return slices.Contains(f.first[:f.n], src) || slices.Contains(f.more, src)
}

// sources are the places p looks in; def is where the default is put (so
// that it is not allocated).
func sources(p *config.JWTProvider, def *[1]config.TokenSource) []config.TokenSource {
	if len(p.ExtractFrom) > 0 {
		return p.ExtractFrom
	}
	def[0] = config.DefaultTokenSource
	return def[:]
}

// findToken looks for a token in every place j's providers name, in
// their order. False: a place holds more than one value (two
// Authorization headers, a cookie or parameter twice), or two places
// hold different tokens.
func findToken(r *http.Request, j *config.JWTAuth) (foundToken, bool) {
	var f foundToken
	var def [1]config.TokenSource
	var seenBuf [8]config.TokenSource
	seen := seenBuf[:0]
	for _, p := range j.Providers {
		for _, src := range sources(p, &def) {
			if slices.Contains(seen, src) {
				continue
			}
			seen = append(seen, src)
			t, ok := tokenAt(r, src)
			switch {
			case !ok:
				return foundToken{}, false
			case t == "":
			case f.token == "":
				f.token = t
				f.add(src)
			case t != f.token:
				return foundToken{}, false
			default:
				f.add(src)
			}
		}
	}
	return f, true
}

// tokenAt is the token src holds, "" for none; false when src holds more
// than one value.
func tokenAt(r *http.Request, src config.TokenSource) (string, bool) {
	switch {
	case src.Header != "":
		vals := r.Header[src.Header]
		if len(vals) > 1 {
			return "", false
		}
		if len(vals) == 0 {
			return "", true
		}
		v := strings.TrimSpace(vals[0])
		if len(v) < len(src.ValuePrefix) || !strings.EqualFold(v[:len(src.ValuePrefix)], src.ValuePrefix) {
			return "", true
		}
		return strings.TrimSpace(v[len(src.ValuePrefix):]), true
	case src.Cookie != "":
		var t string
		n := 0
		for _, line := range r.Header["Cookie"] {
			for part := range strings.SplitSeq(line, ";") {
				name, v, _ := strings.Cut(strings.TrimSpace(part), "=")
				if name == src.Cookie {
					n++
					t = strings.TrimSuffix(strings.TrimPrefix(v, `"`), `"`)
				}
			}
		}
		return t, n <= 1
	default:
		t, _, many, _ := takeQueryParam(r.URL.RawQuery, src.Param)
		return t, !many
	}
}

// readBy reports whether p looks in one of the places that hold f.
func (f *foundToken) readBy(p *config.JWTProvider) bool {
	var def [1]config.TokenSource
	return slices.ContainsFunc(sources(p, &def), f.holds)
}

// remove takes f's token out of every place that holds it: the header,
// the cookie, the query parameter.
func (f *foundToken) remove(r *http.Request) {
	for _, src := range append(f.first[:f.n:f.n], f.more...) {
		switch {
		case src.Header != "":
			delete(r.Header, src.Header)
		case src.Cookie != "":
			removeCookie(r.Header, src.Cookie)
		default:
			if _, found, _, rest := takeQueryParam(r.URL.RawQuery, src.Param); found {
				r.URL.RawQuery = rest
				r.URL.ForceQuery = false
			}
		}
	}
}

// removeCookie takes the cookie name out of h's Cookie headers, leaving
// the others as they were sent; a header left with none is removed.
func removeCookie(h http.Header, name string) {
	var out []string
	for _, line := range h["Cookie"] {
		var kept []string
		for part := range strings.SplitSeq(line, ";") {
			if n, _, _ := strings.Cut(strings.TrimSpace(part), "="); n != name && strings.TrimSpace(part) != "" {
				kept = append(kept, strings.TrimSpace(part))
			}
		}
		if len(kept) > 0 {
			out = append(out, strings.Join(kept, "; "))
		}
	}
	if len(out) == 0 {
		delete(h, "Cookie")
		return
	}
	h["Cookie"] = out
}

// verifiedToken is a token verified lately; never changed once in the
// cache.
type verifiedToken struct {
	provider string   // the ID of the provider whose keys verified it
	keys     [16]byte // the fingerprint of the key set that did
	exp      time.Time
	// claims are every claim when full, else only those CheckClaims
	// reads (the policy that verified it read no other); payload is the
	// token's JSON, to decode every claim from when a policy needs them.
	claims  jose.Claims
	full    bool
	payload []byte
	cost    int
}

// verifyToken verifies token with the provider its "iss" names and
// checks its time and audience. A token verified before is taken from
// the cache while it has not expired and the provider's key set is the
// one that verified it: a rotation, or a key removed from the issuer's
// JWKS, makes it verified anew.
func (g *guard) verifyToken(ctx context.Context, j *config.JWTAuth, token string, now time.Time) (jose.Claims, *config.JWTProvider, error) {
	if len(token) > jose.MaxToken {
		return nil, nil, jose.ErrMalformed
	}
	key := sha256.Sum256([]byte(token))
	full := readsClaims(j)
	if v := g.tokens.get(key); v != nil {
		for _, p := range j.Providers {
			if p.ID != v.provider || !now.Before(v.exp) {
				continue
			}
			if set, _ := g.keySet(ctx, p); set == nil || set.Fingerprint != v.keys {
				continue
			}
			if full && !v.full {
				claims, err := jose.ParseClaims(v.payload)
				if err != nil {
					return nil, nil, err
				}
				w := *v
				w.claims, w.full = claims, true
				w.cost = tokenCost(len(w.payload), true)
				g.tokens.add(key, &w)
				return claims, p, nil
			}
			return v.claims, p, nil
		}
	}
	t, err := jose.Parse(token)
	if err != nil {
		return nil, nil, err
	}
	if !jose.Accepted(t.Header.Alg) {
		return nil, nil, fmt.Errorf("%w: %q", jose.ErrAlgorithm, t.Header.Alg)
	}
	parse := jose.ParseRegistered
	if full {
		parse = jose.ParseClaims
	}
	claims, err := parse(t.Payload)
	if err != nil {
		return nil, nil, err
	}
	var p *config.JWTProvider
	for _, pr := range j.Providers {
		if pr.Issuer == claims.Issuer() {
			p = pr
		}
	}
	if p == nil {
		return nil, nil, jose.ErrIssuer
	}
	set, err := g.verifySignature(ctx, p, t)
	if err != nil {
		return nil, nil, err
	}
	if err := claims.CheckClaims(jose.Expect{Issuer: p.Issuer, Audiences: p.Audiences, Now: now, Skew: p.ClockSkew}); err != nil {
		return nil, nil, err
	}
	exp, _ := claims.Expiry()
	g.tokens.add(key, &verifiedToken{provider: p.ID, keys: set.Fingerprint, exp: exp, claims: claims, full: full,
		payload: t.Payload, cost: tokenCost(len(t.Payload), full)})
	return claims, p, nil
}

// readsClaims reports whether j reads claims beyond those every token's
// verification does: required claims or scopes, claims to headers.
func readsClaims(j *config.JWTAuth) bool {
	if len(j.RequiredClaims) > 0 || len(j.RequiredScopes) > 0 {
		return true
	}
	for _, p := range j.Providers {
		if len(p.ClaimToHeaders) > 0 {
			return true
		}
	}
	return false
}

// keySet is p's key set as it is now: its local one, or the one fetched
// (fetched now when there is none yet; refreshed in the background when
// older than p.CacheDuration).
func (g *guard) keySet(ctx context.Context, p *config.JWTProvider) (*jose.KeySet, error) {
	if set := p.LocalKeys(); set != nil {
		return set, nil
	}
	set, err := g.jwks.entry(p.RemoteJWKS).keys(ctx, g.jwks, p.CacheDuration)
	if set == nil {
		return nil, fmt.Errorf("JWKS of %s: %w", p.Issuer, err)
	}
	return set, nil
}

// verifySignature checks t with p's keys and returns the set that
// verified it; a key ID the fetched set lacks asks for the set again (at
// most every jwksMinRefetch), so a rotation at the issuer is picked up
// without a restart.
func (g *guard) verifySignature(ctx context.Context, p *config.JWTProvider, t *jose.Token) (*jose.KeySet, error) {
	set, err := g.keySet(ctx, p)
	if err != nil {
		return nil, err
	}
	err = t.Verify(set)
	if errors.Is(err, jose.ErrUnknownKey) && p.LocalKeys() == nil {
		if fresh := g.jwks.entry(p.RemoteJWKS).refetch(ctx, g.jwks); fresh != nil && fresh != set {
			set, err = fresh, t.Verify(fresh)
		}
	}
	if err != nil {
		return nil, err
	}
	return set, nil
}

// claimsSatisfy reports whether claims hold j's required claims and
// scopes.
func claimsSatisfy(claims jose.Claims, j *config.JWTAuth) bool {
	for _, rc := range j.RequiredClaims {
		v, ok := claims.Lookup(rc.ClaimPath())
		if !ok || !slices.ContainsFunc(rc.Values, func(want string) bool { return jose.Matches(v, want) }) {
			return false
		}
	}
	if len(j.RequiredScopes) == 0 {
		return true
	}
	var scopes []string
	if s, ok := claims["scope"].(string); ok {
		scopes = strings.Fields(s)
	}
	for _, s := range claims.Strings("scp") {
		scopes = append(scopes, strings.Fields(s)...)
	}
	for _, want := range j.RequiredScopes {
		if !slices.Contains(scopes, want) {
			return false
		}
	}
	return true
}

// claimHeaderValue is a claim's value as a header's (jose.Text); false
// for one a header cannot carry safely: a control character (CR, LF and
// NUL among them, which would end or cut the header), or longer than
// config.MaxClaimHeader.
func claimHeaderValue(v any) (string, bool) {
	s, ok := jose.Text(v)
	if !ok || len(s) > config.MaxClaimHeader {
		return "", false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", false
		}
	}
	return s, true
}

// tokenCost estimates the memory a cached token takes: the entry, its
// payload, and its claims (a decoded map of every claim holds about twice
// the payload's JSON; the registered claims alone a few hundred bytes).
func tokenCost(payload int, full bool) int {
	if full {
		return 512 + 3*payload
	}
	return 512 + payload
}

// tokenCache holds tokens verified lately, by the SHA-256 of the token
// (a token itself is never a key), bounded in entries and in the memory
// their claims take: two generations, the current one filled until it
// holds half the bounds, then made the previous one (the previous one
// dropped), so tokens in use stay and a flood of new ones pushes out
// only what is not used.
type tokenCache struct {
	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]*verifiedToken
	curCost   int
	prevCost  int
	// maxEntries and maxBytes are the bounds (tokensMax and
	// tokensMaxBytes when zero; tests lower them).
	maxEntries, maxBytes int
}

func (c *tokenCache) bounds() (int, int) {
	n, b := c.maxEntries, c.maxBytes
	if n == 0 {
		n = tokensMax
	}
	if b == 0 {
		b = tokensMaxBytes
	}
	return n, b
}

func (c *tokenCache) get(k [sha256.Size]byte) *verifiedToken {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v := c.cur[k]; v != nil {
		return v
	}
	v := c.prev[k]
	if v != nil {
		delete(c.prev, k)
		c.prevCost -= v.cost
		c.addLocked(k, v)
	}
	return v
}

func (c *tokenCache) add(k [sha256.Size]byte, v *verifiedToken) {
	c.mu.Lock()
	c.addLocked(k, v)
	c.mu.Unlock()
}

func (c *tokenCache) addLocked(k [sha256.Size]byte, v *verifiedToken) {
	maxEntries, maxBytes := c.bounds()
	if v.cost > maxBytes/2 {
		return
	}
	if old := c.cur[k]; old != nil {
		c.curCost -= old.cost
	} else if c.cur == nil || len(c.cur) >= maxEntries/2 || c.curCost+v.cost > maxBytes/2 {
		c.prev, c.prevCost = c.cur, c.curCost
		c.cur, c.curCost = make(map[[sha256.Size]byte]*verifiedToken), 0
	}
	c.cur[k] = v
	c.curCost += v.cost
}

// size is how many tokens the cache holds and their estimated cost.
func (c *tokenCache) size() (entries, cost int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev), c.curCost + c.prevCost
}

func (c *tokenCache) reset() {
	c.mu.Lock()
	c.cur, c.prev, c.curCost, c.prevCost = nil, nil, 0, 0
	c.mu.Unlock()
}

// jwksStore holds the remote key sets, by URI (from the configuration,
// never from a request), across configurations.
type jwksStore struct {
	client *http.Client
	// timeout bounds one fetch (jwksTimeout; tests shorten it).
	timeout atomic.Int64
	log     *zap.Logger
	mu      sync.Mutex
	sets    map[string]*jwksEntry
}

func newJWKSStore(log *zap.Logger) *jwksStore {
	s := &jwksStore{client: &http.Client{}, log: log, sets: map[string]*jwksEntry{}}
	s.timeout.Store(int64(jwksTimeout))
	return s
}

func (s *jwksStore) entry(uri string) *jwksEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.sets[uri]
	if e == nil {
		e = &jwksEntry{uri: uri}
		s.sets[uri] = e
	}
	return e
}

// jwksEntry is one URI's set: the last one fetched, served while newer
// fetches fail.
type jwksEntry struct {
	uri string
	set atomic.Pointer[jose.KeySet]
	// fetching is held by the one fetch at a time.
	fetching sync.Mutex
	mu       sync.Mutex // guards the times
	fetched  time.Time  // the last fetch that succeeded
	tried    time.Time  // the last fetch
}

// keys is the set to verify with: fetched now when there is none yet;
// refreshed in the background once older than ttl, the stale one served
// meanwhile (and for as long as the issuer fails).
func (e *jwksEntry) keys(ctx context.Context, s *jwksStore, ttl time.Duration) (*jose.KeySet, error) {
	set := e.set.Load()
	if set == nil {
		return e.fetch(ctx, s, 0)
	}
	e.mu.Lock()
	stale := time.Since(e.fetched) > ttl && time.Since(e.tried) > jwksMinRefetch
	e.mu.Unlock()
	if stale && e.fetching.TryLock() {
		go func() {
			defer e.fetching.Unlock()
			_, _ = e.fetchLocked(context.Background(), s)
		}()
	}
	return set, nil
}

// refetch fetches the set again for a key ID it lacks, unless it was
// fetched less than jwksMinRefetch ago; the set after it.
func (e *jwksEntry) refetch(ctx context.Context, s *jwksStore) *jose.KeySet {
	set, _ := e.fetch(ctx, s, jwksMinRefetch)
	return set
}

// fetch fetches the set, one caller at a time, unless another fetch
// happened within minGap (0: unless there is a set).
func (e *jwksEntry) fetch(ctx context.Context, s *jwksStore, minGap time.Duration) (*jose.KeySet, error) {
	e.fetching.Lock()
	defer e.fetching.Unlock()
	e.mu.Lock()
	recent := time.Since(e.tried) < minGap
	e.mu.Unlock()
	if set := e.set.Load(); set != nil && (minGap == 0 || recent) {
		return set, nil
	}
	if set := e.set.Load(); set == nil && time.Since(e.tried) < time.Second {
		// A set that failed to come a moment ago: do not have every
		// request wait for the issuer again.
		return nil, errors.New("the JWKS could not be fetched a moment ago")
	}
	return e.fetchLocked(ctx, s)
}

func (e *jwksEntry) fetchLocked(ctx context.Context, s *jwksStore) (*jose.KeySet, error) {
	e.mu.Lock()
	e.tried = time.Now()
	e.mu.Unlock()
	set, err := s.get(ctx, e.uri)
	if err != nil {
		if s.log != nil {
			s.log.Warn("JWKS fetch failed; the keys fetched before, if any, stay in use", zap.String("uri", e.uri), zap.Error(err))
		}
		return e.set.Load(), err
	}
	e.set.Store(set)
	e.mu.Lock()
	e.fetched = time.Now()
	e.mu.Unlock()
	return set, nil
}

// get fetches and parses one JWKS, within s.timeout and jwksMaxBytes.
func (s *jwksStore) get(ctx context.Context, uri string) (*jose.KeySet, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.timeout.Load()))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, uri, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(body) > jwksMaxBytes {
		return nil, fmt.Errorf("answer larger than %d bytes", jwksMaxBytes)
	}
	return jose.ParseKeySet(body)
}
