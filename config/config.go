// Package config is the data plane's configuration: ports, listeners,
// certificates, the compiled route tables with their matches, filters and
// backends, TLS stream tables and endpoints. translate produces a Config
// and proxy serves it; neither owns it, and it holds no Kubernetes or
// Gateway API type, so that the data plane never evaluates an object,
// an attachment or a precedence rule at request time. Everything in it is
// immutable once built: the next Config shares what did not change.
package config

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"

	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/sni"
)

// Protocol is what a port speaks.
type Protocol uint8

const (
	HTTP Protocol = iota + 1
	HTTPS
	// TCP ports carry every connection to the one TCPRoute of their
	// listener: nothing in a TCP connection could choose between two.
	TCP
	// UDP ports carry every datagram to the one UDPRoute of their
	// listener, in sessions keyed by the client's address. A UDP port is
	// a socket apart from the TCP one of the same number (PortKey.UDP).
	UDP
)

func (p Protocol) String() string {
	switch p {
	case HTTP:
		return "HTTP"
	case HTTPS:
		return "HTTPS"
	case TCP:
		return "TCP"
	case UDP:
		return "UDP"
	}
	return fmt.Sprintf("Protocol(%d)", uint8(p))
}

// Config is everything the data plane needs, compiled: no request ever
// looks at a Kubernetes object.
type Config struct {
	Generation int64
	Ports      []*Port
	// Endpoints holds the ready addresses ("ip:port") of every backend a
	// route refers to. Consecutive Configs share most of it.
	Endpoints EndpointTable
	// BackendTLSIDs holds the ID of every BackendTLS a route of
	// this Config may send requests or mirrors to; listing more does no
	// harm. Apply closes the backend connection pools of all other IDs: the
	// pool of an ID missing here is rebuilt at its next request, so an
	// incomplete set costs new connections, never a wrong identity check.
	// It is given rather than collected here because the route tables do
	// not expose their rules.
	BackendTLSIDs map[string]struct{}
	// BackendClientCertIDs holds the ID of every BackendClientCert of a
	// listener, for the same pruning.
	BackendClientCertIDs map[string]struct{}
	// HealthChecks are the backends whose endpoints are probed by active
	// health checks, each with its check, without repeats: Apply starts
	// and stops the probers.
	HealthChecks []HealthCheckTarget
}

// BackendClientCert is the certificate a Gateway presents to TLS backends
// (spec.tls.backend.clientCertificateRef).
type BackendClientCert struct {
	// ID is the same for the same certificate in every Config: backend
	// connections are pooled per BackendTLS ID and certificate ID.
	ID   string
	Cert *tls.Certificate
}

// Port is one bound port and the listeners that share it.
type Port struct {
	// Address is the IP the port binds to; "" means Options.BindAddress.
	// Gateways given addresses of their own bind the same port number on
	// each of them.
	Address  string
	Number   int32
	Protocol Protocol
	// Listeners finds the listener for a request's Host: the most specific
	// listener hostname wins, as it does for SNI.
	Listeners *hostname.Table[*Listener]
	// All lists the port's listeners in precedence order, for status,
	// debugging and tests; requests use the tables. In chunks: the next
	// Config's list shares all that a change did not touch.
	All chunked.List[*Listener]
	// SNI picks the certificate and listener at the TLS handshake (HTTPS
	// only). Entry.Value is the *Listener.
	SNI *sni.Table
	// Streams is set when some listener of the port is of protocol TLS: a
	// ClientHello whose name no listener serves is then refused by closing
	// the connection, as TLS listeners refuse what they cannot route,
	// rather than with an alert.
	Streams bool
	// ProxyProtocol, when set, reads a PROXY protocol header at the start
	// of every connection (ClientTrafficPolicy).
	ProxyProtocol *ProxyProtocol
	// Cleartext, on a port without TLS, are the connection settings
	// (ClientTraffic.ConnSettings) of a connection before its first
	// request names a listener: the strictest of its listeners' (h2c
	// names none at all). nil: the port's flags.
	Cleartext *ClientTraffic
}

// Listener is one serving listener.
type Listener struct {
	// Key identifies the listener across configs ("Gateway/ns/name/section"):
	// a connection keeps the listener it was accepted for, and compares keys
	// after a swap, not pointers.
	Key      string
	Hostname string
	Routes   *Table // nil when no route is attached
	// BackendClientCert is what requests through this listener present to
	// TLS backends; nil: no client certificate.
	BackendClientCert *BackendClientCert
	// ClientAuth is the client certificate check of the listener's
	// handshakes, the one its SNI entry carries (nil for none). A
	// connection whose handshake ran under another check, before a
	// configuration change, is not served; with an optional check, a
	// certificate is checked here before it is passed on to the backend.
	ClientAuth *sni.ClientAuth
	// Stream is how a listener of protocol TLS serves its connections,
	// StreamNone for HTTP and HTTPS listeners; Streams picks a TLS
	// listener's route by SNI (nil: no route, every connection refused).
	Stream  StreamMode
	Streams *StreamTable
	// TCP is the route a TCP listener (StreamTCP) gives every
	// connection; nil: no route attached, connections are refused.
	TCP *StreamRoute
	// Client is what ClientTrafficPolicies set for the listener; nil
	// when none applies.
	Client *ClientTraffic
	// UDP is the route a UDP listener (StreamUDP) gives every session;
	// nil: no route attached, datagrams are dropped.
	UDP *StreamRoute
	// Tracing is what the XTelemetryPolicy of the listener's Gateway
	// sets; nil: the process's tracing.
	Tracing *Tracing
	// RequestFilters are the listener's pre-routing filters
	// (Listener.filters.requests), run on every request in this order
	// before its route is matched, once; each may refuse it or set
	// headers route matching sees, never its Host. Only ExternalAuth
	// filters exist: a listener with any other is not served.
	RequestFilters []*ExtAuth
}

