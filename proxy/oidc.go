package proxy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/jose"
)

// Bounds and lifetimes of the OIDC flow.
const (
	// oidcLoginTTL is how long a login may take, from the redirect to the
	// provider to the callback.
	oidcLoginTTL = 10 * time.Minute
	// oidcProviderTimeout bounds one exchange with the provider
	// (discovery, token endpoint).
	oidcProviderTimeout = 5 * time.Second
	// oidcDiscoveryTTL is how long a discovery document is used before it
	// is fetched again in the background; the last one is served while
	// the provider does not answer.
	oidcDiscoveryTTL = time.Hour
	// oidcDiscoveryRetry is the least time between two fetches of a
	// document that is due.
	oidcDiscoveryRetry = 10 * time.Second
	// oidcMaxAnswer bounds a provider's answer.
	oidcMaxAnswer = 1 << 20
	// oidcUsedMax bounds the states of callbacks already taken (replays
	// are refused); oidcRefreshedMax the refreshes remembered.
	oidcUsedMax      = 65536
	oidcRefreshedMax = 4096
	// oidcRefreshedTTL is how long the tokens of a refresh answer a
	// request that still carries the refresh token it replaced (sent
	// before the browser had the new cookie).
	oidcRefreshedTTL = 30 * time.Second
	// oidcRefreshRetry is how long a failed refresh answers the requests
	// that carry its refresh token before another is tried.
	oidcRefreshRetry = 10 * time.Second
)

// oidcFlows is the guard's OIDC state, across configurations: the
// cookie key, the providers' discovery documents, the states of
// callbacks taken and refreshes in flight.
type oidcFlows struct {
	sealer *cookieSealer
	client *http.Client
	// timeout bounds one exchange with a provider (tests shorten it).
	timeout   atomic.Int64
	log       *zap.Logger
	mu        sync.Mutex
	discovery map[string]*discoveryEntry // by issuer, from the configuration
	used      map[[sha256.Size]byte]time.Time
	refreshes map[[sha256.Size]byte]*refreshCall
	now       func() time.Time
}

