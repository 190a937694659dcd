package trafficpolicy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/config"
)

// TestValidate: each rule the CRD states, checked for objects that reach
// translate from files, refuses with the field it is about.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		spec, refusal string // refusal "": valid
	}{
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r, sectionName: a}], loadBalancer: {type: RoundRobin}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], loadBalancer: {type: ConsistentHash, consistentHash: {type: Header, header: {name: X-User}}}}`, ""},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: g}], healthCheck: {passive: {}}}`, ""},
		{`{targetRefs: []}`, "spec.targetRefs: between 1 and 16"},
		{`{targetRefs: [{group: "", kind: Gateway, name: g}]}`, "spec.targetRefs[0].group"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: Service, name: s}]}`, "spec.targetRefs[0].group"},
		{`{targetRefs: [{group: example.com, kind: Bucket, name: b}]}`, "spec.targetRefs[0].kind"},
		{`{targetRefs: [{group: "", kind: Service, name: s, sectionName: http}]}`, "spec.targetRefs[0].sectionName"},
		{`{targetRefs: [{group: "", kind: Service, name: ""}]}`, "spec.targetRefs[0].name"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], loadBalancer: {type: Fastest}}`, "spec.loadBalancer.type"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], loadBalancer: {type: Random, consistentHash: {type: SourceIP}}}`, "spec.loadBalancer.consistentHash: set only"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], loadBalancer: {type: ConsistentHash, consistentHash: {type: Header}}}`, "type Header needs header"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], loadBalancer: {type: ConsistentHash, consistentHash: {type: Header, header: {name: "a b"}}}}`, "header.name"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], loadBalancer: {type: ConsistentHash, consistentHash: {type: Cookie, cookie: {name: "a;b"}}}}`, "cookie.name"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], loadBalancer: {type: ConsistentHash, consistentHash: {type: SourceIP, cookie: {name: c}}}}`, "type SourceIP"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {}}`, "spec.healthCheck: active or passive is required"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: HTTP, http: {path: /healthz, expectedStatuses: [{start: 200, end: 204}, {start: 301}]}}}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP, tcp: {send: {text: PING}, expect: {binary: UE9ORw==}}}, passive: {}}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: GRPC, grpc: {service: api.v1.Users}, interval: 5s, timeout: 2s, jitter: 1s, healthyThreshold: 2, unhealthyThreshold: 4}}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP}}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: GRPC, tls: {serverName: api.example.com}}}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP, tls: {serverName: "Not A Name"}}}}`, "spec.healthCheck.active.tls.serverName: \"Not A Name\" is not a DNS name"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP, tls: {}}}}`, "spec.healthCheck.active.tls.serverName: \"\" is not a DNS name"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: UDP}}}`, "spec.healthCheck.active.type"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], circuitBreaker: {maxConnections: 10, maxPendingRequests: 0, maxParallelRequests: 100, maxParallelRetries: 0}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], circuitBreaker: {}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], timeout: {tcp: {connectTimeout: 2s}, http: {connectionIdleTimeout: 30s, responseHeaderTimeout: 10s}}, tcpKeepalive: {probes: 3, idleTime: 60s, interval: 10s}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], timeout: {tcp: {connectTimeout: 0s}}}`, "spec.timeout.tcp.connectTimeout"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], timeout: {http: {connectionIdleTimeout: 500ms}}}`, "spec.timeout.http.connectionIdleTimeout"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], tcpKeepalive: {probes: 0}}`, "spec.tcpKeepalive.probes"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], tcpKeepalive: {interval: 100ms}}`, "spec.tcpKeepalive.interval"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], circuitBreaker: {maxConnections: 0}}`, "spec.circuitBreaker.maxConnections: 0 is not between 1"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], circuitBreaker: {maxPendingRequests: -1}}`, "spec.circuitBreaker.maxPendingRequests"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], circuitBreaker: {maxParallelRequests: 4294967296}}`, "spec.circuitBreaker.maxParallelRequests"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: HTTP}}}`, "type HTTP needs http"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP, http: {path: /}}}}`, "only the section of type TCP"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: HTTP, http: {path: healthz}}}}`, "spec.healthCheck.active.http.path"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: HTTP, http: {path: /, method: "GE T"}}}}`, "http.method"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: HTTP, http: {path: /, expectedStatuses: [{start: 300, end: 200}]}}}}`, "expectedStatuses[0]"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP, interval: 1s, timeout: 2s}}}`, "active.timeout: 2s is longer than the interval"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP, interval: 1ms}}}`, "active.interval"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP, unhealthyThreshold: 0}}}`, "unhealthyThreshold: 0"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {active: {type: TCP, tcp: {send: {text: a, binary: YQ==}}}}}`, "tcp.send: exactly one"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {passive: {consecutive5XxErrors: -1}}}`, "consecutive5XxErrors"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {passive: {baseEjectionTime: 0s}}}`, "baseEjectionTime"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], healthCheck: {passive: {maxEjectionPercent: 101}}}`, "maxEjectionPercent"},
		{`{targetRefs: [{group: "", kind: Service, name: s}, {group: "", kind: Service, name: t}], proxyProtocol: {version: V1}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], proxyProtocol: {version: V2}}`, ""},
		{`{targetRefs: [{group: "", kind: Service, name: s}], proxyProtocol: {version: V3}}`, "spec.proxyProtocol.version"},
		{`{targetRefs: [{group: "", kind: Service, name: s}], proxyProtocol: {}}`, "spec.proxyProtocol.version"},
		{`{targetRefs: [{group: "", kind: Service, name: s}, {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}], proxyProtocol: {version: V2}}`, "spec.proxyProtocol: set only when every target is a Service"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: g}], proxyProtocol: {version: V1}}`, "not Gateway g"},
	} {
		var s Spec
		if err := yaml.UnmarshalStrict([]byte(tc.spec), &s); err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		err := s.Validate()
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.spec, err)
		case tc.refusal != "" && (err == nil || !strings.Contains(err.Error(), tc.refusal)):
			t.Errorf("%s: %v, want a refusal naming %q", tc.spec, err, tc.refusal)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: a message of several lines: %q", tc.spec, err)
		}
	}
}

// TestConfig: what the data plane is given, with the defaults of unset
// fields and the header name in the form requests carry it.
func TestConfig(t *testing.T) {
	lb := (&LoadBalancer{Type: ConsistentHash, ConsistentHash: &ConsistentHashConfig{Type: Header, Header: &Named{Name: "x-user-id"}}}).Config("ns/p")
	if lb.HashName != "X-User-Id" || lb.Policy != "ns/p" || string(lb.Algorithm) != "ConsistentHash" || string(lb.HashOn) != "Header" {
		t.Errorf("load balancer %+v", lb)
	}
	od := (&HealthCheck{Passive: &PassiveHealthCheck{}}).Config("ns/p")
	if od.Consecutive5xx != 5 || od.ConsecutiveGatewayErrors != 0 || od.ConsecutiveLocalOriginFailures != 5 ||
		od.BaseEjectionTime != 30*time.Second || od.MaxEjectionPercent != 10 {
		t.Errorf("defaults %+v", od)
	}
	od = (&HealthCheck{Passive: &PassiveHealthCheck{Consecutive5XxErrors: ptr.To[int32](0), BaseEjectionTime: ptr.To(gwv1.Duration("1m30s")),
		MaxEjectionPercent: ptr.To[int32](50)}}).Config("ns/p")
	if od.Consecutive5xx != 0 || od.BaseEjectionTime != 90*time.Second || od.MaxEjectionPercent != 50 {
		t.Errorf("set fields %+v", od)
	}
	if (&HealthCheck{Passive: &PassiveHealthCheck{}}).ActiveConfig("ns/p") != nil || (&HealthCheck{Active: &ActiveHealthCheck{Type: ActiveTCP}}).Config("ns/p") != nil {
		t.Error("a check that is not set is given to the data plane")
	}
	a := (&HealthCheck{Active: &ActiveHealthCheck{Type: ActiveHTTP, HTTP: &HTTPActiveHealthCheck{Path: "/healthz"}}}).ActiveConfig("ns/p")
	if a.Interval != 3*time.Second || a.Timeout != time.Second || a.HealthyThreshold != 1 || a.UnhealthyThreshold != 3 || a.Method != "GET" ||
		!a.Expects(200) || !a.Expects(299) || a.Expects(300) || a.Expects(199) {
		t.Errorf("active defaults %+v", a)
	}
	b := (&HealthCheck{Active: &ActiveHealthCheck{Type: ActiveHTTP, HTTP: &HTTPActiveHealthCheck{Path: "/healthz"}}}).ActiveConfig("other/q")
	c := (&HealthCheck{Active: &ActiveHealthCheck{Type: ActiveHTTP, HTTP: &HTTPActiveHealthCheck{Path: "/ready"}}}).ActiveConfig("ns/p")
	cb := (&CircuitBreaker{MaxConnections: ptr.To[int64](10), MaxPendingRequests: ptr.To[int64](0)}).Config("ns/p")
	if cb.MaxConnections != 10 || cb.MaxPendingRequests != 0 || cb.MaxParallelRequests != 1024 || cb.MaxParallelRetries != 1024 || cb.ID == "" {
		t.Errorf("circuit breaker %+v", cb)
	}
	conn := ConnConfig(&BackendTrafficPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "t"}, Spec: Spec{Timeout: &Timeout{HTTP: &HTTPTimeout{ResponseHeaderTimeout: ptr.To(gwv1.Duration("10s"))}}}},
		&BackendTrafficPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "k"}, Spec: Spec{TCPKeepalive: &TCPKeepalive{Interval: ptr.To(gwv1.Duration("10s"))}}})
	if conn.ResponseHeaderTimeout != 10*time.Second || conn.ConnectTimeout != 0 || conn.Policy != "ns/t" ||
		*conn.KeepAlive != (config.TCPKeepalive{Idle: 2 * time.Hour, Interval: 10 * time.Second, Probes: 9}) {
		t.Errorf("timeouts and keepalive %+v %+v", conn, conn.KeepAlive)
	}
	if ConnConfig(nil, nil) != nil {
		t.Error("no section, yet timeouts")
	}
	tl := (&HealthCheck{Active: &ActiveHealthCheck{Type: ActiveHTTP, HTTP: &HTTPActiveHealthCheck{Path: "/healthz"}, TLS: &ActiveTLS{ServerName: "api.example.com"}}}).ActiveConfig("ns/p")
	if tl.TLS == nil || tl.TLS.ServerName != "api.example.com" || tl.TLS.RootCAs != nil || tl.ID == a.ID {
		t.Errorf("check with tls: %+v (ID %q, the same without tls %q): want probes over TLS to api.example.com, system roots, an ID of its own", tl.TLS, tl.ID, a.ID)
	}
	if a.ID != b.ID || a.ID == c.ID {
		t.Errorf("IDs: the same check of two policies %q, %q; another path %q", a.ID, b.ID, c.ID)
	}
}
