// Tests of the Helm chart in portico/: what it renders for several value
// sets, what its schema refuses, and that with default values it installs
// exactly what the kustomize base in deploy/ does.
package charts_test

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/testkit/charttest"
)

const chartDir = "portico"

var release = charttest.Release{Name: "portico", Namespace: "portico-system"}

func render(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(values), &v); err != nil {
		t.Fatal(err)
	}
	objs, err := charttest.Render(chartDir, release, v)
	if err != nil {
		t.Fatalf("render with %s: %v", values, err)
	}
	return objs
}

// helmOnlyLabels are the labels the chart adds for Helm's bookkeeping;
// deploy/ has no release to name.
var helmOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// withoutHelmLabels returns a copy of o without helmOnlyLabels in any map
// (labels, selectors, label selectors, annotations), and without the
// annotations that are left empty.
func withoutHelmLabels(o *unstructured.Unstructured) map[string]any {
	var strip func(v any) any
	strip = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range v {
				if !slices.Contains(helmOnlyLabels, k) {
					out[k] = strip(e)
				}
			}
			if a, ok := out["annotations"].(map[string]any); ok && len(a) == 0 {
				delete(out, "annotations")
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, e := range v {
				out[i] = strip(e)
			}
			return out
		}
		return v
	}
	return strip(o.DeepCopy().Object).(map[string]any)
}

// normalized makes numbers of both sources compare equal (YAML decoding
// gives int64 in one and float64 in the other).
func normalized(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChartMatchesKustomizeBase is what keeps the chart and deploy/ from
// drifting apart: with default values (and namespace.create, which
// deploy/ always does) the chart renders the same objects, field for
// field, apart from Helm's own labels.
func TestChartMatchesKustomizeBase(t *testing.T) {
	chart := matchesKustomize(t, "../deploy", "namespace: {create: true}")
	// Without namespace.create (the default, for helm install
	// --create-namespace) the Namespace is the one object left out.
	defaults := render(t, "")
	if len(defaults) != len(chart)-1 || charttest.Find(defaults, "Namespace", "portico-system") != nil {
		t.Errorf("default values render %v", keys(defaults))
	}
}

// TestChartMatchesKnativeOverlay: with knative.enabled the chart renders
// what the Knative overlay (examples/knative) installs, field for field.
func TestChartMatchesKnativeOverlay(t *testing.T) {
	matchesKustomize(t, "../examples/knative", "{namespace: {create: true}, knative: {enabled: true}}")
	r := renderTyped(t, "portico", `knative: {enabled: true, ingressClass: kourier-replacement, certificateClass: acme.example}`)
	for name, want := range map[string]string{"knative-ingress-class": "kourier-replacement", "knative-certificate-class": "acme.example"} {
		if got, _ := r.flag(name); got != want {
			t.Errorf("--%s=%q, want %q", name, got, want)
		}
	}
	for _, a := range renderTyped(t, "portico", "").args {
		if strings.HasPrefix(a, "--knative") {
			t.Errorf("default values pass %s", a)
		}
	}
}

func keys(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, charttest.Key(o))
	}
	return out
}

// matchesKustomize checks that the chart with values renders the objects
// kustomize builds from dir, and returns the chart's.
func matchesKustomize(t *testing.T, dir, values string) []*unstructured.Unstructured {
	t.Helper()
	base, err := charttest.Kustomize(dir)
	if err != nil {
		t.Fatal(err)
	}
	chart := render(t, values)
	if !reflect.DeepEqual(keys(base), keys(chart)) {
		t.Fatalf("objects differ:\n%s: %v\nchart:   %v", dir, keys(base), keys(chart))
	}
	for i := range base {
		b, c := normalized(t, base[i].Object), normalized(t, withoutHelmLabels(chart[i]))
		if !reflect.DeepEqual(b, c) {
			by, _ := yaml.Marshal(b)
			cy, _ := yaml.Marshal(c)
			t.Errorf("%s differs:\n--- %s\n%s\n--- chart\n%s", charttest.Key(base[i]), dir, by, cy)
		}
	}
	return chart
}

func renderErr(values string) error {
	var v map[string]any
	if err := yaml.Unmarshal([]byte(values), &v); err != nil {
		return err
	}
	_, err := charttest.Render(chartDir, release, v)
	return err
}

// typed converts o into out, refusing fields the Go type does not have, so
// that a misspelt field in a template fails here rather than be dropped.
func typed(t *testing.T, o *unstructured.Unstructured, out any) {
	t.Helper()
	if o == nil {
		t.Fatal("object not rendered")
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
		t.Fatalf("%s: %v", charttest.Key(o), err)
	}
}

