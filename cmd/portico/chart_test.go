package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/testkit/charttest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

// containerArgs returns the args and environment of the chart's container
// as the kubelet would start it: the downward API and Secret references
// resolved against the API server, every $(VAR) of the args expanded, and
// Secret volumes written to directories of the test, which take the place
// of their mount paths in the args.
func containerArgs(t *testing.T, ctx context.Context, kc kubernetes.Interface, dep *appsv1.Deployment, podName string) ([]string, map[string]string) {
	t.Helper()
	c := dep.Spec.Template.Spec.Containers[0]
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.namespace":
				vars[e.Name] = dep.Namespace
			case "metadata.name":
				vars[e.Name] = podName
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, err := kc.CoreV1().Secrets(dep.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("env %s: %v", e.Name, err)
			}
			vars[e.Name] = string(s.Data[ref.Key])
		}
	}
	mounts := map[string]string{} // mount path: the test's directory
	for _, m := range c.VolumeMounts {
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			s, err := kc.CoreV1().Secrets(dep.Namespace).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("volume %s: %v", v.Name, err)
			}
			dir := t.TempDir()
			files := map[string]string{}
			for k := range s.Data {
				files[k] = k
			}
			if len(v.Secret.Items) > 0 {
				files = map[string]string{}
				for _, it := range v.Secret.Items {
					files[it.Key] = it.Path
				}
			}
			for key, path := range files {
				if err := os.WriteFile(filepath.Join(dir, path), s.Data[key], 0o600); err != nil {
					t.Fatal(err)
				}
			}
			mounts[m.MountPath] = dir
		}
	}
	var args []string
	for _, a := range c.Args {
		for name, v := range vars {
			a = strings.ReplaceAll(a, "$("+name+")", v)
		}
		for path, dir := range mounts {
			a = strings.ReplaceAll(a, "="+path+"/", "="+dir+"/")
		}
		if strings.Contains(a, "$(") {
			t.Fatalf("arg %q refers to a variable the container does not have", a)
		}
		args = append(args, a)
	}
	return args, vars
}

// writeTokenKubeconfig writes a kubeconfig that authenticates as cfg does
// (a ServiceAccount's token).
func writeTokenKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestChartPerGatewayInstall installs the chart in per-Gateway mode on a
// real API server as Helm does, the CRD of crds/ first: the class's
// PorticoParameters it creates in the same install pass the CRD's schema
// and read as Portico reads them, PerGateway with gatewayClass.parameters;
// no Service fronts the controller replicas, which serve no traffic of the
// class; parameters the CRD refuses fail the install.
func TestChartPerGatewayInstall(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	install := func(rel charttest.Release, class string, params map[string]any) error {
		t.Helper()
		objs, err := charttest.Render("../../charts/portico", rel, map[string]any{
			"namespace":    map[string]any{"create": true},
			"gatewayClass": map[string]any{"name": class, "mode": "PerGateway", "parameters": params},
		})
		if err != nil {
			t.Fatal(err)
		}
		return charttest.Apply(ctx, env.Config, "portico-chart-test", objs)
	}
	rel := charttest.Release{Name: "portico", Namespace: "portico-system"}
	if err := install(rel, "dedicated", map[string]any{"replicas": 2, "service": map[string]any{"type": "ClusterIP"}}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: parameters.Group, Version: parameters.Version, Resource: "porticoparameters"}
	u, err := dyn.Resource(gvr).Namespace(rel.Namespace).Get(ctx, "dedicated", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the class's parameters: %v", err)
	}
	var p parameters.PorticoParameters
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		t.Fatal(err)
	}
	if err := p.Spec.Validate(false); err != nil || p.Spec.EffectiveMode() != parameters.ModePerGateway ||
		p.Spec.Replicas == nil || *p.Spec.Replicas != 2 || p.Spec.Service == nil || p.Spec.Service.Type == nil || *p.Spec.Service.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("the class's parameters read as %+v (%v)", p.Spec, err)
	}
	// The controller replicas serve none of the class's traffic: no
	// Service (a load balancer, by default) in front of them, only the one
	// the data planes take their configuration from.
	services := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "services"}).Namespace(rel.Namespace)
	if _, err := services.Get(ctx, "portico", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Service portico in per-Gateway mode: %v, want none", err)
	}
	if _, err := services.Get(ctx, "portico-controller", metav1.GetOptions{}); err != nil {
		t.Errorf("Service portico-controller: %v", err)
	}
	err = install(charttest.Release{Name: "other", Namespace: "other-system"}, "refused", map[string]any{"replicas": -1})
	if err == nil || !strings.Contains(err.Error(), "PorticoParameters other-system/refused") {
		t.Errorf("install with replicas -1: %v, want the API server to refuse the parameters", err)
	}
}

