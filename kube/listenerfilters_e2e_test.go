package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/listeners"
)

// TestListenerFiltersAgainstAPIServer: with the experimental-channel CRDs
// of a real API server, a Gateway whose TCP listener has filters is
// refused by the CRD's rule; the leader reports a listener whose
// ExternalAuth filter names a Service that does not exist
// (ResolvedRefs=False InvalidListenerFilterRef, not programmed) until the
// Service is created, and one with an ExtensionRef filter
// (Accepted=False UnsupportedValue); a ListenerSet's listeners carry
// filters as well (one naming another namespace's Service without a
// ReferenceGrant: RefNotPermitted); an HTTPRoute whose ExternalAuth
// filter names no Service has ResolvedRefs=False BackendNotFound.
func TestListenerFiltersAgainstAPIServer(t *testing.T) {
	f := &clusterFixture{&kubetest.ClusterFixture{T: t, Env: kubetest.StartWith(t, kubetest.Options{Channel: "experimental"})}}
	f.Kube, f.Gateway = kubetest.Clients(t, f.Env.Config)
	ctx := context.Background()
	gws := f.Gateway.GatewayV1().Gateways("default")

	authFilter := func(svc string) *gwv1.ListenerFilters {
		return &gwv1.ListenerFilters{Requests: []gwv1.ListenerFilter{{Type: gwv1.ListenerFilterExternalAuth, ExternalAuth: &gwv1.HTTPExternalAuthFilter{
			ExternalAuthProtocol: gwv1.HTTPRouteExternalAuthHTTPProtocol,
			BackendRef:           gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: ptr.To(gwv1.PortNumber(9000))},
			HTTPAuthConfig:       &gwv1.HTTPAuthConfig{AllowedResponseHeaders: []string{"X-User"}},
		}}}}
	}
	tcp := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "tcp", Namespace: "default"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico",
		Listeners: []gwv1.Listener{{Name: "tcp", Port: 7000, Protocol: gwv1.TCPProtocolType, Filters: authFilter("authz")}}}}
	var err error
	for range 50 { // the CRDs may take a moment to be served
		if _, err = gws.Create(ctx, tcp, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "the server could not find") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err == nil || !strings.Contains(err.Error(), "filters may only be set when protocol is HTTP or HTTPS") {
		t.Fatalf("a TCP listener with filters: %v, want the CRD's refusal", err)
	}

	if _, err := f.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "portico-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.startPortico(f.Env.Config, "127.0.0.1", "a", nil)
	gc := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "portico"}, Spec: gwv1.GatewayClassSpec{ControllerName: "portico.dev/gateway-controller"}}
	if _, err := f.Gateway.GatewayV1().GatewayClasses().Create(ctx, gc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	same := gwv1.NamespacesFromSame
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "default"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico",
		AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &same}},
		Listeners: []gwv1.Listener{
			{Name: "auth", Port: 18081, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname("auth.example.com")), Filters: authFilter("authz")},
			{Name: "ext", Port: 18081, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname("ext.example.com")),
				Filters: &gwv1.ListenerFilters{Requests: []gwv1.ListenerFilter{{Type: gwv1.ListenerFilterExtensionRef,
					ExtensionRef: &gwv1.LocalObjectReference{Group: "example.com", Kind: "Projector", Name: "tenant"}}}}},
		}}}
	if _, err := gws.Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, err := gws.Get(ctx, "gw", metav1.GetOptions{}); err != nil || got.Spec.Listeners[0].Filters == nil {
		t.Fatalf("the API server did not keep the listener's filters (experimental CRDs): %v", err)
	}
	listener := func(name, condition string, status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			g, err := gws.Get(ctx, "gw", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, l := range g.Status.Listeners {
				if string(l.Name) == name {
					return conditionIs(l.Conditions, condition, status, reason, g.Generation)
				}
			}
			return fmt.Errorf("no status of listener %s", name)
		}
	}
	kubetest.WaitFor(t, 30*time.Second, "auth's Service not found",
		listener("auth", "ResolvedRefs", metav1.ConditionFalse, string(listeners.ReasonInvalidListenerFilterRef)))
	kubetest.WaitFor(t, 30*time.Second, "auth not programmed", listener("auth", "Programmed", metav1.ConditionFalse, "Invalid"))
	kubetest.WaitFor(t, 30*time.Second, "ext refused", listener("ext", "Accepted", metav1.ConditionFalse, string(gwv1.ListenerReasonUnsupportedValue)))

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "authz", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 9000}}}}
	if _, err := f.Kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitFor(t, 30*time.Second, "auth's Service resolved", listener("auth", "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs"))

	// A ListenerSet's listener carries filters too: its ExternalAuth
	// naming a Service of another namespace needs a ReferenceGrant from
	// ListenerSets.
	foreign := authFilter("authz")
	foreign.Requests[0].ExternalAuth.BackendRef.Namespace = ptr.To(gwv1.Namespace("other"))
	ls := &gwv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{Name: "ls", Namespace: "default"}, Spec: gwv1.ListenerSetSpec{
		ParentRef: gwv1.ParentGatewayReference{Name: "gw"},
		Listeners: []gwv1.ListenerEntry{
			{Name: "lsauth", Port: 18081, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname("ls.example.com")), Filters: authFilter("authz")},
			{Name: "lsforeign", Port: 18081, Protocol: gwv1.HTTPProtocolType, Hostname: ptr.To(gwv1.Hostname("foreign.example.com")), Filters: foreign},
		}}}
	if _, err := f.Gateway.GatewayV1().ListenerSets("default").Create(ctx, ls, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lsListener := func(name, condition string, status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			got, err := f.Gateway.GatewayV1().ListenerSets("default").Get(ctx, "ls", metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, l := range got.Status.Listeners {
				if string(l.Name) == name {
					return conditionIs(l.Conditions, condition, status, reason, got.Generation)
				}
			}
			return fmt.Errorf("no status of ListenerSet listener %s", name)
		}
	}
	kubetest.WaitFor(t, 30*time.Second, "lsauth resolved", lsListener("lsauth", "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs"))
	kubetest.WaitFor(t, 30*time.Second, "lsforeign not permitted", lsListener("lsforeign", "ResolvedRefs", metav1.ConditionFalse, string(gwv1.ListenerReasonRefNotPermitted)))
	kubetest.WaitFor(t, 30*time.Second, "auth programmed", listener("auth", "Programmed", metav1.ConditionTrue, "Programmed"))

	route := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: gwv1.HTTPRouteSpec{
		CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw", SectionName: ptr.To(gwv1.SectionName("auth"))}}},
		Rules: []gwv1.HTTPRouteRule{{
			Filters: []gwv1.HTTPRouteFilter{{Type: gwv1.HTTPRouteFilterExternalAuth, ExternalAuth: &gwv1.HTTPExternalAuthFilter{
				ExternalAuthProtocol: gwv1.HTTPRouteExternalAuthGRPCProtocol,
				BackendRef:           gwv1.BackendObjectReference{Name: "opa", Port: ptr.To(gwv1.PortNumber(9191))},
				GRPCAuthConfig:       &gwv1.GRPCAuthConfig{},
			}}},
			BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "authz", Port: ptr.To(gwv1.PortNumber(9000))}}}},
		}}}}
	if _, err := f.Gateway.GatewayV1().HTTPRoutes("default").Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitFor(t, 30*time.Second, "the route's ExternalAuth Service not found", func() error {
		r, err := f.Gateway.GatewayV1().HTTPRoutes("default").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p := routeParent(r, "portico.dev/gateway-controller", "gw")
		if p == nil {
			return fmt.Errorf("no parent status yet")
		}
		return conditionIs(p.Conditions, "ResolvedRefs", metav1.ConditionFalse, string(gwv1.RouteReasonBackendNotFound), r.Generation)
	})
}
