package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
)

// Bounds of what an authorization service can make the proxy hold.
const (
	// extAuthBodyMax caps the body of a refusal passed on to the client;
	// the rest is not read.
	extAuthBodyMax = 64 << 10
	// extAuthHeaderMax caps the header block of the service's answer.
	extAuthHeaderMax = 64 << 10
)

// extAuthClientHeaders are the headers of a refusal passed on to the
// client with its status and body: what a client needs to authenticate
// (a challenge, a login page to go to, a session cookie) and to read the
// body.
var extAuthClientHeaders = [...]string{"Www-Authenticate", "Location", "Set-Cookie", "Content-Type", "Retry-After", "Cache-Control"}

// newExtAuthTransport is the transport of authorization requests: its
// own pool, so that a slow service does not hold the backends'
// connections, with every wait bounded.
func newExtAuthTransport() *http.Transport {
	return &http.Transport{
		DialContext:            (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: extAuthHeaderMax,
		DisableCompression:     true,
	}
}

// extAuth asks e's service about r: true lets r through with the headers
// the service names set; false means r was answered (the service's
// refusal, 413 for a body over e.ForwardBody, or 403 when the service
// cannot answer and e does not fail open). With e.ForwardBody, up to that
// many bytes of r's body are read first and sent along; r's body is then
// what it was, for the backend. Without it, r's body is neither read nor
// sent.
func (g *guard) extAuth(w http.ResponseWriter, r *http.Request, e *config.ExtAuth, eps config.EndpointTable) bool {
	var body []byte
	if e.ForwardBody > 0 {
		var ok bool
		if body, ok = g.extAuthBody(w, r, e); !ok {
			return false
		}
	}
	if e.GRPC {
		return g.extAuthGRPC(w, r, e, eps, body)
	}
	resp, cancel, err := g.askExtAuth(r, e, eps, body)
	if err != nil {
		defer cancel()
		return g.extAuthFailed(w, r, e, err)
	}
	defer cancel()
	defer resp.Body.Close()
	allowed := resp.StatusCode >= 200 && resp.StatusCode < 300
	if e.OnlyOK {
		allowed = resp.StatusCode == http.StatusOK
	}
	if allowed {
		// A short body read to its end lets the connection serve the
		// next check.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		setFromAuth(r.Header, resp.Header, e)
		g.note(w, "ext_auth", securityAllowed)
		return true
	}
	g.note(w, "ext_auth", securityDenied)
	if isGRPC(r) {
		g.refuse(w, r, resp.StatusCode, resp.Header.Get("Www-Authenticate"))
		return false
	}
	// The body is read before any byte is written, so that the client
	// gets a whole answer or a 403; a service that sends
	// more than extAuthBodyMax has the rest dropped.
	answer, err := io.ReadAll(io.LimitReader(resp.Body, extAuthBodyMax))
	if err != nil {
		// The service said no, and failOpen does not change that: only
		// its body is lost.
		g.refuse(w, r, http.StatusForbidden, "")
		return false
	}
	h := w.Header()
	for _, name := range extAuthClientHeaders {
		if v, ok := resp.Header[name]; ok {
			h[name] = v
		}
	}
	code := resp.StatusCode
	if code < 300 || code > 599 {
		code = http.StatusForbidden // a 1xx, or a 2xx other than 200 with OnlyOK, cannot be the final answer
	}
	h.Set("Content-Length", fmt.Sprint(len(answer)))
	w.WriteHeader(code)
	_, _ = w.Write(answer)
	return false
}

// extAuthFailed answers r, whose service did not answer (err): 403, or
// let through when e fails open.
func (g *guard) extAuthFailed(w http.ResponseWriter, r *http.Request, e *config.ExtAuth, err error) bool {
	if g.log != nil && g.refusals.first("extauth\x00"+err.Error(), time.Now()) {
		g.log.Warn("authorization service did not answer", zap.String("check", e.Name), zap.Bool("failOpen", e.FailOpen), zap.Error(err))
	}
	if e.FailOpen {
		g.note(w, "ext_auth", securityFailOpen)
		return true
	}
	g.note(w, "ext_auth", securityUnavailable)
	g.refuse(w, r, http.StatusForbidden, "")
	return false
}

// setFromAuth sets on the request's headers dst what an allowing HTTP
// answer's headers src carry for the backend: the names of
// e.HeadersToBackend (those the client sent itself removed first, so
// that a client cannot pass one off as the service's), or with
// e.AllHeadersToBackend every settable one.
func setFromAuth(dst, src http.Header, e *config.ExtAuth) {
	for _, h := range e.HeadersToBackend {
		delete(dst, h)
		if v, ok := src[h]; ok {
			dst[h] = v
		}
	}
	if !e.AllHeadersToBackend {
		return
	}
	for name, v := range src {
		if settableHeader(name) && !answerOnlyHeader(name) {
			dst[name] = v
		}
	}
}

// answerOnlyHeader reports whether name describes the authorization
// answer itself rather than something for the backend.
func answerOnlyHeader(name string) bool {
	switch name {
	case "Date", "Server", "Content-Type", "Content-Encoding", "Authority":
		return true
	}
	return false
}

// extAuthBody reads up to e.ForwardBody bytes of r's body and puts them
// back in front of the rest. False: r was answered, 413 for a longer
// body (the ExternalAuth filter's rule: a body over the limit fails the
// filter with a 4xx), or the client's failure to send it.
func (g *guard) extAuthBody(w http.ResponseWriter, r *http.Request, e *config.ExtAuth) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil, true
	}
	if r.ContentLength > e.ForwardBody {
		g.note(w, "ext_auth", securityDenied)
		writeErrorFor(w, r, http.StatusRequestEntityTooLarge)
		return nil, false
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, e.ForwardBody+1))
	if err != nil {
		answerClientBodyError(g.log, w, r, err)
		return nil, false
	}
	if int64(len(buf)) > e.ForwardBody {
		g.note(w, "ext_auth", securityDenied)
		writeErrorFor(w, r, http.StatusRequestEntityTooLarge)
		return nil, false
	}
	// The whole body is read: the backend gets these bytes, and the
	// length is known now.
	r.Body = replayBody{Reader: bytes.NewReader(buf), orig: r.Body}
	r.ContentLength = int64(len(buf))
	return buf, true
}

