package proxy

import (
	"net"
	"net/http"
	"strings"
)

// serveHTTP picks the listener for the request's Host, enforces the
// listener chosen at the TLS handshake, and hands the request to the
// listener's routes.
func (ps *portServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	cfg := ps.rt.current.Load()
	port := cfg.port(ps.number)
	if port == nil {
		if port = ps.last.Load(); port == nil {
			http.NotFound(w, r)
			return
		}
	}
	host := requestHost(r.Host)
	l, ok := port.Listeners.Lookup(host)
	if port.Protocol == HTTPS {
		if tc, _ := r.Context().Value(connKey{}).(*trackedConn); tc != nil {
			// The handshake chose a listener by SNI. A Host that another,
			// more specific listener on this port owns was sent to the
			// wrong connection: 421 lets the client retry on a new one.
			if cl := tc.listener.Load(); cl != nil && (!ok || l.Key != cl.Key) {
				if ok {
					http.Error(w, "misdirected request", http.StatusMisdirectedRequest)
				} else {
					http.NotFound(w, r)
				}
				return
			}
		}
	}
	if !ok {
		http.NotFound(w, r)
		return
	}
	ps.rt.fwd.serve(w, r, cfg, l)
}

// requestHost returns the Host without port, lowercased lookups are left to
// the tables (which ignore case and a trailing dot).
func requestHost(h string) string {
	if h == "" {
		return h
	}
	if h[0] == '[' { // IPv6 literal
		if host, _, err := net.SplitHostPort(h); err == nil {
			return host
		}
		return strings.Trim(h, "[]")
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ':') == i {
		return h[:i]
	}
	return h
}
