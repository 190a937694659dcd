package securitypolicy

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/jose"
)

// Reasons of a ResolvedRefs=False ancestor condition.
const (
	ReasonRefNotPermitted  = "RefNotPermitted"
	ReasonInvalidReference = "InvalidReference"
	ReasonBackendNotFound  = "BackendNotFound"
)

// RefProblem says why a Secret a policy names cannot be used.
type RefProblem struct {
	Reason, Message string
}

// Secrets are the Secrets a policy can read, by namespace/name.
type Secrets func(types.NamespacedName) *corev1.Secret

// SecretRefs are the Secrets p names, in its own namespace unless the
// reference says another.
func (p *SecurityPolicy) SecretRefs() []types.NamespacedName {
	var out []types.NamespacedName
	add := func(ref gwv1.SecretObjectReference) {
		ns := p.Namespace
		if ref.Namespace != nil && *ref.Namespace != "" {
			ns = string(*ref.Namespace)
		}
		if key := (types.NamespacedName{Namespace: ns, Name: string(ref.Name)}); !slices.Contains(out, key) {
			out = append(out, key)
		}
	}
	if a := p.Spec.APIKeyAuth; a != nil {
		for _, ref := range a.CredentialRefs {
			add(ref)
		}
	}
	if b := p.Spec.BasicAuth; b != nil {
		add(b.Users)
	}
	if j := p.Spec.JWT; j != nil {
		for _, pr := range j.Providers {
			if pr.LocalJWKS != nil && pr.LocalJWKS.SecretRef != nil {
				add(*pr.LocalJWKS.SecretRef)
			}
		}
	}
	if o := p.Spec.OIDC; o != nil {
		add(o.ClientSecret)
	}
	return out
}

// Granted reports whether a policy of namespace ns may read Secret
// secret: one of its own namespace, or one a ReferenceGrant of the
// Secret's namespace lets SecurityPolicies of ns read.
func Granted(grants []*gwv1.ReferenceGrant, ns string, secret types.NamespacedName) bool {
	return grantedKind(grants, ns, "Secret", secret)
}

// ServiceGranted is Granted for a Service (an extAuth's).
func ServiceGranted(grants []*gwv1.ReferenceGrant, ns string, svc types.NamespacedName) bool {
	return grantedKind(grants, ns, "Service", svc)
}

// grantedKind is Granted for an object of a core kind.
func grantedKind(grants []*gwv1.ReferenceGrant, ns string, kind gwv1.Kind, secret types.NamespacedName) bool {
	if secret.Namespace == ns {
		return true
	}
	for _, g := range grants {
		if g == nil || g.Namespace != secret.Namespace {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return f.Group == Group && f.Kind == Kind && string(f.Namespace) == ns
		})
		if from && slices.ContainsFunc(g.Spec.To, func(t gwv1.ReferenceGrantTo) bool {
			return t.Group == "" && t.Kind == kind && (t.Name == nil || string(*t.Name) == secret.Name)
		}) {
			return true
		}
	}
	return false
}

