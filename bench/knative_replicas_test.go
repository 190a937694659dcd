package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
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

// BenchmarkKnativeReplicas rolls three Portico replicas at scale: with N
// KIngresses Ready on three replicas (leader election with the shipped
// timings, each serving and probed, their clients limited as the shipped
// flags limit them), it restarts them one at a time (out of the
// cluster-local Service's endpoints and the load, stopped, a new one
// started at a new address, into both once ready) under continuous load
// on every replica in the rotation (requests to random external hosts),
// and meanwhile updates KIngresses one after another to a new backend and
// header. It fails on a failed request, a replica that reports ready
// before it serves all N hosts, a replica whose first request after a
// change is Ready sees the old configuration, and a status write to a
// KIngress that was not changed. It reports the requests sent and failed
// during the roll, the time from a new replica's start until it reports
// ready, serving all N hosts (s-to-serve-all, the worst of three), change
// → Ready during the roll (median and worst), the KIngresses rewritten by
// the restarts (rewrites-of-right) and the status writes beyond one per
// change (writes-beyond-changes). One op is the whole scenario: run it
// with -benchtime 1x.
func BenchmarkKnativeReplicas(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for range b.N {
				knativeReplicas(b, n)
			}
		})
	}
}

// knRoll is the API server, the backends and the replicas of
// BenchmarkKnativeReplicas.
type knRoll struct {
	b        *testing.B
	env      *kubetest.Env
	kc       kubernetes.Interface
	dyn      dynamic.Interface
	replica  *rest.Config
	settings translate.KnativeSettings
	backend  string // the backends' network namespace address

	mu sync.Mutex
	// serving are the replicas in the rotation: listed as the
	// cluster-local Service's endpoints and sent the load.
	serving []*knRollReplica
	rot     atomic.Pointer[[]*knRollReplica]
	writes  atomic.Int64 // KIngress status writes, every replica
	started int
}

type knRollReplica struct {
	ip   string
	loop *pipeline.Loop
	stop func()
}

