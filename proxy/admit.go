package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"

	"portico.dev/portico/config"
)

// admit checks what every request must satisfy before a route sees it, and
// answers the ones that fail itself. It returns the request's path in normal
// form (routing.NormalizePath), which it also makes the path r is forwarded
// with, so the route decision and the backend's path never disagree.
func (rt *Runtime) admit(w http.ResponseWriter, r *http.Request) (path string, ok bool) {
	if n := headerCount(r, rt.opts.MaxHeaderCount); n > rt.opts.MaxHeaderCount {
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestHeaderFieldsTooLarge)
		return "", false
	}
	// HTTP/2 checks :method for control bytes only: a method with a space
	// in it ("GET /admin?") would rewrite the request line a backend gets.
	// It is the client's error, answered before any route is tried.
	if !httpguts.ValidHeaderFieldName(r.Method) {
		writeError(w, http.StatusBadRequest)
		return "", false
	}
	// Portico relays requests and opens no tunnels: a CONNECT (a plain
	// one; HTTP/2's extended CONNECT is refused by the server) would be
	// routed only for the backend transport to refuse it, a 502 and a
	// warning in the log for each such request any client can send.
	if r.Method == http.MethodConnect {
		writeError(w, http.StatusNotImplemented)
		return "", false
	}
	// HTTP/2 checks :path for control bytes only: a space in its query
	// would end the target of the request line a backend gets, which would
	// then name another target than the routed one, and one in its path
	// would reach the backend escaped, as another target than the client
	// sent. RFC 9113 (8.3.1) makes such a :path malformed. An HTTP/1.1
	// request line cannot carry one: package h1 refuses it, so the scan
	// is for HTTP/2 only.
	if r.ProtoMajor == 2 && !validTarget(r.RequestURI) {
		writeError(w, http.StatusBadRequest)
		return "", false
	}
	path, ok = normalizeRequestPath(r, rt.opts.Paths)
	if !ok {
		writeError(w, http.StatusBadRequest)
		return "", false
	}
	return path, true
}

// headerCount counts the header fields of r (each value of a repeated
// name), stopping early once past max. The servers take Host out of the
// header map (HTTP/2's :authority, which stands for it, is never in it):
// it is a field the client sent all the same, and counts as one.
func headerCount(r *http.Request, max int) int {
	n := 0
	if r.Host != "" {
		n++
	}
	for _, vs := range r.Header {
		if n += len(vs); n > max {
			break
		}
	}
	return n
}

// normalizeRequestPath brings r's path to normal form and makes r.URL
// carry exactly that form. It reports false for a path that is rejected. A
// request without a path (OPTIONS *, CONNECT) is left as it is.
func normalizeRequestPath(r *http.Request, o config.PathOptions) (string, bool) {
	raw, ok := targetPath(r)
	if !ok {
		if r.URL.Path == "" {
			return "/", true
		}
		return r.URL.Path, true
	}
	path, err := config.NormalizePath(raw, o)
	if err != nil {
		return "", false
	}
	if path != raw {
		dec, err := url.PathUnescape(path)
		if err != nil {
			return "", false // a normal form always unescapes
		}
		r.URL.Path, r.URL.RawPath = dec, path
	}
	return path, true
}

// targetPath returns the path of r's request target as the client sent it,
// escapes and all: r.URL.Path is decoded and r.URL.RawPath is not always
// kept, so neither tells "%2F" from "/". ok is false when the target has no
// path.
func targetPath(r *http.Request) (string, bool) {
	u := r.RequestURI
	switch {
	case u == "":
		// Not a request a server read: only r.URL is known.
		if p := r.URL.EscapedPath(); p != "" {
			return p, p[0] == '/'
		}
		return "/", true
	case u[0] == '/':
	case strings.Contains(u, "://"):
		// Absolute form: the path starts after the authority.
		rest := u[strings.Index(u, "://")+3:]
		i := strings.IndexAny(rest, "/?")
		if i < 0 || rest[i] == '?' {
			return "/", true
		}
		u = rest[i:]
	default:
		return "", false
	}
	if i := strings.IndexByte(u, '?'); i >= 0 {
		u = u[:i]
	}
	return u, true
}

// writeError answers with code and its generic status text: what went wrong
// in detail goes to the log and the route status, never to the client.
func writeError(w http.ResponseWriter, code int) {
	http.Error(w, http.StatusText(code), code)
}
