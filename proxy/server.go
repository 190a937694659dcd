package proxy

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/h1"
	"portico.dev/portico/internal/dataplane/h2"
	"portico.dev/portico/internal/dataplane/sockio"
	"portico.dev/portico/sni"
)

// portServer serves one bound port for as long as configs keep it.
type portServer struct {
	rt  *Runtime
	key config.PortKey
	// portText is the port's number in decimal, for X-Forwarded-Port.
	portText string
	protocol config.Protocol
	ln       net.Listener
	// h1 serves the port's HTTP/1 connections; h1ln is the listener its
	// accept loop (acceptH1) takes them from, after the sorter and, on
	// HTTPS ports, TLS.
	h1   *h1.Server
	h1ln net.Listener
	// tlsConfig picks the certificate by SNI (HTTPS ports): the port's
	// TLS listener and terminated TLS streams handshake with it.
	tlsConfig *tls.Config
	// streamTLS is tlsConfig for terminated TLS streams, made at the
	// first one (streamTLSConfig).
	streamTLS atomic.Pointer[tls.Config]
	// h2 serves the port's HTTP/2 connections, TLS and cleartext.
	h2  *h2.Server
	log *zap.Logger
	// last is the port's config when it was removed, for requests that
	// arrive while it drains.
	last atomic.Pointer[config.Port]

	// untracked are the connections h1 does not track: HTTP/2 and
	// upgraded ones.
	untracked untrackedConns
	// tcp are the open connections of a TCP port (tcpstream.go).
	tcp   tcpStreams
	conns connLimit
	// health is what the accept loop reports of failing accepts, for
	// readiness.
	health acceptHealth
	// writers are the paced writers of requests without a body (see
	// pacedWriter).
	writers  sync.Pool
	served   chan struct{} // closed when the accept loop returns
	stopOnce sync.Once
	stopping atomic.Bool
}

// trackedConn remembers the listener its TLS handshake selected, so a
// request whose Host belongs to another listener can be told so (421).
type trackedConn struct {
	net.Conn
	listener atomic.Pointer[config.Listener]
	// served is the listener of the connection's last request, on ports
	// where a listener has connection settings (ClientTraffic): the
	// next request's wait and head take its HTTP/1 timeouts.
	served atomic.Pointer[config.Listener]
	// clientVerified caches whether the client certificate of the
	// connection chains to its listener's CAs, when the handshake did not
	// require that: 0 not checked yet, 1 yes, 2 no.
	clientVerified atomic.Int32
	limit          *connLimit
	// client is the address the connection counts against in limit.
	client netip.Addr
	// remote is the client's address a PROXY protocol header gave; nil
	// without one. Set before the connection is served.
	remote net.Addr
	closed atomic.Bool
}

// Close releases the connection's place under the port's cap, once.
// Inner is the accepted socket, which streams copy to and from.
func (t *trackedConn) Inner() net.Conn { return t.Conn }

func (t *trackedConn) Close() error {
	if !t.closed.Swap(true) {
		t.limit.release(t.client)
	}
	return t.Conn.Close()
}

type connKey struct{}

func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*tls.Conn); ok {
		c = cc.NetConn()
	}
	if t := tracked(c); t != nil {
		return context.WithValue(ctx, connKey{}, t)
	}
	return ctx
}

// tracked is the trackedConn under the wrappers of the connection sorting:
// peekedConn (HTTP/1 on a plain HTTP port) and replayConn (HTTPS, after
// its ClientHello was read); nil when there is none.
func tracked(c net.Conn) *trackedConn {
	switch cc := c.(type) {
	case *peekedConn:
		c = cc.Conn
	case *replayConn:
		c = cc.Conn
	}
	t, _ := c.(*trackedConn)
	return t
}

func (ps *portServer) start() {
	ps.served = make(chan struct{})
	var ln net.Listener = &trackingListener{Listener: ps.ln, limit: &ps.conns}
	switch ps.protocol {
	case config.HTTPS:
		ps.tlsConfig = sni.ServerConfig(&tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{http2.NextProtoTLS, "http/1.1"}}, ps.sniTable, rememberListener)
		s := newSorter(ln, ps)
		s.sort = s.sortTLS
		go s.acceptLoop()
		ln = tls.NewListener(s, ps.tlsConfig)
	case config.TCP:
		s := newSorter(ln, ps)
		s.sort = s.serveTCP
		go s.acceptLoop()
		ln = s
	default:
		s := newSorter(ln, ps)
		s.sort = s.sortH2C
		go s.acceptLoop()
		ln = s
	}
	ps.h1ln = ln
	go func() {
		defer close(ps.served)
		if err := ps.acceptH1(ln); err != nil && !errors.Is(err, net.ErrClosed) && !ps.stopping.Load() {
			ps.log.Error("port stopped serving", zap.Error(err))
		}
	}()
}

// sniTable returns the certificate table of the config being served now, so
// a swap rotates certificates at the next handshake.
func (ps *portServer) sniTable() *sni.Table {
	if p := ps.rt.current.Load().Port(ps.key); p != nil && p.SNI != nil {
		return p.SNI
	}
	if p := ps.last.Load(); p != nil && p.SNI != nil {
		return p.SNI
	}
	return ps.rt.emptySNI
}

func rememberListener(c net.Conn, e *sni.Entry) {
	if t := tracked(c); t != nil {
		if l, ok := e.Value.(*config.Listener); ok {
			t.listener.Store(l)
		}
	}
}

func (ps *portServer) shutdown(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ps.shutdownCtx(ctx)
}

