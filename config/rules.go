package config

import (
	"crypto/x509"
	"strconv"
	"time"
)

// NamespacedName names a Kubernetes object by namespace and name. It has
// the shape of apimachinery's, so that translate converts one into the
// other, without the data plane importing Kubernetes packages.
type NamespacedName struct {
	Namespace string
	Name      string
}

// String is "namespace/name".
func (n NamespacedName) String() string { return n.Namespace + "/" + n.Name }

// BackendTLS is how the data plane connects to a backend over TLS, as a
// BackendTLSPolicy says.
type BackendTLS struct {
	// ID is the same for the same settings in every Config: the data plane
	// pools backend connections per ID, so that connections made with one
	// identity check are never used for another.
	ID string
	// Policy is the BackendTLSPolicy, "namespace/name", for messages.
	Policy string
	// ServerName is the SNI sent to the backend, and the name its
	// certificate must be valid for unless SubjectAltNames are given.
	ServerName string
	// RootCAs verify the backend's certificate chain; nil means the
	// system's roots.
	RootCAs *x509.CertPool
	// SANHostnames and SANURIs, when either is set, replace ServerName in
	// the identity check: the certificate must have one of these DNS
	// names (matched as a TLS client matches a hostname, wildcards
	// included) or URIs (compared as strings).
	SANHostnames []string
	SANURIs      []string
	// Invalid, when not empty, says why no connection to the backend can be
	// trusted (no CA certificate could be loaded): requests get a 500.
	Invalid string
}

// BackendKey names the endpoints of one Service port.
type BackendKey struct {
	Service NamespacedName
	Port    int32
}

// String is "namespace/service:port".
func (k BackendKey) String() string {
	return k.Service.String() + ":" + strconv.Itoa(int(k.Port))
}

// Rule is one compiled HTTPRoute rule: what the data plane does with a
// request that matched it.
type Rule struct {
	Route NamespacedName
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
	// LB is the load balancing a BackendTrafficPolicy gives the rule
	// (attached to the rule, its route, ListenerSet or Gateway, the most
	// specific first): how a backend, and an endpoint of a backend
	// without an LB of its own, are picked. Nil: backends at random by
	// weight, endpoints round robin.
	LB *LoadBalancer
	// Outlier is the passive health check a BackendTrafficPolicy gives
	// the rule, as LB; nil: none.
	Outlier *OutlierDetection
	// Active is the active health check a BackendTrafficPolicy gives the
	// rule, as LB; nil: none.
	Active *ActiveHealthCheck
	// Breaker is the circuit breaker a BackendTrafficPolicy gives the
	// rule's backends, as LB; nil: none.
	Breaker *CircuitBreaker
	// Conn is the timeouts and TCP keepalive a BackendTrafficPolicy gives
	// the connections to the rule's backends, as LB; nil: the flags'.
	// Compile copies it to every Backend.Conn left nil, which is what the
	// data plane reads.
	Conn *BackendConn
	// Session is the rule's sessionPersistence, nil for none: it wins
	// over LB for a request that carries a valid session.
	Session *SessionPersistence
	// BackendSession tells that a backend of the rule has a Session of
	// its own (an XBackendTrafficPolicy's), which applies when the rule
	// has none.
	BackendSession bool
	// Security is what the SecurityPolicy that applies to the rule asks
	// of its requests before they are forwarded; nil: none applies.
	Security *Security
	// RateLimit is the local rate limit a ClientTrafficPolicy gives the
	// rule (of its route, else of the listener); nil: none.
	RateLimit *RateLimit
	// NetworkHash, set on the rules of a KIngress, is the hash of the
	// version of it this configuration serves: Knative's readiness probing
	// asks for it with a K-Network-Hash header of "override".
	NetworkHash string
}

// Retry is a compiled HTTPRouteRetry.
type Retry struct {
	Codes    []int         // response codes to retry on
	Attempts int           // retries after the first attempt; 0 disables them
	Backoff  time.Duration // 0: unset
}

// Backend is one weighted backendRef of a rule.
type Backend struct {
	Key         BackendKey
	Weight      int32
	AppProtocol string // Service port appProtocol, e.g. "kubernetes.io/h2c"
	// TLS is the port's BackendTLSPolicy, nil for plain text.
	TLS *BackendTLS
	// LB is the load balancing of a BackendTrafficPolicy attached to the
	// Service: how its endpoints are picked, over the rule's LB.
	LB *LoadBalancer
	// Outlier is the passive health check of the Service's policy, over
	// the rule's.
	Outlier *OutlierDetection
	// Active is the active health check of the Service's policy, over
	// the rule's.
	Active *ActiveHealthCheck
	// Breaker is the circuit breaker of the Service's policy, over the
	// rule's.
	Breaker *CircuitBreaker
	// Conn is the timeouts and TCP keepalive of the Service's policy,
	// over the rule's.
	Conn *BackendConn
	// Session is the sessionPersistence of the XBackendTrafficPolicy of
	// the Service: a request carrying a valid session of it goes to its
	// endpoint, when the rule has no Session of its own (the rule's is
	// the more specific).
	Session *SessionPersistence
	// Budget is the retry budget of the XBackendTrafficPolicy of the
	// Service, nil for none: every retry to the Service is counted
	// against it (counts kept per Service, across configurations).
	Budget *RetryBudget
	// Invalid, when not empty, says why requests given to this backend get a
	// 500 (BackendNotFound, RefNotPermitted, ...).
	Invalid string
	Filters []Filter
	// Address, when set, is the "host:port" of a backend named by DNS (an
	// ExternalName Service), used instead of endpoints.
	Address string
	// Dispatch, when not zero, is a port of Portico's own (on its bind
	// address) that serves this backend: the request is routed again
	// there in process rather than sent through the network (an
	// ExternalName Service naming Portico's own cluster-local Service).
	Dispatch int32
}
