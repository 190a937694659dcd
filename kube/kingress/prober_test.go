package kingress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/config"
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
