package securitypolicy

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// OIDC logs browsers in at an OpenID Connect provider with the
// authorization-code flow and PKCE (S256), and keeps them logged in with
// an encrypted session cookie. A request without a session is sent to the
// provider (302) when it is a page navigation, and refused with 401
// otherwise (not GET, an Accept without text/html, XMLHttpRequest). The
// redirect URL and the logout path are paths of the hosts the policy
// guards: they must be served by a route the policy applies to.
//
// It combines with clientAddresses and apiKeyAuth, which are checked
// first, and with extAuth, which is asked after it (with the token OIDC
// forwards); not with basicAuth or jwt, which read the Authorization
// header OIDC may set for the backend.
type OIDC struct {
	Provider OIDCProvider `json:"provider"`
	// ClientID is the client's ID at the provider.
	ClientID string `json:"clientID"`
	// ClientSecret is a Secret whose key "client-secret" is the client's
	// secret; one of another namespace needs a ReferenceGrant from
	// SecurityPolicies of the policy's namespace.
	ClientSecret gwv1.SecretObjectReference `json:"clientSecret"`
	// RedirectURL is the path the provider sends the browser back to,
	// on the host of the request that started the login; default
	// "/oauth2/callback". It must be registered at the provider as
	// "<scheme>://<host><redirectURL>".
	RedirectURL string `json:"redirectURL,omitempty"`
	// LogoutPath ends the session: the cookies are cleared, then the
	// browser goes to the provider's end_session_endpoint when it has one
	// (with id_token_hint, and post_logout_redirect_uri when
	// PostLogoutRedirectURL is set), to "/" otherwise. Default
	// "/oauth2/logout".
	LogoutPath string `json:"logoutPath,omitempty"`
	// PostLogoutRedirectURL is where the provider sends the browser after
	// a logout (registered at the provider).
	PostLogoutRedirectURL string `json:"postLogoutRedirectURL,omitempty"`
	// Scopes are asked besides "openid", which always is.
	Scopes []string `json:"scopes,omitempty"`
	// ForwardAccessToken sends the access token to the backend as
	// "Authorization: Bearer"; ForwardIDToken sends the ID token so
	// instead (at most one of the two).
	ForwardAccessToken bool `json:"forwardAccessToken,omitempty"`
	ForwardIDToken     bool `json:"forwardIDToken,omitempty"`
	// CookieNamePrefix names the cookies ("<prefix>-session",
	// "<prefix>-login-…"); default "portico-oidc".
	CookieNamePrefix string `json:"cookieNamePrefix,omitempty"`
	// CookieDomain is the session cookie's Domain; by default it is a
	// host-only cookie.
	CookieDomain string `json:"cookieDomain,omitempty"`
	// RefreshToken, unless false, renews the access token with the
	// refresh token when it expires within RefreshBefore (default 1m).
	RefreshToken  *bool          `json:"refreshToken,omitempty"`
	RefreshBefore *gwv1.Duration `json:"refreshBefore,omitempty"`
	// SessionLifetime bounds a session from its login, whatever the
	// tokens say; default 24h.
	SessionLifetime *gwv1.Duration `json:"sessionLifetime,omitempty"`
	// ClockSkew tolerated on the ID token's exp and iat; default 30s.
	ClockSkew *gwv1.Duration `json:"clockSkew,omitempty"`
}

// OIDCProvider is the provider: its issuer, whose
// /.well-known/openid-configuration gives the endpoints, any of which
// may be set here instead.
type OIDCProvider struct {
	Issuer                string `json:"issuer"`
	AuthorizationEndpoint string `json:"authorizationEndpoint,omitempty"`
	TokenEndpoint         string `json:"tokenEndpoint,omitempty"`
	EndSessionEndpoint    string `json:"endSessionEndpoint,omitempty"`
}

// ClientSecretKey is the key of the Secret that holds an OIDC client's
// secret.
const ClientSecretKey = "client-secret"

// Defaults and bounds of OIDC.
const (
	DefaultOIDCRedirectURL     = "/oauth2/callback"
	DefaultOIDCLogoutPath      = "/oauth2/logout"
	DefaultOIDCCookiePrefix    = "portico-oidc"
	DefaultOIDCRefreshBefore   = time.Minute
	DefaultOIDCSessionLifetime = 24 * time.Hour
	MaxOIDCSessionLifetime     = 30 * 24 * time.Hour
	MaxOIDCScopes              = 16
)

