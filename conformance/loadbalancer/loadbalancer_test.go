package loadbalancer

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"portico.dev/portico/internal/testkit/kubetest"
)

// TestBalancer: a LoadBalancer Service gets the first free pool address in
// its status and its port there reaches the ready endpoint of its
// EndpointSlice; one that asks for a free pool address gets it; one that
// asks for an address outside the pool gets none; a Service of another
// type is left alone.
func TestBalancer(t *testing.T) {
	kubetest.NeedNetns(t)
	env := kubetest.Start(t)
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := kubetest.NewNetns(t, "lb")
	ln, err := ns.Listen("tcp", ns.AddrPort(0))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "backend") })}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	backendPort := int32(ln.Addr().(*net.TCPAddr).Port)

	ctx := context.Background()
	pool := []netip.Addr{netip.MustParseAddr("127.0.0.71"), netip.MustParseAddr("127.0.0.72")}
	lbPort := freePort(t)
	create := func(name string, typ corev1.ServiceType, ip string) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: corev1.ServiceSpec{
			Type: typ, LoadBalancerIP: ip, Ports: []corev1.ServicePort{{Name: "http", Port: int32(lbPort)}},
		}}
		if _, err := kc.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(backendPort)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ns.Addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		}
		if _, err := kc.DiscoveryV1().EndpointSlices("default").Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("web", corev1.ServiceTypeLoadBalancer, "")
	create("pinned", corev1.ServiceTypeLoadBalancer, "127.0.0.72")
	create("elsewhere", corev1.ServiceTypeLoadBalancer, "192.0.2.1")
	create("inside", corev1.ServiceTypeClusterIP, "")

	b := New(Config{Client: kc, Pool: pool, Logf: t.Logf})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(runCtx) }()
	defer func() { cancel(); <-done }()

	ingress := func(name string) string {
		s, err := kc.CoreV1().Services("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
			return ""
		}
		return s.Status.LoadBalancer.Ingress[0].IP
	}
	deadline := time.Now().Add(20 * time.Second)
	for ingress("web") != "127.0.0.71" || ingress("pinned") != "127.0.0.72" {
		if time.Now().After(deadline) {
			t.Fatalf("ingress web=%q pinned=%q", ingress("web"), ingress("pinned"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, name := range []string{"elsewhere", "inside"} {
		if got := ingress(name); got != "" {
			t.Errorf("%s got ingress %s", name, got)
		}
	}
	for _, addr := range []string{"127.0.0.71", "127.0.0.72"} {
		var body []byte
		for time.Now().Before(deadline) {
			resp, err := http.Get(fmt.Sprintf("http://%s/", net.JoinHostPort(addr, strconv.Itoa(lbPort))))
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(body) == "backend" {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if string(body) != "backend" {
			t.Errorf("%s:%d answered %q", addr, lbPort, body)
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.71:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
