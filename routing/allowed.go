package routing

import (
	"cmp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// The spec's rules on which listener takes which route, shared by every
// route kind: this package's HTTPRoutes and GRPCRoutes, and package
// tlsrouting's TLSRoutes and tcprouting's TCPRoutes and UDPRoutes.

// RouteKind is the kind of a route: what listeners carry it, which
// ReferenceGrants let it refer to other namespaces, and what its
// backends must speak.
type RouteKind uint8

const (
	KindHTTPRoute RouteKind = iota
	KindGRPCRoute
	KindTLSRoute
	KindTCPRoute
	KindUDPRoute
)

func (k RouteKind) String() string {
	switch k {
	case KindGRPCRoute:
		return "GRPCRoute"
	case KindTLSRoute:
		return "TLSRoute"
	case KindTCPRoute:
		return "TCPRoute"
	case KindUDPRoute:
		return "UDPRoute"
	}
	return "HTTPRoute"
}

// carriedBy reports whether a listener of protocol p carries routes of
// kind k: TLSRoutes go to TLS listeners (either mode), TCPRoutes to TCP
// listeners, UDPRoutes to UDP listeners, the others to HTTP and HTTPS
// listeners.
func (k RouteKind) carriedBy(p gwv1.ProtocolType) bool {
	switch k {
	case KindTLSRoute:
		return p == gwv1.TLSProtocolType
	case KindTCPRoute:
		return p == gwv1.TCPProtocolType
	case KindUDPRoute:
		return p == gwv1.UDPProtocolType
	}
	return p == gwv1.HTTPProtocolType || p == gwv1.HTTPSProtocolType
}

// Carries reports whether listener l is of a kind that takes routes of
// kind k at all: its protocol and supported kinds, acceptance aside.
// SupportedKinds already is allowedRoutes.kinds narrowed to what the
// protocol carries; empty, it takes no route (a listener whose kinds are
// all invalid), not every kind.
func Carries(l *Listener, k RouteKind) bool {
	return k.carriedBy(l.Protocol) && hasKind(l.SupportedKinds, k)
}

func hasKind(kinds []gwv1.RouteGroupKind, kind RouteKind) bool {
	name := gwv1.Kind(kind.String())
	for _, k := range kinds {
		if k.Kind == name && (k.Group == nil || *k.Group == gwv1.GroupName) {
			return true
		}
	}
	return false
}

// Admission applies listeners' allowedRoutes to routes. It compiles each
// namespace label selector once, when first needed, so that thousands of
// routes attaching to a listener do not parse its selector each time; it
// is meant for one compilation and not for concurrent use.
type Admission struct {
	namespaceLabels map[string]map[string]string
	// selectors are keyed by the selector object rather than by listener:
	// listeners may share one (read-only) allowedRoutes, and it is then
	// compiled once for all of them.
	selectors map[*metav1.LabelSelector]labels.Selector
}

// NewAdmission returns an Admission that reads the labels of a namespace
// in namespaceLabels.
func NewAdmission(namespaceLabels map[string]map[string]string) Admission {
	return Admission{namespaceLabels: namespaceLabels}
}

// Allows reports whether listener l takes routes of kind k from namespace
// ns: it is accepted, carries the kind, and its allowedRoutes.namespaces
// admits ns.
func (a *Admission) Allows(l *Listener, k RouteKind, ns string) bool {
	return l.Accepted && Carries(l, k) && a.fromNamespace(l, ns)
}

// fromNamespace applies l's allowedRoutes.namespaces (Same when unset) to
// a route in ns.
func (a *Admission) fromNamespace(l *Listener, ns string) bool {
	from := gwv1.NamespacesFromSame
	var selector *metav1.LabelSelector
	if rn := l.AllowedRoutes.Namespaces; rn != nil {
		if rn.From != nil {
			from = *rn.From
		}
		selector = rn.Selector
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSame:
		// The namespace of the listener's own parent, Gateway or
		// ListenerSet; the Gateway's when the parent is not set.
		return ns == cmp.Or(l.Parent.Namespace, l.Gateway.Namespace)
	case gwv1.NamespacesFromSelector:
		// Without a selector, or with one that does not parse, Selector
		// admits no namespace.
		if selector == nil {
			return false
		}
		return a.compiled(selector).Matches(labels.Set(a.namespaceLabels[ns]))
	}
	return false
}

// compiled returns s as a labels.Selector, compiling it on first use.
func (a *Admission) compiled(s *metav1.LabelSelector) labels.Selector {
	if c, ok := a.selectors[s]; ok {
		return c
	}
	c, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		c = labels.Nothing()
	}
	if a.selectors == nil {
		a.selectors = map[*metav1.LabelSelector]labels.Selector{}
	}
	a.selectors[s] = c
	return c
}
