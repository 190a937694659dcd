package kingress

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/shared/pmap"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/translate"
)

// fakeGateway answers probes as a replica's gateway port would: with the
// hash it serves for the Host, counting the probes of each host and the
// most in flight at once.
type fakeGateway struct {
	mu     sync.Mutex
	served map[string]string // host -> hash
	probes map[string]int
	// inFlight and most are shared by the gateways of a test: they count
	// the probes in flight at once over all of them.
	inFlight, most *atomic.Int64
}

func (g *fakeGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	// Long enough for the probes of a round to overlap.
	time.Sleep(time.Millisecond)
	g.mu.Lock()
	g.probes[r.Host]++
	hash, ok := g.served[r.Host]
	g.mu.Unlock()
	if !ok || r.Header.Get(config.KnativeProbeHeader) != config.KnativePorticoProbe {
		http.NotFound(w, r)
		return
	}
	w.Header().Set(config.KnativeHashHeader, hash)
}

func (g *fakeGateway) serve(host, hash string) {
	g.mu.Lock()
	g.served[host] = hash
	g.mu.Unlock()
}

func (g *fakeGateway) count(host string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.probes[host]
}

func startFakeGateway(t *testing.T, inFlight, most *atomic.Int64) (*fakeGateway, int32) {
	g := &fakeGateway{served: map[string]string{}, probes: map[string]int{}, inFlight: inFlight, most: most}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return g, int32(p)
}

// TestProberOneRound asks the prober for 300 new versions at once: one
// round probes each of their hosts once, at most Parallel at a time; a
// host that answers an older hash is probed again, alone, until it answers
// the new one, and the version is probed then.
func TestProberOneRound(t *testing.T) {
	var inFlight, most atomic.Int64
	ext, extPort := startFakeGateway(t, &inFlight, &most)
	local, localPort := startFakeGateway(t, &inFlight, &most)
	k := &Knative{Settings: translate.KnativeSettings{ExternalHTTPPort: extPort, LocalHTTPPort: localPort},
		Probe: ProbeOptions{Parallel: 4, Interval: 10 * time.Millisecond}}
	w := newKIngressWriter(k, zaptest.NewLogger(t))
	w.replicas = []string{"127.0.0.1"}

	const n = 300
	lagging := "svc-7.example.com"
	now := time.Now()
	w.mu.Lock()
	for i := range n {
		key := types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)}
		r := translate.KIngressResult{Hash: fmt.Sprintf("hash-%d", i),
			External: []string{key.Name + ".example.com"}, Local: []string{key.Name + ".ns.svc.cluster.local"}}
		w.wantProbe(key, r, now)
		ext.serve(r.External[0], r.Hash)
		local.serve(r.Local[0], r.Hash)
	}
	w.mu.Unlock()
	ext.serve(lagging, "an older hash")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.probeLoop(ctx)
	probed := func() (int, bool) {
		w.mu.Lock()
		defer w.mu.Unlock()
		_, lag := w.probed[types.NamespacedName{Namespace: "ns", Name: "svc-7"}]
		return len(w.probed), lag
	}
	kubetest.WaitFor(t, 10*time.Second, "all but one probed", func() error {
		if got, _ := probed(); got != n-1 {
			return fmt.Errorf("%d probed", got)
		}
		return nil
	})
	if got := w.rounds.Load(); got < 1 || got > 3 {
		// The first round covers every version; the lagging one's
		// retries may have started since.
		t.Errorf("%d rounds before all but one were probed", got)
	}
	for i := range n {
		h := fmt.Sprintf("svc-%d.example.com", i)
		if c := ext.count(h); h != lagging && c != 1 {
			t.Errorf("%s probed %d times, want 1", h, c)
		}
	}
	if most := most.Load(); most > 4 || most < 2 {
		t.Errorf("%d probes in flight at once, want several, at most Parallel (4)", most)
	}

	ext.serve(lagging, "hash-7")
	kubetest.WaitFor(t, 10*time.Second, "the lagging one probed", func() error {
		if _, lag := probed(); !lag {
			return fmt.Errorf("svc-7 not probed")
		}
		return nil
	})
	if c := ext.count(lagging); c < 2 {
		t.Errorf("%s probed %d times, want until it answered the new hash", lagging, c)
	}
	// Its cluster-local host answered the first time: not asked again.
	if c := local.count("svc-7.ns.svc.cluster.local"); c != 1 {
		t.Errorf("svc-7's local host probed %d times, want 1", c)
	}
}

