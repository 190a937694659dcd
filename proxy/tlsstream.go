package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/clienthello"
	"portico.dev/portico/internal/dataplane/sockio"
	"portico.dev/portico/internal/dataplane/stream"
)

// StreamObserver records finished TLS streams (metrics): the TLSRoute as
// "namespace/name" ("" when none took the connection), the listener's mode
// ("passthrough" or "terminate"), the outcome (one of the Stream* values),
// the bytes each way and how long the stream lasted.
type StreamObserver interface {
	ObserveStream(route, mode, outcome string, up, down int64, d time.Duration)
}

// How a TLS stream ended, as StreamObserver is told.
const (
	StreamDone      = "done"       // both sides finished, or one closed
	StreamIdle      = "idle"       // cut by the idle timeout
	StreamNoRoute   = "no_route"   // no TLSRoute for the server name
	StreamNoBackend = "no_backend" // the backend is invalid, has no endpoint, or refused
	StreamHandshake = "handshake"  // the terminating handshake failed
)

// sortTLS reads a connection's ClientHello and serves it according to the
// listener its SNI picks: a TLS listener's stream here, anything else
// (HTTPS listeners, what is not TLS) on to the TLS handshake. A name no
// listener serves is refused: on a port with TLS listeners by closing the
// connection, as a TLS listener refuses a name it has no route for; on a
// port of HTTPS listeners only by the handshake, with the unrecognized_name
// alert. A client that does not finish its ClientHello within
// ReadHeaderTimeout is closed.
func (s *sorter) sortTLS(c net.Conn) {
	ps := s.ps
	// Counted from the start: a shutdown waits for a connection still
	// sending its ClientHello, which may become a stream.
	ps.untracked.begin()
	defer ps.untracked.end()
	done := ps.untracked.read(c)
	_ = c.SetReadDeadline(time.Now().Add(ps.rt.opts.ReadHeaderTimeout))
	hello, name, err := clienthello.Read(c)
	_ = c.SetReadDeadline(time.Time{})
	done()
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		ps.handshakeFailed(HandshakeTimeout)
		c.Close()
		return
	case errors.Is(err, io.EOF):
		ps.handshakeFailed(HandshakeClosed)
		c.Close()
		return
	}
	pc := &replayConn{Conn: c, pending: hello}
	var l *config.Listener
	if err == nil {
		if e := ps.sniTable().Lookup(name); e != nil {
			l, _ = e.Value.(*config.Listener)
		}
	}
	switch {
	case l == nil && err == nil && ps.servesStreams():
		ps.handshakeFailed(HandshakeUnknownName)
		refuse(c)
		return
	case l == nil || l.Stream == config.StreamNone:
		s.handOn(pc)
		return
	}
	ps.stream(ps.untracked.add(pc), pc, l, name)
}

// servesStreams reports whether the port has TLS listeners now.
func (ps *portServer) servesStreams() bool {
	if p := ps.rt.current.Load().Port(ps.key); p != nil {
		return p.Streams
	}
	if p := ps.last.Load(); p != nil {
		return p.Streams
	}
	return false
}

// refuse closes a connection with a reset: what a client whose server name
// no route or backend serves is told, rather than an alert, so that the
// refusal looks the same whether the name was unknown, had no route, or
// its backend could not be reached.
func refuse(c net.Conn) {
	if tc, ok := unwrapTCP(c); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

func unwrapTCP(c net.Conn) (*net.TCPConn, bool) {
	for {
		switch x := c.(type) {
		case *net.TCPConn:
			return x, true
		case stream.Wrapper:
			c = x.Inner()
		default:
			return nil, false
		}
	}
}

// stream serves a connection of a TLS listener: its route and backend are
// found before anything is answered, so that a name without either is
// refused before a handshake; then the client's session is forwarded as it
// is (Passthrough), or terminated with the listener's certificates
// (Terminate) and its plaintext forwarded.
func (ps *portServer) stream(c net.Conn, pc *replayConn, l *config.Listener, name string) {
	start := time.Now()
	route := l.Streams.Lookup(name)
	if route == nil {
		refuse(c)
		ps.streamEnded(c, l, name, "", StreamNoRoute, stream.Result{}, start)
		return
	}
	var cc *config.BackendClientCert
	if l.Stream == config.StreamTerminate {
		cc = l.BackendClientCert
	}
	backend, err := ps.dialStream(route, cc, l.Stream == config.StreamTerminate, c)
	if err == nil && l.Stream == config.StreamPassthrough {
		_, err = backend.Write(pc.take())
	}
	if err != nil {
		if backend != nil {
			backend.Close()
		}
		refuse(c)
		ps.streamEnded(c, l, name, route.Name, StreamNoBackend, stream.Result{}, start)
		return
	}
	if l.Stream == config.StreamPassthrough {
		ps.pipe(c, backend, l, name, route.Name, start)
		return
	}
	tc := tls.Server(c, ps.streamTLSConfig())
	ctx, cancel := context.WithTimeout(context.Background(), ps.rt.opts.ReadHeaderTimeout)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		tc.Close()
		backend.Close()
		ps.streamEnded(c, l, name, route.Name, StreamHandshake, stream.Result{}, start)
		return
	}
	ps.pipe(tc, backend, l, name, route.Name, start)
}

