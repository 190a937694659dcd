package kingress

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/testkit/kubetest"
)

const knRollout = `apiVersion: networking.internal.knative.dev/v1alpha1
kind: Ingress
metadata:
  name: roll
  namespace: serving
  annotations: {networking.knative.dev/ingress.class: portico.ingress.networking.knative.dev}
spec:
  rules:
  - hosts: [roll.example.com]
    http:
      paths:
      - splits: [{serviceNamespace: serving, serviceName: %s, servicePort: 80}]
        appendHeaders: {X-Rollout: "%d"}
`

// TestKnativeRollouts rolls a KIngress out 20 times under continuous load
// on two replicas, each time to a new backend with a new header, deleting
// the old backend once the KIngress is Ready: no request fails, and the
// first request after Ready sees the new version on every replica.
func TestKnativeRollouts(t *testing.T) {
	f := newKnFixture(t)
	f.startReplicas(2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.backend("rev-0", "http")
	f.apply(fmt.Sprintf(knRollout, "rev-0", 0))
	f.waitReady("serving", "roll")
	c := &http.Client{Timeout: 10 * time.Second}
	host := "roll.example.com"

	var sent, failed atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			lc := &http.Client{Timeout: 10 * time.Second, Transport: tr}
			for i := 0; ctx.Err() == nil; i++ {
				r := f.replicas[(w+i)%len(f.replicas)]
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr(f.settings.ExternalHTTPPort)+"/", nil)
				req.Host = host
				resp, err := lc.Do(req)
				if ctx.Err() != nil {
					return
				}
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					failures.Store(err.Error(), true)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
					failures.Store(fmt.Sprintf("status %d from %s", resp.StatusCode, resp.Header.Get("X-Backend")), true)
				}
			}
		})
	}

	var stopping sync.WaitGroup
	for i := 1; i <= 20; i++ {
		name, old := fmt.Sprintf("rev-%d", i), fmt.Sprintf("rev-%d", i-1)
		f.backend(name, "http")
		// Serving routes to a revision once it is ready, long after its
		// Service has endpoints: so does this test, on every replica.
		f.waitEndpoints(name)
		f.apply(fmt.Sprintf(knRollout, name, i))
		ing := f.waitReady("serving", "roll")
		hash, _ := knative.Hash(ing)
		for _, r := range f.replicas {
			e := echoGet(t, c, r.addr(f.settings.ExternalHTTPPort), host, "/", http.Header{config.KnativeHashHeader: {config.KnativeHashOverride}})
			if e.Backend != name || !slices.Equal(e.Headers["X-Rollout"], []string{fmt.Sprint(i)}) || !slices.Equal(e.Headers[config.KnativeHashHeader], []string{hash}) {
				t.Errorf("rollout %d, replica %s, first request after Ready: backend %s, X-Rollout %v, hash %v", i, r.ip, e.Backend, e.Headers["X-Rollout"], e.Headers[config.KnativeHashHeader])
			}
		}
		// As a pod would: its endpoints go at once, it stops a moment
		// later, once requests routed before the swap are answered.
		f.deleteBackendObjects(old)
		srv := f.backends[old].srv
		stopping.Go(func() {
			time.Sleep(time.Second)
			stopServer(srv)
		})
	}
	stopping.Wait()
	time.Sleep(200 * time.Millisecond)
	cancel()
	wg.Wait()
	var msgs []string
	failures.Range(func(k, _ any) bool { msgs = append(msgs, k.(string)); return true })
	t.Logf("%d requests during 20 rollouts, %d failed", sent.Load(), failed.Load())
	if failed.Load() != 0 || sent.Load() < 100 {
		t.Errorf("%d of %d requests failed: %v", failed.Load(), sent.Load(), msgs)
	}
}

// waitEndpoints waits until every replica's configuration has ready
// endpoints for Service serving/name.
func (f *knFixture) waitEndpoints(name string) {
	f.T.Helper()
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "serving", Name: name}, Port: 80}
	kubetest.WaitFor(f.T, 10*time.Second, "endpoints of "+name, func() error {
		for _, r := range f.replicas {
			if eps := r.rt.Current().Endpoints.Lookup(key); eps == nil || len(eps.Addrs) == 0 {
				return fmt.Errorf("replica %s has none", r.ip)
			}
		}
		return nil
	})
}

// deleteBackendObjects deletes a backend's Service and EndpointSlice.
func (f *knFixture) deleteBackendObjects(name string) {
	f.T.Helper()
	ctx := context.Background()
	if err := f.Kube.CoreV1().Services("serving").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		f.T.Fatal(err)
	}
	if err := f.Kube.DiscoveryV1().EndpointSlices("serving").Delete(ctx, name+"-1", metav1.DeleteOptions{}); err != nil {
		f.T.Fatal(err)
	}
}

// stopServer stops a backend, letting requests in flight finish.
func stopServer(srv *http.Server) {
	// A connection the proxy opened and never used keeps Shutdown waiting
	// for seconds: it is closed after one.
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
}
