package proxy

import (
	"context"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/sockio"
	"portico.dev/portico/internal/dataplane/stream"
)

// StreamTCP is the mode StreamObserver is told for a TCP listener's
// connections (TCPRoute).
const StreamTCP = "tcp"

// A TCP port (config.TCP) has one listener, whose one TCPRoute takes every
// connection: nothing is read before the backend is dialled, and the bytes
// go both ways as they are (stream.Pipe, splice(2) between the sockets).
// Its http.Server and HTTP/1 server are started as on any port but are
// never handed a connection: they only give the port the shutdown every
// other port has, the untracked connections draining until the deadline.

// tcpStreams are the open connections of a TCP port with the listener and
// route that took them, so that a configuration without that route any
// more can end them after the drain timeout.
type tcpStreams struct {
	mu    sync.Mutex
	conns map[*tcpStream]struct{}
}

type tcpStream struct {
	conn     net.Conn
	listener string // config.Listener.Key
	route    string // config.StreamRoute.Name
	// cut closes conn at the end of a drain; nil while the route serves.
	cut *time.Timer
}

func (s *tcpStreams) add(ts *tcpStream) {
	s.mu.Lock()
	if s.conns == nil {
		s.conns = map[*tcpStream]struct{}{}
	}
	s.conns[ts] = struct{}{}
	s.mu.Unlock()
}

func (s *tcpStreams) remove(ts *tcpStream) {
	s.mu.Lock()
	delete(s.conns, ts)
	if ts.cut != nil {
		ts.cut.Stop()
	}
	s.mu.Unlock()
}

// recheck gives the connections whose route port p no longer serves
// drain to finish, then closes them; a connection whose route is back
// before then is left alone. p nil: the port is gone, and its shutdown
// drains it.
func (s *tcpStreams) recheck(p *config.Port, drain time.Duration) {
	if p == nil {
		return
	}
	serving := map[[2]string]bool{}
	for l := range p.All.Values() {
		if l.TCP != nil {
			serving[[2]string{l.Key, l.TCP.Name}] = true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ts := range s.conns {
		ts.keep(serving[[2]string{ts.listener, ts.route}], drain)
	}
}

// recheckOne is recheck for ts alone.
func (s *tcpStreams) recheckOne(ts *tcpStream, p *config.Port, drain time.Duration) {
	if p == nil {
		return
	}
	kept := false
	for l := range p.All.Values() {
		kept = kept || (l.Key == ts.listener && l.TCP != nil && l.TCP.Name == ts.route)
	}
	s.mu.Lock()
	ts.keep(kept, drain)
	s.mu.Unlock()
}

// keep starts or stops the drain of ts; the caller holds the lock of its
// tcpStreams.
func (ts *tcpStream) keep(kept bool, drain time.Duration) {
	switch {
	case kept && ts.cut != nil:
		ts.cut.Stop()
		ts.cut = nil
	case !kept && ts.cut == nil:
		c := ts.conn
		ts.cut = time.AfterFunc(drain, func() { c.Close() })
	}
}

// serveTCP serves one connection of a TCP port: its listener's route picks
// a backend by weight, and the connection is refused (reset) when there is
// no route, the backend picked is invalid, or no endpoint of it answers.
func (s *sorter) serveTCP(c net.Conn) {
	ps := s.ps
	ps.untracked.begin()
	defer ps.untracked.end()
	uc := ps.untracked.add(c)
	start := time.Now()
	l := ps.tcpListener()
	var route *config.StreamRoute
	if l != nil {
		route = l.TCP
	}
	if route == nil {
		refuse(uc)
		ps.tcpEnded(uc, "", StreamNoRoute, stream.Result{}, start)
		return
	}
	backend, err := ps.dialTCP(route, uc)
	if err != nil {
		refuse(uc)
		ps.tcpEnded(uc, route.Name, StreamNoBackend, stream.Result{}, start)
		return
	}
	ts := &tcpStream{conn: uc, listener: l.Key, route: route.Name}
	ps.tcp.add(ts)
	// A configuration swapped in since the listener was looked up may have
	// dropped the route already: recheck missed this connection then.
	ps.tcp.recheckOne(ts, ps.rt.current.Load().Port(ps.key), ps.rt.opts.DrainTimeout)
	res := stream.Pipe(uc, backend, max(ps.rt.opts.StreamIdleTimeout, 0))
	ps.tcp.remove(ts)
	outcome := StreamDone
	if res.Idle {
		outcome = StreamIdle
	}
	ps.tcpEnded(uc, route.Name, outcome, res, start)
}

// tcpListener is the port's one listener in the config served now, or
// the one it had when it was removed.
func (ps *portServer) tcpListener() *config.Listener {
	p := ps.rt.current.Load().Port(ps.key)
	if p == nil {
		p = ps.last.Load()
	}
	if p == nil || p.All.Len() == 0 {
		return nil
	}
	return p.All.At(0)
}

// dialTCP connects to a backend of route, picked by weight, for client.
// An endpoint that refuses is left out for a while and the next one of
// the same backend is tried, up to maxFailover times, as for requests
// (failover.go): nothing of the client's has been sent yet.
func (ps *portServer) dialTCP(route *config.StreamRoute, client net.Conn) (net.Conn, error) {
	b := route.Next()
	if b == nil || b.Invalid != "" {
		return nil, errNoStreamBackend
	}
	e := ps.rt.current.Load().Endpoints.Lookup(b.Key)
	down := &ps.rt.fwd.down
	d := sockio.Dialer{Dialer: net.Dialer{Timeout: ps.rt.opts.DialTimeout}}
	for attempt := 0; ; attempt++ {
		now := time.Now()
		addr := down.pickUp(e, now)
		if addr == "" {
			return nil, errNoStreamBackend
		}
		conn, err := d.DialContext(context.Background(), "tcp", addr)
		if err == nil {
			if err := sendProxyHeader(conn, b.ProxyProtocol, client); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		}
		if down.mark(addr, now) {
			ps.log.Warn("backend endpoint unreachable; left out for a while", zap.String("route", route.Name),
				zap.String("endpoint", addr), zap.Duration("for", downFor), zap.Error(err))
		}
		if attempt == maxFailover || !down.hasUp(e, addr, now) {
			return nil, err
		}
	}
}

// tcpEnded reports a finished TCP stream to the metrics and the access log.
func (ps *portServer) tcpEnded(c net.Conn, route, outcome string, res stream.Result, start time.Time) {
	d := time.Since(start)
	if o := ps.rt.opts.Streams; o != nil {
		o.ObserveStream(route, StreamTCP, outcome, res.Up, res.Down, d)
	}
	log := ps.rt.opts.AccessLog
	if log == nil {
		return
	}
	if ce := log.Check(zapcore.InfoLevel, "stream"); ce != nil {
		ce.Write(zap.String("remote", c.RemoteAddr().String()), zap.String("mode", StreamTCP),
			zap.String("route", route), zap.String("outcome", outcome), zap.Int64("bytes_up", res.Up),
			zap.Int64("bytes_down", res.Down), zap.Duration("duration", d))
	}
}
