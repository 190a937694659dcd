package kube

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

// TestDataPlaneReplicasShareSessionKey: two replicas of one Gateway's
// data plane (side by side on 127.0.0.1 and 127.0.0.2) and a restart of
// one of them open each other's session persistence cookies, so a
// client keeps its endpoint whichever replica a request reaches: the
// controller, whose replicas share a key in a Secret, gives each data
// plane the key of its Gateway on its stream. Without it each replica
// would seal with a key of its own, and a cookie sent to the other
// replica would be a new session, balanced round robin over the
// Service's two endpoints.
func TestDataPlaneReplicasShareSessionKey(t *testing.T) {
	kubetest.NeedNetns(t)
	// sessionPersistence is of the experimental channel.
	f := newProvisionFixtureOn(t, kubetest.StartWith(t, kubetest.Options{Channel: "experimental"}))
	f.Netns = kubetest.NewNetns(t, "sticky")
	ctx := context.Background()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	twoEndpointService(t, f, "apps", "web", f.Backend("one"), f.Backend("two"))
	f.parameters("portico-system", "dedicated", `{mode: PerGateway, replicas: 2, service: {type: ClusterIP}}`)
	f.class("dedicated", "portico-system", "dedicated")
	master, err := SessionKey(ctx, f.Kube, "portico-system", "portico-session-key")
	if err != nil {
		t.Fatal(err)
	}
	listen := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	f.clusterFixture.startPortico(f.Env.Config, "127.0.0.1", "portico-0", func(s *replicaSetup) {
		s.c.Dynamic = f.dyn
		s.c.DataPlanes = provisionSettings(listen)
		s.c.DataPlaneListen = listen
		s.c.SessionKey = master
	})

	port := freeport.Port(t)
	route := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "web"}}},
			Rules: []gwv1.HTTPRouteRule{{
				BackendRefs:        []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr.To(gwv1.PortNumber(80))}}}},
				SessionPersistence: &gwv1.SessionPersistence{Type: ptr.To(gwv1.CookieBasedSessionPersistence), Cookie: &gwv1.CookieConfig{Name: ptr.To(gwv1.CookieName("sticky"))}},
			}},
		},
	}
	created, err := f.Gateway.GatewayV1().HTTPRoutes("apps").Create(ctx, route, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.Rules[0].SessionPersistence == nil {
		t.Fatal("the API server dropped sessionPersistence: the experimental channel's CRDs are needed")
	}
	f.gateway(&gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "dedicated", Listeners: []gwv1.Listener{{Name: "http", Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPProtocolType}}},
	})
	kubetest.WaitFor(t, 20*time.Second, "Deployment provisioned", func() error { _, err := f.deployment("apps", "web-dedicated"); return err })
	a := startDataPlaneAt(t, f, "apps", "web-dedicated", "127.0.0.1", "web-dedicated-a")
	b := startDataPlaneAt(t, f, "apps", "web-dedicated", "127.0.0.2", "web-dedicated-b")
	urlA := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	urlB := "http://127.0.0.2:" + strconv.Itoa(port) + "/"
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	send := func(url string, cookie *http.Cookie) (backend string, set *http.Cookie, err error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return "", nil, fmt.Errorf("GET %s: %d", url, resp.StatusCode)
		}
		for _, c := range resp.Cookies() {
			if c.Name == "sticky" {
				set = c
			}
		}
		return resp.Header.Get("X-Backend"), set, nil
	}
	for _, u := range []string{urlA, urlB} {
		kubetest.WaitFor(t, 30*time.Second, "served by "+u, func() error { _, _, err := send(u, nil); return err })
	}

	// A session opened on replica a.
	backend, cookie, err := send(urlA, nil)
	if err != nil || cookie == nil {
		t.Fatalf("first request: %v, session cookie %v", err, cookie)
	}
	sticks := func(what string) {
		t.Helper()
		for i := range 20 {
			url := urlA
			if i%2 == 1 {
				url = urlB
			}
			got, _, err := send(url, cookie)
			if err != nil {
				t.Fatalf("%s: request %d: %v", what, i, err)
			}
			if got != backend {
				t.Fatalf("%s: request %d to %s went to %q, the session's endpoint is %q", what, i, url, got, backend)
			}
		}
	}
	sticks("replicas side by side")

	// Replica b restarts: a new process, the same key from the stream.
	b.stop()
	startDataPlaneAt(t, f, "apps", "web-dedicated", "127.0.0.2", "web-dedicated-b2")
	kubetest.WaitFor(t, 30*time.Second, "restarted replica serving", func() error { _, _, err := send(urlB, nil); return err })
	sticks("after a restart of replica b")
	_ = a // serving throughout; stopped by its cleanup
}

// provisionSettings are the provisioning settings of startController.
func provisionSettings(listen string) *provision.Settings {
	return &provision.Settings{Image: "portico:test", ImagePullPolicy: corev1.PullNever, Controller: listen}
}

// twoEndpointService creates a Service with port 80 ("http") whose two
// endpoints are the backend ports p1 and p2 of the network namespace,
// one EndpointSlice each.
func twoEndpointService(t *testing.T, f *provisionFixture, ns, name string, p1, p2 int32) {
	t.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}}},
	}
	if _, err := f.Kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, p := range []int32{p1, p2} {
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, i), Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(p)}},
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{f.Netns.Addr.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			}},
		}
		if _, err := f.Kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