// rendered holds the objects of one value set, typed where tests look.
type rendered struct {
	objs []*unstructured.Unstructured
	dep  appsv1.Deployment
	svc  corev1.Service
	args []string
}

func renderTyped(t *testing.T, name, values string) rendered {
	t.Helper()
	r := rendered{objs: render(t, values)}
	typed(t, charttest.Find(r.objs, "Deployment", name), &r.dep)
	// Not rendered in per-Gateway mode by default (service.create).
	if svc := charttest.Find(r.objs, "Service", name); svc != nil {
		typed(t, svc, &r.svc)
	}
	if n := len(r.dep.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers", n)
	}
	r.args = r.dep.Spec.Template.Spec.Containers[0].Args
	return r
}

func (r rendered) env(name string) *corev1.EnvVar {
	for _, e := range r.dep.Spec.Template.Spec.Containers[0].Env {
		if e.Name == name {
			return &e
		}
	}
	return nil
}

// flag returns the value of --name in the container's args, and whether
// it is there.
func (r rendered) flag(name string) (string, bool) {
	for _, a := range r.args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestChartACMEWithEABSecret(t *testing.T) {
	r := renderTyped(t, "portico", `
acme:
  directory: https://acme.example.net/directory
  email: ops@example.com
  concurrency: 2
  caBundle: {configMap: acme-ca, key: roots.pem}
  eab: {secretName: acme-eab, keyIDKey: kid, hmacKeyKey: hmac}
`)
	for name, want := range map[string]string{
		"acme-directory":         "https://acme.example.net/directory",
		"acme-email":             "ops@example.com",
		"acme-concurrency":       "2",
		"acme-ca-bundle":         "/etc/portico/acme-ca/roots.pem",
		"acme-eab-key-id":        "$(ACME_EAB_KEY_ID)",
		"acme-eab-hmac-key-file": "/etc/portico/acme-eab/hmac-key",
	} {
		if got, _ := r.flag(name); got != want {
			t.Errorf("--%s=%q, want %q", name, got, want)
		}
	}
	// The key ID comes from the Secret at container start, the HMAC key
	// from the Secret mounted as a file: neither is in the pod spec, and
	// the HMAC key is on no command line.
	if e := r.env("ACME_EAB_KEY_ID"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "acme-eab" || e.ValueFrom.SecretKeyRef.Key != "kid" || e.Value != "" {
		t.Errorf("env ACME_EAB_KEY_ID = %+v, want key kid of Secret acme-eab", e)
	}
	if _, ok := r.flag("acme-eab-hmac-key"); ok || r.env("ACME_EAB_HMAC_KEY") != nil {
		t.Errorf("the HMAC key is passed on the command line: %v", r.args)
	}
	spec := r.dep.Spec.Template.Spec
	if !slices.ContainsFunc(spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "acme-eab" && m.MountPath == "/etc/portico/acme-eab" && m.ReadOnly
	}) || !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "acme-eab" && v.Secret != nil && v.Secret.SecretName == "acme-eab" &&
			len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == "hmac" && v.Secret.Items[0].Path == "hmac-key"
	}) {
		t.Errorf("EAB Secret not mounted: volumes %+v", spec.Volumes)
	}
	mounted := false
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.Name == "acme-ca" && m.MountPath == "/etc/portico/acme-ca" && m.ReadOnly {
			mounted = true
		}
	}
	hasVolume := slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == "acme-ca" && v.ConfigMap != nil && v.ConfigMap.Name == "acme-ca"
	})
	if !mounted || !hasVolume {
		t.Errorf("CA bundle ConfigMap not mounted: volumes %+v", spec.Volumes)
	}
	// Without ACME values, none of it.
	d := renderTyped(t, "portico", "")
	for _, a := range d.args {
		if strings.HasPrefix(a, "--acme") {
			t.Errorf("default values pass %s", a)
		}
	}
	if d.env("ACME_EAB_KEY_ID") != nil || slices.ContainsFunc(d.dep.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "acme-eab" }) {
		t.Error("default values reference an EAB Secret")
	}
}

// TestChartTracing: tracing values become the flags, and without an
// endpoint none is passed.
func TestChartTracing(t *testing.T) {
	r := renderTyped(t, "portico", `
tracing: {endpoint: "otel-collector.observability:4318", protocol: http, insecure: true, sampleRatio: "0.25"}
`)
	for name, want := range map[string]string{
		"tracing-endpoint":     "otel-collector.observability:4318",
		"tracing-protocol":     "http",
		"tracing-sample-ratio": "0.25",
	} {
		if got, _ := r.flag(name); got != want {
			t.Errorf("--%s=%q, want %q", name, got, want)
		}
	}
	if !slices.Contains(r.args, "--tracing-insecure") {
		t.Errorf("args %v lack --tracing-insecure", r.args)
	}
	for _, a := range renderTyped(t, "portico", "").args {
		if strings.HasPrefix(a, "--tracing") {
			t.Errorf("default values pass %s", a)
		}
	}
}

