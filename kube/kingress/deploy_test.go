package kingress

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"portico.dev/portico/internal/testkit/charttest"
	"portico.dev/portico/internal/testkit/kubetest"
)

// TestKnativeDeployOverlay builds deploy/knative, applies it to a real API
// server and runs a replica with exactly the RBAC of Portico's
// ServiceAccount: it reads KIngresses, serves them and writes their
// status.
func TestKnativeDeployOverlay(t *testing.T) {
	objs, err := charttest.Kustomize("../../examples/knative")
	if err != nil {
		t.Fatal(err)
	}
	dep := charttest.Find(objs, "Deployment", "portico")
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	for _, want := range []string{"--knative", "--knative-external-service=$(POD_NAMESPACE)/portico-external", "--knative-local-service=$(POD_NAMESPACE)/portico-internal"} {
		if !slices.Contains(args, want) {
			t.Errorf("Deployment args %v lack %s", args, want)
		}
	}
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	portNames := map[string]int64{}
	for _, p := range ports {
		pm := p.(map[string]any)
		n, _ := pm["containerPort"].(float64) // decoded from YAML through JSON
		portNames[pm["name"].(string)] = int64(n)
	}
	for svc, targets := range map[string][]string{"portico-external": {"kn-http", "kn-https"}, "portico-internal": {"kn-local-http", "kn-local-https"}} {
		s := charttest.Find(objs, "Service", svc)
		if s == nil {
			t.Fatalf("no Service %s", svc)
		}
		sp, _, _ := unstructured.NestedSlice(s.Object, "spec", "ports")
		for i, p := range sp {
			if target := p.(map[string]any)["targetPort"]; target != targets[i] || portNames[targets[i]] == 0 {
				t.Errorf("Service %s port %d targets %v, want container port %s", svc, i, target, targets[i])
			}
		}
	}
	if want := map[string]int64{"kn-http": 8080, "kn-https": 8443, "kn-local-http": 8081, "kn-local-https": 8444}; !mapsSubset(want, portNames) {
		t.Errorf("container ports %v, want the flags' defaults %v", portNames, want)
	}

	f := newKnFixture(t)
	kubetest.ServerSideApply(t, f.Env.Config, objs)
	f.client = f.Env.ImpersonatingConfig("system:serviceaccount:portico-system:portico")
	f.backend("hello-1", "http")
	f.startReplicas(1)
	f.apply(knForeign("deployed", "networking.knative.dev/ingress.class: portico.ingress.networking.knative.dev"))
	f.waitReady("serving", "deployed")
	e := echoGet(t, &http.Client{Timeout: 5 * time.Second}, f.replicas[0].addr(f.settings.ExternalHTTPPort), "deployed.example.com", "/", nil)
	if e.Backend != "hello-1" {
		t.Errorf("served by %s", e.Backend)
	}
}

func mapsSubset(want, got map[string]int64) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
