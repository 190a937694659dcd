package proxy

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net/http"
	"net/url"
	"strings"

	"portico.dev/portico/config"
)

// clientCertHeader carries the client certificate of a listener that
// checks client certificates (Gateway spec.tls.frontend) to the backend,
// in the keys of the common X-Forwarded-Client-Cert format: Hash (SHA-256
// of the DER, hex), Cert (the PEM, URL-escaped), Subject, and a URI and DNS
// entry per SAN. It is set only for a certificate that chains to the
// listener's CAs; a client's own copy of the header is always removed, so a
// backend may trust it.
const clientCertHeader = "X-Forwarded-Client-Cert"

// verifiedClientCert returns the header value for r's client certificate,
// or "" when there is none or it did not verify. With a required check the
// handshake verified it; with AllowInsecureFallback it is checked here,
// once per connection.
func verifiedClientCert(r *http.Request, l *config.Listener) string {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return ""
	}
	chain := r.TLS.PeerCertificates
	if l.ClientAuth.Optional {
		tc, _ := r.Context().Value(connKey{}).(*trackedConn)
		if !clientCertVerified(tc, l, chain) {
			return ""
		}
	}
	return formatClientCert(chain[0])
}

// clientCertVerified checks chain against l's CAs, remembering the answer
// on the connection (its certificate does not change, and a change of CAs
// makes the handler refuse the connection).
func clientCertVerified(tc *trackedConn, l *config.Listener, chain []*x509.Certificate) bool {
	if tc != nil {
		switch tc.clientVerified.Load() {
		case 1:
			return true
		case 2:
			return false
		}
	}
	err := verifyChain(chain, l.ClientAuth.CAs, x509.ExtKeyUsageClientAuth)
	if tc != nil {
		if err == nil {
			tc.clientVerified.Store(1)
		} else {
			tc.clientVerified.Store(2)
		}
	}
	return err == nil
}

func formatClientCert(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	var b strings.Builder
	b.WriteString("Hash=")
	b.WriteString(hex.EncodeToString(sum[:]))
	b.WriteString(`;Cert="`)
	b.WriteString(url.QueryEscape(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))))
	b.WriteString(`";Subject=`)
	b.WriteString(quoteValue(c.Subject.String()))
	for _, u := range c.URIs {
		b.WriteString(";URI=")
		b.WriteString(quoteValue(u.String()))
	}
	for _, d := range c.DNSNames {
		b.WriteString(";DNS=")
		b.WriteString(quoteValue(d))
	}
	return b.String()
}

// quoteValue quotes a value, escaping quotes and backslashes, so that the
// separators of the format (";", ",", "=") inside it are not read as such.
func quoteValue(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