func TestChartAddresses(t *testing.T) {
	pool := renderTyped(t, "portico", `
namespace: {create: true}
hostNetwork: true
gatewayAddressPool: [192.0.2.0/28, "2001:db8::7"]
`)
	if got, _ := pool.flag("gateway-address-pool"); got != "192.0.2.0/28,2001:db8::7" {
		t.Errorf("--gateway-address-pool=%q", got)
	}
	spec := pool.dep.Spec.Template.Spec
	if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
		t.Errorf("hostNetwork %v, dnsPolicy %q", spec.HostNetwork, spec.DNSPolicy)
	}
	// The kubelet refuses namespaced sysctls with host networking.
	if len(spec.SecurityContext.Sysctls) != 0 {
		t.Errorf("sysctls with hostNetwork: %+v", spec.SecurityContext.Sysctls)
	}
	ns := charttest.Find(pool.objs, "Namespace", "portico-system")
	if ns == nil || ns.GetLabels()["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("Namespace for host networking: %v", ns)
	}

	fixed := renderTyped(t, "portico", "gatewayAddresses: [203.0.113.9, lb.example.net]")
	if got, _ := fixed.flag("gateway-address"); got != "203.0.113.9,lb.example.net" {
		t.Errorf("--gateway-address=%q", got)
	}
	if v, ok := fixed.flag("gateway-service"); ok {
		t.Errorf("--gateway-service=%s next to --gateway-address", v)
	}
	if got, _ := renderTyped(t, "portico", "").flag("gateway-service"); got != "$(POD_NAMESPACE)/portico" {
		t.Errorf("default --gateway-service=%q", got)
	}
}

func TestChartDisruptionBudget(t *testing.T) {
	if objs := render(t, "podDisruptionBudget: {enabled: false}"); charttest.Find(objs, "PodDisruptionBudget", "portico") != nil {
		t.Error("PodDisruptionBudget rendered while disabled")
	}
	var pdb policyv1.PodDisruptionBudget
	typed(t, charttest.Find(render(t, "podDisruptionBudget: {maxUnavailable: 50%}"), "PodDisruptionBudget", "portico"), &pdb)
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "50%" || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB spec %+v", pdb.Spec)
	}
}

func TestChartService(t *testing.T) {
	r := renderTyped(t, "portico", `
service:
  type: NodePort
  annotations: {service.beta.kubernetes.io/aws-load-balancer-type: nlb}
  labels: {team: edge}
  externalTrafficPolicy: Local
  ports:
  - {name: http, port: 80, targetPort: http, nodePort: 30080}
  - {name: alt, port: 8443}
`)
	s := r.svc
	if s.Spec.Type != corev1.ServiceTypeNodePort || s.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		t.Errorf("type %s, externalTrafficPolicy %s", s.Spec.Type, s.Spec.ExternalTrafficPolicy)
	}
	if s.Annotations["service.beta.kubernetes.io/aws-load-balancer-type"] != "nlb" || s.Labels["team"] != "edge" {
		t.Errorf("annotations %v, labels %v", s.Annotations, s.Labels)
	}
	if len(s.Spec.Ports) != 2 || s.Spec.Ports[0].NodePort != 30080 || s.Spec.Ports[1].Port != 8443 || s.Spec.Ports[1].TargetPort.IntValue() != 8443 {
		t.Errorf("ports %+v", s.Spec.Ports)
	}
	if !reflect.DeepEqual(s.Spec.Selector, r.dep.Spec.Selector.MatchLabels) {
		t.Errorf("Service selects %v, Deployment's pods are %v", s.Spec.Selector, r.dep.Spec.Selector.MatchLabels)
	}
}