func (o *OIDC) validate() []string {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if !httpURL(o.Provider.Issuer) {
		add("spec.oidc.provider.issuer: %q is not an http(s) URL", o.Provider.Issuer)
	}
	for name, v := range map[string]string{"authorizationEndpoint": o.Provider.AuthorizationEndpoint, "tokenEndpoint": o.Provider.TokenEndpoint, "endSessionEndpoint": o.Provider.EndSessionEndpoint} {
		if v != "" && !httpURL(v) {
			add("spec.oidc.provider.%s: %q is not an http(s) URL", name, v)
		}
	}
	if o.ClientID == "" || len(o.ClientID) > 256 || !printable(o.ClientID) {
		add("spec.oidc.clientID: 1 to 256 printable characters are required")
	}
	if msg := secretRefProblem(o.ClientSecret); msg != "" {
		add("spec.oidc.clientSecret: %s", msg)
	}
	redirect, logout := o.paths()
	if !cleanPath(redirect) {
		add("spec.oidc.redirectURL: %q is not an absolute path", redirect)
	}
	if !cleanPath(logout) {
		add("spec.oidc.logoutPath: %q is not an absolute path", logout)
	}
	if redirect == logout {
		add("spec.oidc: redirectURL and logoutPath are the same path")
	}
	if v := o.PostLogoutRedirectURL; v != "" && !httpURL(v) {
		add("spec.oidc.postLogoutRedirectURL: %q is not an http(s) URL", v)
	}
	if len(o.Scopes) > MaxOIDCScopes {
		add("spec.oidc.scopes: at most %d, not %d", MaxOIDCScopes, len(o.Scopes))
	}
	for i, s := range o.Scopes {
		if s == "" || len(s) > 128 || strings.ContainsAny(s, " \t\"\\") || !printable(s) {
			add("spec.oidc.scopes[%d]: %q is not a scope", i, s)
		}
	}
	if o.ForwardAccessToken && o.ForwardIDToken {
		add("spec.oidc: forwardAccessToken and forwardIDToken both set Authorization; set one")
	}
	if p := o.CookieNamePrefix; p != "" && !cookieToken(p) {
		add("spec.oidc.cookieNamePrefix: %q is not 1 to 64 letters, digits, '-' or '_'", p)
	}
	if d := o.CookieDomain; d != "" && (len(d) > 253 || strings.ContainsAny(d, " ;,\t\"/") || !printable(d)) {
		add("spec.oidc.cookieDomain: %q is not a domain", d)
	}
	durations := []struct {
		name     string
		d        *gwv1.Duration
		min, max time.Duration
	}{
		{"refreshBefore", o.RefreshBefore, 0, time.Hour},
		{"sessionLifetime", o.SessionLifetime, time.Minute, MaxOIDCSessionLifetime},
		{"clockSkew", o.ClockSkew, 0, 10 * time.Minute},
	}
	for _, d := range durations {
		if d.d == nil {
			continue
		}
		if v, err := time.ParseDuration(string(*d.d)); err != nil || v < d.min || v > d.max {
			add("spec.oidc.%s: %q is not between %s and %s", d.name, *d.d, d.min, d.max)
		}
	}
	return errs
}

// paths are the redirect and logout paths, defaults filled in.
func (o *OIDC) paths() (redirect, logout string) {
	redirect, logout = o.RedirectURL, o.LogoutPath
	if redirect == "" {
		redirect = DefaultOIDCRedirectURL
	}
	if logout == "" {
		logout = DefaultOIDCLogoutPath
	}
	return redirect, logout
}

func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && u.User == nil && u.Fragment == "" && len(s) <= 2048
}

func cleanPath(p string) bool {
	return strings.HasPrefix(p, "/") && len(p) <= 1024 && !strings.ContainsAny(p, "?# \t%") && printable(p) && !strings.Contains(p, "//") && !strings.Contains(p, "/../") && !strings.HasSuffix(p, "/..")
}

func cookieToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// compileOIDC makes o the data plane's configuration with the client
// secret of secret.
func compileOIDC(o *OIDC, secret func(gwv1.SecretObjectReference) (*corev1.Secret, types.NamespacedName, *RefProblem)) (*config.OIDC, *RefProblem) {
	s, key, prob := secret(o.ClientSecret)
	if prob != nil {
		return nil, prob
	}
	value := strings.TrimSpace(string(s.Data[ClientSecretKey]))
	if value == "" {
		return nil, &RefProblem{ReasonInvalidReference, fmt.Sprintf("Secret %s has no key %s (or it is empty)", key, ClientSecretKey)}
	}
	redirect, logout := o.paths()
	out := &config.OIDC{
		Issuer:                o.Provider.Issuer,
		AuthorizationEndpoint: o.Provider.AuthorizationEndpoint,
		TokenEndpoint:         o.Provider.TokenEndpoint,
		EndSessionEndpoint:    o.Provider.EndSessionEndpoint,
		ClientID:              o.ClientID,
		SecretRef:             key.String(),
		RedirectPath:          redirect,
		LogoutPath:            logout,
		PostLogoutRedirectURL: o.PostLogoutRedirectURL,
		Scopes:                append([]string{"openid"}, withoutOpenID(o.Scopes)...),
		ForwardAccessToken:    o.ForwardAccessToken,
		ForwardIDToken:        o.ForwardIDToken,
		CookiePrefix:          o.CookieNamePrefix,
		CookieDomain:          o.CookieDomain,
		Refresh:               o.RefreshToken == nil || *o.RefreshToken,
		RefreshBefore:         durationOr(o.RefreshBefore, DefaultOIDCRefreshBefore),
		SessionLifetime:       durationOr(o.SessionLifetime, DefaultOIDCSessionLifetime),
		ClockSkew:             durationOr(o.ClockSkew, DefaultClockSkew),
	}
	if out.CookiePrefix == "" {
		out.CookiePrefix = DefaultOIDCCookiePrefix
	}
	out.SetClientSecret(value)
	return out, nil
}

func withoutOpenID(scopes []string) []string {
	var out []string
	for _, s := range scopes {
		if s != "openid" {
			out = append(out, s)
		}
	}
	return out
}

func durationOr(d *gwv1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	v, err := time.ParseDuration(string(*d))
	if err != nil {
		return def
	}
	return v
}
