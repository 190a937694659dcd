// Package trafficpolicy holds BackendTrafficPolicy (group portico.dev),
// Portico's policy of how traffic reaches backends, attached by GEP-713
// targetRefs to Gateways, ListenerSets, HTTPRoutes and GRPCRoutes (or one
// of their rules by sectionName) and Services. It defines the object and
// the rules its CRD's schema states, checked again here for objects that
// reach translate without an API server (standalone files); which policy
// applies where is decided by translate.
package trafficpolicy

import (
	"errors"
	"fmt"
	"math"
	"net/textproto"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/policytarget"
	"portico.dev/portico/internal/shared/jsoncopy"
)

// Group, Version and Kind of BackendTrafficPolicy.
const (
	Group   = "portico.dev"
	Version = "v1alpha1"
	Kind    = "BackendTrafficPolicy"
	// APIVersion is Group/Version.
	APIVersion = Group + "/" + Version
	// Resource is its plural, as the API serves it.
	Resource = "backendtrafficpolicies"
)

// MaxTargets is the most targetRefs a policy may have (as the CRD says).
const MaxTargets = 16

// BackendTrafficPolicy says how requests reach the backends of what it
// targets.
type BackendTrafficPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec `json:"spec"`
	// Status has one entry per ancestor (GEP-713): each Gateway its
	// targets are served under, or the target itself when there is none.
	Status gwv1.PolicyStatus `json:"status,omitempty"`
}

// Spec is what a BackendTrafficPolicy sets. Each section set by several
// policies that apply to a request comes from the most specific of them:
// a route rule's, then its route's, its ListenerSet's, its Gateway's; a
// Service's policy is the most specific for the Service's own endpoints.
type Spec struct {
	TargetRefs []gwv1.LocalPolicyTargetReferenceWithSectionName `json:"targetRefs"`
	// LoadBalancer is how an endpoint (and, for a route's policy, a
	// backend of a rule) is picked. Unset: backends at random by weight,
	// endpoints round robin.
	LoadBalancer *LoadBalancer `json:"loadBalancer,omitempty"`
	// HealthCheck checks the endpoints' health, actively (probes) or
	// passively (outlier detection), or both: an endpoint is used while
	// neither leaves it out. Active and passive are taken each from the
	// most specific policy that sets it.
	HealthCheck *HealthCheck `json:"healthCheck,omitempty"`
	// CircuitBreaker limits what each backend (Service port) takes at
	// once, across the routes that send to it.
	CircuitBreaker *CircuitBreaker `json:"circuitBreaker,omitempty"`
	// Timeout bounds connecting to the backends, the wait for each
	// answer's head and how long a pooled connection may wait idle.
	Timeout *Timeout `json:"timeout,omitempty"`
	// TCPKeepalive sets TCP keepalive on the connections to the backends.
	TCPKeepalive *TCPKeepalive `json:"tcpKeepalive,omitempty"`
	// ProxyProtocol sends a PROXY protocol header with the client's
	// address ahead of each connection to the targeted Services from a
	// TCPRoute or a TLSRoute (passthrough or terminated). Only a policy
	// whose targets are all Services sets it: HTTP connections to a
	// backend are pooled and shared by clients, so they carry none.
	ProxyProtocol *ProxyProtocol `json:"proxyProtocol,omitempty"`
}

// ProxyProtocolVersion is the version of the PROXY header sent.
type ProxyProtocolVersion string

const (
	ProxyProtocolV1 ProxyProtocolVersion = "V1"
	ProxyProtocolV2 ProxyProtocolVersion = "V2"
)

// ProxyProtocol is the PROXY protocol header toward the backends.
type ProxyProtocol struct {
	// Version is V1 (a text line) or V2 (binary, without TLVs).
	Version ProxyProtocolVersion `json:"version"`
}

// validate refuses a version the format does not have, and targets that
// are not Services.
func (pp *ProxyProtocol) validate(refs []gwv1.LocalPolicyTargetReferenceWithSectionName, errs []string) []string {
	if pp.Version != ProxyProtocolV1 && pp.Version != ProxyProtocolV2 {
		errs = append(errs, fmt.Sprintf("spec.proxyProtocol.version: %q is not one of V1, V2", pp.Version))
	}
	for _, r := range refs {
		if r.Kind != "Service" || r.Group != "" {
			errs = append(errs, fmt.Sprintf("spec.proxyProtocol: set only when every target is a Service (the TCPRoute and TLSRoute connections to it carry the header; HTTP connections are pooled across clients and cannot), not %s %s", r.Kind, r.Name))
			break
		}
	}
	return errs
}

