package kube

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/translate"
)

// TestStatusesOfUntouchedObjectsNotRewritten: with ListenerSets and routes
// served and their statuses written, adding one more ListenerSet and route
// (translated as a delta) writes the statuses of those two and of their
// Gateway, and of nothing else: every other ListenerSet and route keeps its
// resourceVersion on the API server, and the writer compares only what
// the change touched, not every status.
func TestStatusesOfUntouchedObjectsNotRewritten(t *testing.T) {
	const present = 12
	f := newClusterFixture(t)
	ctx := context.Background()
	gws := f.gc.GatewayV1()
	f.namespace("portico-system", nil)
	f.namespace("apps", nil)
	f.service("apps", "svc", f.backend("backend"))
	createClassAndGateway(t, f.gc, freePort(t))
	port := gwv1.PortNumber(freePort(t))
	lsKind := gwv1.Kind("ListenerSet")
	site := func(i int) {
		name := fmt.Sprintf("s-%d", i)
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
	for i := range present {
		site(i)
	}
	p := f.startPortico(f.env.Config, "127.0.0.1", "portico-delta", nil)
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
			if routeParent(r, translate.DefaultControllerName, name) == nil {
				return fmt.Errorf("route %s: no status of Portico's", name)
			}
			return nil
		}
	}
	for i := range present {
		waitFor(t, 30*time.Second, "statuses written", accepted(i))
	}
	// The echo of those writes brings a comparison of every status a
	// second later; let it pass.
	idle := func() error {
		if !p.c.writer.idle() {
			return errors.New("status writer busy")
		}
		return nil
	}
	time.Sleep(1500 * time.Millisecond)
	waitFor(t, 30*time.Second, "status writer idle", idle)
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
	compared := p.c.writer.deltaCompared.Load()
	gen := p.loop.Generation()

	site(present)
	waitFor(t, 30*time.Second, "the new ListenerSet's statuses", accepted(present))
	waitFor(t, 30*time.Second, "status writer idle", idle)
	after := versions()
	for key, v := range before {
		if after[key] != v {
			t.Errorf("%s was written (resourceVersion %s -> %s) although the change did not touch it", key, v, after[key])
		}
	}
	// A few rebuilds (the ListenerSet and the route may come one at a
	// time), each comparing the ListenerSet, the route, the Gateway and
	// the GatewayClass.
	if n := p.c.writer.deltaCompared.Load() - compared; n == 0 || n > 12 {
		t.Errorf("the writer compared %d statuses for the change over %d rebuilds, want the few it touched", n, p.loop.Generation()-gen)
	}
}
