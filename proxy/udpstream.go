package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"portico.dev/portico/config"
)

// A UDP port (config.UDP) is a socket of its own, beside the TCP port of
// the same number. Its one listener's UDPRoute takes every datagram, in
// sessions keyed by the client's address and port:
//
//   - The first datagram of a client opens a session: a backend picked by
//     the route's weights (per session, not per datagram) and a connected
//     UDP socket to one of its endpoints, so that the backend's answers
//     come back on that socket alone and go to that client.
//   - The port's one reader goroutine writes each client datagram to its
//     session's socket, and each session's one goroutine writes the
//     backend's datagrams to the client: neither direction is ever
//     reordered, and no goroutine is started per datagram.
//   - The table is bounded (Options.MaxUDPSessionsPerPort). When it is
//     full, the oldest session whose client has sent a single datagram is
//     evicted for the new one (a query answered, or one of a flood of
//     source addresses and ports); when every session has carried more
//     than that, the new client's datagram is dropped ("full"): a flood
//     of one-datagram sources cannot push out a session in use.
//   - A session ends after Options.UDPIdleTimeout without a datagram
//     either way, when its backend refuses (ICMP port unreachable), when
//     a configuration no longer gives its listener its route (after
//     Options.DrainTimeout), or when the port goes.
//
// A session waits for its backend's datagrams without a buffer of its
// own (udpSession.read): ten thousand idle sessions cost their sockets and
// goroutines, not ten thousand 64 KiB buffers.

// StreamUDP is the mode of a UDP session in the access log.
const StreamUDP = "udp"

// How a UDP session ended, as UDPObserver and the access log are told.
const (
	UDPIdle    = "idle"    // no datagram either way for the idle timeout
	UDPEvicted = "evicted" // made room for a new session in a full table
	UDPRefused = "refused" // the backend refused a datagram (ICMP), or its socket failed
	UDPDrained = "drained" // its route went; ended after the drain timeout
	UDPClosed  = "closed"  // the port was closed
)

// Why a client's datagram was dropped without a session, as UDPObserver
// is told.
const (
	UDPDropNoRoute   = "no_route"   // the listener has no route
	UDPDropNoBackend = "no_backend" // the backend picked is invalid or has no endpoint
	UDPDropFull      = "full"       // the table is full of sessions in use
)

// maxDatagram is the largest UDP payload over IPv4 (65,535 less the IP
// and UDP headers); a buffer one larger tells a longer IPv6 jumbogram
// apart, which is dropped.
const maxDatagram = 65507

// UDPObserver records UDP traffic (metrics): each session after it ended,
// by route ("namespace/name") and outcome, with its datagrams and bytes
// each way (up: client to backend) and how long it lasted; and each
// datagram dropped without a session, by route ("" when the listener has
// none) and reason.
type UDPObserver interface {
	ObserveUDPSession(route, outcome string, datagramsUp, datagramsDown, bytesUp, bytesDown int64, d time.Duration)
	ObserveUDPDrop(route, reason string)
}

type udpServer struct {
	rt   *Runtime
	key  config.PortKey
	conn *net.UDPConn
	log  *zap.Logger
	// bufs holds the buffers sessions read their backend's datagrams
	// into, only while they copy one.
	bufs *sync.Pool

	mu       sync.Mutex
	sessions map[netip.AddrPort]*udpSession
	// fresh lists, oldest first, the sessions whose client has sent one
	// datagram: those evicted when the table is full.
	fresh udpList
	// removed: the port is gone from the configuration; no session is
	// opened, and the socket closes at closeAt unless a configuration
	// brings the port back first.
	removed bool
	closeAt *time.Timer
	closed  bool

	sessionsWG sync.WaitGroup
	served     chan struct{} // closed when the reader returns
}

