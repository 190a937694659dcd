package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"portico.dev/portico/internal/dataplane/sockio"
)

// dialH2 dials and handshakes by itself, where tls.Dialer did both: these
// attacks hold it to what tls.Dialer.DialContext guaranteed.

// sockAtkTransports is what newForwarder builds, with timeout as the dial
// timeout.
func sockAtkTransports(timeout time.Duration) *backendTLSTransports {
	return &backendTLSTransports{
		dialer:  &sockio.Dialer{Dialer: net.Dialer{Timeout: timeout}},
		timeout: timeout,
	}
}

// sockAtkBackend accepts one connection and runs serve on it, then reports
// on the returned channel whether the dialing side closed the connection
// (a read ends) within 5s of serve returning.
func sockAtkBackend(t *testing.T, serve func(net.Conn)) (string, <-chan bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	closed := make(chan bool, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			closed <- false
			return
		}
		defer c.Close()
		serve(c)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		// The end (nil) or a reset: closed; the deadline: left open.
		_, err = io.Copy(io.Discard, c)
		var ne net.Error
		closed <- !errors.As(err, &ne) || !ne.Timeout()
	}()
	return ln.Addr().String(), closed
}

func sockAtkClientConfig(ca *testCA) *tls.Config {
	return &tls.Config{ServerName: "backend.app.svc", RootCAs: ca.pool, NextProtos: []string{http2.NextProtoTLS}}
}

// A backend that takes the connection and never answers the ClientHello
// is given up at the dial timeout, not at the request's (here: none), and
// its connection is closed.
func TestAttackDialH2HandshakeStalls(t *testing.T) {
	ca := newTestCA(t)
	addr, closed := sockAtkBackend(t, func(c net.Conn) {
		c.Read(make([]byte, 1)) // the ClientHello's first byte, then silence
	})
	ts := sockAtkTransports(300 * time.Millisecond)
	start := time.Now()
	res := make(chan error, 1)
	go func() {
		c, err := ts.dialH2(context.Background(), "tcp", addr, sockAtkClientConfig(ca), ts.timeout)
		if c != nil {
			c.Close()
		}
		res <- err
	}()
	select {
	case err := <-res:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dial of a backend that stalls the handshake: %v, want the dial timeout", err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Fatalf("gave up after %v, before the dial timeout", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handshake outlived the dial timeout")
	}
	if !<-closed {
		t.Fatal("the stalled connection was left open")
	}
}

// A backend whose certificate does not verify fails the dial with the
// verification error, and the socket is closed: tls.Client closes nothing
// when its handshake fails.
func TestAttackDialH2UntrustedClosesSocket(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	cert := other.issue(t, []string{"backend.app.svc"})
	addr, closed := sockAtkBackend(t, func(c net.Conn) {
		tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}).Handshake()
	})
	c, err := sockAtkTransports(5*time.Second).dialH2(context.Background(), "tcp", addr, sockAtkClientConfig(ca), 5*time.Second)
	if c != nil {
		c.Close()
	}
	var verr *tls.CertificateVerificationError
	var uerr x509.UnknownAuthorityError
	if !errors.As(err, &verr) || !errors.As(err, &uerr) {
		t.Fatalf("dial of an untrusted backend: %v, want its verification error", err)
	}
	if !<-closed {
		t.Fatal("the socket of a failed handshake was left open")
	}
}

// A backend that speaks no ALPN (so not h2) is refused, and closed.
func TestAttackDialH2WrongALPNClosed(t *testing.T) {
	ca := newTestCA(t)
	cert := ca.issue(t, []string{"backend.app.svc"})
	addr, closed := sockAtkBackend(t, func(c net.Conn) {
		tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}}).Handshake()
	})
	c, err := sockAtkTransports(5*time.Second).dialH2(context.Background(), "tcp", addr, sockAtkClientConfig(ca), 5*time.Second)
	if c != nil {
		c.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "ALPN") {
		t.Fatalf("dial of a backend without h2: %v, want the ALPN refusal", err)
	}
	if !<-closed {
		t.Fatal("the refused connection was left open")
	}
}

// A good backend: HTTP/2 negotiated, verified against the configured
// name, over a socket that reads and writes through sockio.
func TestAttackDialH2Wrapped(t *testing.T) {
	ca := newTestCA(t)
	addr := tlsBackend(t, ca.issue(t, []string{"backend.app.svc"}))
	c, err := sockAtkTransports(5*time.Second).dialH2(context.Background(), "tcp", addr, sockAtkClientConfig(ca), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, ok := c.(*tls.Conn)
	if !ok {
		t.Fatalf("dialH2 returned %T, want *tls.Conn", c)
	}
	if _, ok := tc.NetConn().(*sockio.Conn); !ok {
		t.Fatalf("the TLS session runs over %T, want *sockio.Conn", tc.NetConn())
	}
	if st := tc.ConnectionState(); st.NegotiatedProtocol != "h2" || st.ServerName != "backend.app.svc" {
		t.Fatalf("negotiated %q for %q", st.NegotiatedProtocol, st.ServerName)
	}
}