func knativeReplicas(b *testing.B, n int) {
	b.StopTimer()
	r := startKnRoll(b)
	k := &knBench{b: b, owner: b, env: r.env, kc: r.kc, dyn: r.dyn}
	k.createMany(n)
	ri := r.dyn.Resource(knative.IngressResource).Namespace("serving")
	before := r.versions(n)
	writes0 := r.writes.Load()
	b.StartTimer()

	// Load: workers sending GETs to random external hosts on random
	// replicas of the rotation, each over its own kept-alive connections.
	ctx, cancel := context.WithCancel(context.Background())
	var sent, failed atomic.Int64
	var failures sync.Map
	var load sync.WaitGroup
	for range 4 {
		load.Go(func() {
			tr := &http.Transport{MaxIdleConnsPerHost: 4}
			defer tr.CloseIdleConnections()
			c := &http.Client{Timeout: 10 * time.Second, Transport: tr}
			for ctx.Err() == nil {
				rot := *r.rot.Load()
				rep := rot[rand.IntN(len(rot))]
				host := fmt.Sprintf("ksvc-%05d.serving.example.com", rand.IntN(n))
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(rep.ip, strconv.Itoa(int(r.settings.ExternalHTTPPort)))+"/", nil)
				req.Host = host
				resp, err := c.Do(req)
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%s via %s: %v", host, rep.ip, err), true)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%s via %s: status %d", host, rep.ip, resp.StatusCode), true)
				}
			}
		})
	}

	// Changes: one KIngress after another to the other backend with a
	// new header, each waited Ready, then asked once on every replica of
	// the rotation.
	// What happened when, for the log: slow changes are read against it.
	t0 := time.Now()
	var evMu sync.Mutex
	var events []string
	event := func(format string, args ...any) {
		evMu.Lock()
		events = append(events, fmt.Sprintf("%6.2fs ", time.Since(t0).Seconds())+fmt.Sprintf(format, args...))
		evMu.Unlock()
	}
	changed := map[string]bool{}
	var changes []time.Duration
	var stale []string
	checked := 0
	rollDone := make(chan struct{})
	var changer sync.WaitGroup
	changer.Go(func() {
		c := &http.Client{Timeout: 10 * time.Second}
		for i := 0; ; i++ {
			select {
			case <-rollDone:
				return
			case <-time.After(200 * time.Millisecond):
			}
			name := fmt.Sprintf("ksvc-%05d", (i*7919+13)%n)
			if changed[name] {
				continue
			}
			changed[name] = true
			d, err := r.change(ri, name, i)
			if err != nil {
				b.Error(err)
				return
			}
			if d > time.Second {
				event("change %d (%s) Ready after %v", i, name, d.Round(time.Millisecond))
			}
			changes = append(changes, d)
			for _, rep := range *r.rot.Load() {
				checked++
				req, _ := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(rep.ip, strconv.Itoa(int(r.settings.ExternalHTTPPort)))+"/", nil)
				req.Host = name + ".serving.example.com"
				resp, err := c.Do(req)
				if err != nil {
					stale = append(stale, fmt.Sprintf("%s on %s: %v", name, rep.ip, err))
					continue
				}
				resp.Body.Close()
				if got := resp.Header.Get("X-Backend") + "/" + resp.Header.Get("X-Seen-Round"); got != "next/"+strconv.Itoa(i) {
					stale = append(stale, fmt.Sprintf("%s on %s: %s, want next/%d", name, rep.ip, got, i))
				}
			}
		}
	})

	// The roll: each replica of the three out of the rotation and
	// stopped, a new one started and into the rotation once ready.
	var serveAll time.Duration
	old := slices.Clone(r.serving)
	for _, o := range old {
		r.leave(o)
		event("%s out of the rotation", o.ip)
		time.Sleep(200 * time.Millisecond) // requests sent to it before are answered
		o.stop()
		event("%s stopped", o.ip)
		start := time.Now()
		nr := r.start()
		// Asked once it reports ready, it serves every host: it did then
		// (none was deleted).
		serveAll = max(serveAll, time.Since(start))
		event("%s started and ready", nr.ip)
		if missing := r.unserved(nr, n); missing != 0 {
			b.Errorf("replica %s ready, but %d of %d hosts not served", nr.ip, missing, n)
		}
		r.join(nr)
		event("%s in the rotation", nr.ip)
		time.Sleep(2 * time.Second) // the load on the three, changes among them
	}
	close(rollDone)
	changer.Wait()
	cancel()
	load.Wait()
	b.StopTimer()

	// A pass of the last leader over every KIngress is long done; any
	// rewrite of a status that was right has been sent.
	time.Sleep(2 * time.Second)
	after := r.versions(n)
	rewrites := 0
	for name, rv := range before {
		if !changed[name] && after[name] != rv {
			rewrites++
		}
	}
	var msgs []string
	failures.Range(func(k, _ any) bool { msgs = append(msgs, k.(string)); return true })
	if failed.Load() != 0 {
		b.Errorf("%d of %d requests failed during the roll: %v", failed.Load(), sent.Load(), msgs)
	}
	if len(stale) != 0 {
		b.Errorf("%d first requests after Ready saw the old configuration: %v", len(stale), stale)
	}
	if rewrites != 0 {
		b.Errorf("%d KIngresses whose status was right were written during the roll", rewrites)
	}
	b.Logf("the roll:\n%s", strings.Join(events, "\n"))
	slices.Sort(changes)
	b.ReportMetric(float64(sent.Load()), "requests")
	b.ReportMetric(float64(failed.Load()), "failed")
	b.ReportMetric(serveAll.Seconds(), "s-to-serve-all")
	b.ReportMetric(float64(len(changes)), "changes")
	if len(changes) > 0 {
		b.ReportMetric(float64(changes[len(changes)/2].Microseconds())/1000, "change-ms-median")
		b.ReportMetric(float64(changes[len(changes)-1].Microseconds())/1000, "change-ms-worst")
	}
	b.ReportMetric(float64(rewrites), "rewrites-of-right")
	// Status writes during the roll beyond one per change: the restarts'
	// own (none is due) and writes retried after a conflict.
	b.ReportMetric(float64(r.writes.Load()-writes0-int64(len(changes))), "writes-beyond-changes")
	b.ReportMetric(float64(checked), "first-requests-checked")
}