// Config is the header as the data plane's configuration says it, for
// the policy named policy; pp must be valid.
func (pp *ProxyProtocol) Config(policy string) *config.BackendProxyProtocol {
	v := 2
	if pp.Version == ProxyProtocolV1 {
		v = 1
	}
	return &config.BackendProxyProtocol{Version: v, Policy: policy}
}

// Timeout are the timeouts toward the backends; unset ones are the data
// plane's own (its flags).
type Timeout struct {
	TCP  *TCPTimeout  `json:"tcp,omitempty"`
	HTTP *HTTPTimeout `json:"http,omitempty"`
}

// TCPTimeout bounds connecting to an endpoint: the TCP connect, and to a
// TLS backend (BackendTLSPolicy) the handshake too, each by ConnectTimeout.
type TCPTimeout struct {
	ConnectTimeout *gwv1.Duration `json:"connectTimeout,omitempty"`
}

// HTTPTimeout holds the timeouts of HTTP connections and answers.
type HTTPTimeout struct {
	// ConnectionIdleTimeout: how long a pooled connection may wait idle
	// and still be used.
	ConnectionIdleTimeout *gwv1.Duration `json:"connectionIdleTimeout,omitempty"`
	// ResponseHeaderTimeout: how long an attempt waits for the head of
	// the answer (504 past it).
	ResponseHeaderTimeout *gwv1.Duration `json:"responseHeaderTimeout,omitempty"`
}

// TCPKeepalive are keepalive probes: the first after idleTime without
// traffic (default 2h, Linux's), then every interval (default 75s), the
// connection given up after probes unanswered ones (default 9).
type TCPKeepalive struct {
	Probes   *int32         `json:"probes,omitempty"`
	IdleTime *gwv1.Duration `json:"idleTime,omitempty"`
	Interval *gwv1.Duration `json:"interval,omitempty"`
}

// Defaults of TCPKeepalive, Linux's.
const (
	DefaultKeepaliveProbes   = 9
	DefaultKeepaliveIdle     = 2 * time.Hour
	DefaultKeepaliveInterval = 75 * time.Second
)

func (t *Timeout) validate(errs []string) []string {
	if t.TCP != nil {
		errs = checkDuration(errs, "spec.timeout.tcp.connectTimeout", t.TCP.ConnectTimeout, time.Millisecond, time.Hour)
	}
	if t.HTTP != nil {
		errs = checkDuration(errs, "spec.timeout.http.connectionIdleTimeout", t.HTTP.ConnectionIdleTimeout, time.Second, 24*time.Hour)
		errs = checkDuration(errs, "spec.timeout.http.responseHeaderTimeout", t.HTTP.ResponseHeaderTimeout, time.Millisecond, 24*time.Hour)
	}
	return errs
}

func (k *TCPKeepalive) validate(errs []string) []string {
	if k.Probes != nil && (*k.Probes < 1 || *k.Probes > 127) {
		errs = append(errs, fmt.Sprintf("spec.tcpKeepalive.probes: %d is not between 1 and 127", *k.Probes))
	}
	errs = checkDuration(errs, "spec.tcpKeepalive.idleTime", k.IdleTime, time.Second, 24*time.Hour)
	return checkDuration(errs, "spec.tcpKeepalive.interval", k.Interval, time.Second, 24*time.Hour)
}

// checkDuration appends a refusal of v (at field) unless it is unset or
// a duration from least to most.
func checkDuration(errs []string, field string, v *gwv1.Duration, least, most time.Duration) []string {
	if v == nil {
		return errs
	}
	if d, err := time.ParseDuration(string(*v)); err != nil || d < least || d > most {
		errs = append(errs, fmt.Sprintf("%s: %q is not a duration between %s and %s", field, *v, least, most))
	}
	return errs
}

func parsed(v *gwv1.Duration, def time.Duration) time.Duration {
	if v == nil {
		return def
	}
	d, _ := time.ParseDuration(string(*v))
	return d
}