type udpSession struct {
	srv      *udpServer
	client   netip.AddrPort
	backend  *net.UDPConn
	listener string // config.Listener.Key
	route    string // config.StreamRoute.Name
	start    time.Time
	// last is the time (UnixNano) of the last datagram either way.
	last                       atomic.Int64
	upN, upBytes, downN, downB atomic.Int64

	// Under srv.mu.
	prev, next *udpSession // in srv.fresh
	inFresh    bool
	ended      bool
	outcome    string
	cut        *time.Timer
}

// bindUDP binds the socket of UDP port p.
func (rt *Runtime) bindUDP(p *config.Port) (*udpServer, error) {
	address := p.Address
	if address == "" {
		address = rt.opts.BindAddress
	}
	addr, err := net.ResolveUDPAddr("udp", net.JoinHostPort(address, strconv.Itoa(int(p.Number))))
	if err != nil {
		return nil, fmt.Errorf("bind port %s: %w", p.Key(), err)
	}
	conn, err := net.ListenUDP("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("bind port %s: %w", p.Key(), err)
	}
	return &udpServer{
		rt:       rt,
		key:      p.Key(),
		conn:     conn,
		bufs:     &rt.udpBufs,
		log:      rt.log.With(zap.String("address", p.Address), zap.Int32("port", p.Number), zap.String("transport", "udp")),
		sessions: map[netip.AddrPort]*udpSession{},
	}, nil
}

func (u *udpServer) start() {
	u.served = make(chan struct{})
	go u.serve()
}

// serve reads the port's datagrams until the socket closes.
func (u *udpServer) serve() {
	defer close(u.served)
	buf := make([]byte, maxDatagram+1)
	for {
		n, client, err := u.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			u.log.Debug("reading a datagram", zap.Error(err))
			continue
		}
		if n > maxDatagram {
			continue
		}
		client = netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
		s := u.session(client)
		if s != nil && !s.up(buf[:n]) {
			// The session ended (idle) between the lookup and the
			// write: the datagram opens the client's next one.
			if s = u.session(client); s != nil {
				s.up(buf[:n])
			}
		}
	}
}

// session returns the client's session, opening one when it has none;
// nil when the datagram is to be dropped.
func (u *udpServer) session(client netip.AddrPort) *udpSession {
	u.mu.Lock()
	defer u.mu.Unlock()
	if s := u.sessions[client]; s != nil {
		return s
	}
	if u.removed || u.closed {
		return nil
	}
	p := u.rt.current.Load().Port(u.key)
	var l *config.Listener
	if p != nil && p.All.Len() > 0 {
		l = p.All.At(0)
	}
	if l == nil || l.UDP == nil {
		u.dropped("", UDPDropNoRoute)
		return nil
	}
	route := l.UDP
	if limit := u.rt.opts.MaxUDPSessionsPerPort; limit > 0 && len(u.sessions) >= limit {
		oldest := u.fresh.head
		if oldest == nil {
			u.dropped(route.Name, UDPDropFull)
			return nil
		}
		u.endLocked(oldest, UDPEvicted)
	}
	backend, err := u.dial(route)
	if err != nil {
		u.dropped(route.Name, UDPDropNoBackend)
		return nil
	}
	s := &udpSession{srv: u, client: client, backend: backend, listener: l.Key, route: route.Name, start: time.Now()}
	s.last.Store(s.start.UnixNano())
	u.sessions[client] = s
	u.fresh.push(s)
	u.sessionsWG.Add(1)
	go s.run()
	return s
}

// dial connects a socket to an endpoint of a backend of route, picked by
// weight. Connecting a UDP socket sends nothing: an endpoint that does not
// listen shows as a refusal of the first datagram (UDPRefused).
func (u *udpServer) dial(route *config.StreamRoute) (*net.UDPConn, error) {
	b := route.Next()
	if b == nil || b.Invalid != "" {
		return nil, errNoStreamBackend
	}
	e := u.rt.current.Load().Endpoints.Lookup(b.Key)
	addr := u.rt.fwd.down.pickUp(e, time.Now())
	if addr == "" {
		return nil, errNoStreamBackend
	}
	raddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("backend endpoint %s: %w", addr, err)
	}
	return net.DialUDP("udp", nil, raddr)
}

