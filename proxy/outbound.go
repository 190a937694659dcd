package proxy

import (
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// isForwardingHeader reports whether a client-sent header named name claims
// something only a proxy may say about the connection: Forwarded, X-Real-IP
// and every X-Forwarded-* header. Names are compared without case and with
// '_' read as '-', since CGI-style backends (and many frameworks) map
// "X_Forwarded_For" and "X-Forwarded-For" to the same variable, and Go keeps
// underscores as they are.
func isForwardingHeader(name string) bool {
	const xf = "x-forwarded"
	switch {
	case len(name) >= len(xf) && headerNameEqual(name[:len(xf)], xf):
		return len(name) == len(xf) || name[len(xf)] == '-' || name[len(xf)] == '_'
	case headerNameEqual(name, "forwarded"), headerNameEqual(name, "x-real-ip"):
		return true
	}
	return false
}

// headerNameEqual compares a header name with lower, which is lower case
// and has '-' for every '_' the name may have.
func headerNameEqual(name, lower string) bool {
	if len(name) != len(lower) {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c == '_':
			c = '-'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// dropClientForwarding removes every forwarding header a client sent (see
// isForwardingHeader), and the underscore spelling of X-Request-Id, which
// Portico sets itself when asked to; a well-spelled X-Request-Id is dealt
// with by setRequestID.
func dropClientForwarding(h http.Header) {
	for name := range h {
		if isForwardingHeader(name) || strings.IndexByte(name, '_') >= 0 && headerNameEqual(name, "x-request-id") {
			delete(h, name)
		}
	}
}

// isUpgrade reports whether r asks to switch to WebSocket, the one protocol
// a request may switch to through Portico. Any other Upgrade (h2c above
// all, which would turn the connection into a tunnel past routing, the
// forwarding headers and the access log) is dropped by dropUpgrade.
func isUpgrade(r *http.Request) bool {
	// Upgrade first: most requests have none, and are told with one
	// lookup of the header map.
	up := r.Header["Upgrade"]
	return len(up) == 1 && strings.EqualFold(textproto.TrimString(up[0]), "websocket") &&
		httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade")
}

// dropUpgrade removes from h, the headers of a request being forwarded,
// an Upgrade other than WebSocket (with the Connection header that names
// it) and HTTP2-Settings, which only an h2c upgrade uses.
func dropUpgrade(in *http.Request, h http.Header) {
	delete(h, "Http2-Settings")
	if _, ok := h["Upgrade"]; ok && !isUpgrade(in) {
		delete(h, "Upgrade")
		delete(h, "Connection")
	}
}