func newOIDCFlows(sessionKey []byte, log *zap.Logger) *oidcFlows {
	sealer, err := newCookieSealer(sessionKey)
	if err != nil {
		if log != nil {
			log.Error("session key refused for OIDC cookies; a random one is used", zap.Error(err))
		}
		sealer, _ = newCookieSealer(nil)
	}
	f := &oidcFlows{sealer: sealer, client: &http.Client{
		// The provider's redirects are not followed: every endpoint is
		// one the configuration or the discovery document names.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}, log: log, discovery: map[string]*discoveryEntry{}, used: map[[sha256.Size]byte]time.Time{},
		refreshes: map[[sha256.Size]byte]*refreshCall{}, now: time.Now}
	f.timeout.Store(int64(oidcProviderTimeout))
	return f
}

// oidcSession is what the session cookie holds.
type oidcSession struct {
	IDToken      string `json:"i"`
	AccessToken  string `json:"a"`
	RefreshToken string `json:"r,omitempty"`
	// AccessExpiry is the access token's expiry (Unix seconds), 0 when
	// the provider did not say.
	AccessExpiry int64 `json:"x,omitempty"`
	// End is when the session ends whatever the tokens say.
	End int64 `json:"e"`
}

// oidcLogin is what a login cookie holds, from the redirect to the
// provider to the callback.
type oidcLogin struct {
	State       string `json:"s"`
	Nonce       string `json:"n"`
	Verifier    string `json:"v"`
	RedirectURI string `json:"r"`
	// URL is the path and query to go back to after the login.
	URL string `json:"u"`
}

// securityLogout is the result of a logout, in the access log and the
// metric.
const securityLogout = "logout"

// Purposes of the sealed cookies.
const (
	sealSession = "oidc-session"
	sealLogin   = "oidc-login"
)

// oidcScope is what a sealed cookie of o is bound to: a session of one
// provider or client is none of another's.
func oidcScope(o *config.OIDC) string { return o.Issuer + "\x00" + o.ClientID }

// oidc decides r under o: true when it has a session (refreshed if
// needed; the token o forwards set), false when it was answered (a
// redirect to the provider, the callback, the logout, a refusal).
func (g *guard) oidc(w http.ResponseWriter, r *http.Request, o *config.OIDC) bool {
	f := g.oidcFlows
	switch r.URL.Path {
	case o.RedirectPath:
		g.oidcCallback(w, r, o)
		return false
	case o.LogoutPath:
		g.oidcLogout(w, r, o)
		return false
	}
	now := f.now()
	value, had := readChunked(r, o.CookiePrefix+"-session")
	var s *oidcSession
	if value != "" {
		if plain, err := f.sealer.open(sealSession, oidcScope(o), value, now); err == nil {
			s = new(oidcSession)
			if json.Unmarshal(plain, s) != nil || s.AccessToken == "" {
				s = nil
			}
		}
	}
	if s != nil && s.AccessExpiry != 0 && !now.Add(o.RefreshBefore).Before(time.Unix(s.AccessExpiry, 0)) {
		refreshed := o.Refresh && s.RefreshToken != ""
		if refreshed {
			// A token still valid is renewed in the background: this
			// request does not wait for the provider, a later one takes
			// the new tokens.
			expired := !now.Before(time.Unix(s.AccessExpiry, 0))
			ns, err := g.oidcRefresh(r.Context(), o, s, now, expired)
			if err != nil {
				refreshed = false
				if g.log != nil && !errors.Is(err, errRefreshPending) {
					g.log.Info("OIDC refresh failed", zap.String("issuer", o.Issuer), zap.Error(err))
				}
			} else {
				s = ns
				g.setSession(w, r, o, s, had)
			}
		}
		if !refreshed && !now.Before(time.Unix(s.AccessExpiry, 0)) {
			// The access token has expired and could not be renewed:
			// the session is over.
			s = nil
		}
	}
	if s == nil {
		if had > 0 {
			clearChunked(w.Header(), g.cookie(r, o, o.CookiePrefix+"-session"), had)
		}
		g.oidcLogin(w, r, o, now)
		return false
	}
	g.note(w, "oidc", securityAllowed)
	stripCookies(r, o.CookiePrefix+"-")
	switch {
	case o.ForwardAccessToken:
		r.Header.Set("Authorization", "Bearer "+s.AccessToken)
	case o.ForwardIDToken:
		r.Header.Set("Authorization", "Bearer "+s.IDToken)
	}
	return true
}

// cookie is the base of a cookie of o: HttpOnly, SameSite=Lax, Secure on
// a TLS connection, the session's Domain.
func (g *guard) cookie(r *http.Request, o *config.OIDC, name string) http.Cookie {
	return http.Cookie{Name: name, Path: "/", Domain: o.CookieDomain, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode}
}

// setSession sets the session cookie of s.
func (g *guard) setSession(w http.ResponseWriter, r *http.Request, o *config.OIDC, s *oidcSession, had int) bool {
	plain, _ := json.Marshal(s)
	value := g.oidcFlows.sealer.seal(sealSession, oidcScope(o), time.Unix(s.End, 0), plain)
	c := g.cookie(r, o, o.CookiePrefix+"-session")
	c.Expires = time.Unix(s.End, 0)
	return setChunked(w.Header(), c, value, had)
}

// isNavigation reports whether r is a browser's page navigation, the
// only request a redirect to a login page makes sense for.
func isNavigation(r *http.Request) bool {
	if r.Method != http.MethodGet || isGRPC(r) {
		return false
	}
	if strings.EqualFold(r.Header.Get("X-Requested-With"), "XMLHttpRequest") {
		return false
	}
	if m := r.Header.Get("Sec-Fetch-Mode"); m != "" && m != "navigate" {
		return false
	}
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(strings.ToLower(v), "text/html") {
			return true
		}
	}
	return false
}

