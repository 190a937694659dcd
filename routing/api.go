// Package routing attaches routes to listeners and compiles them into
// per-listener tables that the data plane matches requests against without
// allocating.
package routing

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
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
	SupportedKinds []gwv1.RouteGroupKind
	Accepted       bool // routes may attach and are counted
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name        string
	Port        int32
	AppProtocol string
}

// Service is what backend validation needs to know about a Service.
type Service struct {
	Ports []ServicePort
}

// Input is everything Compile needs.
type Input struct {
	ControllerName gwv1.GatewayController
	Listeners      []Listener
	// Parents are the Gateways of our class and the ListenerSets whose parent
	// is one of them; the value says whether that parent is accepted.
	Parents         map[Parent]bool
	Routes          []*gwv1.HTTPRoute // any order; Compile sorts by creation time, then namespace/name
	NamespaceLabels map[string]map[string]string
	Services        map[types.NamespacedName]Service
	ReferenceGrants []*gwv1.ReferenceGrant
}

// Output is the compiled tables and the route statuses.
type Output struct {
	Tables         map[int]*Table // listener ID -> its routes; absent when none attached
	AttachedRoutes map[int]int32  // listener ID -> number of routes attached
	// RouteParents holds, per route, the RouteParentStatus entries for
	// parentRefs that name one of our Parents (other controllers' entries are
	// not ours to compute).
	RouteParents map[types.NamespacedName][]gwv1.RouteParentStatus
}

// BackendKey names the endpoints of one Service port.
type BackendKey struct {
	Service types.NamespacedName
	Port    int32
}

// Rule is one compiled HTTPRoute rule: what the data plane does with a
// request that matched it.
type Rule struct {
	Route types.NamespacedName
	// RouteName is Route as "namespace/name", made once so that per-request
	// metrics do not build it.
	RouteName string
	Index     int    // position of the rule in the route's spec.rules
	Name      string // the rule's name, "" when it has none
	// Invalid, when not empty, says why this rule cannot be served; the data
	// plane answers 500.
	Invalid     string
	Backends    []Backend
	TotalWeight int32
	// Filters are applied in order by the data plane (see filters.go).
	// A rule without backends (TotalWeight 0) and without a RequestRedirect
	// answers 500.
	Filters []Filter
	// RequestTimeout and BackendRequestTimeout are timeouts.request and
	// timeouts.backendRequest: 0 when the route leaves them unset (the data
	// plane's default applies), NoTimeout when the route disables them.
	RequestTimeout        time.Duration
	BackendRequestTimeout time.Duration
	// Retry is the rule's retry policy, nil when it has none.
	Retry *Retry
}

// Retry is a compiled HTTPRouteRetry.
type Retry struct {
	Codes    []int         // response codes to retry on
	Attempts int           // 0: unset, the data plane's default applies
	Backoff  time.Duration // 0: unset
}

// Backend is one weighted backendRef of a rule.
type Backend struct {
	Key         BackendKey
	Weight      int32
	AppProtocol string // Service port appProtocol, e.g. "kubernetes.io/h2c"
	// Invalid, when not empty, says why requests given to this backend get a
	// 500 (BackendNotFound, RefNotPermitted, ...).
	Invalid string
	Filters []Filter
}