// Compile makes p the data plane's configuration. A Secret that cannot be
// used gives a RefProblem and a Security that is Invalid: its rules
// answer 500 rather than serve unguarded. p's spec must be valid.
func Compile(p *SecurityPolicy, grants []*gwv1.ReferenceGrant, secrets Secrets) (*config.Security, *RefProblem) {
	out := &config.Security{Policy: p.Namespace + "/" + p.Name}
	secret := func(ref gwv1.SecretObjectReference) (*corev1.Secret, types.NamespacedName, *RefProblem) {
		key := types.NamespacedName{Namespace: p.Namespace, Name: string(ref.Name)}
		if ref.Namespace != nil && *ref.Namespace != "" {
			key.Namespace = string(*ref.Namespace)
		}
		if !Granted(grants, p.Namespace, key) {
			return nil, key, &RefProblem{ReasonRefNotPermitted, fmt.Sprintf("Secret %s: no ReferenceGrant lets SecurityPolicies of namespace %s read it", key, p.Namespace)}
		}
		s := secrets(key)
		if s == nil {
			return nil, key, &RefProblem{ReasonInvalidReference, fmt.Sprintf("Secret %s does not exist", key)}
		}
		return s, key, nil
	}
	fail := func(prob *RefProblem) (*config.Security, *RefProblem) {
		return &config.Security{Policy: out.Policy, Invalid: prob.Message}, prob
	}
	if ca := p.Spec.ClientAddresses; ca != nil {
		out.Addresses = &config.AddressList{Allow: prefixes(ca.Allow), Deny: prefixes(ca.Deny)}
	}
	if a := p.Spec.APIKeyAuth; a != nil {
		keys := map[string]string{}
		var names []string
		for _, ref := range a.CredentialRefs {
			s, key, prob := secret(ref)
			if prob != nil {
				return fail(prob)
			}
			if slices.Contains(names, key.String()) {
				continue
			}
			names = append(names, key.String())
			clients := slices.Sorted(func(yield func(string) bool) {
				for c := range s.Data {
					if !yield(c) {
						return
					}
				}
			})
			for _, client := range clients {
				k := strings.TrimSpace(string(s.Data[client]))
				if k == "" {
					return fail(&RefProblem{ReasonInvalidReference, fmt.Sprintf("Secret %s: the key of client %q is empty", key, client)})
				}
				if other, dup := keys[k]; dup && other != client {
					return fail(&RefProblem{ReasonInvalidReference, fmt.Sprintf("Secret %s: clients %q and %q have the same key", key, other, client)})
				}
				keys[k] = client
			}
		}
		if len(keys) == 0 {
			return fail(&RefProblem{ReasonInvalidReference, "apiKeyAuth: the Secrets hold no key"})
		}
		header := ""
		if h := a.ExtractFrom.Header; h != "" {
			header = textproto.CanonicalMIMEHeaderKey(h)
		}
		out.APIKey = config.NewAPIKeyAuth(header, a.ExtractFrom.Query, names, keys)
		out.APIKey.ClientIDHeader = canonicalOrEmpty(a.ForwardClientIDHeader)
	}
	if b := p.Spec.BasicAuth; b != nil {
		s, key, prob := secret(b.Users)
		if prob != nil {
			return fail(prob)
		}
		data, ok := s.Data[HtpasswdKey]
		if !ok {
			return fail(&RefProblem{ReasonInvalidReference, fmt.Sprintf("Secret %s has no key %s", key, HtpasswdKey)})
		}
		users, err := ParseHtpasswd(data)
		if err != nil {
			return fail(&RefProblem{ReasonInvalidReference, fmt.Sprintf("Secret %s: %v", key, err)})
		}
		realm := b.Realm
		if realm == "" {
			realm = DefaultRealm
		}
		out.Basic = config.NewBasicAuth(realm, key.String(), users)
		out.Basic.ForwardAuthorization = b.ForwardAuthorization
		out.Basic.UsernameHeader = canonicalOrEmpty(b.ForwardUsernameHeader)
	}
	if j := p.Spec.JWT; j != nil {
		out.JWT = &config.JWTAuth{RequiredScopes: j.RequiredScopes, ForwardToken: j.ForwardToken}
		for _, c := range j.RequiredClaims {
			path, _ := jose.ParseClaimPath(c.Name)
			out.JWT.RequiredClaims = append(out.JWT.RequiredClaims, config.RequiredClaim{Name: c.Name, Path: path, Values: c.Values})
		}
		for _, pr := range j.Providers {
			cp := &config.JWTProvider{Name: pr.Name, Issuer: pr.Issuer, Audiences: pr.Audiences, ClockSkew: DefaultClockSkew}
			if pr.ClockSkew != nil {
				cp.ClockSkew, _ = time.ParseDuration(string(*pr.ClockSkew))
			}
			for _, c := range pr.ClaimToHeaders {
				path, _ := jose.ParseClaimPath(c.Claim)
				cp.ClaimToHeaders = append(cp.ClaimToHeaders, config.ClaimHeader{Claim: c.Claim, Header: textproto.CanonicalMIMEHeaderKey(c.Header), Path: path})
			}
			for _, src := range pr.ExtractFrom {
				cp.ExtractFrom = append(cp.ExtractFrom, config.TokenSource{Header: canonicalOrEmpty(src.Header), ValuePrefix: src.ValuePrefix, Cookie: src.Cookie, Param: src.Param})
			}
			if r := pr.RemoteJWKS; r != nil {
				cp.RemoteJWKS, cp.CacheDuration = r.URI, DefaultJWKSCacheDuration
				if r.CacheDuration != nil {
					cp.CacheDuration, _ = time.ParseDuration(string(*r.CacheDuration))
				}
				cp.ID = providerID(cp, r.URI)
			} else {
				data := []byte(pr.LocalJWKS.Inline)
				where := "localJWKS.inline"
				if ref := pr.LocalJWKS.SecretRef; ref != nil {
					s, key, prob := secret(*ref)
					if prob != nil {
						return fail(prob)
					}
					where = "Secret " + key.String()
					var ok bool
					if data, ok = s.Data[JWKSKey]; !ok {
						return fail(&RefProblem{ReasonInvalidReference, fmt.Sprintf("Secret %s has no key %s", key, JWKSKey)})
					}
				}
				set, err := jose.ParseKeySet(data)
				if err != nil {
					return fail(&RefProblem{ReasonInvalidReference, fmt.Sprintf("provider %s: %s: %v", pr.Name, where, err)})
				}
				cp.SetLocalKeys(set)
				sum := sha256.Sum256(data)
				cp.ID = providerID(cp, hex.EncodeToString(sum[:8]))
			}
			out.JWT.Providers = append(out.JWT.Providers, cp)
		}
	}
	if o := p.Spec.OIDC; o != nil {
		compiled, prob := compileOIDC(o, secret)
		if prob != nil {
			return fail(prob)
		}
		out.OIDC = compiled
	}
	if e := p.Spec.ExtAuth; e != nil {
		ref, address, headersToAuth := e.target()
		out.ExtAuth = &config.ExtAuth{Address: address, Timeout: DefaultExtAuthTimeout, FailOpen: e.FailOpen, GRPC: e.GRPC != nil}
		if e.Timeout != nil {
			out.ExtAuth.Timeout, _ = time.ParseDuration(string(*e.Timeout))
		}
		if e.ForwardBody != nil && e.ForwardBody.MaxSize > 0 {
			out.ExtAuth.ForwardBody = int64(e.ForwardBody.MaxSize)
		}
		out.ExtAuth.Name = "SecurityPolicy " + out.Policy
		if ref != nil {
			out.ExtAuth.Backend = &config.BackendKey{Service: config.NamespacedName(extAuthService(p)), Port: *ref.Port}
		}
		for _, hd := range headersToAuth {
			out.ExtAuth.HeadersToAuth = append(out.ExtAuth.HeadersToAuth, textproto.CanonicalMIMEHeaderKey(hd))
		}
		if h := e.HTTP; h != nil {
			out.ExtAuth.Path = strings.TrimSuffix(h.Path, "/")
			for _, hd := range h.HeadersToBackend {
				out.ExtAuth.HeadersToBackend = append(out.ExtAuth.HeadersToBackend, textproto.CanonicalMIMEHeaderKey(hd))
			}
		}
	}
	return out, nil
}

