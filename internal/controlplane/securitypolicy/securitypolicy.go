// Package securitypolicy holds SecurityPolicy (group portico.dev),
// Portico's policy of who may reach what it targets: client address
// lists, API keys, HTTP Basic authentication, JSON Web Tokens, OpenID
// Connect logins and an external HTTP authorization service, attached
// by GEP-713 targetRefs to Gateways, ListenerSets, HTTPRoutes and
// GRPCRoutes (or one of their rules by sectionName). It defines the object, the rules its
// CRD's schema states (checked again here for objects that reach
// translate without an API server) and how the Secrets it names become
// the data plane's configuration; which policy applies where is decided
// by translate.
package securitypolicy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/policytarget"
	"portico.dev/portico/internal/shared/jose"
	"portico.dev/portico/internal/shared/jsoncopy"
)

// Group, Version and Kind of SecurityPolicy.
const (
	Group   = "portico.dev"
	Version = "v1alpha1"
	Kind    = "SecurityPolicy"
	// APIVersion is Group/Version.
	APIVersion = Group + "/" + Version
	// Resource is its plural, as the API serves it.
	Resource = "securitypolicies"
)

// Limits the CRD states.
const (
	MaxTargets     = 16
	MaxCIDRs       = 64
	MaxCredentials = 16
	MaxRealm       = 128
)

// SecurityPolicy says who may reach what it targets.
type SecurityPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec `json:"spec"`
	// Status has one entry per ancestor (GEP-713): each Gateway its
	// targets are served under, or the target itself when there is none.
	Status gwv1.PolicyStatus `json:"status,omitempty"`
}

// Spec is what a SecurityPolicy asks. The most specific policy that
// applies to a request's rule applies whole: the rule's, then its
// route's, its ListenerSet's, its Gateway's. Every mechanism it sets must
// pass, in the order clientAddresses, apiKeyAuth, basicAuth, jwt, oidc,
// extAuth.
type Spec struct {
	TargetRefs []gwv1.LocalPolicyTargetReferenceWithSectionName `json:"targetRefs"`
	// ClientAddresses allows and denies by the client's address.
	ClientAddresses *ClientAddresses `json:"clientAddresses,omitempty"`
	// APIKeyAuth asks for an API key.
	APIKeyAuth *APIKeyAuth `json:"apiKeyAuth,omitempty"`
	// BasicAuth asks for a user and password (RFC 7617).
	BasicAuth *BasicAuth `json:"basicAuth,omitempty"`
	// JWT asks for a bearer token of one of its providers.
	JWT *JWT `json:"jwt,omitempty"`
	// OIDC logs browsers in at an OpenID provider (oidc.go).
	OIDC *OIDC `json:"oidc,omitempty"`
	// ExtAuth asks an external authorization service, last.
	ExtAuth *ExtAuth `json:"extAuth,omitempty"`
}

// ExtAuth asks an authorization service whether a request may pass,
// before any byte of it reaches a backend.
type ExtAuth struct {
	// HTTP is an authorization service spoken to over HTTP.
	HTTP *HTTPExtAuth `json:"http,omitempty"`
	// GRPC is one spoken to over Envoy's Authorization/Check (gRPC):
	// exactly one of http and grpc is set.
	GRPC *GRPCExtAuth `json:"grpc,omitempty"`
	// Timeout bounds the whole exchange with the service; default 2s.
	Timeout *gwv1.Duration `json:"timeout,omitempty"`
	// FailOpen lets a request through when the service cannot answer
	// (down, too slow, an answer that cannot be read); by default such a
	// request is refused with 403.
	FailOpen bool `json:"failOpen,omitempty"`
	// ForwardBody sends the service the request's body, buffered up to
	// maxSize bytes (the ExternalAuth filter's option); a longer body is
	// refused with 413. Unset or 0: the body is never sent.
	ForwardBody *gwv1.ForwardBodyConfig `json:"forwardBody,omitempty"`
}

