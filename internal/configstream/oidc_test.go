package configstream

import (
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/securitypolicy"
)

// TestStreamCarriesOIDC: a Gateway's data plane receives its
// SecurityPolicy's oidc section whole and the client Secret it reads,
// over the stream's socket, so that it logs browsers in as the shared
// data plane does.
func TestStreamCarriesOIDC(t *testing.T) {
	res := objectsOfRoute("v1")
	res.Secrets = append(res.Secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "oidc"},
		Data: map[string][]byte{securitypolicy.ClientSecretKey: []byte("s3cret")}})
	res.SecurityPolicies = []*securitypolicy.SecurityPolicy{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "login"},
		Spec: securitypolicy.Spec{OIDC: &securitypolicy.OIDC{Provider: securitypolicy.OIDCProvider{Issuer: "https://idp.example"},
			ClientID: "app", ClientSecret: gwv1.SecretObjectReference{Name: "oidc"}, RedirectURL: "/cb", ForwardIDToken: true}}}}
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: res}})
	srv, roots := hubServer(t, h, "127.0.0.1:0")
	r := startSource(t, srv.Listener.Addr().String(), "web-token", roots)
	select {
	case <-r.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	got, err := r.src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(got.SecurityPolicies) != 1 || got.SecurityPolicies[0].Spec.OIDC == nil {
		t.Fatalf("the oidc policy did not come through: %+v", got.SecurityPolicies)
	}
	if o := got.SecurityPolicies[0].Spec.OIDC; o.ClientID != "app" || o.RedirectURL != "/cb" || !o.ForwardIDToken || o.Provider.Issuer != "https://idp.example" {
		t.Fatalf("oidc came through as %+v", o)
	}
	found := false
	for _, s := range got.Secrets {
		found = found || (s.Name == "oidc" && string(s.Data[securitypolicy.ClientSecretKey]) == "s3cret")
	}
	if !found {
		t.Fatal("the client Secret did not come through")
	}
}