func (u *udpServer) dropped(route, reason string) {
	if o := u.rt.opts.UDP; o != nil {
		o.ObserveUDPDrop(route, reason)
	}
}

// up sends a client datagram to the session's backend. Writes come from
// the port's one reader, in the order the datagrams arrived. It reports
// false when the session had ended.
func (s *udpSession) up(p []byte) bool {
	s.last.Store(time.Now().UnixNano())
	if _, err := s.backend.Write(p); err != nil {
		// A refusal shows on the session's reader too, which ends it.
		return !errors.Is(err, net.ErrClosed)
	}
	s.upBytes.Add(int64(len(p)))
	if s.upN.Add(1) == 2 {
		u := s.srv
		u.mu.Lock()
		if s.inFresh {
			u.fresh.remove(s)
		}
		u.mu.Unlock()
	}
	return true
}

// run carries the backend's datagrams to the client until the session
// ends, then reports it.
func (s *udpSession) run() {
	u := s.srv
	defer u.sessionsWG.Done()
	idle := u.rt.opts.UDPIdleTimeout
	outcome := UDPClosed
	raw, err := s.backend.SyscallConn()
	if err == nil {
		outcome = s.pump(raw, idle)
	}
	u.mu.Lock()
	u.endLocked(s, outcome)
	outcome = s.outcome
	u.mu.Unlock()
	s.report(outcome)
}

// pump copies datagrams from the backend to the client; it returns how
// the session ended when the backend's side did.
func (s *udpSession) pump(raw syscall.RawConn, idle time.Duration) string {
	u := s.srv
	if idle > 0 {
		_ = s.backend.SetReadDeadline(time.Now().Add(idle))
	}
	r := &udpRead{bufs: u.bufs}
	read := r.read // one closure for the session, not one per datagram
	for {
		r.err = nil
		err := raw.Read(read)
		if err == nil && r.err == nil && r.n <= maxDatagram {
			if _, werr := u.conn.WriteToUDPAddrPort((*r.buf)[:r.n], s.client); werr == nil {
				s.downN.Add(1)
				s.downB.Add(int64(r.n))
			}
			s.last.Store(time.Now().UnixNano())
		}
		if r.buf != nil {
			u.bufs.Put(r.buf)
			r.buf = nil
		}
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			last := time.Unix(0, s.last.Load())
			if time.Since(last) >= idle {
				return UDPIdle
			}
			_ = s.backend.SetReadDeadline(last.Add(idle))
		case err != nil:
			// The socket was closed by endLocked, which set the
			// outcome. (The callback's last EAGAIN is no error.)
			return UDPClosed
		case r.err != nil:
			// ECONNREFUSED (ICMP port unreachable) or another error
			// the endpoint's network reported: the client's next
			// datagram opens a new session.
			return UDPRefused
		}
	}
}

// udpRead is one session's read of its backend socket: a buffer is taken
// from the pool only once the socket is readable, and kept only while the
// datagram is copied to the client.
type udpRead struct {
	bufs *sync.Pool
	buf  *[]byte
	n    int
	err  error
}

// read is the syscall.RawConn.Read callback: false when nothing is
// there yet (the poller then waits for the socket).
func (r *udpRead) read(fd uintptr) bool {
	r.buf, r.err = r.bufs.Get().(*[]byte), nil
	r.n, r.err = syscall.Read(int(fd), *r.buf)
	if r.err == syscall.EAGAIN || r.err == syscall.EINTR {
		r.bufs.Put(r.buf)
		r.buf = nil
		return false
	}
	return true
}

