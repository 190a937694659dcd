package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/h2"
	"portico.dev/portico/internal/dataplane/proxyproto"
)

// clientTraffic applies what ClientTrafficPolicies set for a request's
// listener, before it is routed; false when it answered the request.
func (ps *portServer) clientTraffic(w http.ResponseWriter, r *http.Request, c *config.ClientTraffic) bool {
	if c.Address != nil && !useClientAddress(w, r, c.Address) {
		return false
	}
	if (c.MaxHeaderBytes > 0 || c.MaxHeaderCount > 0) && headersTooLarge(r.Header, c) {
		writeErrorFor(w, r, http.StatusRequestHeaderFieldsTooLarge)
		return false
	}
	return true
}

// headersTooLarge reports whether h is over the listener's limits.
func headersTooLarge(h http.Header, c *config.ClientTraffic) bool {
	bytes, count := 0, 0
	for k, vs := range h {
		for _, v := range vs {
			bytes += len(k) + len(v) + 4 // ": " and CRLF
			count++
		}
	}
	return (c.MaxHeaderBytes > 0 && bytes > c.MaxHeaderBytes) || (c.MaxHeaderCount > 0 && count > c.MaxHeaderCount)
}

// accepted serves a new connection: after its PROXY protocol header, when
// the port reads one.
func (s *sorter) accepted(c net.Conn) {
	if cfg := s.ps.rt.current.Load(); cfg != nil {
		if port := cfg.Port(s.ps.key); port != nil && port.ProxyProtocol != nil {
			if !s.ps.readProxyHeader(c, port.ProxyProtocol) {
				return
			}
		}
	}
	s.sort(c)
}

// readProxyHeader reads c's PROXY protocol header as pp says, before
// anything else (TLS included), and makes the address it gives c's peer.
// It reports false, having closed c, when c is refused: a header from a
// peer pp does not trust, none where one is required, a malformed one, or
// one that did not arrive in time.
func (ps *portServer) readProxyHeader(c net.Conn, pp *config.ProxyProtocol) bool {
	t, _ := c.(*trackedConn)
	if t == nil {
		return true
	}
	trusted := pp.TrustsPeer(t.client)
	refuse := func(reason string, err error) bool {
		if ce := ps.log.Check(zap.DebugLevel, "PROXY protocol: connection refused"); ce != nil {
			ce.Write(zap.Stringer("peer", t.client), zap.String("reason", reason), zap.Error(err))
		}
		if tc, ok := unwrapTCP(t.Conn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
		return false
	}
	if !trusted && !pp.Optional {
		return refuse("required header from a peer not trusted to send one", nil)
	}
	timeout := pp.Timeout
	if timeout <= 0 {
		timeout = ps.rt.opts.ReadHeaderTimeout
	}
	// Bounded in time as in size (proxyproto reads at most the header and
	// 64 KiB of TLVs): a peer sending it slowly is cut at the deadline.
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	h, rest, err := proxyproto.Read(c)
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case errors.Is(err, proxyproto.ErrNoHeader) && pp.Optional:
		// Served as from its peer, with the bytes read.
	case err != nil:
		return refuse("no valid header", err)
	case !trusted:
		return refuse("header from a peer not trusted to send one", nil)
	case !h.Local:
		if !t.setClient(h.Source) {
			return refuse("the client reached its share of the port's connections", nil)
		}
	}
	if len(rest) > 0 {
		t.Conn = &prefixConn{Conn: t.Conn, pending: rest}
	}
	return true
}

// setClient makes src the connection's client: its RemoteAddr, and the
// address it counts against for MaxConnsPerClient. False when that
// client has its share already (the connection still counts against its
// peer, which Close releases).
func (t *trackedConn) setClient(src netip.AddrPort) bool {
	client := src.Addr().Unmap()
	if client != t.client {
		if !t.limit.admitClient(client) {
			return false
		}
		t.limit.releaseClient(t.client)
		t.client = client
	}
	t.remote = net.TCPAddrFromAddrPort(netip.AddrPortFrom(client, src.Port()))
	return true
}

// RemoteAddr is the client's address: the one a PROXY protocol header
// gave, else the peer's.
func (t *trackedConn) RemoteAddr() net.Addr {
	if t.remote != nil {
		return t.remote
	}
	return t.Conn.RemoteAddr()
}

// prefixConn gives the bytes read past a PROXY protocol header before
// the socket's. It has no Inner: a stream spliced from the socket would
// skip them.
type prefixConn struct {
	net.Conn
	pending []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// connSettings is the ClientTraffic whose connection settings
// (ClientTraffic.ConnSettings) apply to ctx's connection now: that of
// the listener its last request went to, else the one its TLS handshake
// chose, else, for a cleartext connection before its first request, the
// port's strictest (Port.Cleartext); nil for the port's flags.
func (ps *portServer) connSettings(ctx context.Context) *config.ClientTraffic {
	if t, _ := ctx.Value(connKey{}).(*trackedConn); t != nil {
		if l := t.served.Load(); l != nil {
			return l.Client
		}
		if l := t.listener.Load(); l != nil {
			return l.Client
		}
	}
	if p := ps.rt.current.Load().Port(ps.key); p != nil {
		return p.Cleartext
	}
	return nil
}

// noteServed remembers l as the listener of the connection of r's last
// request, when the port has connection settings to tell apart (h1Timeouts).
func noteServed(r *http.Request, port *config.Port, l *config.Listener) {
	if port.Cleartext == nil && l.Client == nil {
		return
	}
	if t, _ := r.Context().Value(connKey{}).(*trackedConn); t != nil && t.served.Load() != l {
		t.served.Store(l)
	}
}

// h1Timeouts are the HTTP/1 header and idle timeouts of ctx's
// connection (h1.Server.Timeouts); zero for the port's.
func (ps *portServer) h1Timeouts(ctx context.Context) (header, idle time.Duration) {
	c := ps.connSettings(ctx)
	if c == nil {
		return 0, 0
	}
	return c.HeaderTimeout, c.H1IdleTimeout
}

// listenerH2Options are the HTTP/2 settings of ctx's connection
// (ClientTrafficPolicy http.http2): those of the listener its TLS
// handshake chose, or on a cleartext port (h2c) the strictest of its
// listeners', since no request has named one yet; zero for the port's.
func (ps *portServer) listenerH2Options(ctx context.Context) h2.ConnOptions {
	c := ps.connSettings(ctx)
	if c == nil {
		return h2.ConnOptions{}
	}
	return h2.ConnOptions{MaxConcurrentStreams: c.MaxConcurrentStreams, IdleTimeout: c.IdleTimeout}
}