// oidcLogin answers a request without a session: a redirect to the
// provider for a navigation, 401 otherwise.
func (g *guard) oidcLogin(w http.ResponseWriter, r *http.Request, o *config.OIDC, now time.Time) {
	if !isNavigation(r) {
		g.note(w, "oidc", securityMissing)
		g.refuse(w, r, http.StatusUnauthorized, `Bearer realm="portico"`)
		return
	}
	d, err := g.oidcFlows.discover(r.Context(), o)
	if err != nil {
		g.oidcUnavailable(w, r, o, "discovery", err)
		return
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	back := r.URL.RequestURI()
	// Only a path of this host: "//host" and "/\host" are other hosts to
	// a browser.
	if !strings.HasPrefix(back, "/") || strings.HasPrefix(back, "//") || strings.HasPrefix(back, "/\\") {
		back = "/"
	}
	login := oidcLogin{State: randomToken(), Nonce: randomToken(), Verifier: randomToken() + randomToken(),
		RedirectURI: scheme + "://" + r.Host + o.RedirectPath, URL: back}
	plain, _ := json.Marshal(login)
	c := g.cookie(r, o, loginCookieName(o, login.State))
	c.Path = o.RedirectPath
	c.Domain = ""
	c.MaxAge = int(oidcLoginTTL / time.Second)
	c.Value = g.oidcFlows.sealer.seal(sealLogin, oidcScope(o), now.Add(oidcLoginTTL), plain)
	w.Header().Add("Set-Cookie", c.String())
	challenge := sha256.Sum256([]byte(login.Verifier))
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {o.ClientID},
		"redirect_uri":          {login.RedirectURI},
		"scope":                 {strings.Join(o.Scopes, " ")},
		"state":                 {login.State},
		"nonce":                 {login.Nonce},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(challenge[:])},
		"code_challenge_method": {"S256"},
	}
	target := d.AuthorizationEndpoint
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	g.note(w, "oidc", securityMissing)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target+sep+q.Encode(), http.StatusFound)
}

// loginCookieName names the login cookie of state: one per login, so
// that two tabs logging in at once do not undo each other.
func loginCookieName(o *config.OIDC, state string) string {
	sum := sha256.Sum256([]byte(state))
	return o.CookiePrefix + "-login-" + hex.EncodeToString(sum[:8])
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// oidcRefuseCallback refuses a callback: 400, its login cookie cleared.
func (g *guard) oidcRefuseCallback(w http.ResponseWriter, r *http.Request, o *config.OIDC, why string) {
	g.note(w, "oidc", securityDenied)
	if g.log != nil && g.refusals.first("oidc-callback\x00"+o.Issuer+"\x00"+why, time.Now()) {
		g.log.Info("OIDC callback refused", zap.String("issuer", o.Issuer), zap.String("reason", why))
	}
	w.Header().Set("Cache-Control", "no-store")
	writeError(w, http.StatusBadRequest)
}

// oidcCallback takes the provider's answer: the state must be the one
// of this browser's login cookie, not taken before; the code is
// exchanged (with the PKCE verifier) and the ID token verified before a
// session exists.
func (g *guard) oidcCallback(w http.ResponseWriter, r *http.Request, o *config.OIDC) {
	f := g.oidcFlows
	now := f.now()
	if r.Method != http.MethodGet {
		g.oidcRefuseCallback(w, r, o, "not a GET")
		return
	}
	q := r.URL.Query()
	state := q.Get("state")
	if state == "" || len(state) > 512 {
		g.oidcRefuseCallback(w, r, o, "no state")
		return
	}
	name := loginCookieName(o, state)
	lc, err := r.Cookie(name)
	if err != nil {
		g.oidcRefuseCallback(w, r, o, "no login cookie for the state (expired, another browser, or forged)")
		return
	}
	base := g.cookie(r, o, name)
	base.Path, base.Domain = o.RedirectPath, ""
	clearChunked(w.Header(), base, 1)
	plain, err := f.sealer.open(sealLogin, oidcScope(o), lc.Value, now)
	var login oidcLogin
	if err != nil || json.Unmarshal(plain, &login) != nil {
		g.oidcRefuseCallback(w, r, o, "login cookie does not open or has expired")
		return
	}
	if subtle.ConstantTimeCompare([]byte(login.State), []byte(state)) != 1 {
		g.oidcRefuseCallback(w, r, o, "state does not match the login cookie")
		return
	}
	if !f.claimState(state, now) {
		g.oidcRefuseCallback(w, r, o, "callback replayed")
		return
	}
	if e := q.Get("error"); e != "" {
		g.note(w, "oidc", securityDenied)
		writeError(w, http.StatusUnauthorized)
		return
	}
	code := q.Get("code")
	if code == "" {
		g.oidcRefuseCallback(w, r, o, "no code")
		return
	}
	d, err := f.discover(r.Context(), o)
	if err != nil {
		g.oidcUnavailable(w, r, o, "discovery", err)
		return
	}
	tok, err := f.tokenRequest(r.Context(), o, d, url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {login.RedirectURI},
		"code_verifier": {login.Verifier},
	})
	if err != nil {
		g.oidcUnavailable(w, r, o, "token endpoint", err)
		return
	}
	if tok.IDToken == "" || tok.AccessToken == "" {
		g.oidcRefuseCallback(w, r, o, "token answer without id_token or access_token")
		return
	}
	if _, err := g.verifyIDToken(r.Context(), o, d, tok.IDToken, login.Nonce, now); err != nil {
		g.oidcRefuseCallback(w, r, o, "ID token: "+err.Error())
		return
	}
	s := &oidcSession{IDToken: tok.IDToken, AccessToken: tok.AccessToken, RefreshToken: tok.RefreshToken, End: now.Add(o.SessionLifetime).Unix()}
	if tok.ExpiresIn > 0 {
		s.AccessExpiry = now.Add(time.Duration(tok.ExpiresIn) * time.Second).Unix()
	}
	_, had := readChunked(r, o.CookiePrefix+"-session")
	if !g.setSession(w, r, o, s, had) {
		g.oidcRefuseCallback(w, r, o, "tokens too large for the session cookie")
		return
	}
	g.note(w, "oidc", securityAllowed)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, login.URL, http.StatusFound)
}

