package config

import (
	"crypto/sha256"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"portico.dev/portico/internal/shared/jose"
)

// Security is what a SecurityPolicy asks of a rule's requests before any
// byte of them reaches a backend: every check it sets must pass, in the
// order of its fields. The most specific policy that applies to a rule
// gives all of it (the rule's, its route's, its ListenerSet's, its
// Gateway's); nil on a rule no policy protects.
type Security struct {
	// Policy is the policy's "namespace/name", for logs and dumps.
	Policy string
	// Invalid, when not empty, says why the policy cannot be enforced (a
	// Secret it names is missing or not permitted, its spec is invalid):
	// the rule answers 500 rather than serve what it was meant to guard.
	Invalid string
	// Addresses allows or denies by the client's address.
	Addresses *AddressList
	// APIKey asks for a key of a set.
	APIKey *APIKeyAuth
	// Basic asks for a user and password of an htpasswd file.
	Basic *BasicAuth
	// JWT asks for a bearer token of one of its providers.
	JWT *JWTAuth
	// OIDC logs browsers in at an OpenID provider (oidc.go).
	OIDC *OIDC
	// ExtAuth asks an external authorization service, last.
	ExtAuth *ExtAuth
}

// ExtAuth asks an HTTP authorization service whether a request may pass:
// it is sent the request's method, Path followed by the request's path
// and query, and HeadersToAuth, with up to ForwardBody bytes of the body.
// A 2xx answer (200 only with OnlyOK) lets the request through with
// HeadersToBackend set from it; any other answer is the client's. A
// service that cannot answer within Timeout refuses the request (403)
// unless FailOpen. SecurityPolicy's extAuth, HTTPRoute's ExternalAuth
// filter and a listener's ExternalAuth request filter all compile to one.
type ExtAuth struct {
	// Backend is the service's Service port (its endpoints in the
	// configuration's table), nil when Address, its host:port, is set.
	Backend          *BackendKey
	Address          string
	Path             string
	HeadersToAuth    []string // canonical header names
	HeadersToBackend []string // canonical header names
	Timeout          time.Duration
	FailOpen         bool
	// GRPC asks over Envoy's Authorization/Check instead of HTTP: the
	// request goes as a CheckRequest, Path and HeadersToBackend are not
	// used (an allowing answer sets the headers it names).
	GRPC bool
	// AllHeadersToAuth sends every header of the request (a gRPC
	// ExternalAuth filter whose allowedHeaders is empty), not only
	// HeadersToAuth.
	AllHeadersToAuth bool
	// AllHeadersToBackend copies every header of an allowing HTTP answer
	// to the request, but Host, the connection's own and the framing's
	// (an ExternalAuth filter whose allowedResponseHeaders is empty).
	AllHeadersToBackend bool
	// OnlyOK takes only a 200 as an allowing answer (the ExternalAuth
	// filter's rule), not any 2xx.
	OnlyOK bool
	// ForwardBody, when above 0, buffers up to that many bytes of the
	// request's body and sends them to the service; a longer body is
	// refused with 413 and nothing is asked. The body then reaches the
	// backend unchanged.
	ForwardBody int64
	// TLS, when set, is the BackendTLSPolicy of the service's port: the
	// data plane speaks TLS to it.
	TLS *BackendTLS
	// Name says where the check comes from ("listener filter 0",
	// "SecurityPolicy ns/name"), for logs and dumps.
	Name string
}

// JWTAuth asks for a JSON Web Token, found where its providers look for
// one (by default "Authorization: Bearer"), signed by one of Providers
// (picked by the token's "iss"; it must be one that looks where the
// token was found), and, once it verifies, for its claims and scopes:
// 400 when two places hold different tokens, 401 when the token does not
// verify, 403 when it lacks a claim or scope.
type JWTAuth struct {
	Providers []*JWTProvider
	// RequiredClaims: each must hold one of its values (jose.Matches:
	// a string equal to one, a number equal to one read as a number, a
	// boolean named by one, an array with an element that does).
	RequiredClaims []RequiredClaim
	// RequiredScopes must all be in the token's "scope" (space-separated)
	// or "scp" claim.
	RequiredScopes []string
	// ForwardToken keeps the token where it was found for the backend;
	// by default it is removed from there.
	ForwardToken bool
}

