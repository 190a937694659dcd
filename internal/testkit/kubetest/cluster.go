package kubetest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
)

// ClusterFixture is what cluster-mode tests build on: a real API server
// with the Gateway API CRDs, admin clients, and backends in a network
// namespace of their own, where EndpointSlices can point at them (the API
// server rejects loopback addresses there).
type ClusterFixture struct {
	T       testing.TB
	Env     *Env
	Kube    kubernetes.Interface
	Gateway gatewayclient.Interface
	Netns   *Netns
}

// NewClusterFixture starts the API server and the network namespace for
// t; it skips t where network namespaces cannot be made.
func NewClusterFixture(t testing.TB) *ClusterFixture {
	t.Helper()
	NeedNetns(t)
	f := &ClusterFixture{T: t, Env: Start(t)}
	f.Kube, f.Gateway = Clients(t, f.Env.Config)
	f.Netns = NewNetns(t, "cluster")
	return f
}

// Clients are the Kubernetes and Gateway API clients of cfg.
func Clients(t testing.TB, cfg *rest.Config) (kubernetes.Interface, gatewayclient.Interface) {
	t.Helper()
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gc, err := gatewayclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kc, gc
}

// Backend starts an HTTP server in the fixture's network namespace that
// names itself in every answer (body and X-Backend), and returns its port.
func (f *ClusterFixture) Backend(name string) int32 {
	f.T.Helper()
	ln, err := f.Netns.Listen("tcp", f.Netns.AddrPort(0))
	if err != nil {
		f.T.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Backend", name)
			fmt.Fprintf(w, "%s %s", name, r.URL.Path)
		}),
	}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	f.T.Cleanup(func() { srv.Close() })
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// Namespace creates a namespace with labels; one that exists already is
// fine.
func (f *ClusterFixture) Namespace(name string, labels map[string]string) {
	f.T.Helper()
	_, err := f.Kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		f.T.Fatalf("create namespace %s: %v", name, err)
	}
}

// Service creates a Service with port 80 ("http") and the EndpointSlice
// that points it at a backend port in the network namespace.
func (f *ClusterFixture) Service(namespace, name string, backendPort int32) {
	f.T.Helper()
	ctx := context.Background()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{
			Name: "http", Port: 80, TargetPort: intstr.FromInt32(backendPort),
		}}},
	}
	if _, err := f.Kube.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		f.T.Fatalf("create Service %s/%s: %v", namespace, name, err)
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: name},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(backendPort)}},
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{f.Netns.Addr.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
	}
	if _, err := f.Kube.DiscoveryV1().EndpointSlices(namespace).Create(ctx, es, metav1.CreateOptions{}); err != nil {
		f.T.Fatalf("create EndpointSlice %s/%s: %v", namespace, es.Name, err)
	}
}

// ServerSideApply applies objs in order, as "kubectl apply --server-side"
// does; the API server validates each one fully.
func ServerSideApply(t testing.TB, cfg *rest.Config, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if obj.GetNamespace() != "" {
			ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "portico-deploy-test", Force: true}); err != nil {
			t.Fatalf("apply %s %s: %v", gvk.Kind, obj.GetName(), err)
		}
	}
}

// TLSSecret is a kubernetes.io/tls Secret holding a PEM certificate and
// its key.
func TLSSecret(namespace, name string, certPEM, keyPEM []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
}