// ConnConfig is the timeout section of policy timeout and the
// tcpKeepalive section of policy keepalive (either nil) as the data
// plane's configuration says them; nil when neither has its section.
// Both must be valid.
func ConnConfig(timeout, keepalive *BackendTrafficPolicy) *config.BackendConn {
	var t *Timeout
	if timeout != nil {
		t = timeout.Spec.Timeout
	}
	var k *TCPKeepalive
	if keepalive != nil {
		k = keepalive.Spec.TCPKeepalive
	}
	if t == nil && k == nil {
		return nil
	}
	out := &config.BackendConn{}
	if t != nil {
		out.Policy = timeout.Namespace + "/" + timeout.Name
		if t.TCP != nil {
			out.ConnectTimeout = parsed(t.TCP.ConnectTimeout, 0)
		}
		if t.HTTP != nil {
			out.IdleTimeout = parsed(t.HTTP.ConnectionIdleTimeout, 0)
			out.ResponseHeaderTimeout = parsed(t.HTTP.ResponseHeaderTimeout, 0)
		}
	}
	if k != nil {
		if out.Policy == "" {
			out.Policy = keepalive.Namespace + "/" + keepalive.Name
		}
		out.KeepAlive = &config.TCPKeepalive{Probes: DefaultKeepaliveProbes,
			Idle: parsed(k.IdleTime, DefaultKeepaliveIdle), Interval: parsed(k.Interval, DefaultKeepaliveInterval)}
		if k.Probes != nil {
			out.KeepAlive.Probes = *k.Probes
		}
	}
	return out
}

// CircuitBreaker holds the limits of one backend. Unset fields take
// Envoy's default, 1024.
type CircuitBreaker struct {
	// MaxConnections: connections to the backend's endpoints.
	MaxConnections *int64 `json:"maxConnections,omitempty"`
	// MaxPendingRequests: requests waiting for a connection.
	MaxPendingRequests *int64 `json:"maxPendingRequests,omitempty"`
	// MaxParallelRequests: requests admitted at once, sent or waiting.
	MaxParallelRequests *int64 `json:"maxParallelRequests,omitempty"`
	// MaxParallelRetries: requests retrying at once.
	MaxParallelRetries *int64 `json:"maxParallelRetries,omitempty"`
}

// DefaultBreakerLimit is the limit of an unset field of CircuitBreaker.
const DefaultBreakerLimit = 1024

// maxBreakerLimit bounds each limit (the CRD's maximum).
const maxBreakerLimit = 4294967295

