package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

// TestClusterLeaderElection runs two replicas against one API server: both
// serve traffic all along, only the leader writes status, and when the
// leader dies without releasing its lease the other takes over once the
// lease has expired.
func TestClusterLeaderElection(t *testing.T) {
	f := newClusterFixture(t)
	ctx := t.Context()
	gws := f.Gateway.GatewayV1()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.Service("apps", "svc", f.Backend("backend"))
	port := int32(freeport.Port(t))
	mustCreate(t)(gws.GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "portico"},
		Spec:       gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.Gateways("apps").Create(ctx, &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gw"},
		Spec: gwv1.GatewaySpec{
			GatewayClassName: "portico",
			Listeners:        []gwv1.Listener{{Name: "http", Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPProtocolType}},
		},
	}, metav1.CreateOptions{}))
	route := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "r"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Hostnames:       []gwv1.Hostname{"app.example.com"},
			Rules: []gwv1.HTTPRouteRule{{
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To("/steady")}}},
				BackendRefs: []gwv1.HTTPBackendRef{backendRef("svc")},
			}},
		},
	}
	mustCreate(t)(gws.HTTPRoutes("apps").Create(ctx, route, metav1.CreateOptions{}))

	// a dies without releasing the lease, as a killed process would.
	a := f.startPortico(f.Env.Config, "127.0.0.1", "portico-a", func(s *replicaSetup) { s.c.LeaderElection.ReleaseOnCancel = false })
	kubetest.WaitFor(t, 10*time.Second, "a leads", func() error {
		if !a.c.Leading() {
			return errors.New("a does not lead")
		}
		return nil
	})
	b := f.startPortico(f.Env.Config, "127.0.0.2", "portico-b", nil)
	lease := b.c.LeaderElection.LeaseDuration

	// Both replicas serve from start to end (a until it dies).
	type loop struct {
		ok, failed atomic.Int64
		lastErr    atomic.Value
		stop       context.CancelFunc
		done       sync.WaitGroup
	}
	traffic := func(inst *clusterInstance) *loop {
		l := &loop{}
		lctx, cancel := context.WithCancel(context.Background())
		l.stop = cancel
		c := httpClient(inst.addr(port))
		l.done.Go(func() {
			for lctx.Err() == nil {
				if err := expectServed(c, "http://app.example.com/steady", 200, "backend")(); err != nil {
					if lctx.Err() == nil {
						l.failed.Add(1)
						l.lastErr.Store(err.Error())
					}
					continue
				}
				l.ok.Add(1)
				time.Sleep(5 * time.Millisecond)
			}
		})
		t.Cleanup(func() { cancel(); l.done.Wait() })
		return l
	}
	routeObserved := func(gen int64) func() error {
		return func() error {
			r, err := gws.HTTPRoutes("apps").Get(ctx, "r", metav1.GetOptions{})
			if err != nil {
				return err
			}
			ours := routeParent(r, wellknown.ControllerName, "gw")
			if ours == nil {
				return errors.New("no status entry")
			}
			return conditionIs(ours.Conditions, "Accepted", "True", "Accepted", gen)
		}
	}
	bumpRoute := func(path string) int64 {
		r, err := gws.HTTPRoutes("apps").Get(ctx, "r", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.Spec.Rules = append(r.Spec.Rules, gwv1.HTTPRouteRule{
			Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To(path)}}},
			BackendRefs: []gwv1.HTTPBackendRef{backendRef("svc")},
		})
		r, err = gws.HTTPRoutes("apps").Update(ctx, r, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return r.Generation
	}

	la, lb := traffic(a), traffic(b)
	kubetest.WaitFor(t, 10*time.Second, "status written", routeObserved(1))
	gen := bumpRoute("/second")
	for _, inst := range []*clusterInstance{a, b} {
		kubetest.WaitFor(t, 10*time.Second, "new rule on "+inst.bind, expectServed(httpClient(inst.addr(port)), "http://app.example.com/second", 200, "backend"))
	}
	kubetest.WaitFor(t, 10*time.Second, "status of the change", routeObserved(gen))
	if b.c.Leading() {
		t.Fatal("both replicas lead")
	}
	if n := b.c.writer.Stats().Writes; n != 0 {
		t.Errorf("the follower wrote %d statuses", n)
	}
	if a.c.writer.Stats().Writes == 0 {
		t.Error("the leader wrote nothing")
	}

	kubetest.WaitFor(t, 10*time.Second, "both replicas serving", func() error {
		if la.ok.Load() < 20 || lb.ok.Load() < 20 {
			return fmt.Errorf("%d and %d requests served", la.ok.Load(), lb.ok.Load())
		}
		return nil
	})

	// Kill the leader.
	la.stop()
	la.done.Wait()
	killed := time.Now()
	a.stop()
	// b can only take over once the unreleased lease has expired; how long
	// that takes is logged, not asserted: it is a figure of the machine's
	// load as much as of Portico (bench/README.md has the measurement).
	kubetest.WaitFor(t, lease+30*time.Second, "b takes over", func() error {
		if !b.c.Leading() {
			return errors.New("b does not lead")
		}
		return nil
	})
	takeover := time.Since(killed)
	t.Logf("takeover %v after the leader died (lease duration %v)", takeover.Round(time.Millisecond), lease)
	if takeover < lease-a.c.LeaderElection.RenewDeadline {
		// A leader that has not renewed for RenewDeadline stops leading, so
		// a's last renewal is at most that long before it died.
		t.Errorf("b took over after %v, before a's lease (%v) could have expired", takeover, lease)
	}

	// The new leader writes what changes from now on.
	before := b.c.writer.Stats().Writes
	gen = bumpRoute("/third")
	kubetest.WaitFor(t, 10*time.Second, "new rule after the takeover", expectServed(httpClient(b.addr(port)), "http://app.example.com/third", 200, "backend"))
	kubetest.WaitFor(t, 10*time.Second, "status written by the new leader", routeObserved(gen))
	// The API server may show the update before b has read its answer.
	kubetest.WaitFor(t, 10*time.Second, "the new leader counts its write", func() error {
		if n := b.c.writer.Stats().Writes; n == before {
			return fmt.Errorf("b wrote %d statuses, none since the change", n)
		}
		return nil
	})

	time.Sleep(100 * time.Millisecond)
	lb.stop()
	lb.done.Wait()
	for name, l := range map[string]*loop{"a": la, "b": lb} {
		if l.failed.Load() > 0 {
			t.Errorf("replica %s: %d requests failed (last: %v)", name, l.failed.Load(), l.lastErr.Load())
		}
		if l.ok.Load() == 0 {
			t.Errorf("replica %s served nothing", name)
		}
		t.Logf("replica %s: %d requests ok", name, l.ok.Load())
	}
}
