// Package routing attaches HTTPRoutes and GRPCRoutes to listeners, decides
// their statuses, and compiles each listener's routes into the
// config.Table the data plane matches requests against. It also holds the
// rules every route kind shares: which listeners admit a route
// (allowedRoutes) and which backend references resolve.
package routing

import (
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// Parent is an object a route may name in a parentRef.
type Parent struct {
	Kind      string // "Gateway" or "ListenerSet"
	Namespace string
	Name      string
}

// Listener is one listener of the merged list, as route attachment sees it.
type Listener struct {
	ID             int // unique within one Compile; index into Input.Listeners
	Gateway        types.NamespacedName
	Parent         Parent
	Name           gwv1.SectionName
	Port           gwv1.PortNumber
	Protocol       gwv1.ProtocolType
	Hostname       string // "" = any
	AllowedRoutes  gwv1.AllowedRoutes
	SupportedKinds []gwv1.RouteGroupKind // the protocol's kinds narrowed by allowedRoutes.kinds; empty = none
	Accepted       bool                  // routes may attach and are counted
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name        string
	Port        int32
	AppProtocol string
	// TLS, when set, is the BackendTLSPolicy for this port: the data plane
	// speaks TLS to it.
	TLS *config.BackendTLS
}

// Service is what backend validation needs to know about a Service.
type Service struct {
	Ports []ServicePort
	// LB is the load balancing of a BackendTrafficPolicy attached to the
	// Service, nil for none.
	LB *config.LoadBalancer
	// Outlier is the passive health check of that policy, nil for none.
	Outlier *config.OutlierDetection
	// Active is the active health check of that policy, nil for none.
	Active *config.ActiveHealthCheck
	// Breaker is the circuit breaker of that policy, nil for none.
	Breaker *config.CircuitBreaker
	// Conn is the timeouts and TCP keepalive of that policy, nil for none.
	Conn *config.BackendConn
	// Session and Budget are the sessionPersistence and retry budget of
	// the XBackendTrafficPolicy attached to the Service, nil for none.
	Session *config.SessionPersistence
	Budget  *config.RetryBudget
}

// Input is everything Compile needs.
type Input struct {
	ControllerName gwv1.GatewayController
	Listeners      []Listener
	// Parents are the Gateways of our class and the ListenerSets whose parent
	// is one of them; the value says whether that parent is accepted.
	Parents         map[Parent]bool
	Routes          []*gwv1.HTTPRoute // any order; Compile sorts by creation time, then namespace/name
	GRPCRoutes      []*gwv1.GRPCRoute // the same, compiled into the same tables (grpc.go)
	NamespaceLabels map[string]map[string]string
	Services        map[types.NamespacedName]Service
	ReferenceGrants []*gwv1.ReferenceGrant
	// Traffic, when set, returns what BackendTrafficPolicies give a rule
	// (by its name, "" for none) of a route as served on listener l.
	Traffic func(l *Listener, kind RouteKind, route types.NamespacedName, rule string) config.RuleTraffic
	// Security, when set, returns what the SecurityPolicy that applies to
	// a rule (as Traffic) asks of its requests; nil for none.
	Security func(l *Listener, kind RouteKind, route types.NamespacedName, rule string) *config.Security
}

// Output is the compiled tables and the route statuses.
type Output struct {
	Tables         map[int]*config.Table // listener ID -> its routes; absent when none attached
	AttachedRoutes map[int]int32         // listener ID -> number of routes attached
	// RouteParents holds, per route, the RouteParentStatus entries for
	// parentRefs that name one of our Parents (other controllers' entries are
	// not ours to compute).
	RouteParents map[types.NamespacedName][]gwv1.RouteParentStatus
	// GRPCRouteParents is RouteParents for GRPCRoutes.
	GRPCRouteParents map[types.NamespacedName][]gwv1.RouteParentStatus
	// HealthChecks are the backends of the compiled rules that an active
	// health check probes, with it, each once, in a stable order.
	HealthChecks []config.HealthCheckTarget
}
