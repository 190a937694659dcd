package routing

import (
	"fmt"
	"net/textproto"
	"strings"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// ExternalAuthTimeout bounds the answer of the authorization service of
// an ExternalAuth filter, which has no timeout field: a service that has
// not answered by then fails the filter closed (403).
const ExternalAuthTimeout = 2 * time.Second

// alwaysToAuth are the headers an HTTP ExternalAuth filter always sends,
// besides the method, path and Host the request line carries, and the
// Content-Length of what is sent.
var alwaysToAuth = []string{"Authorization"}

// CompileExternalAuth is the data plane's check of an ExternalAuth filter
// (an HTTPRoute rule's or a listener's) whose backendRef resolved to b;
// name says which filter it is, for logs. An error says why the spec
// cannot be served (its path cannot be used safely).
func CompileExternalAuth(spec *gwv1.HTTPExternalAuthFilter, b ResolvedBackend, name string) (*config.ExtAuth, error) {
	key := b.Key
	e := &config.ExtAuth{Backend: &key, Timeout: ExternalAuthTimeout, TLS: b.TLS, Name: name}
	if fb := spec.ForwardBody; fb != nil && fb.MaxSize > 0 {
		e.ForwardBody = int64(fb.MaxSize)
	}
	switch spec.ExternalAuthProtocol {
	case gwv1.HTTPRouteExternalAuthGRPCProtocol:
		e.GRPC = true
		if spec.GRPCAuthConfig == nil || len(spec.GRPCAuthConfig.AllowedRequestHeaders) == 0 {
			e.AllHeadersToAuth = true
		} else {
			e.HeadersToAuth = canonicalHeaders(spec.GRPCAuthConfig.AllowedRequestHeaders)
		}
	case gwv1.HTTPRouteExternalAuthHTTPProtocol:
		e.OnlyOK = true
		e.HeadersToAuth = alwaysToAuth
		e.AllHeadersToBackend = true
		if h := spec.HTTPAuthConfig; h != nil {
			p, err := config.ExtAuthPathPrefix(h.Path)
			if err != nil {
				return nil, err
			}
			e.Path = p
			e.HeadersToAuth = canonicalHeaders(append(append([]string(nil), alwaysToAuth...), h.AllowedRequestHeaders...))
			if len(h.AllowedResponseHeaders) > 0 {
				e.AllHeadersToBackend = false
				e.HeadersToBackend = canonicalHeaders(h.AllowedResponseHeaders)
			}
		}
	default:
		return nil, fmt.Errorf("protocol %q is not HTTP or GRPC", spec.ExternalAuthProtocol)
	}
	return e, nil
}

// canonicalHeaders is names in canonical form, each once, Host and the
// pseudo-header :authority left out (they are never copied).
func canonicalHeaders(names []string) []string {
	out := make([]string, 0, len(names))
	seen := map[string]bool{}
	for _, n := range names {
		c := textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(n))
		if c == "" || c == "Host" || strings.HasPrefix(c, ":") || seen[c] {
			continue
		}
		seen[c] = true
		out = append(out, c)
	}
	return out
}
