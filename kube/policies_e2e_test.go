package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/testkit/kubetest"
)

// policyCluster is a real API server with the CRD of one of Portico's
// policy kinds applied, and what a test needs to write such policies in
// the namespace default.
type policyCluster struct {
	f                *clusterFixture
	ctx              context.Context
	dyn              dynamic.Interface
	policies         dynamic.ResourceInterface
	apiVersion, kind string
}

// startPolicyCluster starts an API server and applies the CRD of
// deploy/crdFile (or of crdFile, when absolute), of the policies of
// resource.
func startPolicyCluster(t *testing.T, crdFile string, resource schema.GroupVersionResource, apiVersion, kind string) *policyCluster {
	f := &clusterFixture{&kubetest.ClusterFixture{T: t, Env: kubetest.Start(t)}}
	f.Kube, f.Gateway = kubetest.Clients(t, f.Env.Config)
	dir := t.TempDir()
	if !filepath.IsAbs(crdFile) {
		crdFile = filepath.Join("../deploy", crdFile)
	}
	crd, err := os.ReadFile(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), crd, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := kubetest.ApplyManifests(ctx, f.Env.Config, dir); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(f.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &policyCluster{f: f, ctx: ctx, dyn: dyn, policies: dyn.Resource(resource).Namespace("default"), apiVersion: apiVersion, kind: kind}
}

// create creates the policy name of spec (YAML), or says why the API
// server refused it.
func (pc *policyCluster) create(name, spec string) error {
	obj := &unstructured.Unstructured{}
	y := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %s, namespace: default}\nspec: %s\n", pc.apiVersion, pc.kind, name, spec)
	if err := yamlToUnstructured(y, obj); err != nil {
		pc.f.T.Fatal(err)
	}
	// The CRD may take a moment to be served after it is applied.
	var err error
	for range 50 {
		if _, err = pc.policies.Create(pc.ctx, obj, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "the server could not find the requested resource") {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// get reads the policy name into p, a typed policy.
func (pc *policyCluster) get(name string, p any) error {
	u, err := pc.policies.Get(pc.ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p)
}

// startGateway starts a leading Portico that reads the policies, and
// creates the GatewayClass portico and its Gateway gw (default) with an
// HTTP listener "http" on port.
func (pc *policyCluster) startGateway(port gwv1.PortNumber) {
	f, ctx, t := pc.f, pc.ctx, pc.f.T
	// The lease of leader election lives there.
	if _, err := f.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "portico-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.startPortico(f.Env.Config, "127.0.0.1", "a", func(s *replicaSetup) { s.c.Dynamic = pc.dyn })
	gc := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "portico"}, Spec: gwv1.GatewayClassSpec{ControllerName: "portico.dev/gateway-controller"}}
	if _, err := f.Gateway.GatewayV1().GatewayClasses().Create(ctx, gc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "default"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico",
		Listeners: []gwv1.Listener{{Name: "http", Port: port, Protocol: gwv1.HTTPProtocolType}}}}
	if _, err := f.Gateway.GatewayV1().Gateways("default").Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createWebRoute creates the Service web (default) and the HTTPRoute web
// from Gateway gw to its port 80.
func (pc *policyCluster) createWebRoute() {
	f, ctx, t := pc.f, pc.ctx, pc.f.T
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if _, err := f.Kube.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	route := &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Spec: gwv1.HTTPRouteSpec{
		CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
		Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
			BackendObjectReference: gwv1.BackendObjectReference{Name: "web", Port: ptr.To(gwv1.PortNumber(80))}}}}}}}}
	if _, err := f.Gateway.GatewayV1().HTTPRoutes("default").Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
