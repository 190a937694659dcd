package bench

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube"
	"portico.dev/portico/kube/kingress"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/proxy"
	"portico.dev/portico/translate"
)

// knBench is a real API server with N KIngresses of Portico's class, all
// Ready, served by one Portico replica.
type knBench struct {
	// b reports failures: the run of the benchmark under way. The API
	// server and the replica outlive it, until the parent benchmark ends:
	// the testing package runs a benchmark once before its timed run.
	b        testing.TB
	owner    *testing.B
	env      *kubetest.Env
	kc       kubernetes.Interface
	dyn      dynamic.Interface
	settings translate.KnativeSettings
	ip       string
	// replica is the API client configuration of the replica: the test
	// environment's (QPS 1,000) or the shipped defaults'.
	replica *rest.Config
	workers int          // Knative status writes in flight; 0: the default
	writes  atomic.Int64 // KIngress status writes sent
	stop    func()
}

func newKnBench(owner, b *testing.B, n int) *knBench {
	b.Helper()
	k := startKnBench(owner, b, 0, 0, 0)
	k.createMany(n)
	return k
}

// startKnBench starts the API server and one replica with no KIngress.
// The replica's clients are limited to qps and burst, as the flags of
// cmd/portico limit them; qps 0 keeps the test environment's limits.
// workers is Knative.Workers.
func startKnBench(owner, b *testing.B, qps float32, burst, workers int) *knBench {
	b.Helper()
	kubetest.NeedNetns(b)
	ctx := context.Background()
	env, err := kubetest.StartEnv(ctx, kubetest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	owner.Cleanup(func() { _ = env.Stop() })
	k := &knBench{b: b, owner: owner, env: env, replica: env.Config, workers: workers}
	if qps != 0 {
		k.replica = rest.CopyConfig(env.Config)
		k.replica.QPS, k.replica.Burst = qps, burst
	}
	if err := kubetest.ApplyManifests(ctx, k.env.Config, "../kube/kingress/testdata/knative"); err != nil {
		b.Fatal(err)
	}
	if k.kc, err = kubernetes.NewForConfig(k.env.Config); err != nil {
		b.Fatal(err)
	}
	if k.dyn, err = dynamic.NewForConfig(k.env.Config); err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{"portico-system", "serving"} {
		if _, err := k.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	netns, err := kubetest.CreateNetns(ctx, "knbench")
	if err != nil {
		b.Fatal(err)
	}
	owner.Cleanup(func() { _ = netns.Delete() })
	k.ip = netns.HostAddr.String()
	k.settings = translate.KnativeSettings{ExternalHTTPPort: 18080, ExternalHTTPSPort: 18443, LocalHTTPPort: 18081, LocalHTTPSPort: 18444,
		LocalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-internal"}}
	k.service("portico-system", "portico-internal", k.ip, k.settings.LocalHTTPPort)
	k.service("serving", "app", "192.0.2.1", 8080)
	k.start()
	return k
}

func (k *knBench) service(ns, name, ip string, port int32) {
	ctx := context.Background()
	_, err := k.kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(port)}}}}, metav1.CreateOptions{})
	if err != nil {
		k.b.Fatal(err)
	}
	_, err = k.kc.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		k.b.Fatal(err)
	}
}