// extAuthService is the Service p's extAuth names.
func extAuthService(p *SecurityPolicy) types.NamespacedName {
	ref, _, _ := p.Spec.ExtAuth.target()
	ns := p.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
}

// ExtAuthService is the Service p's extAuth names, if it names one.
func (p *SecurityPolicy) ExtAuthService() (types.NamespacedName, bool) {
	if p.Spec.ExtAuth == nil {
		return types.NamespacedName{}, false
	}
	if ref, _, _ := p.Spec.ExtAuth.target(); ref != nil {
		return extAuthService(p), true
	}
	return types.NamespacedName{}, false
}

// ServicePorts says whether a Service exists and the ports it has.
type ServicePorts func(types.NamespacedName) (ports []int32, ok bool)

// ExtAuthRefProblem says why the Service p's extAuth names cannot be
// used: another namespace's without a ReferenceGrant, one that does not
// exist or lacks the port; nil when it can, or p names none. p's spec
// must be valid.
func ExtAuthRefProblem(p *SecurityPolicy, grants []*gwv1.ReferenceGrant, services ServicePorts) *RefProblem {
	if p.Spec.ExtAuth == nil {
		return nil
	}
	ref, _, _ := p.Spec.ExtAuth.target()
	if ref == nil {
		return nil
	}
	svc, port := extAuthService(p), *ref.Port
	if !grantedKind(grants, p.Namespace, "Service", svc) {
		return &RefProblem{ReasonRefNotPermitted, fmt.Sprintf("extAuth Service %s: no ReferenceGrant lets SecurityPolicies of namespace %s use it", svc, p.Namespace)}
	}
	ports, ok := services(svc)
	if !ok {
		return &RefProblem{ReasonBackendNotFound, fmt.Sprintf("extAuth Service %s does not exist", svc)}
	}
	if !slices.Contains(ports, port) {
		return &RefProblem{ReasonBackendNotFound, fmt.Sprintf("extAuth Service %s has no port %d", svc, port)}
	}
	return nil
}