// HTTPExtAuth is an HTTP authorization service: it receives the
// request's method, path (after Path) and HeadersToAuth, never its body;
// a 2xx answer lets the request through with HeadersToBackend copied
// from it; any other answer goes back to the client.
type HTTPExtAuth struct {
	// BackendRef is the service's Service port; one of another namespace
	// needs a ReferenceGrant from SecurityPolicies of the policy's
	// namespace.
	BackendRef *gwv1.BackendObjectReference `json:"backendRef,omitempty"`
	// Address is the service's "host:port" instead, for a configuration
	// served without a cluster.
	Address string `json:"address,omitempty"`
	// Path is prefixed to the request's path.
	Path string `json:"path,omitempty"`
	// HeadersToAuth are the request headers sent to the service.
	HeadersToAuth []string `json:"headersToAuth,omitempty"`
	// HeadersToBackend are the headers of an allowing answer set on the
	// forwarded request (replacing any the client sent).
	HeadersToBackend []string `json:"headersToBackend,omitempty"`
}

// GRPCExtAuth is a gRPC authorization service of Envoy's protocol
// (envoy.service.auth.v3.Authorization/Check): it receives a
// CheckRequest of the request's method, path, host and HeadersToAuth,
// never its body; an OK status lets the request through with the headers
// its answer sets; a denial's status, headers and body go to the client.
type GRPCExtAuth struct {
	// BackendRef and Address are as HTTPExtAuth's.
	BackendRef *gwv1.BackendObjectReference `json:"backendRef,omitempty"`
	Address    string                       `json:"address,omitempty"`
	// HeadersToAuth are the request headers sent (lower-cased) besides
	// ":authority", ":method" and ":path".
	HeadersToAuth []string `json:"headersToAuth,omitempty"`
}

// target is the service's reference or address, and the headers it gets.
func (e *ExtAuth) target() (ref *gwv1.BackendObjectReference, address string, headers []string) {
	switch {
	case e.HTTP != nil:
		return e.HTTP.BackendRef, e.HTTP.Address, e.HTTP.HeadersToAuth
	case e.GRPC != nil:
		return e.GRPC.BackendRef, e.GRPC.Address, e.GRPC.HeadersToAuth
	}
	return nil, "", nil
}

// Defaults and bounds of ExtAuth.
const (
	DefaultExtAuthTimeout = 2 * time.Second
	MaxExtAuthTimeout     = time.Minute
	MaxExtAuthHeaders     = 32
	MaxExtAuthBody        = 1 << 20
)

// JWT asks for a JSON Web Token that one of its providers signed (RS*,
// PS*, ES*, EdDSA), found where the providers look for one (by default
// "Authorization: Bearer"), and for claims and scopes.
type JWT struct {
	Providers []JWTProvider `json:"providers"`
	// RequiredClaims must each hold one of their values.
	RequiredClaims []RequiredClaim `json:"requiredClaims,omitempty"`
	// RequiredScopes must all be in the token's "scope" or "scp".
	RequiredScopes []string `json:"requiredScopes,omitempty"`
	// ForwardToken sends the token on to the backend where it was found;
	// by default it is removed from there (the header, the cookie, the
	// query parameter).
	ForwardToken bool `json:"forwardToken,omitempty"`
}

// RequiredClaim is a claim that must hold one of Values. Name is a path
// into nested objects: "realm_access.roles" is the "roles" member of the
// "realm_access" claim; a "." or "\" that is part of a name is escaped
// with "\" (`https://example\.com/roles`). A string claim must equal a
// value; a number claim must equal one read as a number ("5" and "5.0"
// match 5); a boolean claim must be named by one ("true", "false"); an
// array claim must hold an element that matches one of those ways; an
// object claim matches nothing.
type RequiredClaim struct {
	Name   string   `json:"name"`
	Values []string `json:"values"`
}

// JWTProvider is an issuer with its keys: remoteJWKS or localJWKS.
type JWTProvider struct {
	Name      string   `json:"name"`
	Issuer    string   `json:"issuer"`
	Audiences []string `json:"audiences,omitempty"`
	// RemoteJWKS is fetched (and refetched after cacheDuration, default
	// 5m; at once, at most every 10s, for a key ID it lacks).
	RemoteJWKS *RemoteJWKS `json:"remoteJWKS,omitempty"`
	// LocalJWKS is a JWKS inline or in a Secret (key "jwks").
	LocalJWKS *LocalJWKS `json:"localJWKS,omitempty"`
	// ExtractFrom are the places the provider's tokens are looked for,
	// in order; by default "Authorization: Bearer". A request with two
	// different tokens in the places a policy's providers look, or one
	// place given twice (two Authorization headers, a cookie or
	// parameter twice), is refused (400); a token found in a place its
	// issuer's provider does not look in does not verify.
	ExtractFrom []TokenSource `json:"extractFrom,omitempty"`
	// ClaimToHeaders set request headers from claims.
	ClaimToHeaders []ClaimToHeader `json:"claimToHeaders,omitempty"`
	// ClockSkew tolerated on exp and nbf; default 30s.
	ClockSkew *gwv1.Duration `json:"clockSkew,omitempty"`
}