// oidcLogout clears the session and sends the browser to the provider's
// end_session_endpoint, or to the post-logout URL or "/".
func (g *guard) oidcLogout(w http.ResponseWriter, r *http.Request, o *config.OIDC) {
	f := g.oidcFlows
	value, had := readChunked(r, o.CookiePrefix+"-session")
	var s oidcSession
	if value != "" {
		if plain, err := f.sealer.open(sealSession, oidcScope(o), value, f.now()); err == nil {
			_ = json.Unmarshal(plain, &s)
		}
	}
	clearChunked(w.Header(), g.cookie(r, o, o.CookiePrefix+"-session"), had)
	target := o.PostLogoutRedirectURL
	if target == "" {
		target = "/"
	}
	end := o.EndSessionEndpoint
	if end == "" {
		// A provider that is down does not keep the session here.
		if d, err := f.discover(r.Context(), o); err == nil {
			end = d.EndSessionEndpoint
		}
	}
	if end != "" {
		q := url.Values{"client_id": {o.ClientID}}
		if s.IDToken != "" {
			q.Set("id_token_hint", s.IDToken)
		}
		if o.PostLogoutRedirectURL != "" {
			q.Set("post_logout_redirect_uri", o.PostLogoutRedirectURL)
		}
		sep := "?"
		if strings.Contains(end, "?") {
			sep = "&"
		}
		target = end + sep + q.Encode()
	}
	g.note(w, "oidc", securityLogout)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, target, http.StatusFound)
}

// oidcUnavailable answers a request the provider could not serve: 503.
func (g *guard) oidcUnavailable(w http.ResponseWriter, r *http.Request, o *config.OIDC, what string, err error) {
	g.note(w, "oidc", securityUnavailable)
	if g.log != nil && g.refusals.first("oidc\x00"+o.Issuer+"\x00"+what, time.Now()) {
		g.log.Warn("OIDC provider did not serve a login", zap.String("issuer", o.Issuer), zap.String("step", what), zap.Error(err))
	}
	g.refuse(w, r, http.StatusServiceUnavailable, "")
}