// TestOnlyChangedVersionsProbed hands the writer 100 KIngresses whose
// stored status already says Ready for their generation, as after a
// restart: none is probed. Then one of them changes: its hosts alone are
// probed, once each.
func TestOnlyChangedVersionsProbed(t *testing.T) {
	var inFlight, most atomic.Int64
	ext, extPort := startFakeGateway(t, &inFlight, &most)
	local, localPort := startFakeGateway(t, &inFlight, &most)
	settings := translate.KnativeSettings{ExternalHTTPPort: extPort, LocalHTTPPort: localPort,
		LocalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-internal"}}
	// A long grace: no status is due while probing, so none is written.
	k := &Knative{Settings: settings, Probe: ProbeOptions{Interval: 10 * time.Millisecond, Grace: time.Hour}}
	k.informer = cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	w := newKIngressWriter(k, zaptest.NewLogger(t))
	res := &snapshot.Resources{EndpointSlices: []*discoveryv1.EndpointSlice{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico-internal-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: "portico-internal"}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}}},
	}}}

	results := map[types.NamespacedName]translate.KIngressResult{}
	store := func(key types.NamespacedName, r translate.KIngressResult, stored translate.KIngressResult) {
		ing := &knative.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Generation: r.Generation,
			Annotations: map[string]string{knative.IngressClassAnnotation: knative.DefaultIngressClass}}}
		ing.Status = w.status(ing, stored, true, metav1.Now())
		if err := k.informer.GetStore().Add(ing); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 {
		key := types.NamespacedName{Namespace: "serving", Name: fmt.Sprintf("svc-%d", i)}
		r := translate.KIngressResult{Generation: 1, Hash: fmt.Sprintf("hash-%d", i),
			External: []string{key.Name + ".example.com"}, Local: []string{key.Name + ".serving.svc.cluster.local"}}
		results[key] = r
		store(key, r, r)
		ext.serve(r.External[0], r.Hash)
		local.serve(r.Local[0], r.Hash)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.probeLoop(ctx)
	w.submit(&translate.KnativeOutput{Ingresses: pmap.Of(results)}, res)
	w.pass(ctx, true)

	changed := types.NamespacedName{Namespace: "serving", Name: "svc-5"}
	next := maps.Clone(results)
	r := next[changed]
	old := r
	r.Generation, r.Hash = 2, "hash-5-new"
	next[changed] = r
	store(changed, r, old) // Ready for generation 1
	ext.serve(r.External[0], r.Hash)
	local.serve(r.Local[0], r.Hash)
	// As a delta says it: the one KIngress changed.
	w.submit(&translate.KnativeOutput{Ingresses: pmap.Of(next), Changed: []types.NamespacedName{changed}}, res)
	w.pass(ctx, false)
	kubetest.WaitFor(t, 10*time.Second, "svc-5 probed", func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.probed[changed] != r.Hash {
			return fmt.Errorf("probed %q", w.probed[changed])
		}
		return nil
	})
	for i := range 100 {
		want := 0
		if i == 5 {
			want = 1
		}
		if c := ext.count(fmt.Sprintf("svc-%d.example.com", i)); c != want {
			t.Errorf("svc-%d's external host probed %d times, want %d", i, c, want)
		}
		if c := local.count(fmt.Sprintf("svc-%d.serving.svc.cluster.local", i)); c != want {
			t.Errorf("svc-%d's local host probed %d times, want %d", i, c, want)
		}
	}
}

