package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

// TestServeJWTExtractFrom: "portico serve --config" with a SecurityPolicy
// whose JWT provider (a JWKS inline) looks for its token in a cookie and
// forwards a nested claim: a token in the cookie reaches the backend with
// the claim's header and without the cookie, the request's other cookie
// kept; a token without the nested role a policy requires gets a 403; one
// in the Authorization header, where the provider does not look, a 401.
func TestServeJWTExtractFrom(t *testing.T) {
	port := freeport.Port(t)
	serveBackends(t, port, []string{"127.0.0.2"}, func(string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "roles=%s cookie=%s", r.Header.Get("X-Roles"), r.Header.Get("Cookie"))
		})
	})
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	enc := base64.RawURLEncoding.EncodeToString
	x, y := make([]byte, 32), make([]byte, 32)
	k.X.FillBytes(x)
	k.Y.FillBytes(y)
	jwks := fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","kid":"k","x":"%s","y":"%s"}]}`, enc(x), enc(y))
	token := func(roles ...string) string {
		h, _ := json.Marshal(map[string]any{"alg": "ES256", "kid": "k"})
		c, _ := json.Marshal(map[string]any{"iss": "https://idp.example", "exp": time.Now().Add(time.Hour).Unix(), "realm_access": map[string]any{"roles": roles}})
		signed := enc(h) + "." + enc(c)
		d := sha256.Sum256([]byte(signed))
		r, s, err := ecdsa.Sign(rand.Reader, k, d[:])
		if err != nil {
			t.Fatal(err)
		}
		sig := make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
		return signed + "." + enc(sig)
	}
	listen := freeport.Port(t)
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, []string{"127.0.0.2"}, fmt.Sprintf(`apiVersion: portico.dev/v1alpha1
kind: SecurityPolicy
metadata: {name: tokens}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  jwt:
    providers:
    - name: idp
      issuer: https://idp.example
      localJWKS: {inline: '%s'}
      extractFrom: [{cookie: session}]
      claimToHeaders: [{header: X-Roles, claim: realm_access.roles}]
    requiredClaims: [{name: realm_access.roles, values: [staff]}]
`, jwks))
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1")
	url := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func(h ...string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for i := 0; i+1 < len(h); i += 2 {
			req.Header.Add(h[i], h[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitUntil(t, "guarded", func() error {
		if code, _ := get(); code != 401 {
			return fmt.Errorf("no token: %d", code)
		}
		return nil
	})
	tok := token("staff", "user")
	if code, body := get("Cookie", "theme=dark; session="+tok); code != 200 || body != "roles=staff,user cookie=theme=dark" {
		t.Errorf("token in the cookie: %d %q", code, body)
	}
	if code, _ := get("Cookie", "session="+token("user")); code != 403 {
		t.Errorf("without the required nested role: %d, want 403", code)
	}
	if code, body := get("Authorization", "Bearer "+tok); code != 401 || strings.Contains(body, "roles=") {
		t.Errorf("token in Authorization, where the provider does not look: %d", code)
	}
}
