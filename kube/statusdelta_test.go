package kube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwclientv1 "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/typed/apis/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

// TestStatusesOfUntouchedObjectsNotRewritten: with ListenerSets and routes
// served and their statuses written, adding one more ListenerSet and route
// (translated as a delta) writes the statuses of those two and of their
// Gateway, and of nothing else: every other ListenerSet and route keeps its
// resourceVersion on the API server, and the writer compares only what
// the change touched, not every status.
func TestStatusesOfUntouchedObjectsNotRewritten(t *testing.T) {
	const present = 12
	f, gws, port := sitesFixture(t)
	ctx := context.Background()
	site := func(i int) { createSite(t, gws, port, fmt.Sprintf("s-%d", i)) }
	for i := range present {
		site(i)
	}
	p := f.startPortico(f.Env.Config, "127.0.0.1", "portico-delta", nil)
	accepted := func(i int) func() error {
		return func() error {
			name := fmt.Sprintf("s-%d", i)
			ls, err := gws.ListenerSets("apps").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := conditionIs(ls.Status.Conditions, "Programmed", "True", "Programmed", ls.Generation); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			r, err := gws.HTTPRoutes("apps").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if routeParent(r, wellknown.ControllerName, name) == nil {
				return fmt.Errorf("route %s: no status of Portico's", name)
			}
			return nil
		}
	}
	for i := range present {
		kubetest.WaitFor(t, 30*time.Second, "statuses written", accepted(i))
	}
	// The echo of those writes brings a comparison of every status a
	// second later; let it pass.
	idle := func() error {
		if !p.c.writer.Stats().Idle {
			return errors.New("status writer busy")
		}
		return nil
	}
	time.Sleep(1500 * time.Millisecond)
	kubetest.WaitFor(t, 30*time.Second, "status writer idle", idle)
	versions := func() map[string]string {
		out := map[string]string{}
		lss, err := gws.ListenerSets("apps").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, ls := range lss.Items {
			out["ListenerSet "+ls.Name] = ls.ResourceVersion
		}
		routes, err := gws.HTTPRoutes("apps").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range routes.Items {
			out["HTTPRoute "+r.Name] = r.ResourceVersion
		}
		return out
	}
	before := versions()
	compared := p.c.writer.Stats().DeltaCompared
	gen := p.loop.Generation()

	site(present)
	kubetest.WaitFor(t, 30*time.Second, "the new ListenerSet's statuses", accepted(present))
	kubetest.WaitFor(t, 30*time.Second, "status writer idle", idle)
	after := versions()
	for key, v := range before {
		if after[key] != v {
			t.Errorf("%s was written (resourceVersion %s -> %s) although the change did not touch it", key, v, after[key])
		}
	}
	// A few rebuilds (the ListenerSet and the route may come one at a
	// time), each comparing the ListenerSet, the route, the Gateway and
	// the GatewayClass.
	if n := p.c.writer.Stats().DeltaCompared - compared; n == 0 || n > 12 {
		t.Errorf("the writer compared %d statuses for the change over %d rebuilds, want the few it touched", n, p.loop.Generation()-gen)
	}
}

// sitesFixture is a cluster with the Service apps/svc and the Gateway
// apps/gw, and a free port for the sites of createSite.
func sitesFixture(t *testing.T) (*clusterFixture, gwclientv1.GatewayV1Interface, gwv1.PortNumber) {
	t.Helper()
	f := newClusterFixture(t)
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.Service("apps", "svc", f.Backend("backend"))
	createClassAndGateway(t, f.Gateway, freeport.Port(t))
	return f, f.Gateway.GatewayV1(), gwv1.PortNumber(freeport.Port(t))
}

// createSite creates a ListenerSet on apps/gw with one HTTP listener for
// name.example.com, and an HTTPRoute named name on it, to apps/svc.
func createSite(t testing.TB, gws gwclientv1.GatewayV1Interface, port gwv1.PortNumber, name string) {
	t.Helper()
	ctx := context.Background()
	lsKind := gwv1.Kind("ListenerSet")
	mustCreate(t)(gws.ListenerSets("apps").Create(ctx, &gwv1.ListenerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
		Spec: gwv1.ListenerSetSpec{
			ParentRef: gwv1.ParentGatewayReference{Name: "gw"},
			Listeners: []gwv1.ListenerEntry{{Name: "http", Hostname: ptr.To(gwv1.Hostname(name + ".example.com")), Port: port, Protocol: gwv1.HTTPProtocolType}},
		},
	}, metav1.CreateOptions{}))
	mustCreate(t)(gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Kind: &lsKind, Name: gwv1.ObjectName(name)}}},
			Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{backendRef("svc")}}},
		},
	}, metav1.CreateOptions{}))
}

