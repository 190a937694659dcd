package bench

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/testkit/usage"
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

// BenchmarkTranslateKnative is one change among N KIngresses translated as
// the run loop does (pipeline.TranslateConcurrently), each a new object as
// an informer hands out: "update" replaces one KIngress with its next
// generation, "create-delete" creates one more and deletes it in turn (an
// op is one of the two). cpu-ms/op is the CPU of the whole process while
// it translates (the collector's work meanwhile included), not while the
// benchmark makes the next snapshot (a copy of the list, as the source
// makes one per change): the part of a change's wait that is translate.
func BenchmarkTranslateKnative(b *testing.B) {
	s := translate.Settings{Knative: &translate.KnativeSettings{ExternalHTTPPort: 8080, ExternalHTTPSPort: 8443, LocalHTTPPort: 8081,
		LocalHTTPSPort: 8444, LocalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-internal"}}}
	for _, n := range []int{1000, 5000, 10000} {
		for _, change := range []string{"update", "create-delete"} {
			b.Run(fmt.Sprintf("N=%d/%s", n, change), func(b *testing.B) {
				res := knativeResources(n)
				out, mem := pipeline.TranslateConcurrently(s, res, translate.Memory{})
				if got := kingressResults(out); got != n {
					b.Fatalf("%d KIngresses translated", got)
				}
				startTiming(b)
				var cpu time.Duration
				for i := 0; b.Loop(); i++ {
					next := *res
					switch {
					case change == "update":
						next.KIngresses = slices.Clone(res.KIngresses)
						next.KIngresses[i%n] = kingressN(i%n, int64(i+2))
					case i%2 == 0:
						// After every other: sorted by name, in the middle.
						at := (i / 2) % n
						extra := kingressN(at, 1)
						extra.Name += "-extra"
						next.KIngresses = slices.Insert(slices.Clone(res.KIngresses), at+1, extra)
					default:
						at := ((i - 1) / 2) % n
						next.KIngresses = slices.Delete(slices.Clone(res.KIngresses), at+1, at+2)
					}
					start := usage.CPU()
					out, mem = pipeline.TranslateConcurrently(s, &next, mem)
					cpu += usage.CPU() - start
					res = &next
				}
				b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
				if got := kingressResults(out); got != len(res.KIngresses) {
					b.Fatalf("%d KIngresses translated, want %d", got, len(res.KIngresses))
				}
			})
		}
	}
}

// kingressResults is the number of KIngresses out has results of.
func kingressResults(out translate.Output) int { return out.Knative.Ingresses.Len() }