// stopAccepting closes the port's socket: connections already accepted go
// on. Closing the listeners again as the drain begins then fails with
// net.ErrClosed, which the drain ignores.
func (ps *portServer) stopAccepting() {
	ps.stopping.Store(true)
	if err := ps.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		ps.log.Debug("closing the listener", zap.Error(err))
	}
}

// shutdownCtx stops accepting, lets in-flight requests finish until ctx
// ends, then closes whatever is left.
func (ps *portServer) shutdownCtx(ctx context.Context) {
	outer := ctx
	ps.stopOnce.Do(func() {
		if ps.served == nil { // bound but never started
			ps.ln.Close()
			return
		}
		ps.stopping.Store(true)
		// The end of the drain is kept for closing what is left and for
		// its handlers to notice (which closes their backend sides): the
		// shutdown as a whole stays within ctx, --drain-timeout.
		ctx, drained := drainPart(ctx)
		defer drained()
		// HTTP/2 connections get their GOAWAY at once and drain alongside
		// HTTP/1 ones.
		h2done := make(chan struct{})
		go func() {
			defer close(h2done)
			if err := ps.h2.Shutdown(ctx); err != nil {
				ps.h2.Close()
			}
		}()
		ps.shutdownH1(ctx)
		// Upgraded connections (WebSockets) and cleartext HTTP/2 ones
		// drain too, up to the deadline; then they are closed, which ends
		// their requests and so their backend connections.
		if !ps.untracked.wait(ctx) {
			if n := ps.untracked.closeAll(); n > 0 {
				ps.log.Info("drain deadline reached, closing upgraded and cleartext HTTP/2 connections", zap.Int("connections", n))
			}
			// Their handlers end as soon as they notice, closing the
			// backend side, within what drainPart kept.
			drained()
			ps.untracked.wait(outer)
		}
		<-h2done
		<-ps.served
		ps.log.Info("port closed")
	})
}

// closeGrace is the part of a drain kept, at its end, for closing what is
// still open and for its handlers to end (a tenth of shorter drains).
const closeGrace = 200 * time.Millisecond

// drainPart is ctx ending closeGrace before ctx's deadline, if it has
// one, with its cancel function.
func drainPart(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	grace := min(closeGrace, time.Until(d)/10)
	return context.WithDeadline(ctx, d.Add(-grace))
}

type trackingListener struct {
	net.Listener
	limit *connLimit
}

func (l *trackingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := clientAddr(c)
		if l.limit.admit(client) {
			return &trackedConn{Conn: sockio.Wrap(c), limit: l.limit, client: client}, nil
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset: the client learns at once
		}
		c.Close()
	}
}

// h2cPreface is what an HTTP/2 client with prior knowledge sends first.
const h2cPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sorter looks at the first bytes of every connection of a port, on a
// goroutine of its own, and either serves it (sort) or hands it on to the
// port's HTTP/1 accept loop (Accept, acceptH1). On a plain HTTP port it serves cleartext
// HTTP/2 (prior knowledge, as Knative and gRPC clients use) and hands on
// HTTP/1 (sortH2C); on an HTTPS port it serves TLS listeners' streams and
// hands on HTTPS, by the SNI of the ClientHello (sortTLS, tlsstream.go).
type sorter struct {
	net.Listener
	ps    *portServer
	sort  func(net.Conn)
	conns chan net.Conn
	errc  chan error
	once  sync.Once
	done  chan struct{}
}

func newSorter(ln net.Listener, ps *portServer) *sorter {
	return &sorter{Listener: ln, ps: ps, conns: make(chan net.Conn), errc: make(chan error, 1), done: make(chan struct{})}
}

func (s *sorter) sortH2C(c net.Conn) {
	br := bufio.NewReaderSize(c, len(h2cPreface))
	_ = c.SetReadDeadline(time.Now().Add(s.ps.rt.opts.ReadHeaderTimeout))
	isH2 := true
	for n := 1; n <= len(h2cPreface); n++ {
		b, err := br.Peek(n)
		if err != nil {
			// A client that closed early or sent a short request: let the
			// HTTP/1 server answer or discard it.
			isH2 = false
			break
		}
		if b[n-1] != h2cPreface[n-1] {
			isH2 = false
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &peekedConn{Conn: c, r: br}
	if !isH2 {
		s.handOn(pc)
		return
	}
	s.ps.untracked.begin()
	defer s.ps.untracked.end()
	ctx := context.Background()
	if t, ok := c.(*trackedConn); ok {
		ctx = context.WithValue(ctx, connKey{}, t)
	}
	s.ps.serveH2(s.ps.untracked.add(pc), ctx)
}

// serveH2 serves an HTTP/2 connection, TLS or cleartext, behind the
// guard against abusive frame patterns.
func (ps *portServer) serveH2(c net.Conn, ctx context.Context) {
	o := &ps.rt.opts
	co := ps.listenerH2Options(ctx)
	if o.H2MaxGlitches > 0 {
		c = newH2Guard(c, h2Limits{glitches: o.H2MaxGlitches, forgiven: max(o.H2GlitchesForgiven, 0), maxStreams: cmp.Or(co.MaxConcurrentStreams, o.MaxConcurrentStreams)}, ps.log)
	}
	// ctx carries the connection (connKey).
	ps.h2.ServeConnWith(ctx, c, co)
}

// handOn gives c to the port's HTTP/1 accept loop.
func (s *sorter) handOn(c net.Conn) {
	select {
	case s.conns <- c:
	case <-s.done:
		c.Close()
	}
}

func (s *sorter) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case err := <-s.errc:
		s.errc <- err
		return nil, err
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *sorter) Close() error {
	s.once.Do(func() { close(s.done) })
	return s.Listener.Close()
}

// peekedConn replays the bytes read while sniffing.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
