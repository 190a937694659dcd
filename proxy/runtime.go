// Package proxy is Portico's data plane: it binds the ports of a
// config.Config, terminates TLS, routes each request with lookups into
// tables compiled ahead of time and forwards it to an endpoint. A new
// Config replaces the old one with a single atomic swap; sockets and
// in-flight requests survive.
package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/sockio"
	"portico.dev/portico/internal/dataplane/tracing"
	"portico.dev/portico/sni"
)

// Options are the data plane's fixed settings. Zero values get the defaults
// of DefaultOptions.
type Options struct {
	// SessionKey (32 bytes) seals the values of session persistence;
	// empty: a random key of the process, so that sessions survive
	// reloads but neither a restart nor a move to another replica.
	SessionKey []byte
	// BindAddress is the IP every port binds to; "" binds all addresses.
	BindAddress string
	// ReadHeaderTimeout bounds reading a request's headers and, because Go
	// uses the smallest server timeout for it, the TLS handshake.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
	// DrainTimeout bounds how long a removed port waits for in-flight
	// requests before its connections are closed.
	DrainTimeout time.Duration
	// HTTP/2 limits, for TLS (ALPN h2) and cleartext prior-knowledge h2c.
	MaxConcurrentStreams uint32
	MaxReadFrameSize     uint32
	MaxUploadBufferConn  int32
	MaxUploadBufferStrm  int32
	// DialTimeout bounds connecting to a backend.
	DialTimeout time.Duration
	// BackendResponseTimeout bounds the wait for the head of a backend's
	// final answer, for rules whose route sets no timeout of its own and
	// that are not a KIngress's; past it the client gets 504. Negative:
	// no bound.
	BackendResponseTimeout time.Duration
	// MaxInformational caps the informational (1xx) heads of a backend
	// relayed per request; past it the backend's answer has failed (502
	// when nothing of a final answer was sent). Negative: no cap.
	MaxInformational int
	// MaxConnsPerPort caps the open connections of each port; past it new
	// connections are reset at once. Negative: no cap.
	MaxConnsPerPort int
	// MaxConnsPerClient caps the open connections of each client address
	// on a port, so that one client cannot take the whole of
	// MaxConnsPerPort; past it its new connections are reset at once.
	// Negative: no cap.
	MaxConnsPerClient int
	// FileLimit is the process's limit of open files (RLIMIT_NOFILE), which
	// every client and backend connection counts against; when set, Apply
	// warns about a configuration whose connection caps cannot fit in it,
	// or fits them to it (FitConnCaps; see checkFileLimit). Zero: unknown,
	// no check.
	FileLimit uint64
	// FitConnCaps says MaxConnsPerPort is a default rather than the
	// operator's choice: each port's cap is then the lesser of it and
	// what fits in FileLimit for the ports bound, and Apply logs the caps
	// in force (info) instead of warning.
	FitConnCaps bool
	// ClientIdleTimeout bounds how long a request body read or a response
	// write may wait on the client without progress; ClientMinRate (bytes
	// per second) is the pace the client must keep, averaged over
	// ClientRateWindow of time spent waiting on it (see pacer). Negative
	// values turn the rule off.
	ClientIdleTimeout time.Duration
	ClientMinRate     int
	ClientRateWindow  time.Duration
	// H2MaxGlitches is how many abusive frames (resets before a response,
	// surplus SETTINGS, PING, PRIORITY, empty DATA, WINDOW_UPDATE) an
	// HTTP/2 connection may send in a burst before it gets GOAWAY
	// (ENHANCE_YOUR_CALM); H2GlitchesForgiven of them are forgotten per
	// second (see h2Guard). Negative H2MaxGlitches: no guard.
	H2MaxGlitches      int
	H2GlitchesForgiven float64
	// StreamIdleTimeout closes a TLS stream or a TCP listener's connection
	// after this long without a byte
	// either way; negative: never. Streams carry protocols with long quiet
	// spells (database sessions, message queues): an hour by default.
	StreamIdleTimeout time.Duration
	// MaxUDPSessionsPerPort caps the sessions of each UDP port (each has
	// a socket and a goroutine); past it a new client evicts the oldest
	// session that carried one datagram, or is dropped when there is
	// none (udpstream.go). Negative: no cap.
	MaxUDPSessionsPerPort int
	// UDPIdleTimeout ends a UDP session after this long without a
	// datagram either way. Negative: never (then only eviction and
	// configuration changes end sessions).
	UDPIdleTimeout time.Duration
	// UDP, when set, is told about every UDP session after it ended and
	// every datagram dropped without one.
	UDP UDPObserver
	// Observer, when set, is told about every request after it was answered.
	Observer RequestObserver
	// Backends, when set, is told about every request sent to a backend
	// after it was answered.
	Backends BackendObserver
	// Handshakes, when set, is told about every failed TLS handshake.
	Handshakes HandshakeObserver
	// Streams, when set, is told about every TLS stream and TCP listener
	// connection after it ended.
	Streams StreamObserver
	// AccessLog, when set, gets one entry per request (see logAccess) and
	// per TLS stream (see streamEnded).
	AccessLog *zap.Logger
	// Tracer, when set, gives every request a server span and passes its
	// trace context to the backend.
	Tracer *tracing.Tracer
	// RequestID gives every request an X-Request-Id for the backend and
	// the access log, keeping a usable one the client sent.
	RequestID bool
	// Challenges, when set, may answer a request on a plain HTTP port
	// before any route is matched (ACME HTTP-01 challenges).
	Challenges ChallengeHandler
	// Paths are the choices of request path normalisation (see
	// routing.NormalizePath); the zero value is the default.
	Paths config.PathOptions
	// MaxHeaderCount bounds the header fields of a request (each value of
	// a repeated name counts); a request with more gets 431.
	MaxHeaderCount int
}

