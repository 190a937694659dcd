package provision

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"portico.dev/portico/internal/controlplane/parameters"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/")

var settings = Settings{Image: "portico:test", ImagePullPolicy: corev1.PullIfNotPresent, Controller: "portico-controller.portico-system.svc:9443", ControllerCA: "-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n"}

func gateway(ns, name string, infra *gwv1.GatewayInfrastructure, addrs ...gwv1.GatewaySpecAddress) *gwv1.Gateway {
	return &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: "5e1c0a8e-0000-4000-8000-000000000001"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "dedicated", Infrastructure: infra, Addresses: addrs},
	}
}

// goldenCases: each renders one Input; testdata/<name>.yaml holds the
// objects as a YAML stream.
func goldenCases() map[string]Input {
	ipType := gwv1.IPAddressType
	lb := corev1.ServiceTypeLoadBalancer
	cip := corev1.ServiceTypeClusterIP
	local := corev1.ServiceExternalTrafficPolicyLocal
	return map[string]Input{
		// Infrastructure labels and annotations reach every object and the
		// pod template, without the keys the spec reserves, and Portico's
		// own labels win over a Gateway's of the same key. The selector
		// holds none of them.
		"metadata": {
			Gateway: gateway("apps", "web", &gwv1.GatewayInfrastructure{
				Labels: map[gwv1.LabelKey]gwv1.LabelValue{
					"team": "payments", "gateway.networking.k8s.io/gateway-name": "spoofed",
					"app.kubernetes.io/managed-by": "someone-else",
				},
				Annotations: map[gwv1.AnnotationKey]gwv1.AnnotationValue{
					"cost-center": "42", "gateway.networking.k8s.io/anything": "dropped",
				},
			}),
			ClassName: "dedicated",
			Ports: []Port{{Port: 443, Protocol: gwv1.HTTPSProtocolType}, {Port: 80, Protocol: gwv1.HTTPProtocolType},
				{Port: 443, Protocol: gwv1.HTTPSProtocolType}},
			Accepted: true,
		},
		// Every parameter: replicas, resources, placement, a PDB, the
		// drain timeout (and the grace period after it), the log level,
		// the Service's type, class, policy and annotations; the
		// Gateway's address asked of the load balancer.
		"parameters": {
			Gateway:   gateway("apps", "api", nil, gwv1.GatewaySpecAddress{Type: &ipType, Value: "203.0.113.7"}),
			ClassName: "dedicated",
			Parameters: parameters.Spec{
				Mode:     parameters.ModePerGateway,
				Replicas: ptr.To(int32(3)),
				Resources: &corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
				},
				Service: &parameters.Service{Type: &lb, LoadBalancerClass: ptr.To("example.com/lb"), ExternalTrafficPolicy: &local,
					Annotations: map[string]string{"lb.example.com/idle": "300"}},
				NodeSelector:        map[string]string{"node-role": "edge"},
				Tolerations:         []corev1.Toleration{{Key: "edge", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				PodDisruptionBudget: &parameters.PodDisruptionBudget{MinAvailable: ptr.To(intstr.FromInt32(1))},
				DrainTimeout:        &metav1.Duration{Duration: 10 * time.Second},
				LogLevel:            "debug",
			},
			Ports:    []Port{{Port: 8443, Protocol: gwv1.HTTPSProtocolType}},
			Accepted: true,
		},
		// A ClusterIP Service takes the Gateway's address as its cluster
		// IP; a name too long for a Service is cut, with a hash.
		"long-name-cluster-ip": {
			Gateway:    gateway("apps", "a-gateway-with-a-very-long-name-that-does-not-fit.example", nil, gwv1.GatewaySpecAddress{Value: "10.96.7.7"}),
			ClassName:  "dedicated",
			Parameters: parameters.Spec{Service: &parameters.Service{Type: &cip}},
			Ports:      []Port{{Port: 80, Protocol: gwv1.HTTPProtocolType}},
			Accepted:   true,
		},
	}
}

func TestGoldenRender(t *testing.T) {
	for name, in := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			got := renderYAML(t, Render(settings, in))
			path := filepath.Join("testdata", name+".yaml")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./provision -update, then read the file)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("rendering differs from %s (run with -update and read the diff):\n%s", path, got)
			}
		})
	}
}

