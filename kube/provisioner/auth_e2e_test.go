package provisioner

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"portico.dev/portico/internal/configstream"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/testkit/kubetest"
)

// TestDataPlaneAuthAgainstAPIServer attacks the hub's authentication with
// tokens a real API server issued: only a token of the Gateway's
// provisioned ServiceAccount, for Portico's audience, of that
// ServiceAccount as it exists now, gets the Gateway's snapshot. Refused:
// no token, a malformed one, one for the API server's own audience, one
// of another ServiceAccount of the namespace (a non-data-plane pod's), one
// of the controller's own ServiceAccount, one of a ServiceAccount deleted
// and created again under the same name, one bound to a pod since deleted.
func TestDataPlaneAuthAgainstAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"tenant", "portico-system"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sa := func(ns, name string) {
		t.Helper()
		if _, err := kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(ns, name string, audiences []string, bound *authnv1.BoundObjectReference) string {
		t.Helper()
		tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: ptr.To(int64(3600)), BoundObjectRef: bound}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	aud := []string{provision.TokenAudience}
	sa("tenant", "web-portico")
	sa("tenant", "app")
	sa("portico-system", "portico")
	sa("tenant", "recreated")
	good := token("tenant", "web-portico", aud, nil)
	recreatedToken := token("tenant", "recreated", aud, nil)
	if err := kc.CoreV1().ServiceAccounts("tenant").Delete(ctx, "recreated", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	sa("tenant", "recreated")
	pod, err := kc.CoreV1().Pods("tenant").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "web"},
		Spec: corev1.PodSpec{ServiceAccountName: "web-portico", AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{Name: "c", Image: "portico:test"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podToken := token("tenant", "web-portico", aud, &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})
	if err := kc.CoreV1().Pods("tenant").Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}

	web := types.NamespacedName{Namespace: "tenant", Name: "web"}
	planes := []configstream.Plane{{Gateway: web, ServiceAccount: "web-portico", Resources: &snapshot.Resources{}},
		{Gateway: types.NamespacedName{Namespace: "tenant", Name: "recreated-gw"}, ServiceAccount: "recreated", Resources: &snapshot.Resources{}}}
	core, logs := observer.New(zap.DebugLevel)
	hub := configstream.NewHub(TokenReviewer(kc), zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core())))
	hub.Publish(planes)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(hub)
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	defer srv.Close()
	ask := func(gateway, tok string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+configstream.ChallengePath+"?gateway="+gateway+"&host=x&token=y", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The challenge path answers 404 past authorization (no ACME here).
	if code := ask("tenant/web", good); code != http.StatusNotFound {
		t.Fatalf("the provisioned ServiceAccount's token: %d, want it let through (404)", code)
	}
	for name, c := range map[string]struct {
		gateway, token string
		want           int
	}{
		"no token":                    {"tenant/web", "", http.StatusUnauthorized},
		"malformed":                   {"tenant/web", "not.a.jwt", http.StatusUnauthorized},
		"API server audience":         {"tenant/web", token("tenant", "web-portico", nil, nil), http.StatusUnauthorized},
		"another ServiceAccount":      {"tenant/web", token("tenant", "app", aud, nil), http.StatusForbidden},
		"the controller's":            {"tenant/web", token("portico-system", "portico", aud, nil), http.StatusForbidden},
		"ServiceAccount recreated":    {"tenant/recreated-gw", recreatedToken, http.StatusUnauthorized},
		"pod deleted":                 {"tenant/web", podToken, http.StatusUnauthorized},
		"recreated one's fresh token": {"tenant/recreated-gw", token("tenant", "recreated", aud, nil), http.StatusNotFound},
		"good token, another Gateway": {"tenant/recreated-gw", good, http.StatusForbidden},
		"good token, unknown Gateway": {"other/web", good, http.StatusForbidden},
	} {
		if code := ask(c.gateway, c.token); code != c.want {
			t.Errorf("%s: %d, want %d", name, code, c.want)
		}
	}
	// What the hub logs of refusals names no token.
	for _, e := range logs.All() {
		line := e.Message + fmt.Sprint(e.ContextMap())
		for _, tok := range []string{good, podToken, recreatedToken, "not.a.jwt"} {
			if strings.Contains(line, tok) {
				t.Errorf("the hub logged a token: %s", line)
			}
		}
	}
	if logs.Len() == 0 {
		t.Error("the refusals were not logged")
	}
}