// ChallengeHandler answers ACME HTTP-01 challenge requests. It reports
// whether it answered r; if not, r is routed as usual.
type ChallengeHandler interface {
	HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool
}

// RequestObserver records finished requests (metrics). route is the
// HTTPRoute or GRPCRoute as "namespace/name", "" when no route matched.
// outcome is how the exchange ended, one of a fixed set (see
// statusWriter.outcomeOf): every request is observed, however it ended.
// A gRPC call is observed twice: as a request, and by its gRPC status.
type RequestObserver interface {
	ObserveRequest(route string, code int, outcome string, d time.Duration)
	ObserveGRPC(route string, status int)
}

// BackendObserver records finished requests that a rule sent to a backend
// (metrics): the backend (Service and port) picked, the status and outcome
// the client got (as RequestObserver), the attempts of the route's retry
// policy (0 when no endpoint was ready), and the request's time; and each
// endpoint of a backend left out for a while because it could not be
// reached (see downSet); and each connection opened to a backend, on
// every path (the direct HTTP/1.1 pool, Go's transports for bodies, TLS,
// h2c and upgrades, mirrors), and its close: a dial, not a request, so
// that reused connections cost nothing. A connection is told under the
// backend of the request that opened it, and closed once.
type BackendObserver interface {
	ObserveBackend(backend config.BackendKey, code int, outcome string, attempts int, d time.Duration)
	ObserveEjection(backend config.BackendKey)
	ObserveDial(backend config.BackendKey)
	ObserveClose(backend config.BackendKey)
}

// SetSessionKey replaces the key that seals session persistence values
// (Options.SessionKey, 32 bytes): a data plane learns the key its
// replicas share only from its controller, after it started. Sessions
// sealed with the key before stop holding.
func (rt *Runtime) SetSessionKey(key []byte) error {
	if len(key) == 0 {
		return fmt.Errorf("session key: empty")
	}
	s, err := newSessionSealer(key)
	if err != nil {
		return err
	}
	rt.fwd.sessions.Store(s)
	return nil
}

