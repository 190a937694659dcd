package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
	// tokensMax bounds the cache of verified tokens.
	tokensMax = 16384
)

// jwt checks r's bearer token against j.
func (g *guard) jwt(w http.ResponseWriter, r *http.Request, j *config.JWTAuth) bool {
	const challenge = `Bearer realm="portico"`
	vals := r.Header["Authorization"]
	if len(vals) > 1 {
		g.note(w, "jwt", securityMalformed)
		g.refuse(w, r, http.StatusBadRequest, "")
		return false
	}
	token := ""
	if len(vals) == 1 {
		if scheme, t, ok := strings.Cut(strings.TrimSpace(vals[0]), " "); ok && strings.EqualFold(scheme, "Bearer") {
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		g.note(w, "jwt", securityMissing)
		g.refuse(w, r, http.StatusUnauthorized, challenge)
		return false
	}
	claims, p, err := g.verifyToken(r.Context(), j, token, time.Now())
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
		delete(r.Header, "Authorization")
	}
	for _, ch := range p.ClaimToHeaders {
		delete(r.Header, ch.Header)
		if v, ok := claimHeaderValue(claims[ch.Claim]); ok {
			r.Header[ch.Header] = []string{v}
		}
	}
	g.note(w, "jwt", securityAllowed)
	return true
}

// securityForbidden: a verified token without a required claim or scope.
const securityForbidden = "forbidden"

// verifiedToken is a token verified lately.
type verifiedToken struct {
	provider string // the ID of the provider whose keys verified it
	claims   jose.Claims
	exp      time.Time
}

// verifyToken verifies token with the provider its "iss" names and
// checks its time and audience; a token verified before (by the same
// provider's keys) is taken from the cache until it expires.
func (g *guard) verifyToken(ctx context.Context, j *config.JWTAuth, token string, now time.Time) (jose.Claims, *config.JWTProvider, error) {
	if len(token) > jose.MaxToken {
		return nil, nil, jose.ErrMalformed
	}
	key := sha256.Sum256([]byte(token))
	if v, ok := g.tokens.get(key); ok {
		for _, p := range j.Providers {
			if p.ID == v.provider && now.Before(v.exp.Add(p.ClockSkew)) {
				return v.claims, p, nil
			}
		}
	}
	t, err := jose.Parse(token)
	if err != nil {
		return nil, nil, err
	}
	if !jose.Accepted(t.Header.Alg) {
		return nil, nil, fmt.Errorf("%w: %q", jose.ErrAlgorithm, t.Header.Alg)
	}
	claims, err := jose.ParseClaims(t.Payload)
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
	if err := g.verifySignature(ctx, p, t); err != nil {
		return nil, nil, err
	}
	if err := claims.CheckClaims(jose.Expect{Issuer: p.Issuer, Audiences: p.Audiences, Now: now, Skew: p.ClockSkew}); err != nil {
		return nil, nil, err
	}
	exp, _ := claims.Expiry()
	g.tokens.add(key, verifiedToken{provider: p.ID, claims: claims, exp: exp})
	return claims, p, nil
}

// verifySignature checks t with p's keys; a key ID the fetched set lacks
// asks for the set again (at most every jwksMinRefetch), so a rotation at
// the issuer is picked up without a restart.
func (g *guard) verifySignature(ctx context.Context, p *config.JWTProvider, t *jose.Token) error {
	if set := p.LocalKeys(); set != nil {
		return t.Verify(set)
	}
	e := g.jwks.entry(p.RemoteJWKS)
	set, err := e.keys(ctx, g.jwks, p.CacheDuration)
	if set == nil {
		return fmt.Errorf("JWKS of %s: %w", p.Issuer, err)
	}
	err = t.Verify(set)
	if errors.Is(err, jose.ErrUnknownKey) {
		if fresh := e.refetch(ctx, g.jwks); fresh != nil && fresh != set {
			err = t.Verify(fresh)
		}
	}
	return err
}

// claimsSatisfy reports whether claims hold j's required claims and
// scopes.
func claimsSatisfy(claims jose.Claims, j *config.JWTAuth) bool {
	for _, rc := range j.RequiredClaims {
		found := false
		for _, v := range claims.Strings(rc.Name) {
			for _, want := range rc.Values {
				found = found || v == want
			}
		}
		if !found {
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
		found := false
		for _, s := range scopes {
			found = found || s == want
		}
		if !found {
			return false
		}
	}
	return true
}

// claimHeaderValue is a claim as a header value: a string as it is, any
// other JSON value in its JSON form; false for a missing claim or one a
// header cannot carry.
func claimHeaderValue(v any) (string, bool) {
	if v == nil {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return "", false
		}
		s = string(b)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return "", false
		}
	}
	return s, len(s) <= 8192
}

// tokenCache is a bounded map of verified tokens; full, it starts again
// empty.
type tokenCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]verifiedToken
}

func (c *tokenCache) get(k [sha256.Size]byte) (verifiedToken, bool) {
	c.mu.Lock()
	v, ok := c.entries[k]
	c.mu.Unlock()
	return v, ok
}

func (c *tokenCache) add(k [sha256.Size]byte, v verifiedToken) {
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= tokensMax {
		c.entries = map[[sha256.Size]byte]verifiedToken{}
	}
	c.entries[k] = v
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
