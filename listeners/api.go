// Package listeners merges a Gateway's listeners with those of its attached
// ListenerSets (GEP-1713), validates the merged list as if it were one
// Gateway, and computes the Gateway's and every ListenerSet's status.
//
// It is a pure function of its input: no I/O, no clocks, deterministic order.
package listeners

import (
	"crypto/x509"
	"errors"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Source identifies the object that declares a listener.
type Source struct {
	Kind      string // "Gateway" or "ListenerSet"
	Namespace string
	Name      string
}

// CertificateCheck reports whether the Secret namespace/name can serve as a
// listener certificate: nil when it exists, is of type kubernetes.io/tls and
// holds a parseable key pair; otherwise an error whose message goes into the
// listener's ResolvedRefs condition.
type CertificateCheck func(namespace, name string) error

// ErrServingPrevious is wrapped by the error a CertificateCheck returns for
// a Secret whose data is unusable now while the key pair it held before
// still serves: an update that breaks a certificate must not take its
// hostname down. The listener stays programmed with the previous key pair
// and its ResolvedRefs condition says what is wrong with the Secret.
var ErrServingPrevious = errors.New("serving the certificate the Secret held before")

// Input is everything Merge needs for one Gateway.
type Input struct {
	Gateway *gwv1.Gateway
	// ClassAccepted is true when the Gateway's GatewayClass is ours and accepted.
	ClassAccepted bool
	// UnsupportedAddress, when set, says which entry of the Gateway's
	// spec.addresses has a type Portico cannot serve: the Gateway is then
	// not accepted (reason UnsupportedAddress), and nothing of it serves.
	UnsupportedAddress string
	// InvalidParameters, when set, says why the Gateway's
	// spec.infrastructure.parametersRef cannot be used: the Gateway is then
	// not accepted (reason InvalidParameters), and nothing of it serves.
	InvalidParameters string
	// ListenerSets are all ListenerSets whose parentRef names this Gateway, in
	// any namespace and any order; Merge sorts them (creation time, then
	// namespace/name) and decides which may attach.
	ListenerSets []*gwv1.ListenerSet
	// NamespaceLabels holds the labels of every known Namespace.
	NamespaceLabels map[string]map[string]string
	ReferenceGrants []*gwv1.ReferenceGrant
	Certificates    CertificateCheck
	// CACertificates returns the CA certificates of a ConfigMap's ca.crt,
	// for the Gateway's client certificate validation (spec.tls.frontend),
	// or why there are none. Nil: every reference is invalid.
	CACertificates func(namespace, name string) ([]*x509.Certificate, error)
	// TrustBundles returns the CA certificates of a ClusterTrustBundle
	// (certificates.k8s.io), or why there are none. Nil: every reference
	// to one is invalid.
	TrustBundles func(name string) ([]*x509.Certificate, error)
	// ServicePorts returns the ports of the Service namespace/name, false
	// when there is no such Service: the ExternalAuth filters of
	// listeners name one. Nil: no Service exists.
	ServicePorts func(namespace, name string) ([]int32, bool)
}

// ClientValidation is the client certificate check of an HTTPS listener,
// from its Gateway's spec.tls.frontend.
type ClientValidation struct {
	// ID is the same for the same check (CA certificates and mode) in
	// every translation: a connection that passed another check, or none,
	// must not be served under this one.
	ID string
	// CAs are the trust anchors of client certificates.
	CAs *x509.CertPool
	// Optional is AllowInsecureFallback: a client without a valid
	// certificate is let through too.
	Optional bool
}

// Listener is one entry of the merged list.
type Listener struct {
	Gateway  types.NamespacedName // the Gateway whose address and port serve it
	Source   Source
	Name     gwv1.SectionName
	Port     gwv1.PortNumber
	Protocol gwv1.ProtocolType
	Hostname string // "" when the listener has none
	// TLSMode is how a TLS listener treats its connections: Passthrough
	// (routed by SNI, never decrypted) or Terminate. "" for HTTP and HTTPS.
	TLSMode gwv1.TLSModeType
	// ServesPrevious is set when the only unresolved references are Secrets
	// whose update broke them (ErrServingPrevious): the listener serves
	// with the key pairs they held before, although ResolvedRefs is false.
	ServesPrevious bool
	// Certificates are the resolved Secrets of tls.certificateRefs, in order
	// (HTTPS and TLS Terminate only; empty when they did not resolve).
	Certificates []types.NamespacedName
	// ClientValidation, when set, is the client certificate check of the
	// listener's port (HTTPS only).
	ClientValidation *ClientValidation
	// RequestFilters are the listener's pre-routing filters
	// (filters.requests), in order, when every one of them can run and
	// names a Service that resolved; nil otherwise (the listener is then
	// not served). Read-only: shared with the input object.
	RequestFilters []gwv1.ListenerFilter
	// AllowedRoutes with defaults applied (namespaces.from Same; kinds from the protocol).
	// Kinds is always the effective set, identical to SupportedKinds: kinds
	// the listener asked for but cannot have are dropped, so an empty list
	// means no route kind may attach. It may share pointers with the input
	// objects and with other listeners: treat it as read-only.
	AllowedRoutes gwv1.AllowedRoutes
	// SupportedKinds are the valid route kinds this listener accepts
	// (read-only, shared between listeners).
	SupportedKinds []gwv1.RouteGroupKind
	// Accepted is true when routes may attach: the listener is valid, not
	// conflicted, and its Gateway is accepted. It can be true while
	// ResolvedRefs is false (a missing certificate): routes attach and are
	// counted, but nothing is served.
	Accepted     bool
	Conflicted   bool
	ResolvedRefs bool

	// statusIndex locates this listener's entry in its declaring object's
	// status.listeners, for SetAttachedRoutes. For a ListenerSet's
	// listener, attachedRoutes points right at the entry's AttachedRoutes,
	// sparing a lookup of the ListenerSet's status per listener.
	statusIndex    int
	attachedRoutes *int32
}

// Serves reports whether the listener is put on the data plane.
func (l *Listener) Serves() bool {
	return l.Accepted && !l.Conflicted && (l.ResolvedRefs || l.ServesPrevious)
}

// Result is the merged list and every status Merge computed. AttachedRoutes
// counts are zero here; the caller fills them after route attachment with
// SetAttachedRoutes.
//
// Every condition carries the ObservedGeneration of its object and a zero
// LastTransitionTime, which the status writer stamps when a condition
// actually changes. Pointers inside a Result (route groups, allowedRoutes
// namespaces and selectors) are shared between entries and with the input
// objects: treat what they point to as read-only.
type Result struct {
	Listeners    []Listener // Gateway's own first, then attached ListenerSets in precedence order
	Gateway      gwv1.GatewayStatus
	ListenerSets map[types.NamespacedName]gwv1.ListenerSetStatus // one per input ListenerSet
	// BackendClientCertificate is the resolved Secret of the Gateway's
	// spec.tls.backend.clientCertificateRef: the certificate it presents
	// to TLS backends. Nil when there is none or it did not resolve.
	BackendClientCertificate *types.NamespacedName
}
