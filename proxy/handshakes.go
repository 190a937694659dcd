package proxy

import "strings"

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

// handshakeReason classifies the error text of a failed handshake, as
// crypto/tls words it (and tlsHandshakeError, for plain HTTP).
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
