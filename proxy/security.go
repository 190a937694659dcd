package proxy

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"portico.dev/portico/config"
)

// SecurityObserver, when Options.Observer implements it, counts the
// decisions of SecurityPolicies: mechanism is one of "address", "api_key",
// "basic", "jwt", "oidc", "ext_auth", "policy"; result one of the security* results below. Both are
// from fixed sets, whatever the client sends.
type SecurityObserver interface {
	ObserveSecurity(mechanism, result string)
}

// Results of a security check, in the access log ("auth", as
// "mechanism:result") and the metric.
const (
	securityAllowed   = "allowed"    // the check passed
	securityMissing   = "missing"    // no credential: 401
	securityDenied    = "denied"     // a wrong credential or a refused address: 401 or 403
	securityLimited   = "limited"    // too many failures from the client: 429, nothing verified
	securityOverload  = "overloaded" // every verification slot busy: 503, nothing verified
	securityMalformed = "malformed"  // a credential that cannot be read (two of them, bad encoding): 400
	securityInvalid   = "invalid"    // the policy cannot be enforced: 500
	// Of an authorization service that did not answer in time or at all:
	// refused with 403, or let through when the policy fails open.
	securityUnavailable = "unavailable"
	securityFailOpen    = "fail_open"
)

// Bounds of the work a flood of credentials can cause.
const (
	// verifiedMax bounds the cache of credentials verified lately; its
	// keys are digests of what clients send.
	verifiedMax = 16384
	// verifiedTTL is how long a verified credential is taken without a
	// new verification.
	verifiedTTL = 5 * time.Minute
	// failureBurst failures of a client in a row are let through to
	// verification; then one more each failureRefill.
	failureBurst  = 10
	failureRefill = 6 * time.Second
	// failureClients bounds the clients whose failures are counted.
	failureClients = 65536
	// slotWait is how long a request waits for a verification slot.
	slotWait = time.Second
)

// guard enforces the Security of rules: what every request of a rule
// with one passes before any byte of it is sent on. Its state (verified
// credentials, clients' failures) lasts across configurations: a reload
// does not make every client verify again.
type guard struct {
	log     *zap.Logger
	observe SecurityObserver // nil: not counted
	// verified holds digests of credentials bcrypt verified lately, with
	// the hash they matched: a flood of one valid credential costs one
	// bcrypt, not one per request.
	verified verifiedCache
	// failures limits the verifications a client whose credentials fail
	// can ask for.
	failures failureLimiter
	// slots bounds the bcrypt verifications running at once, whoever
	// asks: a flood from many addresses costs at most that many cores.
	slots chan struct{}
	// decoy is a bcrypt hash an unknown user's password is verified
	// against, so that the time of an answer does not tell whether a
	// user exists; made on first use.
	decoyOnce sync.Once
	decoy     []byte
	// hashed counts bcrypt verifications, and running/peak those at
	// once, for the tests that attack these bounds.
	hashed        atomic.Int64
	running, peak atomic.Int32
	// tokens holds JWTs verified lately (jwt.go), jwks the remote key
	// sets.
	tokens tokenCache
	jwks   *jwksStore
	// refusals limits the log lines of policies that cannot be enforced.
	refusals logLimiter
	// extAuthTransport sends the requests to authorization services
	// (extauth.go).
	extAuthTransport *http.Transport
	grpcConns        grpcConns
	// oidcFlows holds the OIDC logins' state (oidc.go).
	oidcFlows *oidcFlows
	// extAuthTLS are the transports to authorization services behind a
	// BackendTLSPolicy, by its settings' ID.
	extAuthTLSMu sync.Mutex
	extAuthTLS   map[string]*http.Transport
}

func newGuard(opts Options, log *zap.Logger) *guard {
	g := &guard{log: log, slots: make(chan struct{}, max(runtime.GOMAXPROCS(0)/2, 1))}
	g.observe, _ = opts.Observer.(SecurityObserver)
	g.verified.entries = map[[sha256.Size]byte]time.Time{}
	g.failures.clients = map[netip.Addr]*failureBucket{}
	g.jwks = newJWKSStore(log)
	g.extAuthTransport = newExtAuthTransport()
	g.oidcFlows = newOIDCFlows(opts.SessionKey, log)
	return g
}

