package bench

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/translate"
)

// knativeResources is n KIngresses as Knative Serving writes them for a
// service each: an external and three cluster-local hosts, one split.
func knativeResources(n int) *snapshot.Resources {
	res := &snapshot.Resources{Services: []*corev1.Service{{ObjectMeta: metav1.ObjectMeta{Namespace: "serving", Name: "app"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}}}
	for i := range n {
		res.KIngresses = append(res.KIngresses, kingressN(i, 1))
	}
	return res
}

func kingressN(i int, gen int64) *knative.Ingress {
	name := fmt.Sprintf("ksvc-%05d", i)
	split := []knative.IngressBackendSplit{{IngressBackend: knative.IngressBackend{ServiceNamespace: "serving", ServiceName: "app",
		ServicePort: intstr.FromInt(80)}, Percent: 100, AppendHeaders: map[string]string{"Knative-Serving-Revision": name + "-00001"}}}
	return &knative.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: "serving", Name: name, Generation: gen,
			Annotations: map[string]string{knative.IngressClassAnnotation: knative.DefaultIngressClass}},
		Spec: knative.IngressSpec{HTTPOption: knative.HTTPOptionEnabled, Rules: []knative.IngressRule{
			{Hosts: []string{name + ".serving.example.com"}, Visibility: knative.VisibilityExternalIP,
				HTTP: &knative.HTTPIngressRuleValue{Paths: []knative.HTTPIngressPath{{Splits: split}}}},
			{Hosts: []string{name + ".serving", name + ".serving.svc", name + ".serving.svc.cluster.local"}, Visibility: knative.VisibilityClusterLocal,
				HTTP: &knative.HTTPIngressRuleValue{Paths: []knative.HTTPIngressPath{{Splits: split}}}},
		}},
	}
}

// BenchmarkTranslateKnative10000 is the rebuild after one of 10,000
// KIngresses changed (a new object, as an informer hands out): the part of
// BenchmarkKnativeReady's wait that is translate.
func BenchmarkTranslateKnative10000(b *testing.B) {
	s := translate.Settings{Knative: &translate.KnativeSettings{ExternalHTTPPort: 8080, ExternalHTTPSPort: 8443, LocalHTTPPort: 8081,
		LocalHTTPSPort: 8444, LocalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-internal"}}}
	res := knativeResources(10000)
	out, mem := pipeline.TranslateConcurrently(s, res, translate.Memory{})
	if len(out.Knative.Ingresses) != 10000 {
		b.Fatalf("%d KIngresses translated", len(out.Knative.Ingresses))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		next := *res
		next.KIngresses = append([]*knative.Ingress(nil), res.KIngresses...)
		next.KIngresses[i%10000] = kingressN(i%10000, int64(i+2))
		out, mem = pipeline.TranslateConcurrently(s, &next, mem)
		res = &next
	}
	_ = out
}