// DefaultOptions are production defaults: bounded everywhere a client could
// otherwise hold resources forever.
func DefaultOptions() Options {
	return Options{
		ReadHeaderTimeout:    10 * time.Second,
		IdleTimeout:          120 * time.Second,
		MaxHeaderBytes:       64 << 10,
		DrainTimeout:         30 * time.Second,
		MaxConcurrentStreams: 250,
		// The protocol's initial value, which nginx and haproxy keep too:
		// a larger one lets every client make the server buffer that much
		// for one frame, and buys a client little.
		MaxReadFrameSize:       16 << 10,
		MaxUploadBufferConn:    4 << 20,
		MaxUploadBufferStrm:    1 << 20,
		DialTimeout:            5 * time.Second,
		MaxInformational:       10,
		BackendResponseTimeout: 60 * time.Second,
		MaxHeaderCount:         100,
		MaxConnsPerPort:        10000,
		MaxConnsPerClient:      1000,
		ClientIdleTimeout:      60 * time.Second,
		ClientMinRate:          512,
		ClientRateWindow:       30 * time.Second,
		H2MaxGlitches:          200,
		H2GlitchesForgiven:     20,
		StreamIdleTimeout:      time.Hour,
		MaxUDPSessionsPerPort:  10000,
		UDPIdleTimeout:         time.Minute,
	}
}

func (o Options) withDefaults() Options {
	d := DefaultOptions()
	o.ReadHeaderTimeout = cmp.Or(o.ReadHeaderTimeout, d.ReadHeaderTimeout)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, d.IdleTimeout)
	o.MaxHeaderBytes = cmp.Or(o.MaxHeaderBytes, d.MaxHeaderBytes)
	o.DrainTimeout = cmp.Or(o.DrainTimeout, d.DrainTimeout)
	o.MaxConcurrentStreams = cmp.Or(o.MaxConcurrentStreams, d.MaxConcurrentStreams)
	o.MaxReadFrameSize = cmp.Or(o.MaxReadFrameSize, d.MaxReadFrameSize)
	o.MaxUploadBufferConn = cmp.Or(o.MaxUploadBufferConn, d.MaxUploadBufferConn)
	o.MaxUploadBufferStrm = cmp.Or(o.MaxUploadBufferStrm, d.MaxUploadBufferStrm)
	o.DialTimeout = cmp.Or(o.DialTimeout, d.DialTimeout)
	o.MaxInformational = cmp.Or(o.MaxInformational, d.MaxInformational)
	o.BackendResponseTimeout = cmp.Or(o.BackendResponseTimeout, d.BackendResponseTimeout)
	o.MaxHeaderCount = cmp.Or(o.MaxHeaderCount, d.MaxHeaderCount)
	o.MaxConnsPerPort = cmp.Or(o.MaxConnsPerPort, d.MaxConnsPerPort)
	o.MaxConnsPerClient = cmp.Or(o.MaxConnsPerClient, d.MaxConnsPerClient)
	o.ClientIdleTimeout = cmp.Or(o.ClientIdleTimeout, d.ClientIdleTimeout)
	o.ClientMinRate = cmp.Or(o.ClientMinRate, d.ClientMinRate)
	o.ClientRateWindow = cmp.Or(o.ClientRateWindow, d.ClientRateWindow)
	o.H2MaxGlitches = cmp.Or(o.H2MaxGlitches, d.H2MaxGlitches)
	o.H2GlitchesForgiven = cmp.Or(o.H2GlitchesForgiven, d.H2GlitchesForgiven)
	o.StreamIdleTimeout = cmp.Or(o.StreamIdleTimeout, d.StreamIdleTimeout)
	o.MaxUDPSessionsPerPort = cmp.Or(o.MaxUDPSessionsPerPort, d.MaxUDPSessionsPerPort)
	o.UDPIdleTimeout = cmp.Or(o.UDPIdleTimeout, d.UDPIdleTimeout)
	return o
}

// Runtime owns the bound ports and the current Config.
type Runtime struct {
	log  *zap.Logger
	opts Options

	current atomic.Pointer[config.Config]
	fwd     *forwarder
	// emptySNI answers handshakes on a port whose table vanished mid-swap.
	emptySNI *sni.Table
	// keeper bounds the runtime monitor's sleep while clients are
	// connected: their sockets' reads and writes no longer wake it
	// (internal/sockio).
	keeper *sockio.Keeper
	// listen binds a port's socket: net.Listen, or in tests a listener
	// whose accepts fail.
	listen func(network, address string) (net.Listener, error)
	// acceptUnreadyAfter is how long a port's accepts fail before Ready
	// says so (acceptUnreadyAfter; shorter in tests).
	acceptUnreadyAfter time.Duration

	mu    sync.Mutex // serializes Apply and Close
	ports map[config.PortKey]*portServer
	// udp are the UDP ports, removed ones included until their drain
	// ends (udpServer.recheck).
	udp map[config.PortKey]*udpServer
	// udpBufs are the buffers UDP sessions copy their backends'
	// datagrams through.
	udpBufs  sync.Pool
	draining map[*portServer]bool // removed ports still finishing requests
	closed   bool
	// fileCheckPorts is the number of ports checkFileLimit last looked at;
	// connCap is the cap of each port's connections in force (fitted to
	// FileLimit under FitConnCaps, else MaxConnsPerPort).
	fileCheckPorts  int
	connCap         int
	fileCheckLogged bool
}