// providerID names what a token verified by p was checked against (its
// issuer, keys, audiences and skew): the data plane takes a token it
// verified before only for a provider of the same ID.
func providerID(p *config.JWTProvider, keys string) string {
	return fmt.Sprintf("%s %s aud=%s skew=%s", p.Issuer, keys, strings.Join(p.Audiences, ","), p.ClockSkew)
}

// Defaults of a JWT provider.
const (
	DefaultClockSkew         = 30 * time.Second
	DefaultJWKSCacheDuration = 5 * time.Minute
)

func canonicalOrEmpty(h string) string {
	if h == "" {
		return ""
	}
	return textproto.CanonicalMIMEHeaderKey(h)
}

func prefixes(list []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// ParseHtpasswd reads an htpasswd file: "user:hash" lines, blank lines and
// "#" comments ignored. Only bcrypt ("$2a$", "$2b$", "$2y$") and "{SHA}"
// hashes are taken: MD5-crypt, crypt(3) and plain text are refused, so
// that no weak or unsupported hash silently locks a user out or lets one
// in. Errors name the line, never its content.
func ParseHtpasswd(data []byte) (map[string]string, error) {
	users := map[string]string{}
	for i, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		user, hash, ok := strings.Cut(string(line), ":")
		switch {
		case !ok || user == "":
			return nil, fmt.Errorf("%s line %d: not user:hash", HtpasswdKey, i+1)
		case !supportedHash(hash):
			return nil, fmt.Errorf("%s line %d: only bcrypt ($2y$) and {SHA} hashes are supported", HtpasswdKey, i+1)
		}
		if _, dup := users[user]; dup {
			return nil, fmt.Errorf("%s line %d: user %q appears twice", HtpasswdKey, i+1, user)
		}
		users[user] = hash
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%s has no user", HtpasswdKey)
	}
	return users, nil
}

func supportedHash(h string) bool {
	if rest, ok := strings.CutPrefix(h, "{SHA}"); ok {
		sum, err := base64.StdEncoding.DecodeString(rest)
		return err == nil && len(sum) == 20
	}
	return len(h) == 60 && (strings.HasPrefix(h, "$2a$") || strings.HasPrefix(h, "$2b$") || strings.HasPrefix(h, "$2y$"))
}
