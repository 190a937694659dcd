package validation

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// check decodes one YAML document the way a source does and checks it.
func check(t *testing.T, c *Checker, doc string) error {
	t.Helper()
	js, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("test document: %v", err)
	}
	var raw map[string]any
	if err := utiljson.Unmarshal(js, &raw); err != nil {
		t.Fatalf("test document: %v", err)
	}
	apiVersion, _ := raw["apiVersion"].(string)
	kind, _ := raw["kind"].(string)
	if err := c.Default(apiVersion, kind, raw); err != nil {
		t.Fatal(err)
	}
	var obj metav1.Object
	switch kind {
	case "GatewayClass":
		obj = &gwv1.GatewayClass{}
	case "Gateway":
		obj = &gwv1.Gateway{}
	case "ListenerSet":
		obj = &gwv1.ListenerSet{}
	case "HTTPRoute":
		obj = &gwv1.HTTPRoute{}
	case "ReferenceGrant":
		obj = &gwv1.ReferenceGrant{}
	case "BackendTLSPolicy":
		obj = &gwv1.BackendTLSPolicy{}
	case "Service":
		obj = &corev1.Service{}
	case "EndpointSlice":
		obj = &discoveryv1.EndpointSlice{}
	case "Secret":
		obj = &corev1.Secret{}
	case "ConfigMap":
		obj = &corev1.ConfigMap{}
	case "Namespace":
		obj = &corev1.Namespace{}
	case "ClusterTrustBundle":
		obj = &certv1.ClusterTrustBundle{}
	default:
		t.Fatalf("test document: kind %q", kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("test document: %v", err)
	}
	defaulted, _ := utiljson.Marshal(raw)
	if err := yaml.Unmarshal(defaulted, obj); err != nil {
		t.Fatalf("defaulted document: %v", err)
	}
	return c.Check(apiVersion, kind, raw, obj)
}

func newChecker(t *testing.T) *Checker {
	t.Helper()
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestBundledConfigurationsAreAdmitted: everything the project ships as an
// example must pass, or the checks are stricter than the API server.
func TestBundledConfigurationsAreAdmitted(t *testing.T) {
	c := newChecker(t)
	var paths []string
	all, _ := filepath.Glob("../../../examples/*/*.yaml")
	for _, p := range all {
		// A kustomize overlay (examples/knative) holds kustomizations and
		// patches, not objects; what it builds is checked where it is
		// applied (kube.TestKnativeDeployOverlay).
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "kustomization.yaml")); err == nil {
			continue
		}
		paths = append(paths, p)
	}
	paths = append(paths, "../../../deploy/gatewayclass.yaml")
	if len(paths) < 2 {
		t.Fatalf("found only %v", paths)
	}
	n := 0
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for i := 1; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(doc, []byte("kind:")) {
				continue
			}
			n++
			if err := check(t, c, string(doc)); err != nil {
				t.Errorf("%s document %d: %v", p, i, err)
			}
		}
	}
	t.Logf("%d documents admitted", n)
}