// New returns a Runtime with no ports bound.
func New(opts Options, log *zap.Logger) *Runtime {
	opts = opts.withDefaults()
	rt := &Runtime{
		log:      log,
		opts:     opts,
		fwd:      newForwarder(opts, log),
		emptySNI: sni.NewTable(nil),
		keeper:   sockio.NewKeeper(),
		listen:   net.Listen,
		ports:    map[config.PortKey]*portServer{},
		udp:      map[config.PortKey]*udpServer{},
		draining: map[*portServer]bool{},
		connCap:  opts.MaxConnsPerPort,

		acceptUnreadyAfter: acceptUnreadyAfter,
	}
	rt.udpBufs.New = func() any { b := make([]byte, maxDatagram+1); return &b }
	rt.current.Store(&config.Config{})
	return rt
}

// Current returns the Config being served.
func (rt *Runtime) Current() *config.Config { return rt.current.Load() }

// Apply makes cfg the served configuration. It binds the ports cfg adds
// first; if any cannot be bound the old configuration stays in place
// (nothing half-applied) and the error says which port failed. Then it swaps
// the configuration in one atomic store, and only then drains the ports cfg
// no longer has.
func (rt *Runtime) Apply(cfg *config.Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("apply config %d: %w", cfg.Generation, err)
	}
	sorted := *cfg
	sorted.Ports = slices.Clone(cfg.Ports)
	slices.SortFunc(sorted.Ports, config.ComparePorts)
	cfg = &sorted

	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return errors.New("apply config: runtime closed")
	}

	// A port that changes protocol must be re-bound: close the old server
	// before binding, accepting a brief gap on that port only.
	var replaced []*portServer
	for _, p := range cfg.Ports {
		if p.Protocol == config.UDP {
			continue // a UDP port's key is never a TCP port's
		}
		if ps, ok := rt.ports[p.Key()]; ok && ps.protocol != p.Protocol {
			replaced = append(replaced, ps)
			delete(rt.ports, p.Key())
		}
	}
	for _, ps := range replaced {
		ps.shutdown(0)
	}

	var added []*portServer
	var addedUDP []*udpServer
	undo := func() {
		for _, a := range added {
			a.shutdown(0)
		}
		for _, a := range addedUDP {
			a.close()
		}
	}
	for _, p := range cfg.Ports {
		if p.Protocol == config.UDP {
			if _, ok := rt.udp[p.Key()]; ok {
				continue
			}
			u, err := rt.bindUDP(p)
			if err != nil {
				undo()
				return fmt.Errorf("apply config %d: %w", cfg.Generation, err)
			}
			addedUDP = append(addedUDP, u)
			continue
		}
		if _, ok := rt.ports[p.Key()]; ok {
			continue
		}
		ps, err := rt.bind(p)
		if err != nil {
			undo()
			return fmt.Errorf("apply config %d: %w", cfg.Generation, err)
		}
		added = append(added, ps)
	}
	for _, ps := range added {
		rt.ports[ps.key] = ps
		ps.start()
	}
	for _, u := range addedUDP {
		rt.udp[u.key] = u
		u.start()
	}

	old := rt.current.Swap(cfg)
	for key, ps := range rt.ports {
		if ps.protocol == config.TCP {
			ps.tcp.recheck(cfg.Port(key), rt.opts.DrainTimeout)
		}
	}
	for key, u := range rt.udp {
		u.recheck(cfg.Port(key), rt.opts.DrainTimeout, func() { rt.dropUDP(u) })
	}
	// After the swap no new request can pick a dropped ID, except one
	// still being served by the old config, whose pool then lasts until
	// the next Apply.
	rt.fwd.tls.retain(cfg.BackendTLSIDs, cfg.BackendClientCertIDs)
	// Probers of the endpoints cfg checks start, those of the endpoints it
	// no longer checks stop (healthcheck.go).
	rt.fwd.health.apply(cfg)
	rt.fwd.breakers.prune()
	rt.fwd.budgets.prune(time.Now())

	for key, ps := range rt.ports {
		if cfg.Port(key) != nil {
			continue
		}
		// Requests still arriving on a draining port are served with the
		// config it had, not turned away.
		ps.last.Store(old.Port(key))
		delete(rt.ports, key)
		rt.draining[ps] = true
		// The port stops accepting before Apply returns: a client
		// connecting after it must be refused, and the same port added
		// back by a later Apply must be able to bind again.
		ps.stopAccepting()
		go func() {
			ps.shutdown(rt.opts.DrainTimeout)
			rt.mu.Lock()
			delete(rt.draining, ps)
			rt.mu.Unlock()
		}()
	}
	rt.checkFileLimit(len(rt.ports))
	// Debug: the loop logs each generation's outcome once, and applies a
	// generation in several steps when some of its ports cannot be bound.
	rt.log.Debug("config swapped", zap.Int64("generation", cfg.Generation), zap.Int("ports", len(cfg.Ports)), zap.Int("added", len(added)))
	return nil
}

