package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

// runServe runs serve with args until the test ends.
func runServe(t *testing.T, name string, args []string) {
	t.Helper()
	logs := &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, args, logs) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: serve: %v", name, err)
		}
		if t.Failed() {
			t.Logf("%s log:\n%s", name, logs.String())
		}
	})
}

// TestServeGatewayMode runs the controller and a data plane as the
// commands the Deployment it provisions names: the data plane, with the
// Deployment's arguments and environment and a token of its
// ServiceAccount for Portico's audience, gets its configuration from the
// controller, becomes ready and serves its Gateway's port.
func TestServeGatewayMode(t *testing.T) {
	port := runGatewayMode(t, nil, nil)
	if code, _, err := httpGet("http://127.0.0.1:"+strconv.Itoa(port)+"/", "nothing.example.com"); err != nil || code != 404 {
		t.Errorf("the Gateway's port on the data plane: %d, %v; want 404 (served, no route)", code, err)
	}
}

// runGatewayMode is TestServeGatewayMode's setup: a controller and the
// data plane of Gateway apps/web (class "dedicated", one HTTP listener),
// ready; it returns the Gateway's port. crds are more CRD files to
// apply; before, when set, creates objects before Portico starts.
func runGatewayMode(t *testing.T, crds []string, before func(env *kubetest.Env, dyn dynamic.Interface)) int {
	env := kubetest.Start(t)
	ctx := t.Context()
	kc, gc := apiClients(t, env)
	dir := t.TempDir()
	for i, path := range append([]string{"../../deploy/porticoparameters.yaml"}, crds...) {
		crd, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("crd-%d.yaml", i)), crd, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := kubetest.ApplyManifests(ctx, env.Config, dir); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"portico-system", "apps"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	params := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "portico.dev/v1alpha1", "kind": "PorticoParameters",
		"metadata": map[string]any{"name": "dedicated", "namespace": "portico-system"},
		"spec":     map[string]any{"mode": "PerGateway", "drainTimeout": "1s"},
	}}
	if _, err := dyn.Resource(source.ParametersResource).Namespace("portico-system").Create(ctx, params, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "dedicated"},
		Spec: gwv1.GatewayClassSpec{ControllerName: "portico.dev/gateway-controller", ParametersRef: &gwv1.ParametersReference{
			Group: "portico.dev", Kind: "PorticoParameters", Name: "dedicated", Namespace: ptr.To(gwv1.Namespace("portico-system"))}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, port := freeport.Addr(t)
	if _, err := gc.GatewayV1().Gateways("apps").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "dedicated", Listeners: []gwv1.Listener{
			{Name: "http", Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPProtocolType},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(env, dyn)
	}

	controller, _ := freeport.Addr(t)
	ctrlAdmin, _ := freeport.Addr(t)
	runServe(t, "controller", []string{
		"--kubeconfig", filepath.Join(env.Dir, "kubeconfig"), "--namespace", "portico-system", "--identity", "cmd-test",
		"--admin-address", ctrlAdmin, "--bind-address", "127.0.0.1", "--drain-timeout", "1s",
		"--data-plane-listen", controller, "--data-plane-controller-address", controller, "--data-plane-image", "portico:test",
	})
	// As in TestServeClusterMode: the test's own clients wait until serve
	// has set up client-go's process-wide logger.
	waitUntil(t, "controller ready", func() error {
		if code, body, err := httpGet("http://"+ctrlAdmin+"/readyz", ""); err != nil || code != 200 {
			return fmt.Errorf("/readyz %d %s %v", code, body, err)
		}
		return nil
	})
	waitUntil(t, "Deployment provisioned", func() error {
		_, err := kc.AppsV1().Deployments("apps").Get(ctx, provision.Name("web", "dedicated"), metav1.GetOptions{})
		return err
	})
	dep, err := kc.AppsV1().Deployments("apps").Get(ctx, provision.Name("web", "dedicated"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	args, vars := containerArgs(t, ctx, kc, dep, "web-0")
	for name, v := range vars {
		t.Setenv(name, v) // the controller's certificate and POD_NAME
	}
	tr, err := kc.CoreV1().ServiceAccounts("apps").CreateToken(ctx, dep.Spec.Template.Spec.ServiceAccountName, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{provision.TokenAudience}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tr.Status.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	dpAdmin, _ := freeport.Addr(t)
	// Only what a process on loopback must change; a later flag wins.
	args = append(args[1:], "--controller-token", tokenFile, "--admin-address", dpAdmin, "--bind-address", "127.0.0.1", "--log-format", "console")
	runServe(t, "data plane", args)
	waitUntil(t, "data plane ready", func() error {
		if code, body, err := httpGet("http://"+dpAdmin+"/readyz", ""); err != nil || code != 200 {
			return fmt.Errorf("/readyz %d %s %v", code, body, err)
		}
		return nil
	})
	return port
}

func TestServeGatewayFlagErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"with --config":     {[]string{"--gateway", "apps/web", "--controller-address", "c:9443", "--config", t.TempDir()}, "not with --config"},
		"no controller":     {[]string{"--gateway", "apps/web"}, "--controller"},
		"not namespaced":    {[]string{"--gateway", "web", "--controller-address", "c:9443"}, "namespace/name"},
		"with cluster flag": {[]string{"--gateway", "apps/web", "--controller-address", "c:9443", "--kubeconfig", "x"}, "no cluster flags"},
	} {
		t.Run(name, func(t *testing.T) {
			var logs bytes.Buffer
			err := serve(context.Background(), tc.args, &logs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("serve %v = %v, want an error about %s", tc.args, err, tc.want)
			}
		})
	}
}
