package proxy

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/sockio"
)

// backendTLSTransports pools the TLS connections to backends per
// routing.BackendTLS ID and client certificate. A connection is only
// trusted for the identity check it passed, and speaks for the client
// certificate it presented, so backends with different TLS settings, or
// Gateways presenting different certificates, never share one, even when
// they share an endpoint address.
type backendTLSTransports struct {
	dialer  *sockio.Dialer
	timeout time.Duration // TLS handshake
	// byID maps a poolKey to its *backendTLSTransport. Keys are written
	// once and then read by every request to their backends, the case
	// sync.Map is made for: reads take no lock.
	byID sync.Map
}

type poolKey struct {
	tls  string // routing.BackendTLS.ID
	cert string // BackendClientCert.ID, "" without one
	// idle is the backend's BackendTrafficPolicy idle timeout (0: the
	// default): a pool closes its connections idle longer than it.
	idle time.Duration
	// connect is the policy's connect timeout (0: the forwarder's dial
	// timeout), which bounds the TLS handshake as it bounds the TCP
	// connect: connecting to a TLS backend is both.
	connect time.Duration
}

// backendTLSTransport is the connection pool of one BackendTLS ID: one
// transport per protocol, since a BackendTLSPolicy may cover ports of
// either kind.
type backendTLSTransport struct {
	h1 *http.Transport
	h2 *http2.Transport
}

// get returns the pool for b.ID and cc under conn's timeouts (nil: the
// defaults), making it on first use. b and cc are only read then: the
// same IDs mean the same settings.
func (ts *backendTLSTransports) get(b *config.BackendTLS, cc *config.BackendClientCert, conn *config.BackendConn) *backendTLSTransport {
	key := poolKey{tls: b.ID}
	if conn != nil {
		key.idle, key.connect = conn.IdleTimeout, conn.ConnectTimeout
	}
	if cc != nil {
		key.cert = cc.ID
	}
	if t, ok := ts.byID.Load(key); ok {
		return t.(*backendTLSTransport)
	}
	// Two first requests may both get here; making a transport opens no
	// connection, so the one that loses costs nothing.
	t, _ := ts.byID.LoadOrStore(key, ts.newTransport(b, cc, cmp.Or(key.idle, backendIdleTimeout), cmp.Or(key.connect, ts.timeout)))
	return t.(*backendTLSTransport)
}

// newTransport makes the pools of b and cc whose connections close after
// idle and whose TLS handshakes may take handshake (0: no bound).
func (ts *backendTLSTransports) newTransport(b *config.BackendTLS, cc *config.BackendClientCert, idle, handshake time.Duration) *backendTLSTransport {
	return &backendTLSTransport{
		h1: &http.Transport{
			DialContext:         ts.dialer.DialContext,
			TLSClientConfig:     backendTLSConfig(b, cc, "http/1.1"),
			TLSHandshakeTimeout: handshake,
			MaxIdleConns:        4096,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     idle,
			// A custom TLSClientConfig already keeps net/http from trying
			// HTTP/2; h2 backends get the h2 transport.
			ForceAttemptHTTP2:  false,
			DisableCompression: true,
		},
		h2: &http2.Transport{
			TLSClientConfig:    backendTLSConfig(b, cc, http2.NextProtoTLS),
			DisableCompression: true,
			DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
				return ts.dialH2(ctx, network, addr, cfg, handshake)
			},
			ReadIdleTimeout: 30 * time.Second,
			PingTimeout:     15 * time.Second,
			// Closes the connections of a pool that Apply dropped while
			// they were busy, once they go idle.
			IdleConnTimeout: idle,
		},
	}
}

// dialH2 connects with timeout (the policy's connect timeout, else the
// forwarder's dial timeout) covering the handshake too, which
// http2.Transport's own dialer would leave to the request's context.
func (ts *backendTLSTransports) dialH2(ctx context.Context, network, addr string, cfg *tls.Config, timeout time.Duration) (net.Conn, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	raw, err := ts.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != http2.NextProtoTLS {
		c.Close()
		return nil, fmt.Errorf("dial %s: backend negotiated ALPN protocol %q, not %q", addr, p, http2.NextProtoTLS)
	}
	return c, nil
}