// claimState records state as taken; false when it was.
func (f *oidcFlows) claimState(state string, now time.Time) bool {
	k := sha256.Sum256([]byte(state))
	f.mu.Lock()
	defer f.mu.Unlock()
	if exp, ok := f.used[k]; ok && now.Before(exp) {
		return false
	}
	if len(f.used) >= oidcUsedMax {
		for old, exp := range f.used {
			if !now.Before(exp) {
				delete(f.used, old)
			}
		}
		// Still full of live states: forget one. Its replay meets the
		// provider, which takes a code once.
		for old := range f.used {
			if len(f.used) < oidcUsedMax {
				break
			}
			delete(f.used, old)
		}
	}
	f.used[k] = now.Add(oidcLoginTTL)
	return true
}

// discovery is what Portico reads of a provider's discovery document,
// with the configuration's endpoints in place of its own.
type discovery struct {
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	EndSessionEndpoint    string   `json:"end_session_endpoint"`
	JWKSURI               string   `json:"jwks_uri"`
	AuthMethods           []string `json:"token_endpoint_auth_methods_supported"`
}

// discoveryEntry is one issuer's document: the last one fetched, served
// while newer fetches fail.
type discoveryEntry struct {
	doc      atomic.Pointer[discovery]
	fetching sync.Mutex
	mu       sync.Mutex
	fetched  time.Time
	tried    time.Time
}

// discover is o's provider's endpoints.
func (f *oidcFlows) discover(ctx context.Context, o *config.OIDC) (*discovery, error) {
	f.mu.Lock()
	e := f.discovery[o.Issuer]
	if e == nil {
		e = &discoveryEntry{}
		f.discovery[o.Issuer] = e
	}
	f.mu.Unlock()
	d := e.doc.Load()
	if d == nil {
		var err error
		if d, err = f.fetchDiscovery(ctx, e, o.Issuer, true); err != nil {
			return nil, err
		}
	} else {
		e.mu.Lock()
		stale := time.Since(e.fetched) > oidcDiscoveryTTL && time.Since(e.tried) > oidcDiscoveryRetry
		e.mu.Unlock()
		if stale && e.fetching.TryLock() {
			go func() {
				defer e.fetching.Unlock()
				_, _ = f.fetchDiscoveryLocked(context.Background(), e, o.Issuer)
			}()
		}
	}
	out := *d
	if o.AuthorizationEndpoint != "" {
		out.AuthorizationEndpoint = o.AuthorizationEndpoint
	}
	if o.TokenEndpoint != "" {
		out.TokenEndpoint = o.TokenEndpoint
	}
	if o.EndSessionEndpoint != "" {
		out.EndSessionEndpoint = o.EndSessionEndpoint
	}
	if out.AuthorizationEndpoint == "" || out.TokenEndpoint == "" || out.JWKSURI == "" {
		return nil, errors.New("the discovery document lacks the authorization, token or JWKS endpoint")
	}
	return &out, nil
}

func (f *oidcFlows) fetchDiscovery(ctx context.Context, e *discoveryEntry, issuer string, first bool) (*discovery, error) {
	e.fetching.Lock()
	defer e.fetching.Unlock()
	if d := e.doc.Load(); d != nil {
		return d, nil
	}
	e.mu.Lock()
	recent := first && time.Since(e.tried) < time.Second
	e.mu.Unlock()
	if recent {
		// A provider that failed a moment ago: do not have every
		// request wait for it again.
		return nil, errors.New("the discovery document could not be fetched a moment ago")
	}
	return f.fetchDiscoveryLocked(ctx, e, issuer)
}

func (f *oidcFlows) fetchDiscoveryLocked(ctx context.Context, e *discoveryEntry, issuer string) (*discovery, error) {
	e.mu.Lock()
	e.tried = time.Now()
	e.mu.Unlock()
	d, err := f.getDiscovery(ctx, issuer)
	if err != nil {
		if f.log != nil {
			f.log.Warn("OIDC discovery failed; the document fetched before, if any, stays in use", zap.String("issuer", issuer), zap.Error(err))
		}
		if old := e.doc.Load(); old != nil {
			return old, nil
		}
		return nil, err
	}
	e.doc.Store(d)
	e.mu.Lock()
	e.fetched = time.Now()
	e.mu.Unlock()
	return d, nil
}