// check decides r under sec (non-nil). True: it may be forwarded, with
// the credentials the policy strips removed and the headers it sets set.
// False: it was answered.
func (g *guard) check(w http.ResponseWriter, r *http.Request, sec *config.Security, eps config.EndpointTable) bool {
	if sec.Invalid != "" {
		if g.log != nil && g.refusals.first(sec.Policy+"\x00"+sec.Invalid, time.Now()) {
			g.log.Warn("request refused: its SecurityPolicy cannot be enforced", zap.String("policy", sec.Policy), zap.String("reason", sec.Invalid))
		}
		g.note(w, "policy", securityInvalid)
		writeErrorFor(w, r, http.StatusInternalServerError)
		return false
	}
	if a := sec.Addresses; a != nil {
		addr := requestClientAddr(r)
		if !addr.IsValid() || !a.Permits(addr) {
			g.note(w, "address", securityDenied)
			g.refuse(w, r, http.StatusForbidden, "")
			return false
		}
		g.note(w, "address", securityAllowed)
	}
	if k := sec.APIKey; k != nil && !g.apiKey(w, r, k) {
		return false
	}
	if b := sec.Basic; b != nil && !g.basic(w, r, b) {
		return false
	}
	if j := sec.JWT; j != nil && !g.jwt(w, r, j) {
		return false
	}
	if o := sec.OIDC; o != nil && !g.oidc(w, r, o) {
		return false
	}
	if e := sec.ExtAuth; e != nil && !g.extAuth(w, r, e, eps) {
		return false
	}
	return true
}

// note records a decision for the access log and the metric.
func (g *guard) note(w http.ResponseWriter, mechanism, result string) {
	if sw, ok := w.(*statusWriter); ok {
		sw.auth = mechanism + ":" + result
	}
	if g.observe != nil {
		g.observe.ObserveSecurity(mechanism, result)
	}
}

// refuse answers a request the guard stops; challenge, when set, is the
// WWW-Authenticate of a 401.
func (g *guard) refuse(w http.ResponseWriter, r *http.Request, code int, challenge string) {
	if challenge != "" {
		w.Header().Set("Www-Authenticate", challenge)
	}
	if isGRPC(r) {
		status := grpcUnavailable
		switch code {
		case http.StatusUnauthorized:
			status = grpcUnauthenticated
		case http.StatusForbidden:
			status = grpcPermissionDenied
		}
		writeGRPCError(w, status, http.StatusText(code))
		return
	}
	if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeError(w, code)
}

// apiKey checks the key of r against k's and removes it from the
// request.
func (g *guard) apiKey(w http.ResponseWriter, r *http.Request, k *config.APIKeyAuth) bool {
	challenge := `ApiKey realm="portico"`
	var key string
	var found, many bool
	if k.Header != "" {
		vals := r.Header[k.Header]
		found, many = len(vals) > 0, len(vals) > 1
		if found {
			key = vals[0]
		}
		delete(r.Header, k.Header)
	} else {
		var rest string
		key, found, many, rest = takeQueryParam(r.URL.RawQuery, k.Query)
		if found {
			r.URL.RawQuery = rest
			r.URL.ForceQuery = false
		}
	}
	switch {
	case many:
		// Two keys: which one a backend or a log would take is not ours
		// to guess.
		g.note(w, "api_key", securityMalformed)
		g.refuse(w, r, http.StatusBadRequest, "")
		return false
	case !found || key == "":
		g.note(w, "api_key", securityMissing)
		g.refuse(w, r, http.StatusUnauthorized, challenge)
		return false
	}
	client, ok := k.Client(key)
	if !ok {
		g.note(w, "api_key", securityDenied)
		g.refuse(w, r, http.StatusUnauthorized, challenge)
		return false
	}
	if k.ClientIDHeader != "" {
		r.Header[k.ClientIDHeader] = []string{client}
	}
	g.note(w, "api_key", securityAllowed)
	return true
}

