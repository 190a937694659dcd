package parameters

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestMerge: the Gateway's fields win one by one, the Service's fields
// one by one and its annotations key by key; the class keeps the rest; the
// mode is the class's; neither input is modified.
func TestMerge(t *testing.T) {
	lb, local := corev1.ServiceTypeLoadBalancer, corev1.ServiceExternalTrafficPolicyLocal
	class := Spec{
		Mode: ModePerGateway, Replicas: ptr.To(int32(2)), LogLevel: "warn",
		NodeSelector: map[string]string{"pool": "edge"},
		Service: &Service{Type: &lb, ExternalTrafficPolicy: &local,
			Annotations: map[string]string{"a": "class", "b": "class"}},
		DrainTimeout: &metav1.Duration{Duration: time.Minute},
	}
	gw := Spec{
		Replicas: ptr.To(int32(5)),
		Service:  &Service{LoadBalancerClass: ptr.To("internal"), Annotations: map[string]string{"b": "gateway"}},
	}
	classBefore, gwBefore := dump(t, class), dump(t, gw)
	got := Merge(class, gw)
	want := Spec{
		Mode: ModePerGateway, Replicas: ptr.To(int32(5)), LogLevel: "warn",
		NodeSelector: map[string]string{"pool": "edge"},
		Service: &Service{Type: &lb, ExternalTrafficPolicy: &local, LoadBalancerClass: ptr.To("internal"),
			Annotations: map[string]string{"a": "class", "b": "gateway"}},
		DrainTimeout: &metav1.Duration{Duration: time.Minute},
	}
	if dump(t, got) != dump(t, want) {
		t.Fatalf("Merge = %s\nwant %s", dump(t, got), dump(t, want))
	}
	if dump(t, class) != classBefore || dump(t, gw) != gwBefore {
		t.Fatal("Merge modified its inputs")
	}
	if got := Merge(Spec{}, Spec{}); got.Service != nil {
		t.Fatalf("Merge of nothing has a Service: %+v", got.Service)
	}
}

func dump(t *testing.T, s Spec) string {
	t.Helper()
	js, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

func TestValidate(t *testing.T) {
	bad := corev1.ServiceType("ExternalName")
	for _, c := range []struct {
		name    string
		spec    Spec
		gateway bool
		ok      bool
	}{
		{"empty", Spec{}, false, true},
		{"class mode", Spec{Mode: ModePerGateway}, false, true},
		{"gateway mode", Spec{Mode: ModeShared}, true, false},
		{"unknown mode", Spec{Mode: "Sometimes"}, false, false},
		{"negative replicas", Spec{Replicas: ptr.To(int32(-1))}, false, false},
		{"ExternalName", Spec{Service: &Service{Type: &bad}}, false, false},
		{"both budgets", Spec{PodDisruptionBudget: &PodDisruptionBudget{
			MinAvailable: ptr.To(intstr.FromInt32(1)), MaxUnavailable: ptr.To(intstr.FromInt32(1))}}, false, false},
		{"no budget", Spec{PodDisruptionBudget: &PodDisruptionBudget{}}, false, false},
		{"drain too long", Spec{DrainTimeout: &metav1.Duration{Duration: 2 * time.Hour}}, false, false},
		{"log level", Spec{LogLevel: "loud"}, false, false},
	} {
		if err := c.spec.Validate(c.gateway); (err == nil) != c.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}
