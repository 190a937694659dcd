package proxy

import (
	"context"
	"errors"
	"net/http"
	"os"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/h2"
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
	if obs == nil && access == nil && tracer == nil && ps.rt.tracers.cur.Load() == nil {
		ps.route(w, r)
		return
	}
	// The paced writer (always w, but in tests) holds one, pooled with it,
	// and the time the request was received.
	var sw *statusWriter
	var start time.Time
	if pw, ok := w.(*pacedWriter); ok {
		sw, start = &pw.status, pw.received
	} else {
		sw, start = new(statusWriter), time.Now()
	}
	*sw = statusWriter{ResponseWriter: w, upgrade: isUpgrade(r), requestID: id, received: start}
	// The span starts once the listener is known (route: its Gateway's
	// XTelemetryPolicy picks the tracer), or in record for a request no
	// listener took.
	// Recorded however the request ends: an answer cut short ends the
	// handler with a panic (http.ErrAbortHandler, which the server
	// recovers), and those are the requests most worth a trace.
	returned := false
	defer func() { ps.record(r, sw, start, !returned) }()
	ps.route(sw, r)
	returned = true
}

// record writes the metrics, access log entry and span of a request that
// ended, however it did.
// panicked: the handler did not return.
func (ps *portServer) record(r *http.Request, sw *statusWriter, start time.Time, panicked bool) {
	obs, access := ps.rt.opts.Observer, ps.rt.opts.AccessLog
	if !sw.spanDone {
		// Refused before a listener took it: the process's span.
		ps.rt.startSpan(sw, r, nil)
	}
	tracer, span := sw.tracer, sw.span
	d := time.Since(start)
	outcome := sw.outcomeOf(r, panicked)
	grpcStatus := -1
	if isGRPC(r) {
		grpcStatus = grpcStatusOf(sw)
	}
	if b := ps.rt.opts.Backends; b != nil && sw.backend != (config.BackendKey{}) {
		b.ObserveBackend(sw.backend, sw.code(), outcome, sw.attempts, d)
	}
	if obs != nil {
		obs.ObserveRequest(sw.route, sw.code(), outcome, d)
		if grpcStatus >= 0 {
			obs.ObserveGRPC(sw.route, grpcStatus)
		}
	}
	if access != nil {
		logAccess(access, r, sw, outcome, d, grpcStatus)
	}
	if tracer != nil && span.Started() {
		tracer.End(span, tracing.Outcome{Route: sw.route, Upstream: sw.upstream, Status: sw.code(),
			End: outcome, Failed: outcome == outcomeBackendFailed || outcome == outcomeTimeout || outcome == outcomeAborted})
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
					noteOutcome(w, outcomeNoListener)
					http.NotFound(w, r)
				}
				return nil
			}
		}
	}
	if !ok {
		noteOutcome(w, outcomeNoListener)
		http.NotFound(w, r)
		return nil
	}
	noteServed(r, port, l)
	r = ps.rt.startSpan(w, r, l)
	if l.Client != nil && !ps.clientTraffic(w, r, l.Client) {
		return nil
	}
	if len(l.RequestFilters) > 0 && !ps.rt.fwd.preRoute(w, r, cfg, l) {
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
	route     string // the rule's route, "" when none matched
	upstream  string
	upgrade   bool   // the request asked to switch protocols
	requestID string // "" unless Options.RequestID
	// outcome is how the exchange ended when something said so on the
	// way (the pacer cut the client, the forwarder cut the answer); "":
	// see outcomeOf. writeFailed: a write to the client failed.
	outcome     string
	writeFailed bool
	// backend is the backend the rule picked (zero when none was), and
	// attempts the attempts of the retry policy made: for metrics.
	backend  config.BackendKey
	attempts int
	// auth is the last decision of the rule's SecurityPolicy,
	// "mechanism:result" (security.go); "" when none applies.
	auth string
	// The request's span and its tracer (nil: none); spanDone: the span
	// was decided (startSpan). received is when the request arrived.
	span     tracing.Span
	tracer   *tracing.Tracer
	spanDone bool
	received time.Time
}

// The outcomes of a request, in the access log ("outcome") and the
// requests metric: a fixed set, whatever the client sends.
const (
	outcomeComplete      = "complete"       // answered in full, whatever the status
	outcomeClientGone    = "client_gone"    // the client closed or failed before the end
	outcomeClientReset   = "client_reset"   // the HTTP/2 client reset the stream
	outcomeClientSlow    = "client_slow"    // cut for reading (or sending) too slowly
	outcomeBackendFailed = "backend_failed" // the backend failed mid-answer: the answer was cut
	outcomeTimeout       = "timeout"        // a timeout of the route fired mid-answer: cut
	outcomeAborted       = "aborted"        // the handler panicked for another reason
	outcomeNoListener    = "no_listener"    // 404: no listener of the port serves the Host
	outcomeNoRoute       = "no_route"       // 404: the listener has no rule that matches
)

// outcomeOf is how r's exchange ended: what was noted on the way, else
// whether the client's side ended before the handler did, else whether
// the handler panicked (it returned otherwise).
func (w *statusWriter) outcomeOf(r *http.Request, panicked bool) string {
	switch {
	case w.outcome != "":
		return w.outcome
	case w.status == 0 && w.upgrade && !panicked:
		return outcomeComplete // hijacked: the tunnel ended, which is its end
	case r.Context().Err() != nil:
		if errors.Is(context.Cause(r.Context()), h2.ErrStreamReset) {
			return outcomeClientReset
		}
		return outcomeClientGone
	case w.writeFailed:
		return outcomeClientGone
	case panicked:
		return outcomeAborted
	}
	return outcomeComplete
}

// noteWriteError records what a failed write to the client says of the
// exchange's end, unless something was noted already.
func (w *statusWriter) noteWriteError(err error) {
	if err == nil || w.outcome != "" || errors.Is(err, http.ErrBodyNotAllowed) ||
		errors.Is(err, http.ErrContentLength) || errors.Is(err, http.ErrHijacked) {
		return
	}
	w.writeFailed = true
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.outcome = outcomeClientSlow // the pacer's cut
	}
}

// noteOutcome records how the exchange of the client's writer w ends, if
// w records it.
func noteOutcome(w http.ResponseWriter, outcome string) {
	if sw, ok := w.(*statusWriter); ok && sw.outcome == "" && !sw.writeFailed {
		sw.outcome = outcome
	}
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
	if err != nil {
		w.noteWriteError(err)
	}
	return n, err
}

func (w *statusWriter) FlushError() error {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if err != nil && !errors.Is(err, http.ErrNotSupported) {
		w.noteWriteError(err)
	}
	return err
}

func (w *statusWriter) Flush() { _ = w.FlushError() }

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
