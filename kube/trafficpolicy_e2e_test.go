package kube

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

// TestTrafficPolicyAgainstAPIServer: against a real API server with the
// BackendTrafficPolicy CRD of deploy/, the CRD's rules refuse what
// translate would call invalid (a ConsistentHash without what to hash, a
// sectionName on a Gateway, a Service of the wrong group, proxyProtocol
// on a target that is not a Service) with their
// messages, and the leader writes the status of accepted policies (the
// route's Gateway as ancestor) and of one whose target does not exist
// (TargetNotFound, the target as ancestor).
func TestTrafficPolicyAgainstAPIServer(t *testing.T) {
	pc := startPolicyCluster(t, "backendtrafficpolicy.yaml", source.TrafficPolicyResource, trafficpolicy.APIVersion, trafficpolicy.Kind)
	ctx, create := pc.ctx, pc.create

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
		{`{targetRefs: [{group: "", kind: Service, name: web}, {group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], proxyProtocol: {version: V2}}`,
			"proxyProtocol is set only when every target is a Service"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], proxyProtocol: {version: V3}}`,
			"Unsupported value"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], proxyProtocol: {}}`,
			"proxyProtocol.version: Required value"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, tls: {}}}}`,
			"serverName: Required value"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, tls: {serverName: "Not A Name"}}}}`,
			"healthCheck.active.tls.serverName"},
	} {
		err := create("refused", tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("spec %s: %v, want a refusal saying %q", tc.spec, err, tc.refusal)
		}
	}
	// Every field of each kind of active check, as the CRD takes them.
	for name, spec := range map[string]string{
		"active-http":    `{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: HTTP, interval: 5s, timeout: 500ms, jitter: 1s, healthyThreshold: 2, unhealthyThreshold: 4, http: {path: /healthz, method: HEAD, hostname: health.internal, expectedStatuses: [{start: 200, end: 204}, {start: 301}]}}, passive: {}}}`,
		"active-tcp":     `{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, tcp: {send: {text: PING}, expect: {binary: UE9ORw==}}}}}`,
		"breaker":        `{targetRefs: [{group: "", kind: Service, name: web}], circuitBreaker: {maxConnections: 10, maxPendingRequests: 0, maxParallelRequests: 4294967295, maxParallelRetries: 3}}`,
		"timeouts":       `{targetRefs: [{group: "", kind: Service, name: web}], timeout: {tcp: {connectTimeout: 2s}, http: {connectionIdleTimeout: 30s, responseHeaderTimeout: 10s}}, tcpKeepalive: {probes: 3, idleTime: 60s, interval: 10s}}`,
		"active-grpc":    `{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: GRPC, grpc: {service: api.v1.Users}}}}`,
		"proxy-protocol": `{targetRefs: [{group: "", kind: Service, name: web}, {group: "", kind: Service, name: db}], proxyProtocol: {version: V1}}`,
		"active-tls":     `{targetRefs: [{group: "", kind: Service, name: web}], healthCheck: {active: {type: TCP, tls: {serverName: web.apps.svc}}}}`,
	} {
		if err := create(name, spec); err != nil {
			t.Errorf("%s refused: %v", name, err)
		} else if err := pc.policies.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	pc.startGateway(18080)
	pc.createWebRoute()
	if err := create("balance", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], loadBalancer: {type: ConsistentHash, consistentHash: {type: Cookie, cookie: {name: session}}}}`); err != nil {
		t.Fatal(err)
	}
	if err := create("orphan", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: gone}], loadBalancer: {type: Random}}`); err != nil {
		t.Fatal(err)
	}

	ancestor := func(name, kind, ancestorName string, status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			p := &trafficpolicy.BackendTrafficPolicy{}
			if err := pc.get(name, p); err != nil {
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
