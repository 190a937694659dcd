package proxy

import (
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
// refusal, or 403 when it cannot answer and e does not fail open). r's
// body is neither read nor sent.
func (g *guard) extAuth(w http.ResponseWriter, r *http.Request, e *config.ExtAuth, eps config.EndpointTable) bool {
	if e.GRPC {
		return g.extAuthGRPC(w, r, e, eps)
	}
	resp, cancel, err := g.askExtAuth(r, e, eps)
	if err != nil {
		defer cancel()
		if g.log != nil && g.refusals.first("extauth\x00"+err.Error(), time.Now()) {
			g.log.Warn("authorization service did not answer", zap.Bool("failOpen", e.FailOpen), zap.Error(err))
		}
		if e.FailOpen {
			g.note(w, "ext_auth", securityFailOpen)
			return true
		}
		g.note(w, "ext_auth", securityUnavailable)
		g.refuse(w, r, http.StatusForbidden, "")
		return false
	}
	defer cancel()
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		// A short body read to its end lets the connection serve the
		// next check.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		for _, h := range e.HeadersToBackend {
			if v, ok := resp.Header[h]; ok {
				r.Header[h] = v
			}
		}
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
	body, err := io.ReadAll(io.LimitReader(resp.Body, extAuthBodyMax))
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
		code = http.StatusForbidden // a 1xx cannot be the final answer
	}
	h.Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(code)
	_, _ = w.Write(body)
	return false
}

// askExtAuth sends the authorization request of r; the caller closes the
// answer's body and calls cancel, which ends the exchange's deadline.
func (g *guard) askExtAuth(r *http.Request, e *config.ExtAuth, eps config.EndpointTable) (*http.Response, context.CancelFunc, error) {
	ctx, cancel := context.WithTimeout(r.Context(), e.Timeout)
	addr, err := extAuthAddr(e, eps)
	if err != nil {
		return nil, cancel, err
	}
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	target := "http://" + addr + e.Path + path
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, target, http.NoBody)
	if err != nil {
		return nil, cancel, fmt.Errorf("authorization request to %s: %w", addr, err)
	}
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
	resp, err := g.extAuthTransport.RoundTrip(req)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("authorization service %s: no answer within %s", addr, e.Timeout)
		}
		return nil, cancel, fmt.Errorf("authorization request to %s: %w", addr, err)
	}
	return resp, cancel, nil
}

// extAuthGRPC is extAuth over Envoy's Authorization/Check.
func (g *guard) extAuthGRPC(w http.ResponseWriter, r *http.Request, e *config.ExtAuth, eps config.EndpointTable) bool {
	ctx, cancel := context.WithTimeout(r.Context(), e.Timeout)
	defer cancel()
	addr, err := extAuthAddr(e, eps)
	var a *checkAnswer
	if err == nil {
		a, err = g.askExtAuthGRPC(ctx, r, e, addr)
	}
	if err != nil {
		if g.log != nil && g.refusals.first("extauth\x00"+err.Error(), time.Now()) {
			g.log.Warn("authorization service did not answer", zap.Bool("failOpen", e.FailOpen), zap.Error(err))
		}
		if e.FailOpen {
			g.note(w, "ext_auth", securityFailOpen)
			return true
		}
		g.note(w, "ext_auth", securityUnavailable)
		g.refuse(w, r, http.StatusForbidden, "")
		return false
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
	if e.Backend == nil {
		return e.Address, nil
	}
	if addr := eps.Lookup(*e.Backend).Pick(); addr != "" {
		return addr, nil
	}
	return "", fmt.Errorf("authorization Service %s: no ready endpoint", e.Backend)
}