// RequiredClaim is a claim that must hold one of Values. Name is its
// path as written (jose.ParseClaimPath: "realm_access.roles", a "." of a
// name escaped as "\."), Path the names it reads.
type RequiredClaim struct {
	Name   string
	Path   []string
	Values []string
}

// ClaimPath is the path of the claim: Path, or Name alone when Path was
// not set.
func (c RequiredClaim) ClaimPath() []string { return pathOr(c.Path, c.Name) }

// TokenSource is one place a token is looked for: exactly one of Header
// (its value after ValuePrefix, compared without regard to case; the
// rest without surrounding spaces), Cookie and Param (a query
// parameter) is set.
type TokenSource struct {
	Header      string // canonical
	ValuePrefix string
	Cookie      string
	Param       string
}

// DefaultTokenSource is where a provider that names none looks.
var DefaultTokenSource = TokenSource{Header: "Authorization", ValuePrefix: "Bearer "}

// JWTProvider is an issuer and the keys its tokens are verified with:
// a JWKS of the configuration (LocalKeys) or fetched from RemoteJWKS.
type JWTProvider struct {
	Name   string
	Issuer string
	// Audiences: the token's "aud" must hold one; none: not checked.
	Audiences []string
	// RemoteJWKS is the URI of the issuer's JWKS; CacheDuration how long
	// a fetched set is used before it is fetched again (served while the
	// issuer does not answer).
	RemoteJWKS    string
	CacheDuration time.Duration
	// Keys is how many keys a local JWKS has.
	Keys int
	// ClockSkew is tolerated on "exp" and "nbf".
	ClockSkew time.Duration
	// ExtractFrom are the places the provider's tokens are looked for,
	// in order; none: DefaultTokenSource.
	ExtractFrom []TokenSource
	// ClaimToHeaders are request headers set from claims (any the client
	// sent of those names removed).
	ClaimToHeaders []ClaimHeader
	// ID names the provider's verified tokens in the data plane's cache:
	// the same for the same issuer, keys, audiences and skew.
	ID    string
	local *jose.KeySet
}

// Sources are the places p's tokens are looked for.
func (p *JWTProvider) Sources() []TokenSource {
	if len(p.ExtractFrom) == 0 {
		return []TokenSource{DefaultTokenSource}
	}
	return p.ExtractFrom
}

// ClaimHeader sets Header to the value of Claim (jose.Text: a string as
// it is, a number or boolean in its JSON form, an array of those joined
// by ","): the header is left out when the claim is missing, is an
// object, or its text holds a control character or is longer than
// MaxClaimHeader. Claim is a path as RequiredClaim's Name, Path the
// names it reads.
type ClaimHeader struct {
	Claim, Header string
	Path          []string
}

// MaxClaimHeader bounds the value of a header set from a claim.
const MaxClaimHeader = 4096

// ClaimPath is the path of the claim: Path, or Claim alone when Path was
// not set.
func (c ClaimHeader) ClaimPath() []string { return pathOr(c.Path, c.Claim) }

func pathOr(path []string, name string) []string {
	if path != nil {
		return path
	}
	return []string{name}
}

// SetLocalKeys makes set the provider's keys.
func (p *JWTProvider) SetLocalKeys(set *jose.KeySet) {
	p.local = set
	p.Keys = len(set.Keys)
}

// LocalKeys is the provider's JWKS of the configuration, nil when it
// fetches one.
func (p *JWTProvider) LocalKeys() *jose.KeySet { return p.local }

// AddressList decides by the client's address: one a Deny prefix holds
// is refused; with Allow set, one no Allow prefix holds is refused.
type AddressList struct {
	Allow []netip.Prefix
	Deny  []netip.Prefix
}