// takeQueryParam finds the parameter name in a raw query, compared by
// its decoded name (so that "api%5Fkey" is "api_key", as a backend would
// read it), and returns its decoded value, whether it is there, whether
// it is there more than once, and the query without any of it (the rest
// as it was sent).
func takeQueryParam(raw, name string) (value string, found, many bool, rest string) {
	if raw == "" {
		return "", false, false, raw
	}
	var kept []string
	for part := range strings.SplitSeq(raw, "&") {
		k, v, _ := strings.Cut(part, "=")
		dk, err := url.QueryUnescape(k)
		if err != nil || dk != name {
			if part != "" {
				kept = append(kept, part)
			}
			continue
		}
		if found {
			many = true
			continue
		}
		found = true
		if dv, err := url.QueryUnescape(v); err == nil {
			value = dv
		} else {
			many = true // unreadable: refused as malformed
		}
	}
	return value, found, many, strings.Join(kept, "&")
}

// basic checks r's Basic credentials against b's users.
func (g *guard) basic(w http.ResponseWriter, r *http.Request, b *config.BasicAuth) bool {
	challenge := `Basic realm="` + b.Realm + `", charset="UTF-8"`
	vals := r.Header["Authorization"]
	if len(vals) > 1 {
		g.note(w, "basic", securityMalformed)
		g.refuse(w, r, http.StatusBadRequest, "")
		return false
	}
	user, password, ok := "", "", false
	if len(vals) == 1 {
		user, password, ok = parseBasic(vals[0])
	}
	if !ok {
		g.note(w, "basic", securityMissing)
		g.refuse(w, r, http.StatusUnauthorized, challenge)
		return false
	}
	switch g.verifyBasic(r.Context(), requestClientAddr(r), b.Hash(user), password) {
	case securityAllowed:
	case securityLimited:
		g.note(w, "basic", securityLimited)
		g.refuse(w, r, http.StatusTooManyRequests, "")
		return false
	case securityOverload:
		g.note(w, "basic", securityOverload)
		g.refuse(w, r, http.StatusServiceUnavailable, "")
		return false
	default:
		g.note(w, "basic", securityDenied)
		g.refuse(w, r, http.StatusUnauthorized, challenge)
		return false
	}
	if !b.ForwardAuthorization {
		delete(r.Header, "Authorization")
	}
	if b.UsernameHeader != "" {
		r.Header[b.UsernameHeader] = []string{user}
	}
	g.note(w, "basic", securityAllowed)
	return true
}

// parseBasic reads "Basic base64(user:password)" (the scheme in any case).
func parseBasic(v string) (user, password string, ok bool) {
	scheme, enc, found := strings.Cut(strings.TrimSpace(v), " ")
	if !found || !strings.EqualFold(scheme, "Basic") || len(enc) > 4096 {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", "", false
	}
	user, password, ok = strings.Cut(string(raw), ":")
	return user, password, ok && user != ""
}

// verifyBasic says whether password matches hash ("" for a user that does
// not exist): securityAllowed, securityDenied, or securityLimited /
// securityOverload when it was not verified. A credential verified lately
// is taken at the cost of a SHA-256; a client whose credentials failed
// too often gets no verification until its budget refills; bcrypt runs in
// at most len(g.slots) requests at once.
func (g *guard) verifyBasic(ctx context.Context, client netip.Addr, hash, password string) string {
	now := time.Now()
	digest := credentialDigest(hash, password)
	if hash != "" && g.verified.has(digest, now) {
		return securityAllowed
	}
	if !g.failures.allow(client, now) {
		return securityLimited
	}
	var ok bool
	if sum, isSHA := strings.CutPrefix(hash, "{SHA}"); isSHA {
		// Cheap by design (and weak): no slot, no cache needed.
		got := sha1.Sum([]byte(password))
		want, err := base64.StdEncoding.DecodeString(sum)
		ok = err == nil && subtle.ConstantTimeCompare(got[:], want) == 1
	} else {
		if !g.acquire(ctx) {
			return securityOverload
		}
		g.hashed.Add(1)
		for n, p := g.running.Add(1), g.peak.Load(); n > p && !g.peak.CompareAndSwap(p, n); p = g.peak.Load() {
		}
		if hash == "" {
			_ = bcrypt.CompareHashAndPassword(g.decoyHash(), []byte(password))
		} else {
			ok = bcrypt.CompareHashAndPassword([]byte(hash), []byte(password)) == nil
		}
		g.running.Add(-1)
		<-g.slots
	}
	if !ok {
		g.failures.fail(client, now)
		return securityDenied
	}
	if !strings.HasPrefix(hash, "{SHA}") {
		g.verified.add(digest, now)
	}
	return securityAllowed
}