func TestRefusedAsTheAPIServerWould(t *testing.T) {
	c := newChecker(t)
	gateway := func(listeners string) string {
		return "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: ns}\n" +
			"spec:\n  gatewayClassName: portico\n  listeners:\n" + listeners
	}
	cases := []struct {
		name, doc string
		want      string // a substring of the error
	}{
		{"port above range", gateway("  - {name: a, port: 70000, protocol: HTTP}\n"), "spec.listeners[0].port"},
		{"port zero", gateway("  - {name: a, port: 0, protocol: HTTP}\n"), "spec.listeners[0].port"},
		{"two wildcards", gateway("  - {name: a, port: 80, protocol: HTTP, hostname: '*.*.example.com'}\n"), "spec.listeners[0].hostname"},
		{"upper-case hostname", gateway("  - {name: a, port: 80, protocol: HTTP, hostname: App.example.com}\n"), "spec.listeners[0].hostname"},
		{"duplicate listener names", gateway("  - {name: a, port: 80, protocol: HTTP}\n  - {name: a, port: 81, protocol: HTTP}\n"), "Duplicate value"},
		{"HTTPS without certificates", gateway("  - {name: a, port: 443, protocol: HTTPS, tls: {}}\n"), "certificateRefs or options"},
		{"no listeners", "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw}\nspec: {gatewayClassName: portico, listeners: []}\n", "spec.listeners"},
		{"gateway name", "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: GW_1}\nspec:\n  gatewayClassName: portico\n  listeners: [{name: a, port: 80, protocol: HTTP}]\n", "metadata.name"},
		{"namespaced GatewayClass", "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: portico, namespace: default}\nspec: {controllerName: portico.dev/gateway-controller}\n", "metadata.namespace"},
		{"bad label", "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: portico, labels: {'a b': c}}\nspec: {controllerName: portico.dev/gateway-controller}\n", "metadata.labels"},
		{"listenerset port", "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {name: ls}\nspec:\n  parentRef: {name: gw}\n  listeners: [{name: a, port: 65536, protocol: HTTP}]\n", "spec.listeners[0].port"},
		{"path match type", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules: [{matches: [{path: {type: Glob, value: /x}}]}]\n", "Glob"},
		{"path not absolute", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules: [{matches: [{path: {type: PathPrefix, value: x}}]}]\n", "must be an absolute path"},
		{"backend weight", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules: [{backendRefs: [{name: s, port: 80, weight: -1}]}]\n", "weight"},
		{"header name", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules: [{matches: [{headers: [{name: 'a b', value: x}]}]}]\n", "headers[0].name"},
		{"service port", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 70000}]}\n", "spec.ports[0].port"},
		{"service port names", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80}, {port: 81}]}\n", "spec.ports[0].name"},
		{"service name", "apiVersion: v1\nkind: Service\nmetadata: {name: 1svc}\nspec: {ports: [{port: 80}]}\n", "metadata.name"},
		{"slice address type", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPX\nendpoints: []\n", "addressType"},
		{"slice address", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4\nendpoints: [{addresses: [999.0.0.1]}]\n", "endpoints[0].addresses[0]"},
		{"slice v6 in v4", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4\nendpoints: [{addresses: ['::1']}]\n", "endpoints[0].addresses[0]"},
		{"slice port", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4\nendpoints: []\nports: [{port: 0}]\n", "ports[0].port"},
		{"tls secret without key", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/tls\nstringData: {tls.crt: x}\n", "data[tls.key]"},
		{"secret key", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {'a/b': x}\n", "data[a/b]"},
		{"namespace name", "apiVersion: v1\nkind: Namespace\nmetadata: {name: a.b}\n", "metadata.name"},
		{"listener filters on TCP", gateway("  - name: a\n    port: 7000\n    protocol: TCP\n    filters: {requests: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: s, port: 80}, http: {}}}]}\n"),
			"filters may only be set when protocol is HTTP or HTTPS"},
		{"listener filter type", gateway("  - name: a\n    port: 80\n    protocol: HTTP\n    filters: {requests: [{type: RequestHeaderModifier}]}\n"), "RequestHeaderModifier"},
		{"listener filter without payload", gateway("  - name: a\n    port: 80\n    protocol: HTTP\n    filters: {requests: [{type: ExternalAuth}]}\n"),
			"filter.externalAuth must be specified for ExternalAuth filter.type"},
		{"listener filter protocol mismatch", gateway("  - name: a\n    port: 80\n    protocol: HTTP\n    filters: {requests: [{type: ExternalAuth, externalAuth: {protocol: GRPC, backendRef: {name: s, port: 80}, http: {}}}]}\n"),
			"grpc must be specified when protocol is set to 'GRPC'"},
		{"route externalAuth body size", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec:\n  rules: [{filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: s, port: 80}, http: {}, forwardBody: {maxSize: -1}}}]}]\n",
			"maxSize"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := check(t, c, tc.doc)
			if err == nil {
				t.Fatalf("admitted:\n%s", tc.doc)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

func TestErrorListsAtMostFive(t *testing.T) {
	c := newChecker(t)
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData:\n")
	for _, k := range []string{"a/1", "a/2", "a/3", "a/4", "a/5", "a/6", "a/7"} {
		b.WriteString("  '" + k + "': x\n")
	}
	err := check(t, c, b.String())
	if err == nil || !strings.HasSuffix(err.Error(), "and 2 more") {
		t.Fatalf("got %v, want five errors and a count of the rest", err)
	}
}

// TestDefaultsAsTheAPIServerGives: what a source hands translate must be
// what a cluster would store, defaults included.
func TestDefaultsAsTheAPIServerGives(t *testing.T) {
	c := newChecker(t)
	doc := "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\n" +
		"spec:\n  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: s, port: 80}]}]\n"
	js, _ := yaml.YAMLToJSON([]byte(doc))
	var raw map[string]any
	if err := utiljson.Unmarshal(js, &raw); err != nil {
		t.Fatal(err)
	}
	if err := c.Default("gateway.networking.k8s.io/v1", "HTTPRoute", raw); err != nil {
		t.Fatal(err)
	}
	out, _ := utiljson.Marshal(raw)
	var r gwv1.HTTPRoute
	if err := yaml.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	rule := r.Spec.Rules[0]
	if len(rule.Matches) != 1 || rule.Matches[0].Path == nil || *rule.Matches[0].Path.Type != gwv1.PathMatchPathPrefix || *rule.Matches[0].Path.Value != "/" {
		t.Errorf("matches = %+v, want the default PathPrefix /", rule.Matches)
	}
	if ref := r.Spec.ParentRefs[0]; ref.Group == nil || *ref.Group != gwv1.GroupName || ref.Kind == nil || *ref.Kind != "Gateway" {
		t.Errorf("parentRef = %+v, want group and kind defaulted", ref)
	}
	if b := rule.BackendRefs[0]; b.Weight == nil || *b.Weight != 1 || b.Kind == nil || *b.Kind != "Service" {
		t.Errorf("backendRef = %+v, want weight 1 and kind Service", b)
	}
	if err := c.Default("v1", "Service", raw); err != nil {
		t.Errorf("core kinds have no schema defaults here, got %v", err)
	}
}