// Permits reports whether the list lets addr through.
func (a *AddressList) Permits(addr netip.Addr) bool {
	addr = addr.Unmap()
	for _, p := range a.Deny {
		if p.Contains(addr) {
			return false
		}
	}
	if len(a.Allow) == 0 {
		return true
	}
	for _, p := range a.Allow {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// BasicAuth is HTTP Basic authentication (RFC 7617) against users and
// password hashes of an htpasswd file (bcrypt or {SHA}). The hashes are
// kept out of the configuration's dumps.
type BasicAuth struct {
	// Realm is sent in WWW-Authenticate.
	Realm string
	// Secret is the htpasswd Secret's "namespace/name", for dumps.
	Secret string
	// Users is how many users the file has.
	Users int
	// ForwardAuthorization keeps the Authorization header on the request
	// sent to the backend; by default it is removed.
	ForwardAuthorization bool
	// UsernameHeader, when set, carries the authenticated user's name to
	// the backend (any such header the client sent is replaced).
	UsernameHeader string
	hashes         map[string]string
}

// NewBasicAuth returns a BasicAuth of the users' password hashes (user
// name to the hash as htpasswd writes it).
func NewBasicAuth(realm, secret string, hashes map[string]string) *BasicAuth {
	return &BasicAuth{Realm: realm, Secret: secret, Users: len(hashes), hashes: hashes}
}

// Hash is the password hash of user, "" when there is no such user.
func (b *BasicAuth) Hash(user string) string { return b.hashes[user] }

// APIKeyAuth asks for a key of a set, in a header or a query parameter,
// which is removed before the request is forwarded. The keys are kept as
// SHA-256 digests: a lookup compares digests, and dumps show none.
type APIKeyAuth struct {
	// Header or Query (exactly one set) carries the key.
	Header string
	Query  string
	// Secrets are the Secrets the keys come from, "namespace/name", for
	// dumps.
	Secrets []string
	// Keys is how many keys there are.
	Keys int
	// ClientIDHeader, when set, carries the name of the key's client to
	// the backend (any such header the client sent is replaced).
	ClientIDHeader string
	clients        map[[sha256.Size]byte]string
}

// NewAPIKeyAuth returns an APIKeyAuth of keys (key to its client's name).
func NewAPIKeyAuth(header, query string, secrets []string, keys map[string]string) *APIKeyAuth {
	a := &APIKeyAuth{Header: header, Query: query, Secrets: secrets, Keys: len(keys), clients: make(map[[sha256.Size]byte]string, len(keys))}
	for k, client := range keys {
		a.clients[sha256.Sum256([]byte(k))] = client
	}
	return a
}

// Client is the name of the client key belongs to; ok is false for a key
// of no client.
func (a *APIKeyAuth) Client(key string) (name string, ok bool) {
	name, ok = a.clients[sha256.Sum256([]byte(key))]
	return name, ok
}

// ExtAuthPathPrefix is the prefix an HTTP ExternalAuth filter puts before the
// request's path, sanitised as the spec asks: "" for none; one leading
// slash and none trailing; no dot segment, query, fragment or
// backslash, which could make the service see another path than the one
// configured.
func ExtAuthPathPrefix(p string) (string, error) {
	if p == "" {
		return "", nil
	}
	if strings.ContainsAny(p, "?#\\ \t") {
		return "", fmt.Errorf("http.path %q may not hold '?', '#', '\\' or blanks", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." || strings.EqualFold(seg, "%2e") || strings.EqualFold(seg, "%2e%2e") {
			return "", fmt.Errorf("http.path %q may not hold a dot segment", p)
		}
	}
	if strings.Contains(strings.ToLower(p), "%2f") || strings.Contains(strings.ToLower(p), "%5c") {
		return "", fmt.Errorf("http.path %q may not hold an encoded slash or backslash", p)
	}
	p = "/" + strings.Trim(p, "/")
	if p == "/" {
		return "", nil
	}
	return p, nil
}
