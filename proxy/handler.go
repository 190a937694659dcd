package proxy

import (
	"net/http"

	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/tracing"
	"portico.dev/portico/internal/shared/hostname"
)

// serveHTTP picks the listener for the request's Host, enforces the
// listener chosen at the TLS handshake, and hands the request to the
// listener's routes.
func (ps *portServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	// A CA validates HTTP-01 over plain HTTP only, and before any route:
	// a route must not be able to shadow the challenge path.
	if ch := ps.rt.opts.Challenges; ch != nil && r.TLS == nil && ch.HandleHTTPChallenge(w, r) {
		return
	}
	var id string
	if ps.rt.opts.RequestID {
		id = setRequestID(r)
	}
	obs, access, tracer := ps.rt.opts.Observer, ps.rt.opts.AccessLog, ps.rt.opts.Tracer
	if obs == nil && access == nil && tracer == nil {
		ps.route(w, r)
		return
	}
	start := time.Now()
	// The paced writer (always w, but in tests) holds one, pooled with it.
	var sw *statusWriter
	if pw, ok := w.(*pacedWriter); ok {
		sw = &pw.status
	} else {
		sw = new(statusWriter)
	}
	*sw = statusWriter{ResponseWriter: w, upgrade: isUpgrade(r), requestID: id}
	var span tracing.Span
	if tracer != nil {
		r, span = tracer.Start(r)
	}
	rule := ps.route(sw, r)
	route := ""
	if rule != nil {
		route = rule.RouteName
	}
	d := time.Since(start)
	grpcStatus := -1
	if isGRPC(r) {
		grpcStatus = grpcStatusOf(sw)
	}
	if obs != nil {
		obs.ObserveRequest(route, sw.code(), d)
		if grpcStatus >= 0 {
			obs.ObserveGRPC(route, grpcStatus)
		}
	}
	if access != nil {
		logAccess(access, r, sw, route, d, grpcStatus)
	}
	if tracer != nil {
		tracer.End(span, tracing.Outcome{Route: route, Upstream: sw.upstream, Status: sw.code()})
	}
}

// route serves one request and returns the rule that matched, if any.
func (ps *portServer) route(w http.ResponseWriter, r *http.Request) *config.Rule {
	path, ok := ps.rt.admit(w, r)
	if !ok {
		return nil
	}
	cfg := ps.rt.current.Load()
	port := cfg.Port(ps.key)
	if port == nil {
		if port = ps.last.Load(); port == nil {
			http.NotFound(w, r)
			return nil
		}
	}
	host := hostname.WithoutPort(r.Host)
	l, ok := port.Listeners.Lookup(host)
	if port.Protocol == config.HTTPS {
		if tc, _ := r.Context().Value(connKey{}).(*trackedConn); tc != nil {
			// The handshake chose a listener by SNI. A Host that another,
			// more specific listener on this port owns was sent to the
			// wrong connection: 421 lets the client retry on a new one.
			// The same listener with another client certificate check
			// than the connection's handshake passed (its configuration
			// changed since) gets a 421 too: the client's new connection
			// goes through the current check.
			if cl := tc.listener.Load(); cl != nil && (!ok || l.Key != cl.Key || l.ClientAuthID() != cl.ClientAuthID()) {
				if ok {
					if l.Key == cl.Key {
						// This connection can serve nothing any more: an
						// HTTP/1 client is told to open another.
						w.Header().Set("Connection", "close")
					}
					writeError(w, http.StatusMisdirectedRequest)
				} else {
					http.NotFound(w, r)
				}
				return nil
			}
		}
	}
	if !ok {
		http.NotFound(w, r)
		return nil
	}
	return ps.rt.fwd.serve(w, r, cfg, l, path, ps.portText)
}

// statusWriter remembers the status code and the size of the answer for
// metrics and the access log, and the forwarder leaves the endpoint it
// chose there. Unwrap lets http.ResponseController reach the connection for
// flushes and upgrades.
type statusWriter struct {
	http.ResponseWriter
	status    int
	bytes     int64
	upstream  string
	upgrade   bool   // the request asked to switch protocols
	requestID string // "" unless Options.RequestID
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush() //nolint:errcheck // best effort, like http.Flusher
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// statusClientClosed is what metrics and the access log say of a request
// whose client went away before it was answered (nothing was sent).
const statusClientClosed = 499

func (w *statusWriter) code() int {
	switch {
	case w.status != 0:
		return w.status
	case w.upgrade:
		// The connection was hijacked: a WebSocket, say.
		return http.StatusSwitchingProtocols
	default:
		// Every answer Portico gives writes a status; none was written
		// only when the client left first.
		return statusClientClosed
	}
}