// start runs a replica in Knative mode, as cmd/portico would.
func (k *knBench) start() {
	kc, err := kubernetes.NewForConfig(k.replica)
	if err != nil {
		k.b.Fatal(err)
	}
	gc, err := gatewayclient.NewForConfig(k.replica)
	if err != nil {
		k.b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(k.replica)
	if err != nil {
		k.b.Fatal(err)
	}
	log := zap.NewNop()
	opts := proxy.DefaultOptions()
	opts.BindAddress = k.ip
	rt := proxy.New(opts, log)
	c := &kube.Cluster{Kube: kc, Gateway: gc, Log: log, OnStatusWrite: func(kind, _ string) {
		if kind == "Knative" {
			k.writes.Add(1)
		}
	}, LeaderElection: leader.Election{Namespace: "portico-system", Name: "portico", Identity: "bench",
		LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond, ReleaseOnCancel: true}}
	kn := &kingress.Knative{Cluster: kingress.Cluster{Run: c.Run, Snapshot: c.Snapshot, Leading: c.Leading},
		Log: c.Log, OnStatusWrite: c.OnStatusWrite, Dynamic: dyn, Settings: k.settings,
		ExternalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-external"}, Workers: k.workers}
	settings := k.settings
	loop := pipeline.New(pipeline.Options{MinHoldoff: 10 * time.Millisecond, Holdoff: 100 * time.Millisecond, MaxDelay: time.Second,
		Translate: translate.Settings{Shared: &translate.SharedAddresses{}, Knative: &settings}},
		kn, rt, nil, pipeline.Outputs{Statuses: c.WriteStatuses, Knative: kn.WriteKnative}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	var once sync.Once
	k.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = rt.Close(sctx)
		})
	}
	k.owner.Cleanup(k.stop)
	deadline := time.Now().Add(60 * time.Second)
	for loop.Ready() != nil {
		if time.Now().After(deadline) {
			k.b.Fatalf("replica not ready: %v", loop.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func kingressObject(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": knative.Group + "/" + knative.Version, "kind": "Ingress",
		"metadata": map[string]any{"name": name, "namespace": "serving",
			"annotations": map[string]any{knative.IngressClassAnnotation: knative.DefaultIngressClass}},
		"spec": map[string]any{"rules": []any{
			map[string]any{"hosts": []any{name + ".serving.example.com"}, "visibility": "ExternalIP",
				"http": map[string]any{"paths": []any{map[string]any{"splits": []any{
					map[string]any{"serviceNamespace": "serving", "serviceName": "app", "servicePort": int64(80), "percent": int64(100)}}}}}},
			map[string]any{"hosts": []any{name + ".serving.svc.cluster.local"}, "visibility": "ClusterLocal",
				"http": map[string]any{"paths": []any{map[string]any{"splits": []any{
					map[string]any{"serviceNamespace": "serving", "serviceName": "app", "servicePort": int64(80)}}}}}},
		}},
	}}
}

// createMany creates n KIngresses and waits until all are Ready.
func (k *knBench) createMany(n int) {
	ctx := context.Background()
	ri := k.dyn.Resource(knative.IngressResource).Namespace("serving")
	names := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for name := range names {
				if _, err := ri.Create(ctx, kingressObject(name), metav1.CreateOptions{}); err != nil {
					k.b.Error(err)
				}
			}
		})
	}
	for i := range n {
		names <- fmt.Sprintf("ksvc-%05d", i)
	}
	close(names)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		list, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			k.b.Fatal(err)
		}
		ready := 0
		for i := range list.Items {
			if isReady(&list.Items[i]) {
				ready++
			}
		}
		if ready == n {
			return
		}
		if time.Now().After(deadline) {
			k.b.Fatalf("%d of %d KIngresses Ready", ready, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func isReady(u *unstructured.Unstructured) bool {
	ing := &knative.Ingress{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, ing); err != nil {
		return false
	}
	for _, c := range ing.Status.Conditions {
		if c.Type == knative.ConditionReady {
			return c.Status == metav1.ConditionTrue && ing.Status.ObservedGeneration == ing.Generation
		}
	}
	return false
}

// createAndWait creates one KIngress and returns how long it took to be
// Ready, watched from before the create.
func (k *knBench) createAndWait(name string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ri := k.dyn.Resource(knative.IngressResource).Namespace("serving")
	w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		k.b.Fatal(err)
	}
	defer w.Stop()
	start := time.Now()
	if _, err := ri.Create(ctx, kingressObject(name), metav1.CreateOptions{}); err != nil {
		k.b.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Modified && isReady(u) {
			return time.Since(start)
		}
	}
	k.b.Fatalf("KIngress %s not Ready: %v", name, ctx.Err())
	return 0
}

func (k *knBench) checkServed(name string) {
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s:%d/", k.ip, k.settings.ExternalHTTPPort), nil)
	req.Host = name + ".serving.example.com"
	req.Header.Set(config.KnativeProbeHeader, config.KnativePorticoProbe)
	req.Header.Set(config.KnativeHashHeader, config.KnativeHashOverride)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		k.b.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		k.b.Fatalf("%s not served: %d", name, resp.StatusCode)
	}
}

// BenchmarkKnativeReady measures what Knative users wait for: with N
// KIngresses Ready, the time from creating one more to its Ready=True
// (ms-to-ready, one per iteration); then once each, after deleting one
// (ms-after-delete) and after a restart of Portico (ms-after-restart), and
// the status writes of the restart (writes-on-restart: none is due, the
// statuses of unrelated KIngresses are already right).
func BenchmarkKnativeReady(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		var k *knBench
		round := 0
		b.Run(fmt.Sprintf("N=%d", n), func(sb *testing.B) {
			if k == nil {
				k = newKnBench(b, sb, n)
			}
			k.b = sb
			round++
			b := sb
			var total time.Duration
			writes := k.writes.Load()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				total += k.createAndWait(fmt.Sprintf("extra-%d-%05d", round, i))
			}
			b.StopTimer()
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-ready")
			b.ReportMetric(float64(k.writes.Load()-writes)/float64(b.N), "writes/op")
			k.checkServed(fmt.Sprintf("extra-%d-00000", round))

			ri := k.dyn.Resource(knative.IngressResource).Namespace("serving")
			if err := ri.Delete(context.Background(), fmt.Sprintf("ksvc-%05d", round), metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(k.createAndWait(fmt.Sprintf("after-delete-%d", round)).Milliseconds()), "ms-after-delete")

			k.stop()
			writes = k.writes.Load()
			k.start()
			b.ReportMetric(float64(k.createAndWait(fmt.Sprintf("after-restart-%d", round)).Milliseconds()), "ms-after-restart")
			time.Sleep(2 * time.Second) // the restarted leader's first pass over all
			// The new KIngress's own write (Ready, its probes passing
			// within the grace) aside.
			b.ReportMetric(float64(k.writes.Load()-writes-1), "writes-on-restart")
		})
	}
}