// retain closes and drops the pools whose BackendTLS ID is not in keep or
// whose client certificate ID is not in keepCerts. A request that took a
// pool just before it was dropped still completes; the connection it
// opens is closed by the pool's idle timeout.
func (ts *backendTLSTransports) retain(keep, keepCerts map[string]struct{}) {
	ts.byID.Range(func(k, v any) bool {
		key := k.(poolKey)
		_, ok := keep[key.tls]
		if _, certOK := keepCerts[key.cert]; key.cert != "" && !certOK {
			ok = false
		}
		if !ok && ts.byID.CompareAndDelete(k, v) {
			v.(*backendTLSTransport).closeIdle()
		}
		return true
	})
}

func (ts *backendTLSTransports) closeIdle() {
	ts.byID.Range(func(_, v any) bool {
		v.(*backendTLSTransport).closeIdle()
		return true
	})
}

func (t *backendTLSTransport) closeIdle() {
	t.h1.CloseIdleConnections()
	t.h2.CloseIdleConnections()
}

// roundTripper picks the transport for a request: HTTP/2 for h2 backends,
// except for an Upgrade, which only HTTP/1.1 can carry.
func (t *backendTLSTransport) roundTripper(h2 bool, r *http.Request) http.RoundTripper {
	if h2 && !isUpgrade(r) {
		return t.h2
	}
	return t.h1
}

// backendTLSConfig is the client side of a BackendTLSPolicy. The standard
// verification is off because with subjectAltNames the policy's hostname
// is only the SNI, not the identity; verifyBackend does the whole check,
// on resumed sessions too.
func backendTLSConfig(b *config.BackendTLS, cc *config.BackendClientCert, alpn string) *tls.Config {
	cfg := &tls.Config{
		ServerName:         b.ServerName,
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{alpn},
		InsecureSkipVerify: true, // verifyBackend does the whole check, in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyBackend(b, cs.PeerCertificates)
		},
	}
	if cc != nil {
		// Presented whatever CAs the backend asks for: the Gateway has one
		// certificate for all its backends.
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return cc.Cert, nil
		}
	}
	return cfg
}

// verifyBackend checks a backend's certificate chain against the policy's
// CAs, then its identity: valid for ServerName, or, when the policy lists
// subjectAltNames, carrying one of them.
func verifyBackend(b *config.BackendTLS, chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("backend sent no certificate")
	}
	leaf := chain[0]
	if err := verifyChain(chain, b.RootCAs, x509.ExtKeyUsageServerAuth); err != nil {
		return fmt.Errorf("backend certificate chain is not trusted: %w", err)
	}
	if len(b.SANHostnames) == 0 && len(b.SANURIs) == 0 {
		if err := leaf.VerifyHostname(b.ServerName); err != nil {
			return fmt.Errorf("backend certificate is not valid for server name %q: %w", b.ServerName, err)
		}
		return nil
	}
	for _, h := range b.SANHostnames {
		if leaf.VerifyHostname(h) == nil {
			return nil
		}
	}
	for _, u := range leaf.URIs {
		if slices.Contains(b.SANURIs, u.String()) {
			return nil
		}
	}
	uris := make([]string, len(leaf.URIs))
	for i, u := range leaf.URIs {
		uris[i] = u.String()
	}
	return fmt.Errorf("backend certificate (DNS names %q, URIs %q) has none of the subject alt names: hostnames %q, URIs %q",
		leaf.DNSNames, uris, b.SANHostnames, b.SANURIs)
}

// verifyChain checks that chain (leaf first, then what the peer sent to
// link it up) leads to one of roots (nil: the system's) for usage.
func verifyChain(chain []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) error {
	opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{usage}}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := chain[0].Verify(opts)
	return err
}