// Addr returns the bound address of a port (address "" for ports bound on
// Options.BindAddress), or nil when it is not bound.
func (rt *Runtime) Addr(address string, number int32) net.Addr {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if ps, ok := rt.ports[config.PortKey{Address: address, Number: number}]; ok {
		return ps.ln.Addr()
	}
	return nil
}

// PortAddr is Addr by the port's key: the bound address of a TCP or UDP
// port, nil when it is not bound.
func (rt *Runtime) PortAddr(key config.PortKey) net.Addr {
	if !key.UDP {
		return rt.Addr(key.Address, key.Number)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if u, ok := rt.udp[key]; ok && !u.removed {
		return u.conn.LocalAddr()
	}
	return nil
}

// dropUDP closes UDP port u at the end of its drain, unless a
// configuration brought it back meanwhile.
func (rt *Runtime) dropUDP(u *udpServer) {
	rt.mu.Lock()
	u.mu.Lock()
	gone := u.removed
	u.mu.Unlock()
	if gone && rt.udp[u.key] == u {
		delete(rt.udp, u.key)
	}
	rt.mu.Unlock()
	if gone {
		u.close()
	}
}

// Close drains every port, waiting for in-flight requests until ctx ends.
func (rt *Runtime) Close(ctx context.Context) error {
	rt.mu.Lock()
	rt.closed = true
	var ports []*portServer
	for _, ps := range rt.ports {
		ports = append(ports, ps)
	}
	for ps := range rt.draining {
		ports = append(ports, ps)
	}
	rt.ports = map[config.PortKey]*portServer{}
	udp := rt.udp
	rt.udp = map[config.PortKey]*udpServer{}
	rt.mu.Unlock()
	var wg sync.WaitGroup
	for _, ps := range ports {
		// shutdownCtx runs once per port; for a draining port this waits
		// for the drain already under way, bounded by ctx.
		wg.Go(func() { ps.shutdownCtx(ctx) })
	}
	for _, u := range udp {
		wg.Go(u.close)
	}
	wg.Wait()
	rt.fwd.close()
	rt.keeper.Stop()
	return ctx.Err()
}

func (rt *Runtime) bind(p *config.Port) (*portServer, error) {
	address := p.Address
	if address == "" {
		address = rt.opts.BindAddress
	}
	addr := net.JoinHostPort(address, strconv.Itoa(int(p.Number)))
	ln, err := rt.listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bind port %s: %w", p.Key(), err)
	}
	ps := &portServer{
		rt:       rt,
		key:      p.Key(),
		portText: strconv.Itoa(int(p.Number)),
		protocol: p.Protocol,
		ln:       ln,
		log:      rt.log.With(zap.String("address", p.Address), zap.Int32("port", p.Number)),
	}
	ps.conns = connLimit{perClient: int64(rt.opts.MaxConnsPerClient), log: ps.log, keeper: rt.keeper}
	ps.conns.max.Store(int64(rt.connCap))
	ps.h1 = ps.newH1Server()
	ps.h2 = ps.newH2Server()
	return ps, nil
}

