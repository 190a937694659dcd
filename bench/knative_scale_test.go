package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/kube"
)

// BenchmarkKnativeScale measures Knative at scale with the client limits
// Portico ships (kube.DefaultAPIQPS, DefaultAPIBurst, the flags' defaults),
// not the test environment's: on a fresh API server and replica, N
// KIngresses created at once by 16 clients, the time from the first create
// until all are Ready (s-to-all-ready) and the status writes they cost
// (writes/kingress); then, at N, five each of one create (to Ready, then
// routed), one update (to Ready at its generation) and one delete (to its
// host answering 404), as median and worst in ms. One op is the whole
// scenario: run it with -benchtime 1x.
func BenchmarkKnativeScale(b *testing.B) {
	for _, n := range []int{1000, 5000, 10000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for range b.N {
				knativeScale(b, n)
			}
		})
	}
}

func knativeScale(b *testing.B, n int) {
	// The creators keep the environment's limits (QPS 1,000): they stand
	// for Knative's controllers, not for Portico. PORTICO_BENCH_KUBE_API_QPS
	// and _BURST run the replica with other limits, as the flags would;
	// PORTICO_BENCH_KNATIVE_WORKERS with other status writes in flight.
	qps, burst := float32(kube.DefaultAPIQPS), kube.DefaultAPIBurst
	if v, err := strconv.ParseFloat(os.Getenv("PORTICO_BENCH_KUBE_API_QPS"), 32); err == nil {
		qps = float32(v)
	}
	if v, err := strconv.Atoi(os.Getenv("PORTICO_BENCH_KUBE_API_BURST")); err == nil {
		burst = v
	}
	workers, _ := strconv.Atoi(os.Getenv("PORTICO_BENCH_KNATIVE_WORKERS"))
	k := startKnBench(b, b, qps, burst, workers)
	b.ResetTimer()
	cpu0 := processCPU(b, "kube-apiserver", k.env.Dir) + processCPU(b, "etcd", k.env.Dir)
	created, ready, writes := k.createAllAtOnce(n)
	cpu := processCPU(b, "kube-apiserver", k.env.Dir) + processCPU(b, "etcd", k.env.Dir) - cpu0
	b.ReportMetric(created.Seconds(), "s-to-create")
	// What the API server and etcd spent on the creates, Portico's
	// watches and its status writes, until all were Ready.
	b.ReportMetric(cpu.Seconds(), "apiserver+etcd-cpu-s")
	b.ReportMetric(ready.Seconds(), "s-to-all-ready")
	b.ReportMetric(float64(writes)/float64(n), "writes/kingress")

	const rounds = 5
	var creates, updates, deletes []time.Duration
	for i := range rounds {
		name := fmt.Sprintf("one-%d", i)
		creates = append(creates, k.createAndWait(name))
		k.checkServed(name)
		updates = append(updates, k.updateAndWait(name, i))
		deletes = append(deletes, k.deleteAndWait(fmt.Sprintf("ksvc-%05d", i)))
	}
	b.StopTimer()
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"create", creates}, {"update", updates}, {"delete", deletes}} {
		slices.Sort(m.d)
		b.ReportMetric(float64(m.d[len(m.d)/2].Microseconds())/1000, m.name+"-ms-median")
		b.ReportMetric(float64(m.d[len(m.d)-1].Microseconds())/1000, m.name+"-ms-worst")
	}
	k.stop()
}