// replayBody is a body read ahead, closing the client's when closed.
type replayBody struct {
	*bytes.Reader
	orig io.Closer
}

func (b replayBody) Close() error { return b.orig.Close() }

// askExtAuth sends the authorization request of r, with body; the caller
// closes the answer's body and calls cancel, which ends the exchange's
// deadline.
func (g *guard) askExtAuth(r *http.Request, e *config.ExtAuth, eps config.EndpointTable, body []byte) (*http.Response, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(r.Context(), e.Timeout)
	addr, err := extAuthAddr(e, eps)
	if err != nil {
		return nil, cancel, err
	}
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	scheme := "http://"
	if e.TLS != nil {
		scheme = "https://"
	}
	target := scheme + addr + e.Path + path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	var rb io.Reader = http.NoBody
	if len(body) > 0 {
		rb = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, target, rb)
	if err != nil {
		return nil, cancel, fmt.Errorf("authorization request to %s: %w", addr, err)
	}
	// The length of what is sent, 0 without a body: never the client's.
	req.ContentLength = int64(len(body))
	req.Host = r.Host
	for _, h := range e.HeadersToAuth {
		if v, ok := r.Header[h]; ok {
			req.Header[h] = v
		}
	}
	req.Header.Set("X-Forwarded-Host", r.Host)
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	req.Header.Set("X-Forwarded-Proto", proto)
	if a := requestClientAddr(r); a.IsValid() {
		req.Header.Set("X-Forwarded-For", a.String())
	}
	resp, err := g.extAuthTransportFor(e).RoundTrip(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("authorization service %s: no answer within %s", addr, e.Timeout)
		}
		return nil, cancel, fmt.Errorf("authorization request to %s: %w", addr, err)
	}
	return resp, cancel, nil
}

// extAuthTransportFor is the transport of e's service: the shared one,
// or for a service behind a BackendTLSPolicy one of its own per policy
// settings (bounded: past extAuthTLSMax, all are closed and made anew).
func (g *guard) extAuthTransportFor(e *config.ExtAuth) *http.Transport {
	if e.TLS == nil {
		return g.extAuthTransport
	}
	g.extAuthTLSMu.Lock()
	defer g.extAuthTLSMu.Unlock()
	if t := g.extAuthTLS[e.TLS.ID]; t != nil {
		return t
	}
	if g.extAuthTLS == nil || len(g.extAuthTLS) >= extAuthTLSMax {
		for _, t := range g.extAuthTLS {
			t.CloseIdleConnections()
		}
		g.extAuthTLS = map[string]*http.Transport{}
	}
	t := newExtAuthTransport()
	t.TLSClientConfig = backendTLSConfig(e.TLS, nil, "http/1.1")
	g.extAuthTLS[e.TLS.ID] = t
	return t
}

// extAuthTLSMax bounds the TLS transports to authorization services.
const extAuthTLSMax = 64

// extAuthGRPC is extAuth over Envoy's Authorization/Check.
func (g *guard) extAuthGRPC(w http.ResponseWriter, r *http.Request, e *config.ExtAuth, eps config.EndpointTable, body []byte) bool {
	ctx, cancel := context.WithTimeout(r.Context(), e.Timeout)
	defer cancel()
	addr, err := extAuthAddr(e, eps)
	var a *checkAnswer
	if err == nil {
		a, err = g.askExtAuthGRPC(ctx, r, e, addr, body)
	}
	if err != nil {
		return g.extAuthFailed(w, r, e, err)
	}
	if a.allowed {
		for _, name := range a.remove {
			if settableHeader(name) {
				r.Header.Del(name)
			}
		}
		for _, kv := range a.headers {
			if settableHeader(kv[0]) {
				r.Header.Set(kv[0], kv[1])
			}
		}
		g.note(w, "ext_auth", securityAllowed)
		return true
	}
	g.note(w, "ext_auth", securityDenied)
	code := a.code
	if code < 300 || code > 599 {
		code = http.StatusForbidden // Envoy's answer to a denial that names no status
	}
	if isGRPC(r) {
		g.refuse(w, r, code, "")
		return false
	}
	h := w.Header()
	for _, kv := range a.headers {
		if settableHeader(kv[0]) {
			h.Set(kv[0], kv[1])
		}
	}
	h.Set("Content-Length", fmt.Sprint(len(a.body)))
	w.WriteHeader(code)
	_, _ = io.WriteString(w, a.body)
	return false
}

// extAuthAddr is the address of e's service.
func extAuthAddr(e *config.ExtAuth, eps config.EndpointTable) (string, error) {
	if e.TLS != nil && e.TLS.Invalid != "" {
		return "", fmt.Errorf("authorization service: BackendTLSPolicy %s: %s", e.TLS.Policy, e.TLS.Invalid)
	}
	if e.Backend == nil {
		return e.Address, nil
	}
	if addr := eps.Lookup(*e.Backend).Pick(); addr != "" {
		return addr, nil
	}
	return "", fmt.Errorf("authorization Service %s: no ready endpoint", e.Backend)
}