// TokenSource is one place a token is looked for: exactly one of header,
// cookie and param.
type TokenSource struct {
	// Header is a request header; with valuePrefix, only a value that
	// starts with it (compared without regard to case) holds a token,
	// the rest of it without surrounding spaces.
	Header      string `json:"header,omitempty"`
	ValuePrefix string `json:"valuePrefix,omitempty"`
	// Cookie is a cookie's name.
	Cookie string `json:"cookie,omitempty"`
	// Param is a query parameter's name.
	Param string `json:"param,omitempty"`
}

// MaxTokenSources bounds a provider's ExtractFrom.
const MaxTokenSources = 8

// RemoteJWKS is the issuer's JWKS URI (http or https).
type RemoteJWKS struct {
	URI           string         `json:"uri"`
	CacheDuration *gwv1.Duration `json:"cacheDuration,omitempty"`
}

// LocalJWKS is a JWKS: inline, or the key "jwks" of a Secret.
type LocalJWKS struct {
	Inline    string                      `json:"inline,omitempty"`
	SecretRef *gwv1.SecretObjectReference `json:"secretRef,omitempty"`
}

// JWKSKey is the key of a Secret that holds a local JWKS.
const JWKSKey = "jwks"

// ClaimToHeader sets a header from a claim, whose name is a path as
// RequiredClaim's. A string claim is sent as it is; a number or boolean
// in its JSON form; an array of those joined by ","; an object, an array
// of objects or arrays, a value with a control character (CR, LF, NUL
// among them) or longer than 4096 bytes is not sent (nor is any header
// of that name the client sent).
type ClaimToHeader struct {
	Header string `json:"header"`
	Claim  string `json:"claim"`
}

// ClientAddresses are CIDRs (or single addresses) of clients: one that
// deny holds gets a 403; with allow set, so does one allow does not hold.
type ClientAddresses struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// BasicAuth checks users against an htpasswd file, the key ".htpasswd"
// of a Secret (bcrypt "$2y$"/"$2a$"/"$2b$" and "{SHA}" hashes).
type BasicAuth struct {
	// Users is the Secret; one of another namespace needs a
	// ReferenceGrant from SecurityPolicies of the policy's namespace.
	Users gwv1.SecretObjectReference `json:"users"`
	// Realm is sent in WWW-Authenticate; default "portico".
	Realm string `json:"realm,omitempty"`
	// ForwardAuthorization sends the Authorization header on to the
	// backend; by default it is removed.
	ForwardAuthorization bool `json:"forwardAuthorization,omitempty"`
	// ForwardUsernameHeader names a header that carries the user's name
	// to the backend.
	ForwardUsernameHeader string `json:"forwardUsernameHeader,omitempty"`
}

// SecretLabel is the label a Secret a SecurityPolicy reads must carry
// in a cluster (any value): Portico watches only those of the Secrets
// that are not TLS certificates.
const SecretLabel = "portico.dev/credentials"

// HtpasswdKey is the key of a basic-auth Secret that holds the users.
const HtpasswdKey = ".htpasswd"

// DefaultRealm is the realm of a BasicAuth that names none.
const DefaultRealm = "portico"

// APIKeyAuth checks a key against those of Secrets: each key of a
// Secret's data is the name of a client, its value that client's key.
type APIKeyAuth struct {
	CredentialRefs []gwv1.SecretObjectReference `json:"credentialRefs"`
	// ExtractFrom says where the key is; it is removed from there before
	// the request is forwarded.
	ExtractFrom KeySource `json:"extractFrom"`
	// ForwardClientIDHeader names a header that carries the client's
	// name to the backend.
	ForwardClientIDHeader string `json:"forwardClientIDHeader,omitempty"`
}