// TestFirstStatusesNotComparedAgainPerInterruption: Portico starting with
// many objects whose statuses it has never written compares every status
// once. Each write comes back as an update, whose rebuild interrupts the
// pass; the next pass takes up what the first had left, instead of
// comparing everything again (which at 100,000 objects never finished).
func TestFirstStatusesNotComparedAgainPerInterruption(t *testing.T) {
	const present = 300
	f, gws, port := sitesFixture(t)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				createSite(t, gws, port, fmt.Sprintf("s-%d", i))
			}
		})
	}
	for i := range present {
		work <- i
	}
	close(work)
	wg.Wait()

	p := f.startPortico(f.Env.Config, "127.0.0.1", "portico-first", nil)
	// Changes keep coming meanwhile, as in a busy cluster: each interrupts
	// the pass.
	const more = 10
	for i := range more {
		time.Sleep(150 * time.Millisecond)
		createSite(t, gws, port, fmt.Sprintf("s-%d", present+i))
	}
	kubetest.WaitFor(t, 2*time.Minute, "every status written", func() error {
		if n := p.c.writer.Stats().Writes; n < 2*(present+more) {
			return fmt.Errorf("%d statuses written", n)
		}
		if !p.c.writer.Stats().Idle {
			return errors.New("status writer busy")
		}
		// Idle between the last change's debounce and its statuses is
		// not done: every ListenerSet must have been written Programmed.
		lss, err := gws.ListenerSets("apps").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, ls := range lss.Items {
			if err := conditionIs(ls.Status.Conditions, "Programmed", "True", "Programmed", ls.Generation); err != nil {
				return fmt.Errorf("ListenerSet %s: %w", ls.Name, err)
			}
		}
		return nil
	})
	stats := p.c.writer.Stats()
	passes, full := stats.Passes, stats.FullCompares
	t.Logf("%d writes in %d passes, %d of them comparing every status", stats.Writes, passes, full)
	// One when it starts leading and one for the first full translation,
	// which may come apart.
	if full > 2 {
		t.Errorf("every status compared %d times", full)
	}
	lss, err := gws.ListenerSets("apps").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ls := range lss.Items {
		if err := conditionIs(ls.Status.Conditions, "Programmed", "True", "Programmed", ls.Generation); err != nil {
			t.Errorf("ListenerSet %s: %v", ls.Name, err)
		}
	}
}

// TestOwnStatusWritesNotComparedAgain: the events of Portico's own status
// writes are recognised as their echo and compare nothing again; before,
// each made the writer compare every status a second later, seconds of CPU
// at 100,000 objects after every change. A status someone else writes is
// still compared and put back.
func TestOwnStatusWritesNotComparedAgain(t *testing.T) {
	f, gws, port := sitesFixture(t)
	for i := range 20 {
		createSite(t, gws, port, fmt.Sprintf("s-%d", i))
	}
	p := f.startPortico(f.Env.Config, "127.0.0.1", "portico-echo", nil)
	settled := func(writes int64) {
		t.Helper()
		kubetest.WaitFor(t, 2*time.Minute, "statuses written", func() error {
			if n := p.c.writer.Stats().Writes; n < writes {
				return fmt.Errorf("%d statuses written, want %d", n, writes)
			}
			if !p.c.writer.Stats().Idle {
				return errors.New("status writer busy")
			}
			return nil
		})
	}
	settled(40)
	// Past the status debouncer's longest delay (5s): a resync the
	// echoes asked for has happened by then.
	time.Sleep(6 * time.Second)
	settled(40)
	stats := p.c.writer.Stats()
	full, writes := stats.FullCompares, stats.Writes

	for i := 20; i < 25; i++ {
		createSite(t, gws, port, fmt.Sprintf("s-%d", i))
	}
	settled(writes + 10)
	time.Sleep(6 * time.Second)
	settled(writes + 10)
	if got := p.c.writer.Stats().FullCompares; got != full {
		t.Errorf("every status compared %d more times after 5 sites were added", got-full)
	}

	// Someone else's write is no echo: compared, and Portico's status is
	// written back.
	ctx := context.Background()
	ls, err := gws.ListenerSets("apps").Get(ctx, "s-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ls.Status = gwv1.ListenerSetStatus{}
	if _, err := gws.ListenerSets("apps").UpdateStatus(ctx, ls, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitFor(t, 30*time.Second, "status written back", func() error {
		ls, err := gws.ListenerSets("apps").Get(ctx, "s-3", metav1.GetOptions{})
		if err != nil {
			return err
		}
		return conditionIs(ls.Status.Conditions, "Programmed", "True", "Programmed", ls.Generation)
	})
}
