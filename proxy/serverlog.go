package proxy

import (
	"strings"

	"go.uber.org/zap"
)

// HandshakeObserver records TLS handshakes that failed (metrics). port is
// the port's "address:number"; reason is one of the Handshake* values.
type HandshakeObserver interface {
	ObserveHandshakeFailure(port, reason string)
}

// Why a TLS handshake failed, as HandshakeObserver is told.
const (
	// HandshakeUnknownName: the server name matches no listener of the
	// port and the port has no fallback (alert unrecognized_name).
	HandshakeUnknownName = "unknown_server_name"
	// HandshakeNotTLS: the client did not speak TLS (often plain HTTP).
	HandshakeNotTLS = "not_tls"
	// HandshakeClientCertificate: a client certificate was required and
	// missing, or did not verify.
	HandshakeClientCertificate = "client_certificate"
	// HandshakeUnsupported: no TLS version, cipher suite, key exchange or
	// application protocol in common.
	HandshakeUnsupported = "unsupported_parameters"
	// HandshakeTimeout: the client did not finish in time.
	HandshakeTimeout = "timeout"
	// HandshakeClosed: the client went away during the handshake.
	HandshakeClosed = "closed"
	// HandshakeOther: anything else.
	HandshakeOther = "other"
)

// handshakePrefix starts what net/http logs for a failed handshake,
// followed by "ADDRESS: REASON".
const handshakePrefix = "http: TLS handshake error from "

// serverLog is the ErrorLog of a port's http.Server. net/http reports what
// goes wrong on a connection only there, as text. Failed handshakes, at a
// public port mostly scanners and clients asking for names nobody serves
// here, are counted by reason and logged at debug level. A panic in a
// handler is an error, and the mistakes net/http reports of a handler (a
// second WriteHeader, a write after a hijack, a bad Content-Length) and
// accept errors are warnings. Everything else is about a client or a
// connection (HTTP/2 protocol errors, a client that never sent its
// SETTINGS, ...), which a client can repeat at will: debug level.
type serverLog struct {
	log  *zap.Logger
	port string
	obs  HandshakeObserver
}

// serverProblems start the messages of net/http that say something is
// wrong on Portico's side.
var serverProblems = [...]string{
	"http: Accept error",
	"http: superfluous response.WriteHeader",
	"http: response.WriteHeader on hijacked connection",
	"http: response.Write on hijacked connection",
	"http: invalid Content-Length",
	"http: WriteHeader called with both",
}

func (l *serverLog) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	switch {
	case strings.HasPrefix(msg, handshakePrefix):
		remote, detail, _ := strings.Cut(msg[len(handshakePrefix):], ": ")
		reason := handshakeReason(detail)
		if l.obs != nil {
			l.obs.ObserveHandshakeFailure(l.port, reason)
		}
		l.log.Debug("TLS handshake failed", zap.String("remote", remote), zap.String("reason", reason), zap.String("error", detail))
	case strings.Contains(msg, "panic serving"): // "http: " and "http2: "
		l.log.Error(msg)
	case hasAnyPrefix(msg, serverProblems[:]):
		l.log.Warn(msg)
	default:
		l.log.Debug(msg)
	}
	return len(p), nil
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// handshakeReason classifies the error text of a failed handshake, as
// crypto/tls and net/http word it.
func handshakeReason(detail string) string {
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(detail, s) {
				return true
			}
		}
		return false
	}
	switch {
	case has("tls: no certificates configured"):
		// sni refuses a name by handing crypto/tls a config without
		// certificates, which answers with unrecognized_name.
		return HandshakeUnknownName
	case has("client sent an HTTP request to an HTTPS server", "does not look like a TLS handshake"):
		return HandshakeNotTLS
	case has("client didn't provide a certificate", "failed to verify certificate", "client certificate"):
		return HandshakeClientCertificate
	case has("offered only unsupported versions", "no cipher suite supported", "no key exchanges supported",
		"incompatible point formats", "inappropriate protocol fallback", "application protocol", "older than TLS 1.3"):
		return HandshakeUnsupported
	case has("timeout", "deadline exceeded"):
		return HandshakeTimeout
	case detail == "EOF" || has("connection reset", "broken pipe", "use of closed network connection", "unexpected EOF"):
		return HandshakeClosed
	}
	return HandshakeOther
}