// startKnRoll starts the API server, the backends and three replicas with
// no KIngress.
func startKnRoll(b *testing.B) *knRoll {
	kubetest.NeedNetns(b)
	ctx := context.Background()
	env, err := kubetest.StartEnv(ctx, kubetest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	r := &knRoll{b: b, env: env, replica: rest.CopyConfig(env.Config)}
	// The replicas' clients are limited as the flags of portico serve
	// limit them by default; the test's own keep the environment's.
	r.replica.QPS, r.replica.Burst = float32(kube.DefaultAPIQPS), kube.DefaultAPIBurst
	if err := kubetest.ApplyManifests(ctx, env.Config, "../kube/kingress/testdata/knative"); err != nil {
		b.Fatal(err)
	}
	if r.kc, err = kubernetes.NewForConfig(env.Config); err != nil {
		b.Fatal(err)
	}
	if r.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		b.Fatal(err)
	}
	k := &knBench{b: b, owner: b, env: env, kc: r.kc, dyn: r.dyn}
	for _, ns := range []string{"portico-system", "serving"} {
		if _, err := r.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	r.settings = translate.KnativeSettings{ExternalHTTPPort: 18080, ExternalHTTPSPort: 18443, LocalHTTPPort: 18081, LocalHTTPSPort: 18444,
		LocalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-internal"}}

	// Two backends in a network namespace of their own: app, which every
	// KIngress starts with, and next, which changes move them to. Each
	// names itself and the X-Round header it was sent.
	bns, err := kubetest.CreateNetns(ctx, "knroll-be")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bns.Delete() })
	r.backend = bns.Addr.String()
	for _, name := range []string{"app", "next"} {
		ln, err := bns.Listen("tcp", bns.AddrPort(0))
		if err != nil {
			b.Fatal(err)
		}
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			w.Header().Set("X-Backend", name)
			w.Header().Set("X-Seen-Round", req.Header.Get("X-Round"))
		})}
		go srv.Serve(ln) //nolint:errcheck // ends with Close
		b.Cleanup(func() { srv.Close() })
		k.service("serving", name, r.backend, int32(ln.Addr().(*net.TCPAddr).Port))
	}
	k.service("portico-system", "portico-internal", "192.0.2.1", r.settings.LocalHTTPPort)
	for range 3 {
		r.join(r.start())
	}
	return r
}