// fileHeadroom is the file descriptors checkFileLimit keeps aside for
// what is not a proxied connection: the control plane's connections to
// the API server, the admin and ACME servers, log and certificate files.
const fileHeadroom = 1024

// minFittedConnCap is the least cap FitConnCaps gives a port, however low
// the open files limit: below it a port would refuse ordinary traffic.
const minFittedConnCap = 64

// checkFileLimit relates the connection caps of ports ports to
// Options.FileLimit: each client connection may hold a backend connection
// too, so the caps fit when
//
//	2 × cap × ports + fileHeadroom ≤ FileLimit.
//
// Past it, a client can make the process run out of files before any
// port reaches its cap: accepts then fail for every port (shed and
// retried, see sorter.acceptLoop) and dials to backends fail with 502.
// Caps the operator set are warned about; defaulted ones (FitConnCaps)
// are lowered to what fits. It looks again only when the number of ports
// changed.
func (rt *Runtime) checkFileLimit(ports int) {
	limit, perPort := rt.opts.FileLimit, rt.opts.MaxConnsPerPort
	if limit == 0 || ports == rt.fileCheckPorts {
		return
	}
	rt.fileCheckPorts = ports
	if ports == 0 {
		return
	}
	if rt.opts.FitConnCaps {
		rt.fitConnCaps(ports)
		return
	}
	if perPort <= 0 {
		rt.log.Warn("ports have no connection cap (--max-connections-per-port): clients can exhaust the open files limit",
			zap.Uint64("open_files_limit", limit), zap.Int("ports", ports))
		return
	}
	need := 2*uint64(perPort)*uint64(ports) + fileHeadroom
	if need > limit {
		rt.log.Warn("connection caps do not fit in the open files limit: lower --max-connections-per-port or raise RLIMIT_NOFILE",
			zap.Int("max_connections_per_port", perPort), zap.Int("ports", ports),
			zap.Uint64("files_needed", need), zap.Uint64("open_files_limit", limit))
	}
}

// fittedConnCap is the cap of each of ports ports that fits in the open
// files limit (checkFileLimit's rule), at most want when want > 0, at
// least minFittedConnCap.
func fittedConnCap(limit uint64, ports, want int) int {
	fit := uint64(0)
	if limit > fileHeadroom {
		fit = (limit - fileHeadroom) / (2 * uint64(ports))
	}
	c := max(fit, minFittedConnCap)
	if want > 0 {
		c = min(c, uint64(want))
	}
	return int(c)
}

// fitConnCaps sets the cap of every port to what fits for ports ports
// and logs it when it changed. Only an open files limit too low for even
// minFittedConnCap is warned about: that is the machine's to fix.
func (rt *Runtime) fitConnCaps(ports int) {
	limit := rt.opts.FileLimit
	capacity := fittedConnCap(limit, ports, rt.opts.MaxConnsPerPort)
	for _, ps := range rt.ports {
		ps.conns.max.Store(int64(capacity))
	}
	if capacity == rt.connCap && rt.fileCheckLogged {
		return
	}
	rt.connCap, rt.fileCheckLogged = capacity, true
	if need := 2*uint64(capacity)*uint64(ports) + fileHeadroom; need > limit {
		rt.log.Warn("the open files limit is too low for the ports' connections: raise RLIMIT_NOFILE",
			zap.Int("max_connections_per_port", capacity), zap.Int("ports", ports),
			zap.Uint64("files_needed", need), zap.Uint64("open_files_limit", limit))
		return
	}
	rt.log.Info("connection caps", zap.Int("max_connections_per_port", capacity), zap.Int("ports", ports),
		zap.Uint64("open_files_limit", limit), zap.Bool("fitted_to_open_files_limit", capacity < rt.opts.MaxConnsPerPort || rt.opts.MaxConnsPerPort <= 0))
}
