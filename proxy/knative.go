package proxy

import (
	"context"
	"net/http"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/hostname"
)

// answerProbe answers the readiness probe of Portico's leader on a KIngress
// rule with the hash of the version this replica serves; it reports
// whether r was that probe.
func answerProbe(w http.ResponseWriter, r *http.Request, rule *config.Rule) bool {
	if rule.NetworkHash == "" || r.Header.Get(config.KnativeProbeHeader) != config.KnativePorticoProbe ||
		r.Header.Get(config.KnativeHashHeader) != config.KnativeHashOverride {
		return false
	}
	w.Header().Set(config.KnativeHashHeader, rule.NetworkHash)
	w.WriteHeader(http.StatusOK)
	return true
}

// overrideHash returns r, or a copy of it whose K-Network-Hash of
// "override" is replaced by the hash of the KIngress version rule comes
// from; any other value goes on unchanged.
func overrideHash(r *http.Request, rule *config.Rule) *http.Request {
	if rule.NetworkHash == "" {
		return r
	}
	if v := r.Header[config.KnativeHashHeader]; len(v) != 1 || v[0] != config.KnativeHashOverride {
		return r
	}
	out := r.Clone(r.Context())
	out.Header.Set(config.KnativeHashHeader, rule.NetworkHash)
	return out
}

// dispatchedKey marks, in its context, a request already routed again in
// process: a second time would be a loop.
type dispatchedKey struct{}

// dispatch routes r again on Portico's own port, in process: the backend
// is an ExternalName Service naming Portico's cluster-local Service, and a
// trip through the network would only come back here.
func (f *forwarder) dispatch(w http.ResponseWriter, r *http.Request, cfg *config.Config, port int32, x *exchange) {
	if r.Context().Value(dispatchedKey{}) != nil {
		writeError(w, http.StatusLoopDetected)
		return
	}
	p := cfg.Port(config.PortKey{Number: port})
	if p == nil {
		http.NotFound(w, r)
		return
	}
	l, ok := p.Listeners.Lookup(hostname.WithoutPort(r.Host))
	if !ok {
		http.NotFound(w, r)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), dispatchedKey{}, true))
	rule, m := l.Routes.Match(r)
	if rule == nil {
		http.NotFound(w, r)
		return
	}
	f.forward(w, r, cfg, rule, m, &exchange{origHost: x.origHost, in: r, listener: l, port: x.port})
}