// KeySource is a header or a query parameter: exactly one is set.
type KeySource struct {
	Header string `json:"header,omitempty"`
	Query  string `json:"query,omitempty"`
}

const gatewayGroup = gwv1.GroupName

// targetKinds are the kinds a policy may target: routes by rule.
var targetKinds = []policytarget.Kind{
	{Kind: "Gateway", Group: gatewayGroup}, {Kind: "ListenerSet", Group: gatewayGroup},
	{Kind: "HTTPRoute", Group: gatewayGroup, Sections: true}, {Kind: "GRPCRoute", Group: gatewayGroup, Sections: true},
}

// Validate checks the rules of the CRD's schema (and its CEL rules) for
// objects that reach translate without an API server, and what the
// schema cannot say. The error names the field.
func (s *Spec) Validate() error {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	errs = append(errs, policytarget.Problems(s.TargetRefs, MaxTargets, targetKinds, nil)...)
	if s.ClientAddresses == nil && s.APIKeyAuth == nil && s.BasicAuth == nil && s.JWT == nil && s.OIDC == nil && s.ExtAuth == nil {
		add("spec: one of clientAddresses, apiKeyAuth, basicAuth, jwt, oidc, extAuth is required")
	}
	if o := s.OIDC; o != nil {
		errs = append(errs, o.validate()...)
		if s.BasicAuth != nil || s.JWT != nil {
			add("spec: oidc cannot be set with basicAuth or jwt (they read the Authorization header oidc sets for the backend)")
		}
	}
	if e := s.ExtAuth; e != nil {
		errs = append(errs, e.validate()...)
	}
	if j := s.JWT; j != nil {
		errs = append(errs, j.validate()...)
		if s.BasicAuth != nil {
			add("spec: basicAuth and jwt both read the Authorization header; set one")
		}
	}
	if ca := s.ClientAddresses; ca != nil {
		if len(ca.Allow) == 0 && len(ca.Deny) == 0 {
			add("spec.clientAddresses: allow or deny is required")
		}
		for name, list := range map[string][]string{"allow": ca.Allow, "deny": ca.Deny} {
			if len(list) > MaxCIDRs {
				add("spec.clientAddresses.%s: at most %d entries, not %d", name, MaxCIDRs, len(list))
			}
		}
		for i, c := range ca.Allow {
			if _, err := ParsePrefix(c); err != nil {
				add("spec.clientAddresses.allow[%d]: %v", i, err)
			}
		}
		for i, c := range ca.Deny {
			if _, err := ParsePrefix(c); err != nil {
				add("spec.clientAddresses.deny[%d]: %v", i, err)
			}
		}
	}
	if a := s.APIKeyAuth; a != nil {
		if len(a.CredentialRefs) == 0 || len(a.CredentialRefs) > MaxCredentials {
			add("spec.apiKeyAuth.credentialRefs: between 1 and %d Secrets are needed, not %d", MaxCredentials, len(a.CredentialRefs))
		}
		for i, ref := range a.CredentialRefs {
			if msg := secretRefProblem(ref); msg != "" {
				add("spec.apiKeyAuth.credentialRefs[%d]: %s", i, msg)
			}
		}
		switch from := a.ExtractFrom; {
		case (from.Header == "") == (from.Query == ""):
			add("spec.apiKeyAuth.extractFrom: exactly one of header and query is required")
		case from.Header != "" && !isHeaderName(from.Header):
			add("spec.apiKeyAuth.extractFrom.header: %q is not a header name", from.Header)
		case from.Query != "" && len(from.Query) > 256:
			add("spec.apiKeyAuth.extractFrom.query: longer than 256")
		}
		if h := a.ForwardClientIDHeader; h != "" && !isHeaderName(h) {
			add("spec.apiKeyAuth.forwardClientIDHeader: %q is not a header name", h)
		}
	}
	if b := s.BasicAuth; b != nil {
		if msg := secretRefProblem(b.Users); msg != "" {
			add("spec.basicAuth.users: %s", msg)
		}
		if len(b.Realm) > MaxRealm || strings.ContainsAny(b.Realm, "\"\\") || !printable(b.Realm) {
			add("spec.basicAuth.realm: at most %d printable characters, without '\"' or '\\'", MaxRealm)
		}
		if h := b.ForwardUsernameHeader; h != "" && !isHeaderName(h) {
			add("spec.basicAuth.forwardUsernameHeader: %q is not a header name", h)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

func secretRefProblem(ref gwv1.SecretObjectReference) string {
	switch {
	case ref.Group != nil && *ref.Group != "":
		return fmt.Sprintf("group %q: only core Secrets are read", *ref.Group)
	case ref.Kind != nil && *ref.Kind != "Secret":
		return fmt.Sprintf("kind %q: only Secrets are read", *ref.Kind)
	case ref.Name == "":
		return "name is required"
	}
	return ""
}

func isHeaderName(h string) bool {
	return len(h) <= 256 && len(validation.IsHTTPHeaderName(h)) == 0
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// ParsePrefix reads a CIDR or a single address (a prefix of its full
// length), in the canonical form of its network.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// DeepCopy copies p (jsoncopy.Copy).
func (p *SecurityPolicy) DeepCopy() *SecurityPolicy { return jsoncopy.Copy(p) }

// DeepCopyObject makes SecurityPolicy a runtime.Object.
func (p *SecurityPolicy) DeepCopyObject() runtime.Object { return p.DeepCopy() }

// MaxProviders bounds a policy's JWT providers.
const MaxProviders = 4

func (j *JWT) validate() []string {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(j.Providers) == 0 || len(j.Providers) > MaxProviders {
		add("spec.jwt.providers: between 1 and %d are needed, not %d", MaxProviders, len(j.Providers))
	}
	issuers := map[string]bool{}
	for i, p := range j.Providers {
		at := fmt.Sprintf("spec.jwt.providers[%d]", i)
		if p.Name == "" {
			add("%s.name: required", at)
		}
		if p.Issuer == "" {
			add("%s.issuer: required", at)
		} else if issuers[p.Issuer] {
			add("%s.issuer: %q is the issuer of another provider", at, p.Issuer)
		}
		issuers[p.Issuer] = true
		switch {
		case (p.RemoteJWKS == nil) == (p.LocalJWKS == nil):
			add("%s: exactly one of remoteJWKS and localJWKS is required", at)
		case p.RemoteJWKS != nil:
			u, err := url.Parse(p.RemoteJWKS.URI)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				add("%s.remoteJWKS.uri: %q is not an http(s) URI", at, p.RemoteJWKS.URI)
			}
			if d := p.RemoteJWKS.CacheDuration; d != nil {
				if v, err := time.ParseDuration(string(*d)); err != nil || v < time.Second || v > 24*time.Hour {
					add("%s.remoteJWKS.cacheDuration: %q is not between 1s and 24h", at, *d)
				}
			}
		default:
			l := p.LocalJWKS
			if (l.Inline == "") == (l.SecretRef == nil) {
				add("%s.localJWKS: exactly one of inline and secretRef is required", at)
			}
			if l.SecretRef != nil {
				if msg := secretRefProblem(*l.SecretRef); msg != "" {
					add("%s.localJWKS.secretRef: %s", at, msg)
				}
			}
		}
		if d := p.ClockSkew; d != nil {
			if v, err := time.ParseDuration(string(*d)); err != nil || v < 0 || v > 10*time.Minute {
				add("%s.clockSkew: %q is not between 0s and 10m", at, *d)
			}
		}
		for k, c := range p.ClaimToHeaders {
			if c.Claim == "" || !isHeaderName(c.Header) {
				add("%s.claimToHeaders[%d]: a claim and a header name are required", at, k)
				continue
			}
			if _, err := jose.ParseClaimPath(c.Claim); err != nil {
				add("%s.claimToHeaders[%d].claim: %v", at, k, err)
			}
			if reservedHeader(c.Header) {
				add("%s.claimToHeaders[%d].header: %q is not a header a claim may set", at, k, c.Header)
			}
		}
		errs = append(errs, tokenSourceProblems(at, p.ExtractFrom)...)
	}
	for i, c := range j.RequiredClaims {
		if c.Name == "" || len(c.Values) == 0 {
			add("spec.jwt.requiredClaims[%d]: a name and values are required", i)
		} else if _, err := jose.ParseClaimPath(c.Name); err != nil {
			add("spec.jwt.requiredClaims[%d].name: %v", i, err)
		}
	}
	for i, s := range j.RequiredScopes {
		if s == "" || strings.ContainsAny(s, " \t") {
			add("spec.jwt.requiredScopes[%d]: %q is not a scope", i, s)
		}
	}
	return errs
}

// tokenSourceProblems checks a provider's extractFrom.
func tokenSourceProblems(at string, list []TokenSource) []string {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if len(list) > MaxTokenSources {
		add("%s.extractFrom: at most %d places, not %d", at, MaxTokenSources, len(list))
	}
	for i, src := range list {
		set := 0
		for _, v := range []string{src.Header, src.Cookie, src.Param} {
			if v != "" {
				set++
			}
		}
		switch {
		case set != 1:
			add("%s.extractFrom[%d]: exactly one of header, cookie and param is required", at, i)
		case src.Header != "" && !isHeaderName(src.Header):
			add("%s.extractFrom[%d].header: %q is not a header name", at, i, src.Header)
		case src.Cookie != "" && !isCookieName(src.Cookie):
			add("%s.extractFrom[%d].cookie: %q is not a cookie name", at, i, src.Cookie)
		case src.Param != "" && (len(src.Param) > 256 || !printable(src.Param)):
			add("%s.extractFrom[%d].param: at most 256 printable characters", at, i)
		}
		if src.ValuePrefix != "" && (src.Header == "" || len(src.ValuePrefix) > 64 || !printable(src.ValuePrefix)) {
			add("%s.extractFrom[%d].valuePrefix: at most 64 printable characters, with header only", at, i)
		}
	}
	return errs
}

// isCookieName: a token (RFC 6265 4.1.1), as a header name is.
func isCookieName(s string) bool { return isHeaderName(s) }

// reservedHeader tells the headers a claim may not set: those that frame
// or route the request, or carry credentials.
func reservedHeader(h string) bool {
	switch strings.ToLower(h) {
	case "host", "content-length", "transfer-encoding", "connection", "upgrade", "te", "trailer",
		"keep-alive", "proxy-connection", "expect", "authorization", "cookie", "proxy-authorization":
		return true
	}
	return false
}

func (e *ExtAuth) validate() []string {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if (e.HTTP == nil) == (e.GRPC == nil) {
		add("spec.extAuth: exactly one of http and grpc is required")
		return errs
	}
	if d := e.Timeout; d != nil {
		if v, err := time.ParseDuration(string(*d)); err != nil || v <= 0 || v > MaxExtAuthTimeout {
			add("spec.extAuth.timeout: %q is not above 0s and at most %s", *d, MaxExtAuthTimeout)
		}
	}
	if fb := e.ForwardBody; fb != nil && (fb.MaxSize < 0 || fb.MaxSize > MaxExtAuthBody) {
		add("spec.extAuth.forwardBody.maxSize: %d is not between 0 and %d", fb.MaxSize, MaxExtAuthBody)
	}
	at := "spec.extAuth.http"
	if e.GRPC != nil {
		at = "spec.extAuth.grpc"
	}
	ref, address, headersToAuth := e.target()
	switch {
	case (ref == nil) == (address == ""):
		add("%s: exactly one of backendRef and address is required", at)
	case ref != nil:
		if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != "Service") {
			add("%s.backendRef: only core Services are supported", at)
		}
		if ref.Name == "" {
			add("%s.backendRef.name: required", at)
		}
		if ref.Port == nil {
			add("%s.backendRef.port: required", at)
		}
	default:
		host, port, err := net.SplitHostPort(address)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			add("%s.address: %q is not host:port", at, address)
		}
	}
	lists := map[string][]string{"headersToAuth": headersToAuth}
	if h := e.HTTP; h != nil {
		if p := h.Path; p != "" && (!strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?# \t") || len(p) > 1024) {
			add("spec.extAuth.http.path: %q is not an absolute path", p)
		}
		lists["headersToBackend"] = h.HeadersToBackend
	}
	for name, list := range lists {
		if len(list) > MaxExtAuthHeaders {
			add("%s.%s: at most %d headers, not %d", at, name, MaxExtAuthHeaders, len(list))
		}
		for i, hd := range list {
			if !isHeaderName(hd) {
				add("%s.%s[%d]: %q is not a header name", at, name, i, hd)
			}
		}
	}
	return errs
}
