package bench

// Benchmarks of a full translate at Knative scale: one Gateway and one
// ListenerSet, Secret, HTTPRoute and Service per hostname. Figures and
// commands are in README.md, section "Translate".

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/internal/testkit/usage"
	"portico.dev/portico/translate"
)

// translateSets is the number of ListenerSets (and hostnames, Secrets,
// routes, Services) of the workload.
const translateSets = 5000

// setsPerNamespace spreads the workload over namespaces the way Knative
// spreads Services over tenants' namespaces.
const setsPerNamespace = 100

// translateWorkload builds the Resources once per test binary: issuing 5,000
// certificates takes longer than the translate being measured.
var translateWorkload = sync.OnceValues(func() (*snapshot.Resources, error) {
	return buildTranslateWorkload(translateSets)
})

func buildTranslateWorkload(n int) (*snapshot.Resources, error) {
	res, _, err := buildWorkloadOnPorts(n, 80, 443)
	return res, err
}

// buildWorkloadOnPorts is the workload with the Gateway's HTTP listener on
// httpPort and the ListenerSets' HTTPS listeners on httpsPort, and the CA
// of its certificates.
func buildWorkloadOnPorts(n int, httpPort, httpsPort gwv1.PortNumber) (*snapshot.Resources, *snitest.CA, error) {
	ca, err := snitest.NewCA()
	if err != nil {
		return nil, nil, err
	}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("svc-%d.ns-%d.example.com", i, i/setsPerNamespace)
	}
	pairs, err := ca.IssueMany(hosts, 1)
	if err != nil {
		return nil, nil, fmt.Errorf("issue certificates: %w", err)
	}

	created := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	objectMeta := func(ns, name string, i int) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(created.Add(time.Duration(i) * time.Second))}
	}
	from := gwv1.NamespacesFromAll
	res := &snapshot.Resources{
		GatewayClasses: []*gwv1.GatewayClass{{
			ObjectMeta: metav1.ObjectMeta{Name: "portico", Generation: 1},
			Spec:       gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName},
		}},
		Gateways: []*gwv1.Gateway{{
			ObjectMeta: objectMeta("knative-serving", "gw", -1),
			Spec: gwv1.GatewaySpec{
				GatewayClassName: "portico",
				AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &from}},
				Listeners:        []gwv1.Listener{{Name: "http", Port: httpPort, Protocol: gwv1.HTTPProtocolType}},
			},
		}},
		Namespaces: []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "knative-serving", Labels: map[string]string{"kubernetes.io/metadata.name": "knative-serving"}}}},
	}
	gwNamespace := gwv1.Namespace("knative-serving")
	lsKind := gwv1.Kind("ListenerSet")
	ready := true
	for i, host := range hosts {
		ns := fmt.Sprintf("ns-%d", i/setsPerNamespace)
		if i%setsPerNamespace == 0 {
			res.Namespaces = append(res.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kubernetes.io/metadata.name": ns}}})
		}
		name := fmt.Sprintf("svc-%d", i)
		hostname := gwv1.Hostname(host)
		res.ListenerSets = append(res.ListenerSets, &gwv1.ListenerSet{
			ObjectMeta: objectMeta(ns, name, i),
			Spec: gwv1.ListenerSetSpec{
				ParentRef: gwv1.ParentGatewayReference{Name: "gw", Namespace: &gwNamespace},
				Listeners: []gwv1.ListenerEntry{{
					Name:     "https",
					Hostname: &hostname,
					Port:     httpsPort,
					Protocol: gwv1.HTTPSProtocolType,
					TLS:      &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: gwv1.ObjectName(name + "-tls")}}},
				}},
			},
		})
		res.Secrets = append(res.Secrets, &corev1.Secret{
			ObjectMeta: objectMeta(ns, name+"-tls", i),
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: pairs[i].CertPEM, corev1.TLSPrivateKeyKey: pairs[i].KeyPEM},
		})
		port := gwv1.PortNumber(80)
		res.HTTPRoutes = append(res.HTTPRoutes, &gwv1.HTTPRoute{
			ObjectMeta: objectMeta(ns, name, i),
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Kind: &lsKind, Name: gwv1.ObjectName(name)}}},
				Hostnames:       []gwv1.Hostname{hostname},
				Rules: []gwv1.HTTPRouteRule{{
					BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: &port}}}},
				}},
			},
		})
		portName := "http"
		res.Services = append(res.Services, &corev1.Service{
			ObjectMeta: objectMeta(ns, name, i),
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: portName, Port: 80}}},
		})
		slicePort := int32(8080)
		sliceMeta := objectMeta(ns, name+"-1", i)
		sliceMeta.Labels = map[string]string{discoveryv1.LabelServiceName: name}
		res.EndpointSlices = append(res.EndpointSlices, &discoveryv1.EndpointSlice{
			ObjectMeta:  sliceMeta,
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &slicePort}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", i>>16&0xff, i>>8&0xff, i&0xff)},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			}},
		})
	}
	return res, ca, nil
}

