package config

import (
	"sync/atomic"

	"portico.dev/portico/internal/shared/hostname"
)

// StreamRoute is what the data plane does with a connection whose SNI picked it
// (TLSRoute) or that its TCP listener accepted (TCPRoute), or with a
// session its UDP listener opened (UDPRoute): open a stream or session to
// one of its backends, chosen by weight.
type StreamRoute struct {
	// Name is "namespace/name", for metrics and the access log.
	Name        string
	Backends    []StreamBackend
	TotalWeight int32
	// turn counts the connections Next gave out: the route's own count,
	// so that the shares of its backends hold whatever other routes get.
	turn atomic.Uint32
}

// Next returns the backend for the route's next connection (Pick of its
// own count of connections).
func (r *StreamRoute) Next() *StreamBackend {
	return r.Pick(r.turn.Add(1) - 1)
}

// StreamBackend is one backendRef of a TLSRoute's or TCPRoute's rule.
type StreamBackend struct {
	Key    BackendKey
	Weight int32
	// TLS is the port's BackendTLSPolicy: a terminated stream is
	// encrypted again towards the backend. Passthrough streams ignore it,
	// as they carry the client's own TLS session.
	TLS *BackendTLS
	// Invalid, when not empty, says why connections given to this backend
	// are refused (the spec: a share of connections as large as its
	// weight is rejected).
	Invalid string
	// ProxyProtocol, when set, is the PROXY header each connection to the
	// backend starts with (the Service's BackendTrafficPolicy).
	ProxyProtocol *BackendProxyProtocol
}

// Pick returns the backend for the n-th connection: weighted, over the
// total weight. Nil when the route has no weight at all.
func (r *StreamRoute) Pick(n uint32) *StreamBackend {
	if r.TotalWeight <= 0 {
		return nil
	}
	w := int32(n % uint32(r.TotalWeight))
	for i := range r.Backends {
		if w < r.Backends[i].Weight {
			return &r.Backends[i]
		}
		w -= r.Backends[i].Weight
	}
	return nil
}

// StreamTable picks a TLSRoute by SNI: the most specific hostname wins, as for
// certificates.
type StreamTable struct {
	hosts *hostname.Table[*StreamRoute]
}

// Lookup returns the route for a server name, or nil.
func (t *StreamTable) Lookup(serverName string) *StreamRoute {
	if t == nil {
		return nil
	}
	r, _ := t.hosts.Lookup(serverName)
	return r
}

// Len is the number of hostnames in the table.
func (t *StreamTable) Len() int { return t.hosts.Len() }

// NewStreamTable maps hostname patterns (listener-style: exact, "*.suffix", ""
// for any) to routes, routes[i] to patterns[i]; the first of equal
// patterns wins.
func NewStreamTable(patterns []string, routes []*StreamRoute) *StreamTable {
	return &StreamTable{hosts: hostname.NewTable(patterns, routes)}
}