func (ps *portServer) pipe(client, backend net.Conn, l *config.Listener, name, route string, start time.Time) {
	res := stream.Pipe(client, backend, max(ps.rt.opts.StreamIdleTimeout, 0))
	outcome := StreamDone
	if res.Idle {
		outcome = StreamIdle
	}
	ps.streamEnded(client, l, name, route, outcome, res, start)
}

// dialStream connects to a backend of route, picked by weight, for
// client; with reencrypt (terminated streams), a backend with a
// BackendTLSPolicy gets a TLS session of Portico's own, after the PROXY
// header when the backend takes one.
func (ps *portServer) dialStream(route *config.StreamRoute, cc *config.BackendClientCert, reencrypt bool, client net.Conn) (net.Conn, error) {
	b := route.Next()
	if b == nil || b.Invalid != "" {
		return nil, errNoStreamBackend
	}
	cfg := ps.rt.current.Load()
	addr := cfg.Endpoints.Lookup(b.Key).Pick()
	if addr == "" {
		return nil, errNoStreamBackend
	}
	d := sockio.Dialer{Dialer: net.Dialer{Timeout: ps.rt.opts.DialTimeout}}
	conn, err := d.DialContext(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := sendProxyHeader(conn, b.ProxyProtocol, client); err != nil {
		conn.Close()
		return nil, err
	}
	if b.TLS == nil || !reencrypt {
		return conn, nil
	}
	if b.TLS.Invalid != "" {
		conn.Close()
		return nil, errNoStreamBackend
	}
	tcfg := backendTLSConfig(b.TLS, cc, "")
	tcfg.NextProtos = nil
	tc := tls.Client(conn, tcfg)
	ctx, cancel := context.WithTimeout(context.Background(), ps.rt.opts.DialTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return tc, nil
}

// streamTLSConfig is the port's TLS configuration without application
// protocols: a terminated stream carries whatever the client speaks to
// the backend, so Portico must not agree to h2 or http/1.1 on the
// backend's behalf.
func (ps *portServer) streamTLSConfig() *tls.Config {
	if cfg := ps.streamTLS.Load(); cfg != nil {
		return cfg
	}
	cfg := ps.tlsConfig.Clone()
	cfg.NextProtos = nil
	perEntry := ps.tlsConfig.GetConfigForClient
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := perEntry(h)
		if c == nil || len(c.NextProtos) == 0 {
			return c, err
		}
		c = c.Clone()
		c.NextProtos = nil
		return c, err
	}
	ps.streamTLS.Store(cfg)
	return cfg
}

// handshakeFailed counts a ClientHello that never came whole.
func (ps *portServer) handshakeFailed(reason string) {
	if o := ps.rt.opts.Handshakes; o != nil {
		o.ObserveHandshakeFailure(ps.key.String(), reason)
	}
}

var errNoStreamBackend = errors.New("no usable backend")

// streamEnded reports a finished stream to the metrics and the access log.
func (ps *portServer) streamEnded(c net.Conn, l *config.Listener, name, route, outcome string, res stream.Result, start time.Time) {
	d := time.Since(start)
	mode := "terminate"
	if l.Stream == config.StreamPassthrough {
		mode = "passthrough"
	}
	if o := ps.rt.opts.Streams; o != nil {
		o.ObserveStream(route, mode, outcome, res.Up, res.Down, d)
	}
	log := ps.rt.opts.AccessLog
	if log == nil {
		return
	}
	if ce := log.Check(zapcore.InfoLevel, "stream"); ce != nil {
		ce.Write(zap.String("remote", c.RemoteAddr().String()), zap.String("sni", name), zap.String("mode", mode),
			zap.String("route", route), zap.String("outcome", outcome), zap.Int64("bytes_up", res.Up),
			zap.Int64("bytes_down", res.Down), zap.Duration("duration", d))
	}
}

// replayConn gives the bytes of the ClientHello read while sorting to the
// reader first, then the connection's.
type replayConn struct {
	net.Conn
	pending []byte
	// read is set once pending is gone: reads go straight to the socket.
	read atomic.Bool
}

func (c *replayConn) Read(p []byte) (int, error) {
	if !c.read.Load() {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.read.Store(true)
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// take returns the ClientHello's bytes not read yet, and forgets them: a
// passthrough stream writes them to the backend itself, then copies from
// the socket.
func (c *replayConn) take() []byte {
	p := c.pending
	c.pending = nil
	c.read.Store(true)
	return p
}

// Inner is the socket: streams copy to and from it once the ClientHello
// has gone to the backend.
func (c *replayConn) Inner() net.Conn {
	return c.Conn
}