// checkTranslated fails unless every hostname is served: a fast translate
// of a config that serves nothing measures nothing.
// It returns the memory that translation leaves, as a running instance has
// it after its first translate.
func checkTranslated(b testing.TB, res *snapshot.Resources) translate.Memory {
	b.Helper()
	out, mem := translate.Translate(translate.Settings{}, res, translate.Memory{})
	cfg, st := out.Config, out.Statuses
	served := 0
	for _, p := range cfg.Ports {
		if p.Number == 443 {
			for l := range p.All.Values() {
				if l.Routes != nil {
					served++
				}
			}
		}
	}
	if served != len(res.ListenerSets) {
		b.Fatalf("%d of %d hostnames served with routes", served, len(res.ListenerSets))
	}
	for key, s := range st.ListenerSets.All() {
		if !meta.IsStatusConditionTrue(s.Conditions, string(gwv1.ListenerSetConditionProgrammed)) {
			b.Fatalf("ListenerSet %s is not programmed: %v", key, s.Conditions)
		}
	}
	for key, parents := range st.HTTPRoutes.All() {
		if len(parents) != 1 || !meta.IsStatusConditionTrue(parents[0].Conditions, string(gwv1.RouteConditionAccepted)) {
			b.Fatalf("HTTPRoute %s is not accepted: %v", key, parents)
		}
	}
	return mem
}

// TestTranslateWorkload checks, at a small size, that the benchmark's
// workload is a valid config that serves every hostname.
func TestTranslateWorkload(t *testing.T) {
	res, err := buildTranslateWorkload(250)
	if err != nil {
		t.Fatal(err)
	}
	checkTranslated(t, res)
}

// BenchmarkTranslate5000 is a steady-state full rebuild: the memory has
// parsed every certificate before, as it has after the first translate of a
// running instance, and each iteration replaces the Gateway with a new
// object, as an informer does on an update. A Gateway change is translated
// in full (a change of ListenerSets, routes, Secrets or Services is
// incremental, see incremental_test.go), so each iteration is what a full
// rebuild costs: translated as the run loop does, with the endpoints
// resolved on another goroutine.
func BenchmarkTranslate5000(b *testing.B) {
	shared, err := translateWorkload()
	if err != nil {
		b.Fatal(err)
	}
	// A copy of the snapshot with its own Gateway list: the workload is
	// shared with the other benchmarks and must not change under them.
	res := *shared
	res.Gateways = slices.Clone(shared.Gateways)
	mem := checkTranslated(b, &res)
	startTiming(b)
	start := usage.CPU()
	for b.Loop() {
		changed := *shared.Gateways[0]
		res.Gateways = []*gwv1.Gateway{&changed}
		_, mem = pipeline.TranslateConcurrently(translate.Settings{}, &res, mem)
		if mem.Incremental() {
			b.Fatal("a Gateway change was translated incrementally")
		}
	}
	reportCPU(b, start)
}

// BenchmarkTranslate5000Endpoints is a rebuild after an EndpointSlice
// changed, the most frequent change in a cluster: route and certificate
// tables are reused and only endpoints are resolved again.
func BenchmarkTranslate5000Endpoints(b *testing.B) {
	shared, err := translateWorkload()
	if err != nil {
		b.Fatal(err)
	}
	res := *shared
	res.EndpointSlices = slices.Clone(shared.EndpointSlices)
	mem := checkTranslated(b, &res)
	startTiming(b)
	start := usage.CPU()
	for i := 0; b.Loop(); i++ {
		k := i % len(res.EndpointSlices)
		changed := *shared.EndpointSlices[k]
		res.EndpointSlices[k] = &changed
		_, mem = pipeline.TranslateConcurrently(translate.Settings{}, &res, mem)
	}
	reportCPU(b, start)
}

// BenchmarkTranslate5000Cold is the first translate after start: every
// certificate is parsed (key pair checked, leaf decoded).
func BenchmarkTranslate5000Cold(b *testing.B) {
	res, err := translateWorkload()
	if err != nil {
		b.Fatal(err)
	}
	checkTranslated(b, res)
	startTiming(b)
	start := usage.CPU()
	for b.Loop() {
		pipeline.TranslateConcurrently(translate.Settings{}, res, translate.Memory{})
	}
	reportCPU(b, start)
}

// startTiming starts the timed part of a benchmark. The garbage of the
// setup (building the workload, the checking translate) is collected
// first: left to the collector, it would be marked and swept during the
// first iterations and counted against them.
func startTiming(b *testing.B) {
	runtime.GC()
	b.ReportAllocs()
	b.ResetTimer()
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(usage.CPU()-start)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
}

// BenchmarkTranslateHeap reports what a running instance holds per
// hostname of the workload, for sizing its memory limit, each measured
// after a collection: the objects as the informers hold them
// (objB/hostname), and what the translator adds after its first translate,
// parsed certificates and the served config (translatorB/hostname). An
// iteration is that first translate; a full rebuild's garbage, which the
// collector must also make room for, is BenchmarkTranslate5000's B/op.
func BenchmarkTranslateHeap(b *testing.B) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	res, err := buildTranslateWorkload(translateSets)
	if err != nil {
		b.Fatal(err)
	}
	objects := heap() - base
	n := float64(len(res.ListenerSets))
	var translator uint64
	for b.Loop() {
		before := heap()
		out, mem := translate.Translate(translate.Settings{}, res, translate.Memory{})
		translator = heap() - before
		runtime.KeepAlive(mem)
		runtime.KeepAlive(out)
	}
	b.ReportMetric(float64(objects)/n, "objB/hostname")
	b.ReportMetric(float64(translator)/n, "translatorB/hostname")
}
