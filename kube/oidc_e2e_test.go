package kube

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/internal/testkit/oidctest"
	"portico.dev/portico/kube/source"
)

// TestSecurityPolicyOIDCLoginInCluster: in a cluster, an oidc
// SecurityPolicy whose client Secret carries the credentials label logs a
// scripted browser in at a real OpenID provider: before the login the
// route answers 401 (a script) or sends a page to the provider; after it,
// the request passes the guard and reaches the route's backend (a Service
// without endpoints here: 503, which no request without a session gets).
func TestSecurityPolicyOIDCLoginInCluster(t *testing.T) {
	const port = 18082
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	op := oidctest.Start(t, filepath.Join("..", "hack"), base+"/oauth2/callback")
	pc := startPolicyCluster(t, "securitypolicy.yaml", source.SecurityPolicyResource, securitypolicy.APIVersion, securitypolicy.Kind)
	pc.startGateway(port)
	pc.createWebRoute()
	client := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "oidc-client", Namespace: "default", Labels: map[string]string{securitypolicy.SecretLabel: "true"}},
		Data: map[string][]byte{securitypolicy.ClientSecretKey: []byte(oidctest.ClientSecret)}}
	if _, err := pc.f.Kube.CoreV1().Secrets("default").Create(pc.ctx, client, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pc.create("login", fmt.Sprintf(`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], oidc: {provider: {issuer: %q}, clientID: %s, clientSecret: {name: oidc-client}, forwardAccessToken: true}}`,
		op.Issuer, oidctest.ClientID)); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitFor(t, 60*time.Second, "the route guarded by oidc", func() error {
		req, _ := http.NewRequest(http.MethodGet, base+"/page", nil)
		req.Header.Set("Accept", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("a script without a session got %d, want 401", resp.StatusCode)
		}
		return nil
	})
	b := oidctest.NewBrowser(t)
	callback := b.Login(base+"/page", "/oauth2/callback")
	resp, body := b.Get(callback.String())
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Request.URL.Path != "/page" {
		t.Fatalf("after the login: %d at %s (%q), want the route's backend (no endpoints: 503) at /page", resp.StatusCode, resp.Request.URL, body)
	}
	// A script of the same browser rides the session: past the guard
	// (401 without one) to the backend.
	if resp, _ := b.Get(base+"/api", "Accept", "application/json"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a script with the session got %d, want the backend's 503", resp.StatusCode)
	}
}