func (cb *CircuitBreaker) validate() error {
	var errs []string
	for _, f := range []struct {
		name string
		v    *int64
	}{{"maxConnections", cb.MaxConnections}, {"maxPendingRequests", cb.MaxPendingRequests},
		{"maxParallelRequests", cb.MaxParallelRequests}, {"maxParallelRetries", cb.MaxParallelRetries}} {
		// maxPendingRequests 0 is meaningful: no request waits.
		least := int64(1)
		if f.name == "maxPendingRequests" || f.name == "maxParallelRetries" {
			least = 0
		}
		if f.v != nil && (*f.v < least || *f.v > maxBreakerLimit) {
			errs = append(errs, fmt.Sprintf("spec.circuitBreaker.%s: %d is not between %d and %d", f.name, *f.v, least, int64(maxBreakerLimit)))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errors.New(strings.Join(errs, "; "))
}

// Config is the circuit breaker as the data plane's configuration says
// it, for the policy named policy. cb must be valid.
func (cb *CircuitBreaker) Config(policy string) *config.CircuitBreaker {
	limit := func(v *int64) int32 {
		if v == nil {
			return DefaultBreakerLimit
		}
		return int32(min(*v, math.MaxInt32))
	}
	out := &config.CircuitBreaker{MaxConnections: limit(cb.MaxConnections), MaxPendingRequests: limit(cb.MaxPendingRequests),
		MaxParallelRequests: limit(cb.MaxParallelRequests), MaxParallelRetries: limit(cb.MaxParallelRetries), Policy: policy}
	out.MakeID()
	return out
}

// HealthCheck holds the health checks of endpoints.
type HealthCheck struct {
	// Passive watches the answers of real requests: an endpoint that
	// fails too many in a row is left out for a while.
	Passive *PassiveHealthCheck `json:"passive,omitempty"`
	// Active probes every endpoint on its own schedule.
	Active *ActiveHealthCheck `json:"active,omitempty"`
}

// ActiveHealthCheckType is what a probe asks.
type ActiveHealthCheckType string

const (
	ActiveHTTP ActiveHealthCheckType = "HTTP"
	ActiveTCP  ActiveHealthCheckType = "TCP"
	ActiveGRPC ActiveHealthCheckType = "GRPC"
)

// ActiveHealthCheck probes each endpoint of a backend every interval: an
// endpoint is left out after unhealthyThreshold failed probes in a row
// and used again after healthyThreshold passed ones. A new endpoint is
// used once its first probe passes. When every endpoint of a backend is
// left out, requests go to all of them as if none were (Envoy's panic
// mode): a check that fails everywhere more likely checks the wrong
// thing than finds every endpoint down.
type ActiveHealthCheck struct {
	Type ActiveHealthCheckType `json:"type"`
	// Interval between probes of one endpoint (default 3s).
	Interval *gwv1.Duration `json:"interval,omitempty"`
	// Timeout of one probe (default 1s), at most interval.
	Timeout *gwv1.Duration `json:"timeout,omitempty"`
	// Jitter is the most added at random to each wait (default 0), so
	// that many data planes do not probe in step.
	Jitter *gwv1.Duration `json:"jitter,omitempty"`
	// HealthyThreshold (default 1) and UnhealthyThreshold (default 3):
	// probes in a row.
	HealthyThreshold   *int32                 `json:"healthyThreshold,omitempty"`
	UnhealthyThreshold *int32                 `json:"unhealthyThreshold,omitempty"`
	HTTP               *HTTPActiveHealthCheck `json:"http,omitempty"`
	TCP                *TCPActiveHealthCheck  `json:"tcp,omitempty"`
	GRPC               *GRPCActiveHealthCheck `json:"grpc,omitempty"`
	// TLS probes over TLS a backend that has no BackendTLSPolicy. A
	// backend with one is probed over TLS with its SNI and validation,
	// as its traffic, whatever this says.
	TLS *ActiveTLS `json:"tls,omitempty"`
}

// ActiveTLS: the probes' SNI, the name the endpoint's certificate must
// be valid for, trusted by the system's roots.
type ActiveTLS struct {
	ServerName string `json:"serverName"`
}

// HTTPActiveHealthCheck sends a request and expects one of some statuses.
type HTTPActiveHealthCheck struct {
	// Path of the request, starting with "/".
	Path string `json:"path"`
	// Method of the request (default GET).
	Method *string `json:"method,omitempty"`
	// Hostname is the Host header (default: the endpoint's address).
	Hostname *string `json:"hostname,omitempty"`
	// ExpectedStatuses are ranges of statuses that pass (default
	// 200-299).
	ExpectedStatuses []StatusRange `json:"expectedStatuses,omitempty"`
}

// StatusRange is the statuses from start to end (default: start), both
// included.
type StatusRange struct {
	Start int32  `json:"start"`
	End   *int32 `json:"end,omitempty"`
}

// TCPActiveHealthCheck connects and, optionally, sends bytes and expects
// bytes back.
type TCPActiveHealthCheck struct {
	Send   *Payload `json:"send,omitempty"`
	Expect *Payload `json:"expect,omitempty"`
}

// Payload is bytes given as text or as binary (base64 in YAML and JSON);
// exactly one of them.
type Payload struct {
	Text   *string `json:"text,omitempty"`
	Binary []byte  `json:"binary,omitempty"`
}

func (p *Payload) bytes() []byte {
	if p == nil {
		return nil
	}
	if p.Text != nil {
		return []byte(*p.Text)
	}
	return p.Binary
}

// GRPCActiveHealthCheck calls grpc.health.v1.Health/Check over HTTP/2
// cleartext and expects SERVING.
type GRPCActiveHealthCheck struct {
	// Service is the name asked about (default "": the whole server).
	Service *string `json:"service,omitempty"`
}

// Defaults of ActiveHealthCheck.
const (
	DefaultInterval           = 3 * time.Second
	DefaultTimeout            = time.Second
	DefaultHealthyThreshold   = 1
	DefaultUnhealthyThreshold = 3
)

// PassiveHealthCheck is outlier detection. Unset fields take Envoy's
// defaults: 5 consecutive 5xx or local-origin failures, gateway errors not
// counted, 30s, 10%.
type PassiveHealthCheck struct {
	// Consecutive5XxErrors: answers of status 500-599 in a row (0: not
	// counted).
	Consecutive5XxErrors *int32 `json:"consecutive5XxErrors,omitempty"`
	// ConsecutiveGatewayErrors: answers of status 502, 503, 504 in a row
	// (0: not counted).
	ConsecutiveGatewayErrors *int32 `json:"consecutiveGatewayErrors,omitempty"`
	// ConsecutiveLocalOriginFailures: attempts without an answer in a row
	// (connection refused or dropped, no answer in time; 0: not counted).
	ConsecutiveLocalOriginFailures *int32 `json:"consecutiveLocalOriginFailures,omitempty"`
	// BaseEjectionTime is how long an endpoint is left out the first
	// time; each time again in a row adds as much, up to 5 minutes.
	BaseEjectionTime *gwv1.Duration `json:"baseEjectionTime,omitempty"`
	// MaxEjectionPercent is the largest share of a backend's endpoints
	// left out at once (rounded down: with 10% and fewer than 10
	// endpoints, none is).
	MaxEjectionPercent *int32 `json:"maxEjectionPercent,omitempty"`
}

// Defaults of PassiveHealthCheck.
const (
	DefaultConsecutive5xx          = 5
	DefaultConsecutiveLocalFailure = 5
	DefaultBaseEjectionTime        = 30 * time.Second
	DefaultMaxEjectionPercent      = 10
)

// LoadBalancerType names an algorithm.
type LoadBalancerType string

const (
	RoundRobin     LoadBalancerType = "RoundRobin"
	LeastRequest   LoadBalancerType = "LeastRequest"
	Random         LoadBalancerType = "Random"
	ConsistentHash LoadBalancerType = "ConsistentHash"
)

// LoadBalancer picks an algorithm; ConsistentHash needs consistentHash.
type LoadBalancer struct {
	Type           LoadBalancerType      `json:"type"`
	ConsistentHash *ConsistentHashConfig `json:"consistentHash,omitempty"`
}

// HashType is what a consistent hash is computed over.
type HashType string

const (
	SourceIP HashType = "SourceIP"
	Header   HashType = "Header"
	Cookie   HashType = "Cookie"
)

// ConsistentHashConfig says what to hash: the client's address, a header
// or a cookie. A request without the header or cookie is sent to an
// endpoint at random.
type ConsistentHashConfig struct {
	Type   HashType `json:"type"`
	Header *Named   `json:"header,omitempty"`
	Cookie *Named   `json:"cookie,omitempty"`
}

// Named is a header or cookie by name.
type Named struct {
	Name string `json:"name"`
}

// targetKinds are the kinds a policy may target: routes by rule.
var targetKinds = []policytarget.Kind{
	{Kind: "Gateway", Group: gwv1.GroupName}, {Kind: "ListenerSet", Group: gwv1.GroupName},
	{Kind: "HTTPRoute", Group: gwv1.GroupName, Sections: true}, {Kind: "GRPCRoute", Group: gwv1.GroupName, Sections: true},
	{Kind: "Service"},
}

// Validate checks the rules of the CRD's schema (and its CEL rules) for
// objects that reach translate without an API server, and what the
// schema cannot say. The error names the field.
func (s *Spec) Validate() error {
	var errs []error
	for _, m := range policytarget.Problems(s.TargetRefs, MaxTargets, targetKinds, nil) {
		errs = append(errs, errors.New(m))
	}
	if lb := s.LoadBalancer; lb != nil {
		if err := lb.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if hc := s.HealthCheck; hc != nil {
		if err := hc.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if cb := s.CircuitBreaker; cb != nil {
		if err := cb.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	var more []string
	if s.Timeout != nil {
		more = s.Timeout.validate(more)
	}
	if s.TCPKeepalive != nil {
		more = s.TCPKeepalive.validate(more)
	}
	if s.ProxyProtocol != nil {
		more = s.ProxyProtocol.validate(s.TargetRefs, more)
	}
	for _, m := range more {
		errs = append(errs, errors.New(m))
	}
	if len(errs) == 0 {
		return nil
	}
	// One line, as a condition's message reads best.
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

func (lb *LoadBalancer) validate() error {
	switch lb.Type {
	case RoundRobin, LeastRequest, Random:
		if lb.ConsistentHash != nil {
			return fmt.Errorf("spec.loadBalancer.consistentHash: set only with type ConsistentHash, not %s", lb.Type)
		}
		return nil
	case ConsistentHash:
	default:
		return fmt.Errorf("spec.loadBalancer.type: %q is not one of RoundRobin, LeastRequest, Random, ConsistentHash", lb.Type)
	}
	ch := lb.ConsistentHash
	if ch == nil {
		return errors.New("spec.loadBalancer.consistentHash: required with type ConsistentHash")
	}
	switch ch.Type {
	case SourceIP:
		if ch.Header != nil || ch.Cookie != nil {
			return errors.New("spec.loadBalancer.consistentHash: header and cookie are not set with type SourceIP")
		}
	case Header:
		if ch.Header == nil || ch.Cookie != nil {
			return errors.New("spec.loadBalancer.consistentHash: type Header needs header, and no cookie")
		}
		if msgs := validation.IsHTTPHeaderName(ch.Header.Name); ch.Header.Name == "" || len(msgs) > 0 {
			return fmt.Errorf("spec.loadBalancer.consistentHash.header.name: %q is not a header name", ch.Header.Name)
		}
	case Cookie:
		if ch.Cookie == nil || ch.Header != nil {
			return errors.New("spec.loadBalancer.consistentHash: type Cookie needs cookie, and no header")
		}
		if !isToken(ch.Cookie.Name) {
			return fmt.Errorf("spec.loadBalancer.consistentHash.cookie.name: %q is not a cookie name", ch.Cookie.Name)
		}
	default:
		return fmt.Errorf("spec.loadBalancer.consistentHash.type: %q is not one of SourceIP, Header, Cookie", ch.Type)
	}
	return nil
}

func (hc *HealthCheck) validate() error {
	if hc.Passive == nil && hc.Active == nil {
		return errors.New("spec.healthCheck: active or passive is required")
	}
	var errs []string
	if hc.Active != nil {
		errs = hc.Active.validate(errs)
	}
	p := hc.Passive
	if p == nil {
		if len(errs) == 0 {
			return nil
		}
		return errors.New(strings.Join(errs, "; "))
	}
	for name, v := range map[string]*int32{"consecutive5XxErrors": p.Consecutive5XxErrors,
		"consecutiveGatewayErrors": p.ConsecutiveGatewayErrors, "consecutiveLocalOriginFailures": p.ConsecutiveLocalOriginFailures} {
		if v != nil && (*v < 0 || *v > 1000) {
			errs = append(errs, fmt.Sprintf("spec.healthCheck.passive.%s: %d is not between 0 and 1000", name, *v))
		}
	}
	if p.MaxEjectionPercent != nil && (*p.MaxEjectionPercent < 0 || *p.MaxEjectionPercent > 100) {
		errs = append(errs, fmt.Sprintf("spec.healthCheck.passive.maxEjectionPercent: %d is not between 0 and 100", *p.MaxEjectionPercent))
	}
	if p.BaseEjectionTime != nil {
		d, err := time.ParseDuration(string(*p.BaseEjectionTime))
		if err != nil || d < time.Millisecond || d > time.Hour {
			errs = append(errs, fmt.Sprintf("spec.healthCheck.passive.baseEjectionTime: %q is not a duration between 1ms and 1h", *p.BaseEjectionTime))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs) // map order
	return errors.New(strings.Join(errs, "; "))
}

// validate appends to errs what is wrong with a.
func (a *ActiveHealthCheck) validate(errs []string) []string {
	const at = "spec.healthCheck.active"
	dur := func(name string, v *gwv1.Duration, least, most time.Duration) time.Duration {
		if v == nil {
			return -1
		}
		d, err := time.ParseDuration(string(*v))
		if err != nil || d < least || d > most {
			errs = append(errs, fmt.Sprintf("%s.%s: %q is not a duration between %s and %s", at, name, *v, least, most))
			return -1
		}
		return d
	}
	interval := dur("interval", a.Interval, 10*time.Millisecond, time.Hour)
	timeout := dur("timeout", a.Timeout, time.Millisecond, time.Hour)
	dur("jitter", a.Jitter, 0, time.Hour)
	if interval < 0 {
		interval = DefaultInterval
	}
	if timeout < 0 && a.Timeout == nil {
		timeout = DefaultTimeout
	}
	if timeout > interval {
		errs = append(errs, fmt.Sprintf("%s.timeout: %s is longer than the interval %s", at, timeout, interval))
	}
	for name, v := range map[string]*int32{"healthyThreshold": a.HealthyThreshold, "unhealthyThreshold": a.UnhealthyThreshold} {
		if v != nil && (*v < 1 || *v > 100) {
			errs = append(errs, fmt.Sprintf("%s.%s: %d is not between 1 and 100", at, name, *v))
		}
	}
	sections := 0
	for _, set := range []bool{a.HTTP != nil, a.TCP != nil, a.GRPC != nil} {
		if set {
			sections++
		}
	}
	want := map[ActiveHealthCheckType]bool{ActiveHTTP: a.HTTP != nil, ActiveTCP: a.TCP != nil, ActiveGRPC: a.GRPC != nil}
	switch set, known := want[a.Type]; {
	case !known:
		errs = append(errs, fmt.Sprintf("%s.type: %q is not one of HTTP, TCP, GRPC", at, a.Type))
	case a.Type == ActiveHTTP && !set:
		errs = append(errs, at+": type HTTP needs http")
	case sections > 1 || sections == 1 && !set:
		errs = append(errs, fmt.Sprintf("%s: only the section of type %s may be set", at, a.Type))
	}
	if h := a.HTTP; h != nil {
		if !strings.HasPrefix(h.Path, "/") || len(h.Path) > 1024 || strings.ContainsAny(h.Path, " \t\r\n#") {
			errs = append(errs, fmt.Sprintf("%s.http.path: %q is not an absolute path", at, h.Path))
		}
		if h.Method != nil && (!isToken(*h.Method) || *h.Method == "CONNECT") {
			errs = append(errs, fmt.Sprintf("%s.http.method: %q is not a method", at, *h.Method))
		}
		if h.Hostname != nil && len(validation.IsDNS1123Subdomain(strings.ToLower(*h.Hostname))) > 0 {
			errs = append(errs, fmt.Sprintf("%s.http.hostname: %q is not a hostname", at, *h.Hostname))
		}
		if len(h.ExpectedStatuses) > 16 {
			errs = append(errs, fmt.Sprintf("%s.http.expectedStatuses: at most 16 ranges, not %d", at, len(h.ExpectedStatuses)))
		}
		for i, r := range h.ExpectedStatuses {
			end := r.Start
			if r.End != nil {
				end = *r.End
			}
			if r.Start < 100 || r.Start > 599 || end < r.Start || end > 599 {
				errs = append(errs, fmt.Sprintf("%s.http.expectedStatuses[%d]: %d-%d is not a range of statuses within 100-599", at, i, r.Start, end))
			}
		}
	}
	if t := a.TCP; t != nil {
		for name, p := range map[string]*Payload{"send": t.Send, "expect": t.Expect} {
			switch {
			case p == nil:
			case (p.Text != nil) == (p.Binary != nil):
				errs = append(errs, fmt.Sprintf("%s.tcp.%s: exactly one of text and binary is needed", at, name))
			case len(p.bytes()) == 0 || len(p.bytes()) > 1024:
				errs = append(errs, fmt.Sprintf("%s.tcp.%s: between 1 and 1024 bytes are needed", at, name))
			}
		}
	}
	if t := a.TLS; t != nil && (t.ServerName == "" || len(validation.IsDNS1123Subdomain(t.ServerName)) > 0) {
		errs = append(errs, fmt.Sprintf("%s.tls.serverName: %q is not a DNS name", at, t.ServerName))
	}
	if g := a.GRPC; g != nil && g.Service != nil && len(*g.Service) > 256 {
		errs = append(errs, fmt.Sprintf("%s.grpc.service: longer than 256 characters", at))
	}
	slices.Sort(errs)
	return errs
}

// ActiveConfig is the active check as the data plane's configuration
// says it, with the defaults of unset fields, for the policy named
// policy; nil when hc has none. hc must be valid.
func (hc *HealthCheck) ActiveConfig(policy string) *config.ActiveHealthCheck {
	a := hc.Active
	if a == nil {
		return nil
	}
	dur := func(v *gwv1.Duration, def time.Duration) time.Duration {
		if v == nil {
			return def
		}
		d, _ := time.ParseDuration(string(*v))
		return d
	}
	out := &config.ActiveHealthCheck{Type: config.HealthCheckType(a.Type), Policy: policy,
		Interval: dur(a.Interval, DefaultInterval), Timeout: dur(a.Timeout, DefaultTimeout), Jitter: dur(a.Jitter, 0),
		HealthyThreshold: DefaultHealthyThreshold, UnhealthyThreshold: DefaultUnhealthyThreshold}
	out.Timeout = min(out.Timeout, out.Interval)
	if a.HealthyThreshold != nil {
		out.HealthyThreshold = *a.HealthyThreshold
	}
	if a.UnhealthyThreshold != nil {
		out.UnhealthyThreshold = *a.UnhealthyThreshold
	}
	switch {
	case a.HTTP != nil:
		h := a.HTTP
		out.Path, out.Method = h.Path, "GET"
		if h.Method != nil {
			out.Method = *h.Method
		}
		if h.Hostname != nil {
			out.Host = *h.Hostname
		}
		for _, r := range h.ExpectedStatuses {
			end := r.Start
			if r.End != nil {
				end = *r.End
			}
			out.ExpectedStatuses = append(out.ExpectedStatuses, config.StatusRange{Start: r.Start, End: end})
		}
		if len(out.ExpectedStatuses) == 0 {
			out.ExpectedStatuses = []config.StatusRange{{Start: 200, End: 299}}
		}
	case a.TCP != nil:
		out.Send, out.Expect = a.TCP.Send.bytes(), a.TCP.Expect.bytes()
	case a.GRPC != nil && a.GRPC.Service != nil:
		out.GRPCService = *a.GRPC.Service
	}
	if a.TLS != nil {
		// RootCAs nil: the system's roots. Its ID names its settings.
		out.TLS = &config.BackendTLS{ID: "healthCheck.tls/" + a.TLS.ServerName, Policy: policy, ServerName: a.TLS.ServerName}
	}
	out.MakeID()
	return out
}

// Config is the passive check as the data plane's configuration says it,
// with the defaults of unset fields, for the policy named policy; nil
// when hc has none. hc must be valid.
func (hc *HealthCheck) Config(policy string) *config.OutlierDetection {
	p := hc.Passive
	if p == nil {
		return nil
	}
	out := &config.OutlierDetection{
		Consecutive5xx:                 DefaultConsecutive5xx,
		ConsecutiveLocalOriginFailures: DefaultConsecutiveLocalFailure,
		BaseEjectionTime:               DefaultBaseEjectionTime,
		MaxEjectionPercent:             DefaultMaxEjectionPercent,
		Policy:                         policy,
	}
	if p.Consecutive5XxErrors != nil {
		out.Consecutive5xx = *p.Consecutive5XxErrors
	}
	if p.ConsecutiveGatewayErrors != nil {
		out.ConsecutiveGatewayErrors = *p.ConsecutiveGatewayErrors
	}
	if p.ConsecutiveLocalOriginFailures != nil {
		out.ConsecutiveLocalOriginFailures = *p.ConsecutiveLocalOriginFailures
	}
	if p.BaseEjectionTime != nil {
		out.BaseEjectionTime, _ = time.ParseDuration(string(*p.BaseEjectionTime))
	}
	if p.MaxEjectionPercent != nil {
		out.MaxEjectionPercent = *p.MaxEjectionPercent
	}
	return out
}

// isToken reports whether s is an RFC 7230 token, as a cookie name is.
func isToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return true
}

// Config is lb as the data plane's configuration says it, for the policy
// named policy ("namespace/name"); each call makes a new value (a rule's
// holds the turn of its own round robin). lb must be valid.
func (lb *LoadBalancer) Config(policy string) *config.LoadBalancer {
	out := &config.LoadBalancer{Algorithm: config.LBAlgorithm(lb.Type), Policy: policy}
	if ch := lb.ConsistentHash; ch != nil {
		out.HashOn = config.HashSource(ch.Type)
		switch ch.Type {
		case Header:
			out.HashName = textproto.CanonicalMIMEHeaderKey(ch.Header.Name)
		case Cookie:
			out.HashName = ch.Cookie.Name
		}
	}
	return out
}

// DeepCopy copies p (jsoncopy.Copy).
func (p *BackendTrafficPolicy) DeepCopy() *BackendTrafficPolicy { return jsoncopy.Copy(p) }

// DeepCopyObject makes BackendTrafficPolicy a runtime.Object.
func (p *BackendTrafficPolicy) DeepCopyObject() runtime.Object { return p.DeepCopy() }