func renderYAML(t *testing.T, o Objects) []byte {
	t.Helper()
	var b bytes.Buffer
	for _, obj := range []any{o.ServiceAccount, o.Deployment, o.Service, o.PodDisruptionBudget} {
		js, err := sigsyaml.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if string(js) == "null\n" {
			continue
		}
		b.WriteString("---\n")
		b.Write(js)
	}
	return b.Bytes()
}

// TestRenderDeterministic: the order ports come in and the order maps are
// filled in change nothing, so a restarted controller applies the same
// bytes and rolls no pod.
func TestRenderDeterministic(t *testing.T) {
	in := goldenCases()["metadata"]
	first := renderYAML(t, Render(settings, in))
	in.Ports = []Port{in.Ports[1], in.Ports[2], in.Ports[0]}
	for range 20 {
		if got := renderYAML(t, Render(settings, in)); !bytes.Equal(got, first) {
			t.Fatalf("rendering changed between calls:\n%s\nthen\n%s", first, got)
		}
	}
}

// TestSelectorIgnoresInfrastructureLabels: changing a Gateway's
// infrastructure labels changes the pod template (the pods roll) but
// never the Deployment's selector, which the API server refuses to change.
func TestSelectorIgnoresInfrastructureLabels(t *testing.T) {
	in := goldenCases()["metadata"]
	before := Render(settings, in)
	in.Gateway = in.Gateway.DeepCopy()
	in.Gateway.Spec.Infrastructure.Labels["team"] = "search"
	after := Render(settings, in)
	if !equalJSON(t, before.Deployment.Spec.Selector, after.Deployment.Spec.Selector) {
		t.Fatalf("selector changed: %v -> %v", before.Deployment.Spec.Selector, after.Deployment.Spec.Selector)
	}
	if after.Deployment.Spec.Template.Labels["team"] != "search" {
		t.Fatalf("pod template labels = %v, want team=search", after.Deployment.Spec.Template.Labels)
	}
	for k, v := range after.Deployment.Spec.Selector.MatchLabels {
		if after.Deployment.Spec.Template.Labels[k] != v {
			t.Fatalf("selector %s=%s does not select the pod template's labels %v", k, v, after.Deployment.Spec.Template.Labels)
		}
	}
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := sigsyaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := sigsyaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

// TestName: short valid names are kept; anything else becomes a DNS-1035
// label of at most 63 characters, and distinct Gateway/class pairs whose
// name is hashed never share one (the hash covers the pair, not the joined
// string). Two valid pairs that join to the same name ("a"/"b-c" and
// "a-b"/"c") do share it, as the spec's naming scheme has them; the
// provisioner never takes over an object another Gateway owns.
func TestName(t *testing.T) {
	if got := Name("web", "dedicated"); got != "web-dedicated" {
		t.Fatalf("Name(web, dedicated) = %q", got)
	}
	seen := map[string]string{}
	for _, pair := range [][2]string{
		{"web", "dedicated"}, {"a.b", "c"}, {"a-b", "c"}, {"a-b", "c"}, {"1gw", "x"}, {"a_b", "c"},
		{strings.Repeat("g", 253), "dedicated"}, {strings.Repeat("g", 253), "dedicated2"},
		{"UPPER", "x"}, {"...", "..."}, {"gw", strings.Repeat("c", 60)},
	} {
		n := Name(pair[0], pair[1])
		if errs := validation.IsDNS1035Label(n); len(errs) > 0 {
			t.Errorf("Name(%q, %q) = %q: %v", pair[0], pair[1], n, errs)
		}
		key := pair[0] + "/" + pair[1]
		if prev, ok := seen[n]; ok && prev != key {
			t.Errorf("Name(%s) = Name(%s) = %q", key, prev, n)
		}
		seen[n] = key
	}
	if errs := validation.IsValidLabelValue(labelValue(strings.Repeat("g", 253))); len(errs) > 0 {
		t.Errorf("label value of a long Gateway name: %v", errs)
	}
}
