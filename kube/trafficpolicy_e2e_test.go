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
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

// TestTrafficPolicyAgainstAPIServer: against a real API server with the
// BackendTrafficPolicy CRD of deploy/, the CRD's rules refuse what
// translate would call invalid (a ConsistentHash without what to hash, a
// sectionName on a Gateway, a Service of the wrong group) with their
// messages, and the leader writes the status of accepted policies (the
// route's Gateway as ancestor) and of one whose target does not exist
// (TargetNotFound, the target as ancestor).
func TestTrafficPolicyAgainstAPIServer(t *testing.T) {
	f := &clusterFixture{&kubetest.ClusterFixture{T: t, Env: kubetest.Start(t)}}
	f.Kube, f.Gateway = kubetest.Clients(t, f.Env.Config)
	dir := t.TempDir()
	crd, err := os.ReadFile("../deploy/backendtrafficpolicy.yaml")
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
	policies := dyn.Resource(source.TrafficPolicyResource).Namespace("default")
	create := func(name, spec string) error {
		obj := &unstructured.Unstructured{}
		y := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata: {name: %s, namespace: default}\nspec: %s\n", trafficpolicy.APIVersion, trafficpolicy.Kind, name, spec)
		if err := yamlToUnstructured(y, obj); err != nil {
			t.Fatal(err)
		}
		// The CRD may take a moment to be served after it is applied.
		var err error
		for range 50 {
			if _, err = policies.Create(ctx, obj, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "the server could not find the requested resource") {
				return err
			}
			time.Sleep(100 * time.Millisecond)
		}
		return err
	}

	for _, tc := range []struct{ spec, refusal string }{
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], loadBalancer: {type: ConsistentHash}}`,
			"consistentHash is set with type ConsistentHash"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}]}`,
			"sectionName names a rule of an HTTPRoute or GRPCRoute only"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: Service, name: web}]}`,
			`Service is of the core group`},
		{`{targetRefs: [{group: "", kind: Service, name: web}], loadBalancer: {type: ConsistentHash, consistentHash: {type: Header}}}`,
			"type Header needs header"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], loadBalancer: {type: Fastest}}`,
			"Unsupported value"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {passive: {maxEjectionPercent: 120}}}`,
			"should be less than or equal to 100"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {}}`,
			"active or passive is required"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], circuitBreaker: {maxConnections: 0}}`,
			"should be greater than or equal to 1"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], tcpKeepalive: {probes: 200}}`,
			"should be less than or equal to 127"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {}}}`,
			"healthCheck.active.type: Required value"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: HTTP}}}`,
			"type HTTP needs http"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, grpc: {}}}}`,
			"only the section of the type may be set"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, interval: 1s, timeout: 2s}}}`,
			"timeout is not longer than interval"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, interval: 1ms}}}`,
			"interval is between 10ms and 1h"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, tcp: {send: {text: a, binary: YQ==}}}}}`,
			"exactly one of text and binary"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: HTTP, http: {path: /, expectedStatuses: [{start: 300, end: 200}]}}}}`,
			"end is not before start"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: HTTP, http: {path: healthz}}}}`,
			"healthCheck.active.http.path"},
	} {
		err := create("refused", tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("spec %s: %v, want a refusal saying %q", tc.spec, err, tc.refusal)
		}
	}
	// Every field of each kind of active check, as the CRD takes them.
	for name, spec := range map[string]string{
		"active-http": `{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: HTTP, interval: 5s, timeout: 500ms, jitter: 1s, healthyThreshold: 2, unhealthyThreshold: 4, http: {path: /healthz, method: HEAD, hostname: health.internal, expectedStatuses: [{start: 200, end: 204}, {start: 301}]}}, passive: {}}}`,
		"active-tcp":  `{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, tcp: {send: {text: PING}, expect: {binary: UE9ORw==}}}}}`,
		"breaker":     `{targetRefs: [{group: "", kind: Service, name: web}], circuitBreaker: {maxConnections: 10, maxPendingRequests: 0, maxParallelRequests: 4294967295, maxParallelRetries: 3}}`,
		"timeouts":    `{targetRefs: [{group: "", kind: Service, name: web}], timeout: {tcp: {connectTimeout: 2s}, http: {connectionIdleTimeout: 30s, responseHeaderTimeout: 10s}}, tcpKeepalive: {probes: 3, idleTime: 60s, interval: 10s}}`,
		"active-grpc": `{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: GRPC, grpc: {service: api.v1.Users}}}}`,
	} {
		if err := create(name, spec); err != nil {
			t.Errorf("%s refused: %v", name, err)
		} else if err := policies.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The lease of leader election lives there.
	if _, err := f.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "portico-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.startPortico(f.Env.Config, "127.0.0.1", "a", func(s *replicaSetup) { s.c.Dynamic = dyn })
	gc := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "portico"}, Spec: gwv1.GatewayClassSpec{ControllerName: "portico.dev/gateway-controller"}}
	if _, err := f.Gateway.GatewayV1().GatewayClasses().Create(ctx, gc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gw := &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "gw", Namespace: "default"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico",
		Listeners: []gwv1.Listener{{Name: "http", Port: 18080, Protocol: gwv1.HTTPProtocolType}}}}
	if _, err := f.Gateway.GatewayV1().Gateways("default").Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	if err := create("balance", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], loadBalancer: {type: ConsistentHash, consistentHash: {type: Cookie, cookie: {name: session}}}}`); err != nil {
		t.Fatal(err)
	}
	if err := create("orphan", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: gone}], loadBalancer: {type: Random}}`); err != nil {
		t.Fatal(err)
	}

	ancestor := func(name, kind, ancestorName string, status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			u, err := policies.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p := &trafficpolicy.BackendTrafficPolicy{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
				return err
			}
			for _, a := range p.Status.Ancestors {
				if ptr.Deref(a.AncestorRef.Kind, "") == gwv1.Kind(kind) && string(a.AncestorRef.Name) == ancestorName {
					return conditionIs(a.Conditions, string(gwv1.PolicyConditionAccepted), status, reason, p.Generation)
				}
			}
			return fmt.Errorf("no ancestor %s %s in %+v", kind, ancestorName, p.Status.Ancestors)
		}
	}
	kubetest.WaitFor(t, 30*time.Second, "balance accepted on Gateway gw", ancestor("balance", "Gateway", "gw", metav1.ConditionTrue, string(gwv1.PolicyReasonAccepted)))
	kubetest.WaitFor(t, 30*time.Second, "orphan TargetNotFound", ancestor("orphan", "HTTPRoute", "gone", metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound)))
}