// TestProbePassesOfChangedReplicasDropped: what a round found is not kept
// when the replicas changed while it ran: an address that left may be
// a new pod by the time the round ends, one that was never asked, and its
// pass would let the version be reported Ready without it.
func TestProbePassesOfChangedReplicasDropped(t *testing.T) {
	var inFlight, most atomic.Int64
	ext, extPort := startFakeGateway(t, &inFlight, &most)
	local, localPort := startFakeGateway(t, &inFlight, &most)
	k := &Knative{Settings: translate.KnativeSettings{ExternalHTTPPort: extPort, LocalHTTPPort: localPort},
		Probe: ProbeOptions{Parallel: 4, Interval: 10 * time.Millisecond}}
	w := newKIngressWriter(k, zaptest.NewLogger(t))
	w.replicas = []string{"127.0.0.1"}
	key := types.NamespacedName{Namespace: "ns", Name: "svc"}
	r := translate.KIngressResult{Hash: "hash", External: []string{"svc.example.com"}, Local: []string{"svc.ns.svc.cluster.local"}}
	ext.serve(r.External[0], r.Hash)
	local.serve(r.Local[0], r.Hash)
	w.mu.Lock()
	w.wantProbe(key, r, time.Now())
	w.mu.Unlock()

	tasks, gen, _ := w.dueTasks(time.Now())
	if len(tasks) != 2 {
		t.Fatalf("%d tasks, want the 2 hosts on the one replica", len(tasks))
	}
	w.mu.Lock()
	w.replicaGen++ // the replicas changed while the round ran
	w.mu.Unlock()
	w.round(context.Background(), tasks, gen)

	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.probed[key]; ok {
		t.Fatal("the version was probed by a round whose replicas changed")
	}
	if p := w.want[key]; p == nil || len(p.passed) != 0 {
		t.Fatalf("passes kept from a round whose replicas changed: %v", p)
	}
}

// TestSubmitLooksAtChangedOnly hands the writer a full rebuild's results,
// then a delta's: after the delta only the KIngresses it names are looked
// at again, and a deleted one is no longer taken as probed.
func TestSubmitLooksAtChangedOnly(t *testing.T) {
	k := &Knative{Settings: translate.KnativeSettings{LocalService: types.NamespacedName{Namespace: "portico-system", Name: "portico-internal"}}}
	w := newKIngressWriter(k, zaptest.NewLogger(t))
	a, b, c := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}, types.NamespacedName{Namespace: "ns", Name: "c"}
	results := map[types.NamespacedName]translate.KIngressResult{a: {Generation: 1, Hash: "a1"}, b: {Generation: 1, Hash: "b1"}, c: {Generation: 1, Hash: "c1"}}
	res := &snapshot.Resources{}
	w.submit(&translate.KnativeOutput{Ingresses: pmap.Of(results)}, res)
	if len(w.dirty) != 3 {
		t.Fatalf("after the first rebuild %d KIngresses to look at, want 3", len(w.dirty))
	}
	w.dirty = map[types.NamespacedName]struct{}{}
	w.probed[b], w.probed[c] = "b1", "c1"
	next := map[types.NamespacedName]translate.KIngressResult{a: {Generation: 2, Hash: "a2"}, c: {Generation: 1, Hash: "c1"}}
	w.submit(&translate.KnativeOutput{Ingresses: pmap.Of(next), Changed: []types.NamespacedName{a, b}}, res)
	if _, ok := w.dirty[a]; !ok || len(w.dirty) != 1 {
		t.Errorf("after a delta changing a and deleting b, looked at again: %v, want a", w.dirty)
	}
	if _, ok := w.probed[b]; ok {
		t.Error("b, deleted, is still taken as probed")
	}
	if w.probed[c] != "c1" {
		t.Error("c, unchanged, is no longer taken as probed")
	}
}