// TestChartInstallRunsPortico installs the Helm chart on a real API server
// (rendered with the Helm SDK, applied server-side, twice) and runs
// "portico serve" with the container args it renders, as its
// ServiceAccount, whose token carries exactly the chart's RBAC: Portico
// leads, serves the Gateway's port and writes status with the Service's
// address.
func TestChartInstallRunsPortico(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	kc, gc := apiClients(t, env)
	const ns = "portico-system"
	objs, err := charttest.Render("../../charts/portico", charttest.Release{Name: "portico", Namespace: ns}, map[string]any{
		"namespace":  map[string]any{"create": true},
		"acme":       map[string]any{"email": "ops@example.com", "eab": map[string]any{"secretName": "acme-eab"}},
		"monitoring": map[string]any{"dashboard": map[string]any{"enabled": true}},
		"extraArgs":  []any{"--request-id"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := charttest.Apply(ctx, env.Config, "portico-chart-test", objs); err != nil {
		t.Fatal(err)
	}
	// What the user creates next to the chart: the EAB Secret.
	if _, err := kc.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "acme-eab"},
		StringData: map[string]string{"keyID": "kid-1", "hmacKey": "c2VjcmV0LWhtYWMta2V5LTMyLWJ5dGVzLWxvbmctLS0"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// An upgrade with the same values changes nothing and is accepted.
	if err := charttest.Apply(ctx, env.Config, "portico-chart-test", objs); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(charttest.Find(objs, "Deployment", "portico").Object, &dep); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().ConfigMaps(ns).Get(ctx, "portico-dashboard", metav1.GetOptions{}); err != nil {
		t.Errorf("dashboard ConfigMap: %v", err)
	}
	front, err := kc.CoreV1().Services(ns).Get(ctx, "portico", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, port := freeport.Addr(t)
	if _, err := gc.GatewayV1().Gateways("apps").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "portico", Listeners: []gwv1.Listener{
			{Name: "http", Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPProtocolType},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	sa, err := env.ServiceAccountConfig(ctx, ns, dep.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	args, vars := containerArgs(t, ctx, kc, &dep, "portico-0")
	for name, v := range vars {
		t.Setenv(name, v) // POD_NAME and POD_NAMESPACE are read from there
	}
	if args[0] != "serve" {
		t.Fatalf("container args %v", args)
	}
	for _, want := range []string{"--acme-eab-key-id=kid-1", "--gateway-service=portico-system/portico", "--request-id", "--data-plane-image=portico:latest"} {
		if !slices.Contains(args, want) {
			t.Errorf("container args %v lack %s", args, want)
		}
	}
	// The HMAC key reaches Portico in a file of the mounted Secret.
	for _, a := range args {
		if path, ok := strings.CutPrefix(a, "--acme-eab-hmac-key-file="); ok {
			if key, err := os.ReadFile(path); err != nil || string(key) != "c2VjcmV0LWhtYWMta2V5LTMyLWJ5dGVzLWxvbmctLS0" {
				t.Errorf("HMAC key file %s: %q, %v", path, key, err)
			}
		}
		if strings.Contains(a, "c2VjcmV0LWhtYWMta2V5") {
			t.Errorf("the HMAC key is on the command line: %s", a)
		}
	}
	adminAddr, _ := freeport.Addr(t)
	dataPlanes, _ := freeport.Addr(t)
	// Only what a test on loopback must change; a later flag wins.
	args = append(args[1:], "--kubeconfig", writeTokenKubeconfig(t, sa), "--admin-address", adminAddr,
		"--data-plane-listen", dataPlanes, "--bind-address", "127.0.0.1", "--drain-timeout", "1s")
	logs := &lockedBuffer{}
	serveCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(serveCtx, args, logs) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("serve did not stop")
		}
		if t.Failed() {
			t.Logf("portico log:\n%s", logs.String())
		}
	})

	admin := "http://" + adminAddr
	waitUntil(t, "ready and leading", func() error {
		if code, body, err := httpGet(admin+"/readyz", ""); err != nil || code != 200 {
			return fmt.Errorf("/readyz %d %s %v", code, body, err)
		}
		_, body, err := httpGet(admin+"/metrics", "")
		if err != nil {
			return err
		}
		if !strings.Contains(body, "portico_leader 1") {
			return fmt.Errorf("not leading")
		}
		return nil
	})
	if code, _, err := httpGet("http://127.0.0.1:"+strconv.Itoa(port)+"/", "nothing.example.com"); err != nil || code != 404 {
		t.Errorf("Gateway port: %d, %v; want 404", code, err)
	}
	waitUntil(t, "statuses", func() error {
		class, err := gc.GatewayV1().GatewayClasses().Get(ctx, "portico", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(class.Status.Conditions, "Accepted") {
			return fmt.Errorf("GatewayClass not accepted: %+v", class.Status.Conditions)
		}
		gw, err := gc.GatewayV1().Gateways("apps").Get(ctx, "gw", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(gw.Status.Conditions, "Programmed") {
			return fmt.Errorf("Gateway not programmed: %+v", gw.Status.Conditions)
		}
		if len(gw.Status.Addresses) != 1 || gw.Status.Addresses[0].Value != front.Spec.ClusterIP {
			return fmt.Errorf("Gateway addresses %+v, want the Service's %s", gw.Status.Addresses, front.Spec.ClusterIP)
		}
		return nil
	})
	lease, err := kc.CoordinationV1().Leases(ns).Get(ctx, "portico", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "portico-0" {
		t.Errorf("leader Lease %v, %v", lease, err)
	}
}