// start starts a replica at a new address, as cmd/portico would in
// Knative mode, and returns it once it reports ready.
func (r *knRoll) start() *knRollReplica {
	b := r.b
	r.started++
	identity := fmt.Sprintf("portico-%d", r.started)
	ns, err := kubetest.CreateNetns(context.Background(), "knroll")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ns.Delete() })
	kc, err := kubernetes.NewForConfig(r.replica)
	if err != nil {
		b.Fatal(err)
	}
	gc, err := gatewayclient.NewForConfig(r.replica)
	if err != nil {
		b.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(r.replica)
	if err != nil {
		b.Fatal(err)
	}
	log := zap.NewNop()
	opts := proxy.DefaultOptions()
	opts.BindAddress = ns.HostAddr.String()
	opts.DrainTimeout = 2 * time.Second
	rt := proxy.New(opts, log)
	c := &kube.Cluster{Kube: kc, Gateway: gc, Log: log, OnStatusWrite: func(kind, _ string) {
		if kind == "Knative" {
			r.writes.Add(1)
		}
	}, LeaderElection: leader.Default("portico-system", identity)} // the shipped timings: a stopped leader hands over within RetryPeriod
	kn := &kingress.Knative{Cluster: kingress.Cluster{Run: c.Run, Snapshot: c.Snapshot, Leading: c.Leading},
		Log: c.Log, OnStatusWrite: c.OnStatusWrite, Dynamic: dyn, Settings: r.settings,
		ExternalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-external"}}
	settings := r.settings
	loop := pipeline.New(pipeline.Options{MinHoldoff: 10 * time.Millisecond, Holdoff: 100 * time.Millisecond, MaxDelay: time.Second,
		Translate: translate.Settings{Shared: &translate.SharedAddresses{}, Knative: &settings}},
		kn, rt, nil, pipeline.Outputs{Statuses: c.WriteStatuses, Knative: kn.WriteKnative}, log)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	var once sync.Once
	rep := &knRollReplica{ip: ns.HostAddr.String(), loop: loop, stop: func() {
		once.Do(func() {
			cancel()
			<-done
			sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer scancel()
			_ = rt.Close(sctx)
		})
	}}
	b.Cleanup(rep.stop)
	deadline := time.Now().Add(5 * time.Minute)
	for loop.Ready() != nil {
		if time.Now().After(deadline) {
			b.Fatalf("replica %s not ready: %v", identity, loop.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return rep
}

// join puts a replica into the rotation: the load, and the endpoints of
// the cluster-local Service, which the leader probes.
func (r *knRoll) join(rep *knRollReplica) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serving = append(r.serving, rep)
	r.publish()
}

// leave takes a replica out of the rotation, as a pod that is stopping.
func (r *knRoll) leave(rep *knRollReplica) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serving = slices.DeleteFunc(r.serving, func(x *knRollReplica) bool { return x == rep })
	r.publish()
}

// publish writes the rotation to the EndpointSlice and to the load; the
// caller holds r.mu.
func (r *knRoll) publish() {
	rot := slices.Clone(r.serving)
	r.rot.Store(&rot)
	ctx := context.Background()
	es, err := r.kc.DiscoveryV1().EndpointSlices("portico-system").Get(ctx, "portico-internal", metav1.GetOptions{})
	if err != nil {
		r.b.Fatal(err)
	}
	es.Endpoints = nil
	for _, rep := range rot {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{rep.ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	if _, err := r.kc.DiscoveryV1().EndpointSlices("portico-system").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		r.b.Fatal(err)
	}
}

// versions lists the resourceVersion of every KIngress, checking that
// all n are Ready.
func (r *knRoll) versions(n int) map[string]string {
	list, err := r.dyn.Resource(knative.IngressResource).Namespace("serving").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.b.Fatal(err)
	}
	out := map[string]string{}
	for i := range list.Items {
		u := &list.Items[i]
		if !isReady(u) {
			r.b.Errorf("KIngress %s not Ready", u.GetName())
		}
		out[u.GetName()] = u.GetResourceVersion()
	}
	if len(out) != n {
		r.b.Fatalf("%d KIngresses, want %d", len(out), n)
	}
	return out
}

// change moves a KIngress's external path to the backend next with
// header X-Round: round, and returns how long it took to be Ready at its
// new generation.
func (r *knRoll) change(ri dynamic.ResourceInterface, name string, round int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("change %s: %w", name, err)
	}
	w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: u.GetResourceVersion()})
	if err != nil {
		return 0, fmt.Errorf("change %s: %w", name, err)
	}
	defer w.Stop()
	rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
	rule := rules[0].(map[string]any)
	paths, _, _ := unstructured.NestedSlice(rule, "http", "paths")
	path := paths[0].(map[string]any)
	path["appendHeaders"] = map[string]any{"X-Round": strconv.Itoa(round)}
	path["splits"] = []any{map[string]any{"serviceNamespace": "serving", "serviceName": "next", "servicePort": int64(80), "percent": int64(100)}}
	if err := unstructured.SetNestedSlice(rule, paths, "http", "paths"); err != nil {
		return 0, fmt.Errorf("change %s: %w", name, err)
	}
	if err := unstructured.SetNestedSlice(u.Object, rules, "spec", "rules"); err != nil {
		return 0, fmt.Errorf("change %s: %w", name, err)
	}
	start := time.Now()
	if _, err := ri.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		return 0, fmt.Errorf("change %s: %w", name, err)
	}
	for ev := range w.ResultChan() {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Modified && isReady(u) {
			return time.Since(start), nil
		}
	}
	return 0, fmt.Errorf("KIngress %s not Ready after its change: %w", name, ctx.Err())
}

// unserved counts the hosts of the n KIngresses a replica does not
// serve: asked with a probe, which it answers itself while it has a
// route for the host.
func (r *knRoll) unserved(rep *knRollReplica, n int) int {
	var missing atomic.Int64
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			for i := range next {
				req, _ := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(rep.ip, strconv.Itoa(int(r.settings.ExternalHTTPPort)))+"/", nil)
				req.Host = fmt.Sprintf("ksvc-%05d.serving.example.com", i)
				req.Header.Set(config.KnativeProbeHeader, config.KnativePorticoProbe)
				req.Header.Set(config.KnativeHashHeader, config.KnativeHashOverride)
				resp, err := c.Do(req)
				if err != nil {
					missing.Add(1)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					missing.Add(1)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return int(missing.Load())
}
