package config

import (
	"net/netip"
	"time"

	"portico.dev/portico/sni"
)

// ClientTraffic is what ClientTrafficPolicies give one listener: how the
// client's address is found. nil on a listener no policy applies to, which
// costs a request nothing.
type ClientTraffic struct {
	// Address says where the client's address comes from; nil: the
	// connection's peer (after a PROXY protocol header, if any).
	Address *ClientAddress
	// ProxyProtocol is the listener's PROXY protocol, which its port
	// takes (Port.ProxyProtocol): the data plane reads it there.
	ProxyProtocol *ProxyProtocol
	// TLS are the listener's own handshake settings, which its SNI entry
	// carries (sni.Entry.TLS): the data plane reads them there.
	TLS *sni.Settings
	// MaxHeaderBytes and MaxHeaderCount bound a request's header fields
	// (name, value and 4 bytes of framing each; every field line
	// counted), stricter than the port's limits; 0: the port's. Over
	// them a request is answered 431.
	MaxHeaderBytes, MaxHeaderCount int
	// MaxConcurrentStreams and IdleTimeout are the listener's HTTP/2
	// settings, for connections whose TLS handshake chose it; 0: the
	// port's.
	MaxConcurrentStreams uint32
	IdleTimeout          time.Duration
	// H1IdleTimeout bounds the wait of a kept-alive HTTP/1 connection
	// for its next request, and HeaderTimeout the reading of a request's
	// head, on connections whose TLS handshake chose the listener or whose
	// last request it served; 0: the port's.
	H1IdleTimeout, HeaderTimeout time.Duration
}

// ConnSettings are the connection fields of c alone (those a connection
// reads before any request), nil when it sets none.
func (c *ClientTraffic) ConnSettings() *ClientTraffic {
	if c == nil {
		return nil
	}
	out := ClientTraffic{MaxConcurrentStreams: c.MaxConcurrentStreams, IdleTimeout: c.IdleTimeout,
		H1IdleTimeout: c.H1IdleTimeout, HeaderTimeout: c.HeaderTimeout}
	if out == (ClientTraffic{}) {
		return nil
	}
	return &out
}

// Strictest is the least of each connection setting of a and b that is
// set (0 where neither sets it): what a cleartext connection takes
// before its first request names a listener of the port (Port.Cleartext).
func Strictest(a, b *ClientTraffic) *ClientTraffic {
	switch {
	case a == nil:
		return b.ConnSettings()
	case b == nil:
		return a.ConnSettings()
	}
	least := func(x, y time.Duration) time.Duration {
		if x == 0 || (y != 0 && y < x) {
			return y
		}
		return x
	}
	out := ClientTraffic{
		MaxConcurrentStreams: a.MaxConcurrentStreams,
		IdleTimeout:          least(a.IdleTimeout, b.IdleTimeout),
		H1IdleTimeout:        least(a.H1IdleTimeout, b.H1IdleTimeout),
		HeaderTimeout:        least(a.HeaderTimeout, b.HeaderTimeout),
	}
	if s := b.MaxConcurrentStreams; s != 0 && (out.MaxConcurrentStreams == 0 || s < out.MaxConcurrentStreams) {
		out.MaxConcurrentStreams = s
	}
	return out.ConnSettings()
}

// ClientAddress finds the address of the client behind trusted proxies.
// At most one of XFFTrustedHops, XFFTrustedCIDRs and Header is set.
type ClientAddress struct {
	// XFFTrustedHops: the client is the address this many entries from
	// the right of X-Forwarded-For (1: the last, which the one trusted
	// proxy in front appended); with fewer entries, the peer.
	XFFTrustedHops int
	// XFFTrustedCIDRs: when the peer is in one of them, X-Forwarded-For
	// is read from the right, skipping the addresses in them; the client
	// is the first that is not (or the leftmost). A peer outside them is
	// the client, whatever it sends.
	XFFTrustedCIDRs []netip.Prefix
	// Header names a header (canonical form) holding the client's
	// address alone.
	Header string
	// FailClosed: a request whose Header is missing or not an address is
	// refused (403) rather than taken as from its peer.
	FailClosed bool
	// Policy is the "namespace/name" of the policy, for logs and dumps.
	Policy string
}

// ProxyProtocol is a port's PROXY protocol (v1 and v2): a header before
// anything else on each connection gives the client's address.
type ProxyProtocol struct {
	// Optional: a connection without a header is served as from its
	// peer; otherwise it is refused.
	Optional bool
	// Trusted are the peers that may send a header; empty: any peer.
	// A header from another peer is refused, and so is such a peer on a
	// port where the header is not optional.
	Trusted []netip.Prefix
	// Timeout bounds how long the header may take to arrive.
	Timeout time.Duration
	// Policy is the "namespace/name" of the policy, for logs and dumps.
	Policy string
}

// TrustsPeer reports whether peer may send a header.
func (p *ProxyProtocol) TrustsPeer(peer netip.Addr) bool {
	return len(p.Trusted) == 0 || inPrefixes(p.Trusted, peer)
}

// inPrefixes reports whether a is in one of ps.
func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Trusts reports whether a is one of the trusted proxies of XFFTrustedCIDRs.
func (c *ClientAddress) Trusts(a netip.Addr) bool { return inPrefixes(c.XFFTrustedCIDRs, a) }