// acquire takes a verification slot, waiting at most slotWait (and no
// longer than the request lives).
func (g *guard) acquire(ctx context.Context) bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(slotWait)
	defer t.Stop()
	select {
	case g.slots <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

func (g *guard) decoyHash() []byte {
	g.decoyOnce.Do(func() {
		g.decoy, _ = bcrypt.GenerateFromPassword([]byte("portico decoy password"), bcrypt.DefaultCost)
	})
	return g.decoy
}

// credentialDigest is the cache key of a password checked against hash:
// a password change (a new hash) is a new key, and the password itself
// is never kept.
func credentialDigest(hash, password string) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(hash))
	h.Write([]byte{0})
	h.Write([]byte(password))
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// verifiedCache is a bounded set of digests with their time of
// verification. Full, it starts again empty: its keys come from clients,
// and a flood of distinct valid credentials is bounded by bcrypt's slots
// anyway.
type verifiedCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]time.Time
}

func (c *verifiedCache) has(k [sha256.Size]byte, now time.Time) bool {
	c.mu.Lock()
	at, ok := c.entries[k]
	c.mu.Unlock()
	return ok && now.Sub(at) < verifiedTTL
}

func (c *verifiedCache) add(k [sha256.Size]byte, now time.Time) {
	c.mu.Lock()
	if len(c.entries) >= verifiedMax {
		clear(c.entries)
	}
	c.entries[k] = now
	c.mu.Unlock()
}

// failureLimiter is a token bucket of failed verifications per client
// (an IPv6 client by its /64, which one host usually has whole).
type failureLimiter struct {
	mu      sync.Mutex
	clients map[netip.Addr]*failureBucket
}

type failureBucket struct {
	tokens float64
	at     time.Time
}

func failureKey(a netip.Addr) netip.Addr {
	if a.Is6() && !a.Is4In6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a.Unmap()
}

// allow reports whether client may have a credential verified now.
func (l *failureLimiter) allow(client netip.Addr, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[failureKey(client)]
	if b == nil {
		return true
	}
	b.refill(now)
	return b.tokens >= 1
}

// fail takes a token of client's for a failed verification.
func (l *failureLimiter) fail(client netip.Addr, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := failureKey(client)
	b := l.clients[k]
	if b == nil {
		if len(l.clients) >= failureClients {
			l.prune(now)
		}
		b = &failureBucket{tokens: failureBurst, at: now}
		l.clients[k] = b
	}
	b.refill(now)
	b.tokens = max(b.tokens-1, 0)
}

// prune drops the clients whose budget is whole again, and every client
// if that frees nothing: an attacker of many addresses is bounded by the
// verification slots.
func (l *failureLimiter) prune(now time.Time) {
	for k, b := range l.clients {
		if b.refill(now); b.tokens >= failureBurst {
			delete(l.clients, k)
		}
	}
	if len(l.clients) >= failureClients {
		clear(l.clients)
	}
}

func (b *failureBucket) refill(now time.Time) {
	if d := now.Sub(b.at); d > 0 {
		b.tokens = min(b.tokens+float64(d)/float64(failureRefill), failureBurst)
		b.at = now
	}
}

// requestClientAddr is the address of r's client, as the security
// policies' address lists and failure limits see it. Today the peer's;
// where a client address detection exists (trusted X-Forwarded-For hops,
// PROXY protocol), it is the one place to switch to it.
func requestClientAddr(r *http.Request) netip.Addr {
	a, err := netip.ParseAddr(clientIP(r.RemoteAddr))
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}