// endLocked ends s with outcome, once: it leaves the table and its socket
// closes, which stops its reader. The caller holds u.mu.
func (u *udpServer) endLocked(s *udpSession, outcome string) {
	if s.ended {
		return
	}
	s.ended, s.outcome = true, outcome
	if u.sessions[s.client] == s {
		delete(u.sessions, s.client)
	}
	if s.inFresh {
		u.fresh.remove(s)
	}
	if s.cut != nil {
		s.cut.Stop()
	}
	s.backend.Close()
}

// report reports an ended session to the metrics and the access log.
func (s *udpSession) report(outcome string) {
	u := s.srv
	d := time.Since(s.start)
	upN, downN, upB, downB := s.upN.Load(), s.downN.Load(), s.upBytes.Load(), s.downB.Load()
	if o := u.rt.opts.UDP; o != nil {
		o.ObserveUDPSession(s.route, outcome, upN, downN, upB, downB, d)
	}
	log := u.rt.opts.AccessLog
	if log == nil {
		return
	}
	if ce := log.Check(zapcore.InfoLevel, "stream"); ce != nil {
		ce.Write(zap.String("remote", s.client.String()), zap.String("mode", StreamUDP),
			zap.String("route", s.route), zap.String("outcome", outcome),
			zap.Int64("datagrams_up", upN), zap.Int64("datagrams_down", downN),
			zap.Int64("bytes_up", upB), zap.Int64("bytes_down", downB), zap.Duration("duration", d))
	}
}

// recheck follows a new configuration: sessions whose listener still has
// their route stay, the others end after drain unless a later
// configuration gives it back. p nil: the port is gone; no session opens,
// and the socket closes after drain unless the port comes back first
// (then nothing was unbound: its sessions go on).
func (u *udpServer) recheck(p *config.Port, drain time.Duration, gone func()) {
	serving := map[[2]string]bool{}
	if p != nil {
		for l := range p.All.Values() {
			if l.UDP != nil {
				serving[[2]string{l.Key, l.UDP.Name}] = true
			}
		}
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case p == nil && !u.removed:
		u.removed = true
		u.closeAt = time.AfterFunc(drain, gone)
	case p != nil && u.removed:
		u.removed = false
		u.closeAt.Stop()
		u.closeAt = nil
	}
	for _, s := range u.sessions {
		kept := serving[[2]string{s.listener, s.route}]
		switch {
		case kept && s.cut != nil:
			s.cut.Stop()
			s.cut = nil
		case !kept && s.cut == nil:
			s.cut = time.AfterFunc(drain, func() {
				u.mu.Lock()
				u.endLocked(s, UDPDrained)
				u.mu.Unlock()
			})
		}
	}
}

// close closes the socket and ends every session, waiting for their
// reports.
func (u *udpServer) close() {
	u.mu.Lock()
	if u.closed {
		u.mu.Unlock()
		return
	}
	u.closed = true
	if u.closeAt != nil {
		u.closeAt.Stop()
	}
	u.conn.Close()
	for _, s := range u.sessions {
		u.endLocked(s, UDPClosed)
	}
	u.mu.Unlock()
	if u.served != nil {
		<-u.served
	}
	u.sessionsWG.Wait()
}

// sessionCount is the number of open sessions, for tests.
func (u *udpServer) sessionCount() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.sessions)
}

// udpList is a list of sessions in the order they were pushed, under the
// server's lock.
type udpList struct{ head, tail *udpSession }

func (l *udpList) push(s *udpSession) {
	s.prev, s.next, s.inFresh = l.tail, nil, true
	if l.tail != nil {
		l.tail.next = s
	} else {
		l.head = s
	}
	l.tail = s
}

func (l *udpList) remove(s *udpSession) {
	if s.prev != nil {
		s.prev.next = s.next
	} else {
		l.head = s.next
	}
	if s.next != nil {
		s.next.prev = s.prev
	} else {
		l.tail = s.prev
	}
	s.prev, s.next, s.inFresh = nil, nil, false
}