func (f *oidcFlows) getDiscovery(ctx context.Context, issuer string) (*discovery, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(f.timeout.Load()))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	body, err := f.do(req)
	if err != nil {
		return nil, err
	}
	var d discovery
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("discovery document: %w", err)
	}
	if d.Issuer != issuer {
		// OpenID Connect Discovery 1.0, 4.3: the issuer must be the one
		// the document was fetched for.
		return nil, fmt.Errorf("discovery document is of issuer %q, not %q", d.Issuer, issuer)
	}
	return &d, nil
}

// do sends req and reads a 200 answer of at most oidcMaxAnswer bytes.
func (f *oidcFlows) do(req *http.Request) ([]byte, error) {
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, oidcMaxAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(body) > oidcMaxAnswer {
		return nil, fmt.Errorf("answer larger than %d bytes", oidcMaxAnswer)
	}
	if resp.StatusCode != http.StatusOK {
		// The body may echo what was sent (a code, a token): not kept.
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	return body, nil
}

// tokenAnswer is a token endpoint's answer (RFC 6749, 5.1).
type tokenAnswer struct {
	AccessToken  string `json:"access_token"`
	IDToken      string `json:"id_token"`
	RefreshToken string `json:"refresh_token"`
	ExpiresIn    int64  `json:"expires_in"`
	TokenType    string `json:"token_type"`
}

// tokenRequest posts form to the token endpoint, authenticated as the
// client: client_secret_basic unless the provider supports only
// client_secret_post.
func (f *oidcFlows) tokenRequest(ctx context.Context, o *config.OIDC, d *discovery, form url.Values) (*tokenAnswer, error) {
	post := len(d.AuthMethods) > 0 && !slices.Contains(d.AuthMethods, "client_secret_basic") && slices.Contains(d.AuthMethods, "client_secret_post")
	if post {
		form.Set("client_id", o.ClientID)
		form.Set("client_secret", o.ClientSecret())
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(f.timeout.Load()))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if !post {
		// RFC 6749, 2.3.1: both form-encoded before Basic.
		req.SetBasicAuth(url.QueryEscape(o.ClientID), url.QueryEscape(o.ClientSecret()))
	}
	body, err := f.do(req)
	if err != nil {
		return nil, err
	}
	var t tokenAnswer
	if err := json.Unmarshal(body, &t); err != nil {
		return nil, errors.New("token answer is not JSON")
	}
	if t.TokenType != "" && !strings.EqualFold(t.TokenType, "bearer") {
		return nil, fmt.Errorf("token type %q is not Bearer", t.TokenType)
	}
	return &t, nil
}

// verifyIDToken verifies an ID token: signature by the provider's JWKS,
// iss, aud (the client), exp and iat with o's skew, and nonce when one
// is expected (not on a refresh).
func (g *guard) verifyIDToken(ctx context.Context, o *config.OIDC, d *discovery, raw, nonce string, now time.Time) (jose.Claims, error) {
	t, err := jose.Parse(raw)
	if err != nil {
		return nil, err
	}
	e := g.jwks.entry(d.JWKSURI)
	set, err := e.keys(ctx, g.jwks, time.Hour)
	if err != nil {
		return nil, fmt.Errorf("provider's JWKS: %w", err)
	}
	err = t.Verify(set)
	if errors.Is(err, jose.ErrUnknownKey) {
		if set = e.refetch(ctx, g.jwks); set != nil {
			err = t.Verify(set)
		}
	}
	if err != nil {
		return nil, err
	}
	claims, err := jose.ParseClaims(t.Payload)
	if err != nil {
		return nil, err
	}
	if err := claims.CheckClaims(jose.Expect{Issuer: o.Issuer, Audiences: []string{o.ClientID}, Now: now, Skew: o.ClockSkew}); err != nil {
		return nil, err
	}
	iat, ok := claims.IssuedAt()
	if !ok || iat.After(now.Add(o.ClockSkew)) {
		return nil, errors.New("iat is missing or in the future")
	}
	if aud := claims.Strings("aud"); len(aud) > 1 {
		if azp, _ := claims["azp"].(string); azp != o.ClientID {
			return nil, errors.New("azp is not the client")
		}
	}
	if nonce != "" {
		got, _ := claims["nonce"].(string)
		if subtle.ConstantTimeCompare([]byte(got), []byte(nonce)) != 1 {
			return nil, errors.New("nonce does not match the login's")
		}
	}
	return claims, nil
}

// refreshCall is one refresh of a refresh token: requests that carry it
// at once wait for the one exchange, and for oidcRefreshedTTL after it
// take its result, so that a provider that rotates refresh tokens is not
// sent a used one.
type refreshCall struct {
	done chan struct{}
	s    *oidcSession
	err  error
	at   time.Time
}

// errRefreshPending: a refresh runs in the background; the session's
// tokens serve meanwhile.
var errRefreshPending = errors.New("refresh under way")

// oidcRefresh renews s's tokens with its refresh token; unless wait, it
// does not wait for the provider (errRefreshPending) but takes the result
// of a refresh that has ended.
func (g *guard) oidcRefresh(ctx context.Context, o *config.OIDC, s *oidcSession, now time.Time, wait bool) (*oidcSession, error) {
	f := g.oidcFlows
	k := sha256.Sum256([]byte(oidcScope(o) + "\x00" + s.RefreshToken))
	f.mu.Lock()
	c := f.refreshes[k]
	if c != nil {
		select {
		case <-c.done:
			// A refresh that failed is not tried again for a while: with
			// the provider down, the requests of a session whose token is
			// still valid go on without waiting for it each time.
			if ttl := oidcRefreshedTTL; (c.err == nil && now.Sub(c.at) > ttl) || (c.err != nil && now.Sub(c.at) > oidcRefreshRetry) {
				c = nil
			}
		default:
		}
	}
	if c != nil {
		f.mu.Unlock()
		if !wait {
			select {
			case <-c.done:
				return c.s, c.err
			default:
				return nil, errRefreshPending
			}
		}
		select {
		case <-c.done:
			return c.s, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if len(f.refreshes) >= oidcRefreshedMax {
		for old, oc := range f.refreshes {
			select {
			case <-oc.done:
				delete(f.refreshes, old)
			default:
			}
		}
	}
	c = &refreshCall{done: make(chan struct{})}
	f.refreshes[k] = c
	f.mu.Unlock()
	// The exchange is the provider's, not this request's: a client that
	// goes away does not cancel the refresh others wait for.
	run := func() {
		c.s, c.err = g.refreshTokens(context.WithoutCancel(ctx), o, s, now)
		c.at = f.now()
		close(c.done)
	}
	if !wait {
		go run()
		return nil, errRefreshPending
	}
	run()
	return c.s, c.err
}

func (g *guard) refreshTokens(ctx context.Context, o *config.OIDC, s *oidcSession, now time.Time) (*oidcSession, error) {
	f := g.oidcFlows
	d, err := f.discover(ctx, o)
	if err != nil {
		return nil, err
	}
	tok, err := f.tokenRequest(ctx, o, d, url.Values{
		"grant_type":    {"refresh_token"},
		"refresh_token": {s.RefreshToken},
		"scope":         {strings.Join(o.Scopes, " ")},
	})
	if err != nil {
		return nil, err
	}
	if tok.AccessToken == "" {
		return nil, errors.New("refresh answer without access_token")
	}
	ns := *s
	ns.AccessToken, ns.AccessExpiry = tok.AccessToken, 0
	if tok.ExpiresIn > 0 {
		ns.AccessExpiry = now.Add(time.Duration(tok.ExpiresIn) * time.Second).Unix()
	}
	if tok.RefreshToken != "" {
		ns.RefreshToken = tok.RefreshToken
	}
	if tok.IDToken != "" {
		if _, err := g.verifyIDToken(ctx, o, d, tok.IDToken, "", now); err != nil {
			return nil, fmt.Errorf("refreshed ID token: %w", err)
		}
		ns.IDToken = tok.IDToken
	}
	return &ns, nil
}
