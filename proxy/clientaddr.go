package proxy

import (
	"net/http"
	"net/netip"
	"strings"

	"portico.dev/portico/config"
)

// The client's address of a request is r.RemoteAddr, in one place: the
// connection's peer as the HTTP/1 and HTTP/2 servers set it (the address a
// PROXY protocol header gave, when the port reads one: trackedConn), then
// replaced by what a ClientTrafficPolicy's clientIPDetection finds
// (useClientAddress), before anything reads it. The access log, the
// X-Forwarded-For Portico sets, consistent hashing on the source address
// and local rate limits all read it there.

// useClientAddress sets r.RemoteAddr to the client's address as a finds
// it. It reports false, having answered 403, when a fails closed and the
// request does not say.
func useClientAddress(w http.ResponseWriter, r *http.Request, a *config.ClientAddress) bool {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return true // not a TCP peer (tests): nothing to go by
	}
	client, ok := clientAddress(r.Header, peer.Addr().Unmap(), a)
	if !ok {
		writeError(w, http.StatusForbidden)
		return false
	}
	if client != peer.Addr().Unmap() {
		// The port a proxy in front saw is not known.
		r.RemoteAddr = netip.AddrPortFrom(client, 0).String()
	}
	return true
}

// clientAddress is the client's address of a request from peer with
// header h, as a says; false when a fails closed without one.
func clientAddress(h http.Header, peer netip.Addr, a *config.ClientAddress) (netip.Addr, bool) {
	switch {
	case a.Header != "":
		if v := h[a.Header]; len(v) == 1 {
			if ip, ok := parseAddr(v[0]); ok {
				return ip, true
			}
		}
		return peer, !a.FailClosed
	case a.XFFTrustedHops > 0:
		// The hops-th entry from the right: the one the farthest trusted
		// proxy appended. Fewer entries: the peer.
		n := 0
		client := peer
		forEachXFFFromRight(h["X-Forwarded-For"], func(e string) bool {
			n++
			if n < a.XFFTrustedHops {
				return true
			}
			if ip, ok := parseAddr(e); ok {
				client = ip
			}
			return false
		})
		return client, true
	case len(a.XFFTrustedCIDRs) > 0:
		// Only a trusted peer's X-Forwarded-For is believed, and only as
		// far as each entry was appended by a trusted proxy.
		if !a.Trusts(peer) {
			return peer, true
		}
		client := peer
		forEachXFFFromRight(h["X-Forwarded-For"], func(e string) bool {
			ip, ok := parseAddr(e)
			if !ok {
				return false
			}
			client = ip
			return a.Trusts(ip)
		})
		return client, true
	}
	return peer, true
}

// forEachXFFFromRight calls f with each entry of the X-Forwarded-For
// lines, the last first, until f returns false.
func forEachXFFFromRight(lines []string, f func(string) bool) {
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for {
			j := strings.LastIndexByte(line, ',')
			if !f(strings.TrimSpace(line[j+1:])) {
				return
			}
			if j < 0 {
				break
			}
			line = line[:j]
		}
	}
}

// parseAddr parses an address as proxies write it in X-Forwarded-For or
// a header of their own: "ip", "ip:port" or "[ip]:port"; without a zone,
// an IPv4-mapped address as IPv4.
func parseAddr(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	ip, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return netip.Addr{}, false
		}
		ip = ap.Addr()
	}
	if ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}
