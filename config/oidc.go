package config

import "time"

// OIDC logs browsers in at an OpenID Connect provider (authorization code
// with PKCE) and keeps them in with an encrypted session cookie. The
// provider's endpoints come from its discovery document unless set here.
// The client secret is kept out of the configuration's dumps.
type OIDC struct {
	Issuer                string
	AuthorizationEndpoint string
	TokenEndpoint         string
	EndSessionEndpoint    string
	ClientID              string
	// SecretRef is the client secret's Secret, "namespace/name", for
	// dumps.
	SecretRef string
	// RedirectPath and LogoutPath are paths of the request's host: the
	// provider's callback and the end of a session.
	RedirectPath          string
	LogoutPath            string
	PostLogoutRedirectURL string
	// Scopes asked, "openid" first.
	Scopes []string
	// ForwardAccessToken or ForwardIDToken sends that token to the
	// backend as "Authorization: Bearer".
	ForwardAccessToken bool
	ForwardIDToken     bool
	CookiePrefix       string
	CookieDomain       string
	// Refresh renews the access token with the refresh token once it
	// expires within RefreshBefore.
	Refresh         bool
	RefreshBefore   time.Duration
	SessionLifetime time.Duration
	ClockSkew       time.Duration
	clientSecret    string
}

// SetClientSecret sets the client's secret.
func (o *OIDC) SetClientSecret(s string) { o.clientSecret = s }

// ClientSecret is the client's secret.
func (o *OIDC) ClientSecret() string { return o.clientSecret }