func TestChartNodePlacement(t *testing.T) {
	r := renderTyped(t, "portico", `
nodeSelector: {node-role.kubernetes.io/edge: ""}
tolerations: [{key: dedicated, operator: Equal, value: edge, effect: NoSchedule}]
affinity:
  podAntiAffinity:
    requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector: {matchLabels: {app.kubernetes.io/name: portico}}
priorityClassName: system-cluster-critical
spreadAcrossNodes: false
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app.kubernetes.io/name: portico}}}
replicas: 3
resources: {requests: {cpu: "1", memory: 2Gi}, limits: {memory: 3Gi}}
`)
	spec := r.dep.Spec.Template.Spec
	if _, ok := spec.NodeSelector["node-role.kubernetes.io/edge"]; !ok {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Value != "edge" {
		t.Errorf("tolerations %+v", spec.Tolerations)
	}
	if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil || len(spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 {
		t.Errorf("affinity %+v", spec.Affinity)
	}
	if spec.PriorityClassName != "system-cluster-critical" {
		t.Errorf("priorityClassName %q", spec.PriorityClassName)
	}
	if len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Errorf("topologySpreadConstraints %+v", spec.TopologySpreadConstraints)
	}
	if *r.dep.Spec.Replicas != 3 || spec.Containers[0].Resources.Limits.Memory().String() != "3Gi" {
		t.Errorf("replicas %d, resources %+v", *r.dep.Spec.Replicas, spec.Containers[0].Resources)
	}
}

// A release of another name names every object after itself, and every
// reference between them follows.
func TestChartReleaseName(t *testing.T) {
	objs, err := charttest.Render(chartDir, charttest.Release{Name: "edge", Namespace: "gateways"}, map[string]any{
		"gatewayClass": map[string]any{"name": "edge", "controllerName": "example.net/edge"},
		"log":          map[string]any{"level": "debug", "format": "console"},
		"image":        map[string]any{"repository": "registry.example.com/portico", "digest": "sha256:" + strings.Repeat("ab", 32)},
		"extraArgs":    []any{"--request-id", "--holdoff=200ms"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		// A CRD's name is its resource and group's, whatever the release.
		named := o.GetName() == "edge-portico" || strings.HasPrefix(o.GetName(), "edge-portico-")
		if o.GetKind() != "GatewayClass" && o.GetKind() != "CustomResourceDefinition" && !named {
			t.Errorf("%s: not named after the release", charttest.Key(o))
		}
		if ns := o.GetNamespace(); ns != "" && ns != "gateways" {
			t.Errorf("%s: outside the release namespace", charttest.Key(o))
		}
	}
	var dep appsv1.Deployment
	typed(t, charttest.Find(objs, "Deployment", "edge-portico"), &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"--gateway-service=$(POD_NAMESPACE)/edge-portico", "--controller-name=example.net/edge", "--log-level=debug",
		"--log-format=console", "--request-id", "--holdoff=200ms"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	if c.Image != "registry.example.com/portico@sha256:"+strings.Repeat("ab", 32) {
		t.Errorf("image %s", c.Image)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "edge-portico" {
		t.Errorf("serviceAccountName %s", dep.Spec.Template.Spec.ServiceAccountName)
	}
	gc := charttest.Find(objs, "GatewayClass", "edge")
	if gc == nil {
		t.Fatal("no GatewayClass edge")
	}
	if got, _, _ := unstructured.NestedString(gc.Object, "spec", "controllerName"); got != "example.net/edge" {
		t.Errorf("GatewayClass controllerName %q", got)
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		b := charttest.Find(objs, kind, "edge-portico")
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		sa, _ := subjects[0].(map[string]any)
		if sa["name"] != "edge-portico" || sa["namespace"] != "gateways" {
			t.Errorf("%s subject %v", kind, sa)
		}
	}
}

func TestChartMonitoring(t *testing.T) {
	objs := render(t, `
monitoring:
  dashboard: {enabled: true, namespace: grafana}
  prometheusRule: {enabled: true, labels: {release: prometheus}}
  podMonitor: {enabled: true, interval: 15s}
`)
	var cm corev1.ConfigMap
	typed(t, charttest.Find(objs, "ConfigMap", "portico-dashboard"), &cm)
	dashboard, err := os.ReadFile("portico/monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if cm.Namespace != "grafana" || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap in %q with labels %v", cm.Namespace, cm.Labels)
	}
	if strings.TrimSpace(cm.Data["portico.json"]) != strings.TrimSpace(string(dashboard)) {
		t.Error("the dashboard ConfigMap does not hold monitoring/dashboard.json")
	}
	rule := charttest.Find(objs, "PrometheusRule", "portico")
	if rule == nil || rule.GetLabels()["release"] != "prometheus" {
		t.Fatalf("PrometheusRule %v", rule)
	}
	raw, err := os.ReadFile("portico/monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	spec, _, _ := unstructured.NestedMap(rule.Object, "spec")
	if !reflect.DeepEqual(normalized(t, spec), normalized(t, file)) {
		t.Error("the PrometheusRule's spec is not monitoring/alerts.yaml")
	}
	pm := charttest.Find(objs, "PodMonitor", "portico")
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(endpoints) != 1 || endpoints[0].(map[string]any)["port"] != "admin" || endpoints[0].(map[string]any)["interval"] != "15s" {
		t.Errorf("PodMonitor endpoints %v", endpoints)
	}
	for _, kind := range []string{"ConfigMap", "PrometheusRule", "PodMonitor"} {
		for _, o := range render(t, "") {
			if o.GetKind() == kind {
				t.Errorf("%s rendered by default", kind)
			}
		}
	}
}

// The schema refuses values that would make a broken install, saying
// which value and why.
func TestChartSchemaRejects(t *testing.T) {
	for values, want := range map[string]string{
		"replicas: two":                                   "at '/replicas': got string, want integer",
		"replica: 3":                                      "additional properties 'replica' not allowed",
		"log: {format: xml}":                              "at '/log/format': value must be one of 'console', 'json'",
		"log: {level: verbose}":                           "at '/log/level'",
		"service: {type: Ingress}":                        "at '/service/type'",
		"service: {ports: []}":                            "at '/service/ports'",
		"service: {ports: [{name: http}]}":                "missing property 'port'",
		"image: {digest: md5:abc}":                        "at '/image/digest'",
		"image: {repository: ''}":                         "at '/image/repository'",
		"drainTimeout: 30 seconds":                        "at '/drainTimeout'",
		"gatewayAddressPool: [10.0.0.0/24]":               "at '/hostNetwork': value must be true",
		"{hostNetwork: true, gatewayAddressPool: [pool]}": "at '/gatewayAddressPool/0'",
		"acme: {directory: ftp://acme.example.net}":       "at '/acme/directory'",
		"acme: {concurrency: 0}":                          "at '/acme/concurrency'",
		"acme: {email: ops}":                              "at '/acme/email'",
		"acme: {eab: {secretName: Not_A_Name}}":           "at '/acme/eab/secretName'",
		"podDisruptionBudget: {minAvailable: half}":       "at '/podDisruptionBudget/minAvailable'",
		"admin: {port: 70000}":                            "at '/admin/port'",
		"gatewayClass: {controllerName: portico}":         "at '/gatewayClass/controllerName'",
		"extraArgs: [serve]":                              "at '/extraArgs/0'",
		"monitoring: {dashboard: {enable: true}}":         "additional properties 'enable' not allowed",
		"knative: {externalService: {type: Ingress}}":     "at '/knative/externalService/type'",
		"tracing: {endpoint: http://otel:4317}":           "at '/tracing/endpoint'",
		"tracing: {protocol: udp}":                        "at '/tracing/protocol'",
		"tracing: {sampleRatio: '2'}":                     "at '/tracing/sampleRatio'",
	} {
		err := renderErr(values)
		if err == nil {
			t.Errorf("%s: accepted", values)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant it to say %q", values, err, want)
		}
	}
}

// TestChartLint runs Helm's own linter ("helm lint"): Chart.yaml, values
// against the schema, templates rendered and checked as Kubernetes objects
// (names, deprecated APIs), for the defaults and with every option on.
func TestChartLint(t *testing.T) {
	for _, values := range []string{"", `
namespace: {create: true}
hostNetwork: true
gatewayAddressPool: [192.0.2.0/28]
acme: {email: ops@example.com, caBundle: {configMap: ca}, eab: {secretName: eab}}
monitoring: {dashboard: {enabled: true}, prometheusRule: {enabled: true}, podMonitor: {enabled: true}}
`} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(values), &v); err != nil {
			t.Fatal(err)
		}
		result := lint.RunAll(chartDir, v, "portico-system")
		for _, m := range result.Messages {
			// INFO is advice such as "icon is recommended".
			if m.Severity > support.InfoSev {
				t.Errorf("helm lint with %q: %s", values, m)
			}
		}
	}
}

// TestChartModes renders every mode the chart installs Portico in (shared
// replicas, Knative, a Gateway address pool on the host's network,
// autoscaled, per-Gateway): in each the controller gives the data planes it
// provisions for per-Gateway classes the chart's own image and pull policy,
// and only in per-Gateway mode does the chart create the class's
// PorticoParameters.
func TestChartModes(t *testing.T) {
	image := `image: {repository: registry.example.com/edge/portico, tag: v1.2.3, pullPolicy: Always}`
	for name, values := range map[string]string{
		"shared":        image,
		"knative":       image + "\nknative: {enabled: true}",
		"host pool":     image + "\nnamespace: {create: true}\nhostNetwork: true\ngatewayAddressPool: [192.0.2.0/28]",
		"autoscaled":    image + "\nautoscaling: {enabled: true}",
		"no own SA":     image + "\nserviceAccount: {create: false, name: existing}",
		"ACME with EAB": image + "\nacme: {eab: {secretName: eab}}",
		"per-Gateway":   image + "\ngatewayClass: {mode: PerGateway}",
	} {
		t.Run(name, func(t *testing.T) {
			r := renderTyped(t, "portico", values)
			if got, _ := r.flag("data-plane-image"); got != "registry.example.com/edge/portico:v1.2.3" {
				t.Errorf("--data-plane-image=%q", got)
			}
			if got, _ := r.flag("data-plane-image-pull-policy"); got != "Always" {
				t.Errorf("--data-plane-image-pull-policy=%q", got)
			}
			if got := r.dep.Spec.Template.Spec.Containers[0].Image; got != "registry.example.com/edge/portico:v1.2.3" {
				t.Errorf("image %q", got)
			}
			perGateway := strings.Contains(values, "PerGateway")
			if got := charttest.Find(r.objs, "PorticoParameters", "portico") != nil; got != perGateway {
				t.Errorf("PorticoParameters rendered: %v, want %v", got, perGateway)
			}
			// The Service in front of the replicas, and the flag that
			// reports its address in Gateways' status, only where the
			// replicas serve the class's traffic.
			_, gatewayService := r.flag("gateway-service")
			if got := charttest.Find(r.objs, "Service", "portico") != nil; got == perGateway || gatewayService == perGateway {
				t.Errorf("Service portico rendered: %v, --gateway-service: %v; want both %v", got, gatewayService, !perGateway)
			}
			if charttest.Find(r.objs, "Service", "portico-controller") == nil {
				t.Error("no Service portico-controller for the data planes' configuration")
			}
		})
	}
	// service.create wins over the mode, either way.
	for values, want := range map[string]bool{
		"gatewayClass: {mode: PerGateway}\nservice: {create: true}": true,
		"service: {create: false}":                                  false,
		"gatewayClass: {create: false, mode: PerGateway}":           true,
	} {
		r := renderTyped(t, "portico", values)
		_, gatewayService := r.flag("gateway-service")
		if got := charttest.Find(r.objs, "Service", "portico") != nil; got != want || gatewayService != want {
			t.Errorf("%s: Service portico rendered: %v, --gateway-service: %v; want both %v", values, got, gatewayService, want)
		}
	}
	digest := "sha256:" + strings.Repeat("ab", 32)
	r := renderTyped(t, "portico", "image: {repository: registry.example.com/portico, digest: "+digest+"}")
	if got, _ := r.flag("data-plane-image"); got != "registry.example.com/portico@"+digest {
		t.Errorf("with a digest: --data-plane-image=%q", got)
	}
	if v, ok := r.flag("data-plane-image-pull-policy"); ok {
		t.Errorf("default pull policy passed: %s", v)
	}
}

// TestChartPerGatewayMode: gatewayClass.mode PerGateway makes the chart
// create the class's PorticoParameters, in PerGateway mode with the
// fields of gatewayClass.parameters, and the class name exactly them; they
// go with the class at uninstall (no keep policy). The notes say which
// image the data planes run. The default class names none, and none are
// rendered.
func TestChartPerGatewayMode(t *testing.T) {
	defaults := render(t, "")
	if ref, ok, _ := unstructured.NestedMap(charttest.Find(defaults, "GatewayClass", "portico").Object, "spec", "parametersRef"); ok {
		t.Errorf("default values: parametersRef %v", ref)
	}
	for _, o := range defaults {
		if o.GetKind() == "PorticoParameters" {
			t.Errorf("default values render %s", charttest.Key(o))
		}
	}
	rel := charttest.Release{Name: "edge", Namespace: "gateways"}
	values := map[string]any{
		"image": map[string]any{"repository": "registry.example.com/portico", "tag": "v1.2.3"},
		"gatewayClass": map[string]any{"name": "dedicated", "mode": "PerGateway", "parameters": map[string]any{
			"mode": "Shared", "replicas": 3, "service": map[string]any{"type": "ClusterIP"},
		}},
	}
	objs, err := charttest.Render(chartDir, rel, values)
	if err != nil {
		t.Fatal(err)
	}
	class := charttest.Find(objs, "GatewayClass", "dedicated")
	if class == nil {
		t.Fatalf("no GatewayClass dedicated in %v", keys(objs))
	}
	ref, _, _ := unstructured.NestedStringMap(class.Object, "spec", "parametersRef")
	want := map[string]string{"group": "portico.dev", "kind": "PorticoParameters", "name": "dedicated", "namespace": "gateways"}
	if !reflect.DeepEqual(ref, want) {
		t.Errorf("parametersRef %v, want %v", ref, want)
	}
	var params []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "PorticoParameters" {
			params = append(params, o)
		}
	}
	if len(params) != 1 {
		t.Fatalf("PorticoParameters rendered: %d, want 1", len(params))
	}
	p := params[0]
	if p.GroupVersionKind().Group != ref["group"] || p.GetName() != ref["name"] || p.GetNamespace() != ref["namespace"] {
		t.Errorf("the chart creates %s %s/%s, the class names %v", p.GetAPIVersion(), p.GetNamespace(), p.GetName(), ref)
	}
	spec, _, _ := unstructured.NestedMap(p.Object, "spec")
	wantSpec := map[string]any{"mode": "PerGateway", "replicas": int64(3), "service": map[string]any{"type": "ClusterIP"}}
	if !reflect.DeepEqual(normalized(t, spec), normalized(t, wantSpec)) {
		t.Errorf("spec %v, want %v (gatewayClass.parameters, mode PerGateway whatever they say)", spec, wantSpec)
	}
	if policy, ok := p.GetAnnotations()["helm.sh/resource-policy"]; ok {
		t.Errorf("the class's parameters carry resource-policy %q: they would outlive the class they belong to", policy)
	}
	if p.GetLabels()["app.kubernetes.io/instance"] != "edge" {
		t.Errorf("labels %v: not the release's", p.GetLabels())
	}
	notes, err := charttest.Notes(chartDir, rel, values)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"running registry.example.com/portico:v1.2.3", "kubectl -n gateways get porticoparameters dedicated", "helm uninstall deletes the class and these parameters",
		"2 controller replicas", "They serve no traffic of the GatewayClass dedicated", "The chart creates no Service in front of the controller replicas",
		"-l gateway.networking.k8s.io/gateway-class-name=dedicated"} {
		if !strings.Contains(notes, want) {
			t.Errorf("the notes lack %q:\n%s", want, notes)
		}
	}
	// Nothing of the shared mode's front Service, which is not rendered.
	if strings.Contains(notes, "behind the") || charttest.Find(objs, "Service", "edge-portico") != nil {
		t.Errorf("per-Gateway mode: a Service edge-portico rendered or announced:\n%s", notes)
	}
	shared, err := charttest.Notes(chartDir, rel, map[string]any{"gatewayClass": map[string]any{"name": "dedicated"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(shared, "2 replicas behind the LoadBalancer Service edge-portico, serving every Gateway of class dedicated") || strings.Contains(shared, "porticoparameters") {
		t.Errorf("shared mode's notes:\n%s", shared)
	}
	if strings.Contains(notes, "kubectl apply") {
		t.Errorf("the notes still ask for objects to be applied by hand:\n%s", notes)
	}
	if _, err := charttest.Render(chartDir, release, map[string]any{"gatewayClass": map[string]any{"mode": "Dedicated"}}); err == nil {
		t.Error("the schema accepts mode Dedicated")
	}
}

// TestChartCRDSurvivesUninstall: Portico's CRDs (PorticoParameters,
// BackendTrafficPolicy) are in crds/, which Helm installs before the
// templates (so that they may hold the class's PorticoParameters) and never
// deletes: helm uninstall keeps them, and with them the PorticoParameters
// Gateways name and every policy. No template renders one a second time.
func TestChartCRDSurvivesUninstall(t *testing.T) {
	crds, err := charttest.CRDs(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"porticoparameters.portico.dev", "backendtrafficpolicies.portico.dev", "securitypolicies.portico.dev"} {
		if charttest.Find(crds, "CustomResourceDefinition", name) == nil {
			t.Errorf("crds/ holds %v, not the CRD %s", keys(crds), name)
		}
	}
	n := 0
	for _, o := range render(t, "gatewayClass: {mode: PerGateway}") {
		if o.GetKind() == "CustomResourceDefinition" {
			n++
		}
	}
	if n != len(crds) {
		t.Errorf("%d CRDs rendered with crds/ holding %d: a template renders one too", n, len(crds))
	}
}

// TestChartWorkloadValues: security contexts, probes, resources, HPA,
// ServiceAccount, extra volumes and environment come from values.
func TestChartWorkloadValues(t *testing.T) {
	r := renderTyped(t, "portico", `
podSecurityContext: {runAsNonRoot: true, runAsUser: 10001, fsGroup: 10001}
securityContext: {readOnlyRootFilesystem: true, runAsNonRoot: true}
probes:
  readiness: {httpGet: {path: /readyz, port: admin}, periodSeconds: 1}
  liveness: null
resources: {requests: {cpu: "1", memory: 512Mi}, limits: {memory: 2Gi}}
autoscaling: {enabled: true, minReplicas: 3, maxReplicas: 9, targetCPUUtilizationPercentage: 60, targetMemoryUtilizationPercentage: 80}
serviceAccount: {create: false, name: platform-edge}
extraVolumes: [{name: geo, configMap: {name: geoip}}]
extraVolumeMounts: [{name: geo, mountPath: /etc/geo, readOnly: true}]
extraEnv: [{name: TZ, value: UTC}]
`)
	spec := r.dep.Spec.Template.Spec
	c := spec.Containers[0]
	if psc := spec.SecurityContext; psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 10001 || psc.FSGroup == nil || *psc.FSGroup != 10001 || len(psc.Sysctls) != 1 {
		t.Errorf("pod securityContext %+v (the port sysctl kept)", psc)
	}
	// Helm merges the values with the defaults: those not overridden stay.
	if sc := c.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("container securityContext %+v", sc)
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.PeriodSeconds != 1 || c.LivenessProbe != nil || c.StartupProbe == nil {
		t.Errorf("probes: readiness %+v, liveness %+v, startup %+v", c.ReadinessProbe, c.LivenessProbe, c.StartupProbe)
	}
	if c.Resources.Requests.Cpu().String() != "1" || c.Resources.Limits.Memory().String() != "2Gi" {
		t.Errorf("resources %+v", c.Resources)
	}
	if r.dep.Spec.Replicas != nil {
		t.Errorf("replicas %d set next to an HPA", *r.dep.Spec.Replicas)
	}
	var hpa autoscalingv2.HorizontalPodAutoscaler
	typed(t, charttest.Find(r.objs, "HorizontalPodAutoscaler", "portico"), &hpa)
	if hpa.Spec.ScaleTargetRef.Name != "portico" || hpa.Spec.ScaleTargetRef.Kind != "Deployment" || *hpa.Spec.MinReplicas != 3 || hpa.Spec.MaxReplicas != 9 || len(hpa.Spec.Metrics) != 2 {
		t.Errorf("HPA spec %+v", hpa.Spec)
	}
	if spec.ServiceAccountName != "platform-edge" || charttest.Find(r.objs, "ServiceAccount", "portico") != nil || charttest.Find(r.objs, "ServiceAccount", "platform-edge") != nil {
		t.Errorf("serviceAccountName %q; the chart must render no ServiceAccount", spec.ServiceAccountName)
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		var b rbacv1.ClusterRoleBinding
		typed(t, charttest.Find(r.objs, kind, "portico"), &b)
		if len(b.Subjects) != 1 || b.Subjects[0].Name != "platform-edge" {
			t.Errorf("%s subjects %+v", kind, b.Subjects)
		}
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "geo" && v.ConfigMap != nil }) ||
		!slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "geo" && m.MountPath == "/etc/geo" }) ||
		!slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "tmp" }) {
		t.Errorf("volumes %+v, mounts %+v", spec.Volumes, c.VolumeMounts)
	}
	if e := r.env("TZ"); e == nil || e.Value != "UTC" {
		t.Errorf("env TZ %+v", e)
	}
	// Defaults: no HPA, replicas set, the chart's own ServiceAccount.
	d := renderTyped(t, "portico", "")
	if charttest.Find(d.objs, "HorizontalPodAutoscaler", "portico") != nil || d.dep.Spec.Replicas == nil || *d.dep.Spec.Replicas != 2 ||
		charttest.Find(d.objs, "ServiceAccount", "portico") == nil || d.dep.Spec.Template.Spec.ServiceAccountName != "portico" {
		t.Error("default values: want replicas 2, no HPA, the chart's ServiceAccount")
	}
	if err := renderErr("serviceAccount: {create: false}"); err == nil || !strings.Contains(err.Error(), "serviceAccount.name") {
		t.Errorf("serviceAccount.create false without a name: %v", err)
	}
}

// TestChartValuesPointToDocs: every "(FILE, "Section")" pointer in
// values.yaml names a section FILE has.
func TestChartValuesPointToDocs(t *testing.T) {
	raw, err := os.ReadFile(chartDir + "/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`\(((?:deploy/)?README\.md), "([^"]+)"\)`).FindAllStringSubmatch(string(raw), -1)
	if len(refs) == 0 {
		t.Fatal("no pointer found")
	}
	for _, ref := range refs {
		doc, err := os.ReadFile("../" + ref[1])
		if err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(ref[2]) + `$`).Match(doc) {
			t.Errorf("values.yaml points to %s, section %q, which it does not have", ref[1], ref[2])
		}
	}
}