// StreamMode says what a listener does with a connection: serve HTTP, or
// carry it as a byte stream to a TLSRoute's or TCPRoute's backend.
type StreamMode uint8

const (
	StreamNone StreamMode = iota
	// StreamPassthrough forwards the client's TLS session as it is,
	// ClientHello included, routed by its SNI.
	StreamPassthrough
	// StreamTerminate completes the handshake with the listener's
	// certificates and forwards the decrypted bytes.
	StreamTerminate
	// StreamTCP forwards a TCP listener's connections, as they are, to
	// its TCPRoute's backends.
	StreamTCP
	// StreamUDP forwards a UDP listener's datagrams, as they are, to its
	// UDPRoute's backends, one backend socket per client address.
	StreamUDP
)

// ClientAuthID is the ID of l's client certificate check, "" for none.
func (l *Listener) ClientAuthID() string {
	if l.ClientAuth == nil {
		return ""
	}
	return l.ClientAuth.ID
}

// Endpoints are the ready addresses of one backend, used round robin
// unless a BackendTrafficPolicy picks another way (balance.go).
type Endpoints struct {
	Addrs []string
	next  atomic.Uint32
	// balance holds what the other ways of picking need (a consistent
	// hash table, requests in flight), made on first use: endpoints no
	// policy names never pay for it.
	balance atomic.Pointer[balanceState]
}

// NewEndpoints returns a set of addresses to balance over.
func NewEndpoints(addrs ...string) *Endpoints {
	return &Endpoints{Addrs: addrs}
}

// Pick returns the next address, or "" when there is none.
func (e *Endpoints) Pick() string {
	if e == nil || len(e.Addrs) == 0 {
		return ""
	}
	n := e.next.Add(1)
	return e.Addrs[int(n-1)%len(e.Addrs)]
}

// PickIndex is Pick as an index of Addrs; -1 when there is none.
func (e *Endpoints) PickIndex() int {
	if e == nil || len(e.Addrs) == 0 {
		return -1
	}
	return int((e.next.Add(1) - 1) % uint32(len(e.Addrs)))
}

// Validate checks what Apply relies on.
func (c *Config) Validate() error {
	seen := map[PortKey]bool{}
	for _, p := range c.Ports {
		if p.Number < 1 || p.Number > 65535 {
			return fmt.Errorf("port %d: out of range", p.Number)
		}
		if p.Address != "" && net.ParseIP(p.Address) == nil {
			return fmt.Errorf("port %d: address %q is not an IP address", p.Number, p.Address)
		}
		if seen[p.Key()] {
			return fmt.Errorf("port %s: listed twice", p.Key())
		}
		seen[p.Key()] = true
		if p.Protocol != HTTP && p.Protocol != HTTPS && p.Protocol != TCP && p.Protocol != UDP {
			return fmt.Errorf("port %d: unknown protocol %v", p.Number, p.Protocol)
		}
		if p.Listeners == nil {
			return fmt.Errorf("port %d: no listener table", p.Number)
		}
		if p.Protocol == HTTPS && p.SNI == nil {
			return fmt.Errorf("port %d: HTTPS without a certificate table", p.Number)
		}
	}
	return nil
}

// PortKey identifies a bound port: an address ("" for every address of the
// host, or the bind address), a number and the transport: a UDP port is
// another socket than the TCP port of the same number, and both may be
// bound at once.
type PortKey struct {
	Address string
	Number  int32
	UDP     bool
}

// String is "address:number", or only the number for address "", with
// "/udp" after a UDP port's.
func (k PortKey) String() string {
	s := strconv.Itoa(int(k.Number))
	if k.Address != "" {
		s = net.JoinHostPort(k.Address, s)
	}
	if k.UDP {
		s += "/udp"
	}
	return s
}

// Key identifies the port.
func (p *Port) Key() PortKey { return PortKey{p.Address, p.Number, p.Protocol == UDP} }

func ComparePorts(a, b *Port) int {
	return comparePortKey(a, b.Key())
}

func comparePortKey(p *Port, k PortKey) int {
	if c := cmp.Compare(p.Address, k.Address); c != 0 {
		return c
	}
	if c := cmp.Compare(p.Number, k.Number); c != 0 {
		return c
	}
	switch udp := p.Protocol == UDP; {
	case udp == k.UDP:
		return 0
	case k.UDP:
		return -1
	}
	return 1
}

// Port returns the config of one port, or nil. Ports are sorted by
// comparePorts (Apply sorts them). It runs for every request, and searches
// by key so that it allocates nothing.
func (c *Config) Port(k PortKey) *Port {
	i, ok := slices.BinarySearchFunc(c.Ports, k, comparePortKey)
	if !ok {
		return nil
	}
	return c.Ports[i]
}
