package main

import (
	"bytes"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/oidctest"
)

// oidcPolicy is a SecurityPolicy of the web files logging browsers in at
// issuer, forwarding the ID token, with spec lines extra.
func oidcPolicy(issuer, extra string) string {
	return fmt.Sprintf(`apiVersion: portico.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: login}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  oidc:
    provider: {issuer: %q}
    clientID: %s
    clientSecret: {name: oidc-client}
    forwardIDToken: true
%s---
apiVersion: v1
kind: Secret
metadata: {name: oidc-client}
stringData:
  client-secret: %s
`, issuer, oidctest.ClientID, extra, oidctest.ClientSecret)
}

// TestServeOIDCLogin: "portico serve --config" with an oidc
// SecurityPolicy and its client Secret in the files logs a scripted
// browser in at a real OpenID provider: the backend gets the ID token the
// provider signed for the client, never the session cookie.
func TestServeOIDCLogin(t *testing.T) {
	port := freeport.Port(t)
	serveBackends(t, port, []string{"127.0.0.2"}, func(string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "auth=%s cookie=%s", r.Header.Get("Authorization"), r.Header.Get("Cookie"))
		})
	})
	listen := freeport.Port(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", listen)
	op := oidctest.Start(t, filepath.Join("..", "..", "hack"), base+"/oauth2/callback")
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, []string{"127.0.0.2"}, oidcPolicy(op.Issuer, ""))
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	waitUntil(t, "guarded", func() error {
		resp, err := http.Get(base + "/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("a request without a session: %d", resp.StatusCode)
		}
		return nil
	})
	b := oidctest.NewBrowser(t)
	callback := b.Login(base+"/page", "/oauth2/callback")
	resp, body := b.Get(callback.String())
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(body, "auth=Bearer ey") {
		t.Fatalf("after the callback: %d %q, want the backend with the ID token", resp.StatusCode, body)
	}
	if strings.Contains(body, "portico-oidc") {
		t.Fatalf("the backend got the session cookie: %s", body)
	}
}

// TestCheckOIDC: "portico check" reports an oidc spec the CRD refuses
// (Accepted=False Invalid, naming the field) and a missing client Secret
// (ResolvedRefs=False) as a policy that does not serve.
func TestCheckOIDC(t *testing.T) {
	for _, c := range []struct {
		name, extra string
		drop        bool
		code        int
		want        []string
	}{
		{"both tokens forwarded", "    forwardAccessToken: true\n", false, exitNotServing, []string{"SecurityPolicy", "login", "Accepted", "Invalid", "forwardAccessToken and forwardIDToken"}},
		{"no client Secret", "", true, exitNotServing, []string{"SecurityPolicy", "login", "ResolvedRefs", "oidc-client"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			policy := oidcPolicy("https://idp.example", c.extra)
			if c.drop {
				policy = policy[:strings.Index(policy, "---\napiVersion: v1")]
			}
			writeWebFiles(t, dir, 18080, 18081, []string{"127.0.0.2"}, policy)
			var out, errOut bytes.Buffer
			if code := run([]string{"check", "--config", dir}, &out, &errOut); code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, errOut.String())
			}
			if !hasLineWith(errOut.String(), c.want...) {
				t.Errorf("stderr has no line with %q:\n%s", c.want, errOut.String())
			}
		})
	}
}