// createAllAtOnce creates n KIngresses with 16 clients and returns the time
// the creates took, the time from the first create until all are Ready, and
// the status writes sent meanwhile.
func (k *knBench) createAllAtOnce(n int) (created, ready time.Duration, writes int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	ri := k.dyn.Resource(knative.IngressResource).Namespace("serving")
	list, err := ri.List(ctx, metav1.ListOptions{})
	if err != nil {
		k.b.Fatal(err)
	}
	rv := list.GetResourceVersion()
	writes0 := k.writes.Load()
	start := time.Now()
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
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			names <- fmt.Sprintf("ksvc-%05d", i)
		}
		close(names)
		wg.Wait()
		created = time.Since(start)
	}()
	readyNow := map[string]bool{}
	count := 0
	see := func(u *unstructured.Unstructured) {
		if r := isReady(u); r != readyNow[u.GetName()] {
			readyNow[u.GetName()] = r
			if r {
				count++
			} else {
				count--
			}
		}
	}
	for count < n {
		// The API server ends a watch that falls behind a burst of
		// events: list again, and watch from there.
		w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			k.b.Fatal(err)
		}
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				break // an error: too old a version
			}
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				see(u)
			}
			if count == n {
				break
			}
		}
		w.Stop()
		if count == n || ctx.Err() != nil {
			break
		}
		list, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			k.b.Fatal(err)
		}
		for i := range list.Items {
			see(&list.Items[i])
		}
		rv = list.GetResourceVersion()
	}
	if count < n {
		k.b.Fatalf("%d of %d KIngresses Ready: %v", count, n, ctx.Err())
	}
	ready = time.Since(start)
	<-done
	return created, ready, k.writes.Load() - writes0
}

// updateAndWait changes one KIngress's spec (the header its split
// appends) and returns how long it took to be Ready at its new generation.
func (k *knBench) updateAndWait(name string, i int) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ri := k.dyn.Resource(knative.IngressResource).Namespace("serving")
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		k.b.Fatal(err)
	}
	w, err := ri.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: u.GetResourceVersion()})
	if err != nil {
		k.b.Fatal(err)
	}
	defer w.Stop()
	rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
	rule := rules[0].(map[string]any)
	paths, _, _ := unstructured.NestedSlice(rule, "http", "paths")
	paths[0].(map[string]any)["appendHeaders"] = map[string]any{"X-Round": fmt.Sprint(i)}
	if err := unstructured.SetNestedSlice(rule, paths, "http", "paths"); err != nil {
		k.b.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(u.Object, rules, "spec", "rules"); err != nil {
		k.b.Fatal(err)
	}
	start := time.Now()
	if _, err := ri.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		k.b.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Modified && isReady(u) {
			return time.Since(start)
		}
	}
	k.b.Fatalf("KIngress %s not Ready after its update: %v", name, ctx.Err())
	return 0
}

// deleteAndWait deletes one KIngress and returns how long it took until
// the replica answers its external host with 404.
func (k *knBench) deleteAndWait(name string) time.Duration {
	ri := k.dyn.Resource(knative.IngressResource).Namespace("serving")
	c := &http.Client{Timeout: 5 * time.Second}
	url := fmt.Sprintf("http://%s:%d/", k.ip, k.settings.ExternalHTTPPort)
	start := time.Now()
	if err := ri.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		k.b.Fatal(err)
	}
	for time.Since(start) < 60*time.Second {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Host = name + ".serving.example.com"
		// A probe, which the replica answers itself while it serves the
		// host: the benchmark's backend address leads nowhere.
		req.Header.Set(config.KnativeProbeHeader, config.KnativePorticoProbe)
		req.Header.Set(config.KnativeHashHeader, config.KnativeHashOverride)
		resp, err := c.Do(req)
		if err != nil {
			k.b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return time.Since(start)
		}
		time.Sleep(2 * time.Millisecond)
	}
	k.b.Fatalf("%s still served a minute after its delete", name)
	return 0
}

// processCPU is the CPU time (user and system) the process named name
// whose command line mentions dir has used so far.
func processCPU(b *testing.B, name, dir string) time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) != name || !strings.Contains(string(cmdline), dir) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			b.Fatal(err)
		}
		// The fields after the command's name, which may hold spaces:
		// utime and stime are the 12th and 13th of them, in clock ticks
		// (100 a second on Linux).
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		return time.Duration(utime+stime) * 10 * time.Millisecond
	}
	b.Fatalf("no %s process of %s", name, dir)
	return 0
}
