package proxy

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/sockio"
)

// appProtocolH2C is the Service port appProtocol for HTTP/2 cleartext.
const appProtocolH2C = "kubernetes.io/h2c"

// maxReplayBody bounds the request body Portico keeps in memory so a
// request can be retried or mirrored; larger bodies are streamed once.
const maxReplayBody = 1 << 20

// forwarder sends requests to backends, reusing connections per endpoint.
type forwarder struct {
	log *zap.Logger
	// sessions seals the values of session persistence (session.go).
	sessions atomic.Pointer[sessionSealer]
	rp       *httputil.ReverseProxy
	h1       *http.Transport
	// h1once sends the requests with a body to endpoints caught sending
	// bytes unasked, a connection each (unasked.go): connections of h1
	// that were busy when the endpoint was caught are never used again.
	h1once *http.Transport
	// h1plain sends the plain HTTP/1.1 requests that claim no
	// connection of h1 (mirrors), whose connections are not watched.
	h1plain *http.Transport
	h2c     *http2.Transport
	// byIdle holds, by idle timeout, the copies of h1, h1plain and h2c
	// for backends whose BackendTrafficPolicy sets one (idleTransports):
	// a Go transport has one idle timeout for all its connections.
	byIdle sync.Map // time.Duration -> *idleTransports
	// pool holds the connections of the direct HTTP/1.1 path
	// (h1forward.go), bufs the buffers bodies are copied through.
	pool *h1Pool
	bufs *bufferPool
	// tls holds the transports of backends with a BackendTLSPolicy.
	tls *backendTLSTransports
	// down are the endpoints that failed to connect lately.
	down downSet
	// outliers are the endpoints passive health checks count or eject.
	outliers outlierSet
	// health runs the active health checks (healthcheck.go).
	health *healthChecks
	// breakers counts what circuit breakers limit (breaker.go).
	breakers breakers
	// budgets counts the retries of retry budgets (retrybudget.go).
	budgets retryBudgets
	// guard enforces the rules' SecurityPolicies (security.go).
	guard *guard
	// limits are the buckets of local rate limits (ratelimit.go).
	limits rateLimits
	// refusals limits the log lines of rules that cannot be served.
	refusals logLimiter
	// max1xx is Options.MaxInformational; headTimeout is
	// Options.BackendResponseTimeout, 0 when off.
	max1xx      int32
	headTimeout time.Duration
	// backends is Options.Backends, told of the endpoints left out.
	backends BackendObserver
}

// exchange is the per-request state the ReverseProxy callbacks need. It
// is the context of the first attempt too, the one its callbacks find it
// in (see Value): one allocation less than a context.WithValue per request.
type exchange struct {
	// Context is the request's context, set once before the first attempt.
	context.Context
	addr string
	tls  *config.BackendTLS // nil: plain text
	// clientCert is presented to TLS backends; nil: none.
	clientCert *config.BackendClientCert
	// listener received the request, on port (the number, for
	// X-Forwarded-Port).
	listener *config.Listener
	port     string
	origHost string
	// backend is the backend the rule picked, in the applied
	// configuration (never changed): its key is what a connection dialed
	// for the request is counted under (trackDial), its Conn the policy's
	// timeouts and keepalive of the dial (dialConn). Set once, before the
	// first attempt, since a transport may dial in a goroutine of its own.
	backend *config.Backend
	// respFilters modify the backend's response headers.
	respFilters []*config.HeaderModifier
	cors        *config.CORS
	// sess is the request's session persistence, nil without one.
	sess *session
	in   *http.Request
	// retryCodes, when set, makes a response with one of these codes an
	// error the handler retries instead of an answer.
	retryCodes []int
	retryable  error
	// body is the client's request body, nil when it has none.
	body *clientBody
	// gate is the client's writer as an attempt sees it (answergate.go).
	gate answerGate
	// rp is what a ReverseProxy attempt keeps of its answer, nil on the
	// direct path (kept out of the exchange, which every request makes).
	rp *rpAttempt
	// failover, when set, makes a failure to connect an error the handler
	// retries on another endpoint instead of an answer. unreachable is
	// set when the attempt's endpoint could not be connected to (see
	// unreachable). Next to each other and to h2c: no padding each.
	failover, unreachable, h2c bool
	// answered is the status of the attempt's answer, 0 until its head
	// came (for passive health checks; in the bools' padding).
	answered int16
}

// rpAttempt is what a ReverseProxy attempt keeps of its answer: its body,
// wrapped to learn how reading it ended (err), and the timer of the wait
// for its head (nil: none), which the head stops.
type rpAttempt struct {
	body  answerBody
	err   error
	timer *time.Timer
	// conn is the plain HTTP/1.1 transport's connection the attempt
	// claimed (unasked.go), claim its claim; nil: none.
	conn  *watchedConn
	claim uint64
}

type exchangeKey struct{}

// Value finds the exchange itself under exchangeKey, everything else in
// the request's context.
func (x *exchange) Value(key any) any {
	if _, ok := key.(exchangeKey); ok {
		return x
	}
	return x.Context.Value(key)
}

// errRetryableStatus marks a backend answer the rule's retry policy retries.
var errRetryableStatus = errors.New("retryable response status")

func newForwarder(opts Options, log *zap.Logger) *forwarder {
	dialer := &sockio.Dialer{Dialer: net.Dialer{Timeout: opts.DialTimeout, KeepAlive: 30 * time.Second}}
	f := &forwarder{log: log, tls: &backendTLSTransports{dialer: dialer, timeout: opts.DialTimeout},
		pool: newH1Pool(dialer), bufs: &bufferPool{}, max1xx: int32(min(opts.MaxInformational, math.MaxInt32)),
		headTimeout: max(opts.BackendResponseTimeout, 0), backends: opts.Backends}
	sealer, err := newSessionSealer(opts.SessionKey)
	if err != nil {
		log.Error("session persistence key refused; a random one is used", zap.Error(err))
		sealer, _ = newSessionSealer(nil)
	}
	f.sessions.Store(sealer)
	hobs, _ := opts.Backends.(HealthObserver)
	f.health = newHealthChecks(log, hobs)
	// A BackendTrafficPolicy's connect timeout and TCP keepalive, on
	// every path.
	dialer.Conn = dialConn
	f.guard = newGuard(opts, log)
	if f.backends != nil {
		// Every path dials through this dialer: the direct pool, Go's
		// transports (plain, TLS, h2c, upgrades) and mirrors.
		dialer.Track = f.trackDial
	}
	// Portico retries nothing on its own unless a rule says so, except a
	// request that never reached a backend (see failover.go). The
	// transport does send an idempotent request (GET, HEAD, OPTIONS, TRACE
	// without a body) a second time when a reused keep-alive connection
	// fails before any byte of an answer: that is what a backend closing an
	// idle connection looks like, and not resending would turn that race
	// into 502s.
	f.h1 = &http.Transport{
		// Its connections are watched for bytes that come while no
		// request is on them (unasked.go).
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &watchedConn{Conn: c, f: f, addr: addr}, nil
		},
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     backendIdleTimeout,
		// Backends speak plain HTTP/1.1 unless their Service says h2c.
		ForceAttemptHTTP2: false,
		// Pass Accept-Encoding through as the client sent it; never make
		// the backend compress for us only to decompress again.
		DisableCompression: true,
	}
	f.h1plain = &http.Transport{
		DialContext:         dialer.DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     backendIdleTimeout,
		ForceAttemptHTTP2:   false,
		DisableCompression:  true,
	}
	f.h1once = &http.Transport{
		DialContext:        dialer.DialContext,
		DisableKeepAlives:  true,
		ForceAttemptHTTP2:  false,
		DisableCompression: true,
	}
	f.h2c = &http2.Transport{
		AllowHTTP:          true,
		DisableCompression: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
		ReadIdleTimeout: 30 * time.Second,
		PingTimeout:     15 * time.Second,
	}
	// ReverseProxy logs only what the ErrorHandler does not see: a body
	// copy cut short, by the client or the backend, after the answer
	// started. That is routine; it goes to the debug log.
	copyLog, _ := zap.NewStdLogAt(log, zap.DebugLevel) // fails only for levels above Fatal
	f.rp = &httputil.ReverseProxy{
		Rewrite:   rewrite,
		Transport: f,
		// Streams are flushed as they come: ReverseProxy flushes every
		// write of a body of unknown length (chunked HTTP/1.1, HTTP/2
		// without Content-Length: gRPC, streamed long polls) and of
		// text/event-stream, whatever this says. A body of known length
		// goes through the server's buffer and leaves with its headers:
		// -1 here would flush the headers alone from a timer goroutine
		// first, two writes and a wake-up for every small answer.
		FlushInterval:  0,
		ModifyResponse: modifyResponse,
		ErrorHandler:   f.proxyError,
		BufferPool:     f.bufs,
		ErrorLog:       copyLog,
	}
	return f
}

// bufferPool lends ReverseProxy the buffers it copies bodies through;
// without one it allocates 32 KiB for every request, most of the garbage a
// small request makes. The pool holds array pointers, which a slice of the
// full length converts back to without an allocation (a *[]byte would be
// one more per request).
type bufferPool struct{ pool sync.Pool }

const copyBufferSize = 32 << 10

func (p *bufferPool) Get() []byte {
	if b, ok := p.pool.Get().(*[copyBufferSize]byte); ok {
		return b[:]
	}
	return make([]byte, copyBufferSize)
}

func (p *bufferPool) Put(b []byte) {
	if len(b) == copyBufferSize {
		p.pool.Put((*[copyBufferSize]byte)(b))
	}
}

// rewrite points the outbound request at the chosen endpoint. ReverseProxy
// has already removed hop-by-hop headers; the client's forwarding headers
// and any Upgrade but WebSocket go here, and Portico writes its own.
func rewrite(pr *httputil.ProxyRequest) {
	x := pr.In.Context().Value(exchangeKey{}).(*exchange)
	pr.Out.URL.Scheme = "http"
	if x.tls != nil {
		pr.Out.URL.Scheme = "https"
	}
	pr.Out.URL.Host = x.addr
	pr.Out.Host = pr.In.Host
	dropClientForwarding(pr.Out.Header)
	dropUpgrade(pr.In, pr.Out.Header)
	pr.SetXForwarded()
	pr.Out.Header.Set("X-Forwarded-Host", x.origHost)
	pr.Out.Header.Set("X-Forwarded-Port", x.port)
	// Only Portico says which client certificate was verified.
	pr.Out.Header.Del(clientCertHeader)
	if x.listener != nil && x.listener.ClientAuth != nil {
		if v := verifiedClientCert(pr.In, x.listener); v != "" {
			pr.Out.Header.Set(clientCertHeader, v)
		}
	}
}

func modifyResponse(resp *http.Response) error {
	if resp.StatusCode < 100 {
		// The transport takes any three digits; WriteHeader panics on
		// these.
		return fmt.Errorf("backend answered with status %d", resp.StatusCode)
	}
	x, _ := resp.Request.Context().Value(exchangeKey{}).(*exchange)
	if x == nil {
		return nil
	}
	if x.rp != nil && x.rp.timer != nil {
		x.rp.timer.Stop() // the head came
	}
	x.answered = int16(min(resp.StatusCode, 999))
	if slices.Contains(x.retryCodes, resp.StatusCode) {
		if x.rp != nil {
			// ReverseProxy closes the body, which may drain it and pool
			// the connection: the claim ends once that is done.
			resp.Body = releasingBody{ReadCloser: resp.Body, rp: x.rp}
		}
		return errRetryableStatus
	}
	if resp.StatusCode != http.StatusSwitchingProtocols && x.rp != nil {
		// An upgrade's body is the connection, which ReverseProxy needs
		// as it is.
		x.rp.body = answerBody{ReadCloser: resp.Body, rp: x.rp}
		resp.Body = &x.rp.body
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if idle := x.idleTimeout(); idle > 0 {
			if rwc, ok := resp.Body.(io.ReadWriteCloser); ok {
				resp.Body = newIdleTunnel(rwc, idle)
			}
		}
	}
	for _, f := range x.respFilters {
		f.Apply(resp.Header)
	}
	if x.cors != nil {
		x.cors.Apply(x.in, resp.Header)
	}
	x.sess.apply(resp.Header)
	return nil
}

// backendIdleTimeout is how long Go's transports keep a backend
// connection idle when no BackendTrafficPolicy says otherwise.
const backendIdleTimeout = 90 * time.Second

// idleTransports are h1, h1plain and h2c for one idle timeout.
type idleTransports struct {
	h1, h1plain *http.Transport
	h2c         *http2.Transport
}

// transports are the plain transports for backends whose connections
// may stay idle for idle (0: the default, f's own).
func (f *forwarder) transports(idle time.Duration) *idleTransports {
	if idle <= 0 {
		return &idleTransports{h1: f.h1, h1plain: f.h1plain, h2c: f.h2c}
	}
	if t, ok := f.byIdle.Load(idle); ok {
		return t.(*idleTransports)
	}
	t := &idleTransports{h1: f.h1.Clone(), h1plain: f.h1plain.Clone(), h2c: &http2.Transport{
		AllowHTTP: f.h2c.AllowHTTP, DisableCompression: f.h2c.DisableCompression, DialTLSContext: f.h2c.DialTLSContext,
		ReadIdleTimeout: f.h2c.ReadIdleTimeout, PingTimeout: f.h2c.PingTimeout,
	}}
	t.h1.IdleConnTimeout, t.h1plain.IdleConnTimeout, t.h2c.IdleConnTimeout = idle, idle, idle
	// Policies name few distinct timeouts: the map stays small, and a
	// pool no Config uses any more empties itself after idle.
	got, _ := f.byIdle.LoadOrStore(idle, t)
	return got.(*idleTransports)
}

// closeIdleByIdle closes the idle connections of every byIdle transport;
// h1 only when onlyH1.
func (f *forwarder) closeIdleByIdle(onlyH1 bool) {
	f.byIdle.Range(func(_, v any) bool {
		t := v.(*idleTransports)
		t.h1.CloseIdleConnections()
		if !onlyH1 {
			t.h1plain.CloseIdleConnections()
			t.h2c.CloseIdleConnections()
		}
		return true
	})
}

// idleTimeout is the idle timeout of x's backend's connections, 0 for
// the default.
func (x *exchange) idleTimeout() time.Duration {
	if c := x.conn(); c != nil {
		return c.IdleTimeout
	}
	return 0
}

// conn is the timeouts and keepalive of x's backend's connections (a
// BackendTrafficPolicy's), nil for the defaults.
func (x *exchange) conn() *config.BackendConn {
	if x.backend != nil {
		return x.backend.Conn
	}
	return nil
}

// RoundTrip picks the transport the backend speaks.
func (f *forwarder) RoundTrip(r *http.Request) (*http.Response, error) {
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if x != nil && x.gate.max1xx >= 0 {
		capInformational(r, x)
	}
	h1, h1plain := f.h1, f.h1plain
	switch {
	case x == nil: // not sent by forward; plain HTTP/1.1
	case x.tls != nil:
		return f.tls.get(x.tls, x.clientCert, x.conn()).roundTripper(x.h2c, r).RoundTrip(r)
	case x.h2c:
		if idle := x.idleTimeout(); idle > 0 {
			return f.transports(idle).h2c.RoundTrip(r)
		}
		return f.h2c.RoundTrip(r)
	default:
		if idle := x.idleTimeout(); idle > 0 {
			t := f.transports(idle)
			h1, h1plain = t.h1, t.h1plain
		}
		if x.rp == nil {
			break
		}
		if f.pool.isShunned(x.addr) {
			return f.h1once.RoundTrip(r)
		}
		if t := httptrace.ContextClientTrace(r.Context()); t != nil && t.GotConn == nil {
			t.GotConn = x.rp.gotConn
			return h1.RoundTrip(r)
		}
	}
	// Only requests that claim their connection go through h1: one that
	// does not, handed a connection whose last claim is not released yet,
	// would have its answer taken for bytes no request asked for.
	return h1plain.RoundTrip(r)
}

// capInformational makes the transports fail r's answer past the cap on
// informational heads. ReverseProxy relays them from its trace's
// Got1xxResponse, which the transports let end the answer with an error;
// a trace added on top of it could not (httptrace drops the error of the
// newer of two hooks), so its hook is wrapped where it is. The trace is
// ReverseProxy's own, made for this request.
func capInformational(r *http.Request, x *exchange) {
	t := httptrace.ContextClientTrace(r.Context())
	if t == nil || t.Got1xxResponse == nil {
		return
	}
	relay := t.Got1xxResponse
	t.Got1xxResponse = func(code int, h textproto.MIMEHeader) error {
		if err := relay(code, h); err != nil {
			return err
		}
		if x.gate.over1xx() {
			return errTooManyInformational
		}
		return nil
	}
}

func (f *forwarder) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	err = cutByDeadline(r.Context(), err)
	if errors.Is(context.Cause(r.Context()), errNoAnswerInTime) {
		// The transports see a cancelled request; the timer that
		// cancelled it says why.
		err = errNoAnswerInTime
	}
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	if berr := x.bodyFailed(); berr != nil {
		// Reading the client's body failed: neither the endpoint's fault
		// nor something a retry could fix.
		answerClientBodyError(f.log, w, r, berr)
		return
	}
	if x != nil && unreachable(r, err) {
		x.unreachable = true
		if f.down.mark(x.addr, time.Now()) {
			f.log.Warn("endpoint cannot be reached; left out while its Service has others",
				zap.String("endpoint", x.addr), zap.Duration("for", downFor), zap.Error(err))
			if sw, ok := x.gate.ResponseWriter.(*statusWriter); ok && f.backends != nil {
				f.backends.ObserveEjection(sw.backend)
			}
		}
	}
	if x != nil && (x.retryCodes != nil || x.failover && x.unreachable) {
		// The handler decides: retry, or answer after the last attempt.
		x.retryable = err
		return
	}
	writeProxyError(f.log, w, r, x, err)
}

// answerFailed handles a backend answer that failed after its head was
// read: before anything of it passed to the client it is a failure like
// any other (a 502, or a retry); after, the client's answer is cut short
// (http.ErrAbortHandler), never ended as if it were whole.
func (f *forwarder) answerFailed(r *http.Request, x *exchange, err error) {
	if x.gate.passed {
		switch {
		case x.in.Context().Err() != nil:
			// The client's side ended first: the access log says how.
		case r.Context().Err() != nil || errors.Is(err, context.DeadlineExceeded):
			noteOutcome(x.gate.ResponseWriter, outcomeTimeout)
		default:
			noteOutcome(x.gate.ResponseWriter, outcomeBackendFailed)
		}
		panic(http.ErrAbortHandler)
	}
	x.gate.discard()
	f.proxyError(&x.gate, r, err)
}

// bodyFailed returns the error reading the client's body, if any.
func (x *exchange) bodyFailed() error {
	if x == nil {
		return nil
	}
	return x.body.failed()
}

func writeProxyError(log *zap.Logger, w http.ResponseWriter, r *http.Request, x *exchange, err error) {
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return // the client went away; nobody reads this answer
	}
	addr := ""
	if x != nil {
		addr = x.addr
		if x.tls != nil {
			log = log.With(zap.String("backendTLSPolicy", x.tls.Policy))
		}
	}
	log.Warn("backend request failed", zap.String("host", r.Host), zap.String("path", r.URL.Path), zap.String("endpoint", addr), zap.Error(err))
	if isGRPC(r) {
		writeGRPCError(w, grpcFromHTTP(status), http.StatusText(status))
		return
	}
	w.WriteHeader(status)
}

func (f *forwarder) close() {
	f.h1.CloseIdleConnections()
	f.h1once.CloseIdleConnections()
	f.h1plain.CloseIdleConnections()
	f.pool.close()
	f.h2c.CloseIdleConnections()
	f.closeIdleByIdle(false)
	f.tls.closeIdle()
	f.health.close()
	f.guard.closeExtAuth()
}

// preRoute runs l's request filters on r in their order, before its
// route is matched (Listener.filters.requests): false when one answered
// it, and then neither the next filters nor route matching run. A filter
// may set headers that route matching sees; the Host the listener was
// chosen by is kept whatever a filter's answer says.
func (f *forwarder) preRoute(w http.ResponseWriter, r *http.Request, cfg *config.Config, l *config.Listener) bool {
	host := r.Host
	for _, e := range l.RequestFilters {
		if !f.guard.extAuth(w, r, e, cfg.Endpoints) {
			return false
		}
		r.Host = host
		delete(r.Header, "Host")
	}
	return true
}

// serve routes a request, whose path admit normalised to path, among the
// routes of l, which received it on port, applies the rule's filters and
// forwards it.
func (f *forwarder) serve(w http.ResponseWriter, r *http.Request, cfg *config.Config, l *config.Listener, path, port string) *config.Rule {
	rule, m := l.Routes.MatchPath(r, path)
	if rule == nil {
		noteOutcome(w, outcomeNoRoute)
		if isGRPC(r) {
			writeGRPCError(w, grpcUnimplemented, http.StatusText(http.StatusNotFound))
		} else {
			http.NotFound(w, r)
		}
		return nil
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.route = rule.RouteName
	}
	if rule.RateLimit != nil && !f.limits.allow(w, r, rule.RateLimit) {
		return rule
	}
	f.forward(w, r, cfg, rule, m, &exchange{origHost: r.Host, in: r, clientCert: l.BackendClientCert, listener: l, port: port})
	return rule
}

// forward applies the matched rule: filters, backend choice, retries and
// timeouts. x holds what is known of the request so far.
func (f *forwarder) forward(w http.ResponseWriter, r *http.Request, cfg *config.Config, rule *config.Rule, m *config.Match, x *exchange) {
	if rule.Invalid != "" {
		f.refuse(w, r, rule, "route rule is invalid", rule.Invalid)
		return
	}
	if answerProbe(w, r, rule) {
		return
	}
	if rule.Security != nil && !f.guard.check(w, r, rule.Security, cfg.Endpoints) {
		return
	}
	x.body = watchBody(r)
	fr := &filterRun{w: w, in: r, out: overrideHash(r, rule), m: m, x: x, guard: f.guard, eps: cfg.Endpoints}
	if fr.apply(rule.Filters) {
		return
	}
	// bal is the load balancing of a BackendTrafficPolicy (balance.go),
	// nil without one; kept out of the exchange, which every request makes.
	var bal *balancing
	var b *config.Backend
	switch {
	case rule.Session != nil:
		// A valid session wins over the load balancing (session.go).
		x.sess = &session{sp: rule.Session, index: -1}
		b = f.stick(r, rule, cfg, x.sess, time.Now())
	case rule.BackendSession:
		// The sessions of the backends' Services, when the rule has
		// none of its own.
		x.sess = &session{index: -1}
		if b = f.stickBackends(r, rule, cfg, x.sess, time.Now()); b == nil {
			x.sess = nil
		}
	}
	switch {
	case b != nil:
		if rule.LB != nil {
			bal = &balancing{lb: rule.LB, held: -1}
		}
	case rule.LB == nil:
		b = pickBackend(rule)
	default:
		bal = &balancing{lb: rule.LB, held: -1}
		if rule.LB.Algorithm == config.LBConsistentHash {
			bal.key, bal.hasKey = requestKey(r, rule.LB)
		}
		b = pickBalanced(rule, bal.key, bal.hasKey)
	}
	if b == nil {
		writeErrorFor(w, r, http.StatusInternalServerError)
		return
	}
	if b.Invalid != "" {
		f.refuse(w, r, rule, "backend is invalid", b.Invalid)
		return
	}
	if x.sess == nil && b.Session != nil && rule.BackendSession {
		// A new session of the picked backend's Service.
		x.sess = &session{sp: b.Session, index: -1}
	}
	if od := cmp.Or(b.Outlier, rule.Outlier); od != nil {
		if bal == nil {
			bal = &balancing{held: -1}
		}
		bal.outlier = od
	}
	if hc := cmp.Or(b.Active, rule.Active); hc != nil {
		if bal == nil {
			bal = &balancing{held: -1}
		}
		bal.active = hc
	}
	if b.LB != nil {
		// The Service's own policy picks among its endpoints.
		if bal == nil {
			bal = &balancing{held: -1}
		}
		if b.LB.Algorithm == config.LBConsistentHash && (bal.lb == nil || bal.lb.HashOn != b.LB.HashOn || bal.lb.HashName != b.LB.HashName) {
			bal.key, bal.hasKey = requestKey(r, b.LB)
		}
		bal.lb = b.LB
	}
	if fr.apply(b.Filters) {
		return
	}
	out, mirrors := fr.out, fr.mirrors
	if b.Dispatch != 0 {
		f.dispatch(w, out, cfg, b.Dispatch, x)
		return
	}
	x.h2c = b.AppProtocol == appProtocolH2C
	x.tls = b.TLS

	ctx := r.Context()
	if rule.RequestTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rule.RequestTimeout)
		defer cancel()
	}

	var body []byte
	replay := rule.Retry != nil || len(mirrors) > 0
	if replay {
		var ok bool
		if body, ok = bufferBody(out); !ok {
			if err := x.bodyFailed(); err != nil {
				answerClientBodyError(f.log, w, r, err)
				return
			}
			// Too large to keep: send it once, without retries or mirrors.
			replay, mirrors = false, nil
		}
	}
	for _, mi := range mirrors {
		f.mirror(out, body, mi, cfg, x)
	}
	eps := cfg.Endpoints.Lookup(b.Key)
	if b.Address != "" {
		eps = config.NewEndpoints(b.Address)
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.backend = b.Key // for metrics
	}
	x.backend = b
	if cb := cmp.Or(b.Breaker, rule.Breaker); cb != nil {
		br, slotted := f.breakers.get(b.Key, cb), !x.h2c
		refused, err := br.admit(ctx, slotted)
		switch {
		case err != nil:
			if r.Context().Err() == nil {
				writeErrorFor(w, r, http.StatusGatewayTimeout) // the route's timeout, while it waited
			}
			return
		case refused != "":
			noteOutcome(w, refused)
			writeErrorFor(w, r, http.StatusServiceUnavailable)
			return
		}
		defer br.release(slotted)
		if bal == nil {
			bal = &balancing{held: -1}
		}
		bal.breaker = br
	}
	f.send(ctx, w, r, out, body, replay, rule, eps, x, bal)
}

// filterRun applies the filters of one request, rule's then backend's.
type filterRun struct {
	w       http.ResponseWriter
	in      *http.Request
	out     *http.Request // in, or the copy the filters changed
	m       *config.Match
	x       *exchange
	mirrors []*config.Mirror
	// guard and eps ask the authorization services of ExternalAuth
	// filters.
	guard *guard
	eps   config.EndpointTable
}

// apply runs one list of filters; it reports whether the request was
// answered (redirect, CORS preflight).
func (fr *filterRun) apply(filters []config.Filter) bool {
	w, r, x := fr.w, fr.in, fr.x
	for i := range filters {
		fl := &filters[i]
		switch {
		case fl.RequestHeaders != nil:
			if fr.out == r {
				fr.out = r.Clone(r.Context())
			}
			fl.RequestHeaders.ApplyRequest(fr.out)
		case fl.ResponseHeaders != nil:
			x.respFilters = append(x.respFilters, fl.ResponseHeaders)
		case fl.Redirect != nil:
			w.Header().Set("Location", fl.Redirect.Location(fr.out, fr.m))
			for _, rf := range x.respFilters {
				rf.Apply(w.Header())
			}
			w.WriteHeader(fl.Redirect.StatusCode)
			return true
		case fl.Rewrite != nil:
			if fr.out == r {
				fr.out = r.Clone(r.Context())
			}
			fl.Rewrite.Apply(fr.out, fr.m)
		case fl.Mirror != nil:
			// A copy of an Upgrade request would open a second
			// long-lived connection that nobody reads.
			if fl.Mirror.Take(rand.Uint64()) && !isUpgrade(r) {
				fr.mirrors = append(fr.mirrors, fl.Mirror)
			}
		case fl.ExtAuth != nil:
			// The service is asked about the request as the filters
			// before it left it, and its answer's headers go to the
			// backend; the Host stays the one the route matched.
			if fr.out == r {
				fr.out = r.Clone(r.Context())
			}
			host := fr.out.Host
			if !fr.guard.extAuth(w, fr.out, fl.ExtAuth, fr.eps) {
				return true
			}
			fr.out.Host = host
		case fl.CORS != nil:
			x.cors = fl.CORS
			if fl.CORS.Preflight(r) {
				fl.CORS.Apply(r, w.Header())
				w.WriteHeader(http.StatusNoContent)
				return true
			}
		}
	}
	return false
}

// send sends out, the request r after its filters, to an endpoint of eps
// until an attempt is answered: retries as rule says (replay: the body, if
// any, was kept in body), fail-over to another endpoint, backoff. bal,
// when set, picks the endpoints as a BackendTrafficPolicy says.
func (f *forwarder) send(ctx context.Context, w http.ResponseWriter, r, out *http.Request, body []byte, replay bool, rule *config.Rule, eps *config.Endpoints, x *exchange, bal *balancing) {
	attempts := 1
	if replay && rule.Retry != nil {
		attempts += rule.Retry.Attempts
	}
	// A request that can be sent again goes to another endpoint when its
	// endpoint cannot be reached (see failover.go).
	resendable := replay || out.ContentLength == 0
	failovers := 0
	x.Context = ctx
	endpoint := -1    // x.addr's index in eps, with a policy
	retrying := false // a retry of the circuit breaker is held
	if bal != nil {
		defer bal.release(eps)
	}
	var budget *retryBudget // the Service's retry budget, nil for none
	if rb := x.backend.Budget; rb != nil {
		budget = f.budgets.get(x.backend.Key, rb)
		budget.request(time.Now())
	}
	for attempt := 1; ; attempt++ {
		// A retry goes back to the same endpoint: the failure was that
		// request's (the backend answered with a retryable code, or dropped
		// that connection). Only an endpoint that cannot be reached at all
		// is swapped for the next one.
		now := time.Now()
		if attempt == 1 || isDialError(x.retryable) {
			switch {
			case attempt == 1 && x.sess != nil && x.sess.pinned != "":
				x.addr, endpoint = x.sess.pinned, x.sess.index
			case bal == nil:
				x.addr = f.down.pickUp(eps, now)
			default:
				x.addr, endpoint = f.down.pickWith(eps, bal, &f.outliers, f.health, now)
			}
			if x.sess != nil {
				x.sess.issue(f, r, x.addr, now)
			}
		}
		if x.addr == "" {
			writeErrorFor(w, r, http.StatusServiceUnavailable)
			return
		}
		if bal != nil {
			bal.hold(eps, endpoint)
		}
		if sw, ok := w.(*statusWriter); ok {
			sw.upstream = x.addr // the last attempt's, for the access log
			sw.attempts = attempt
		}
		x.failover = resendable && failovers < maxFailover && f.down.hasUp(eps, x.addr, now)
		last := attempt >= attempts
		if !last && bal != nil && bal.breaker != nil && !retrying && bal.breaker.retriesFull() {
			// No retry could be taken: this attempt's answer is the
			// client's, whatever it is (Envoy's retry overflow).
			last = true
		}
		if !last {
			x.retryCodes = rule.Retry.Codes
			if x.retryCodes == nil {
				x.retryCodes = []int{}
			}
		} else {
			x.retryCodes = nil
		}
		x.retryable, x.unreachable, x.rp, x.answered = nil, false, nil, 0
		// The cap on informational heads spans the request's attempts.
		x.gate = answerGate{ResponseWriter: w, n1xx: x.gate.n1xx, max1xx: f.max1xx}
		headTimeout := f.headTimeoutOf(rule)
		if c := x.backend.Conn; c != nil && c.ResponseHeaderTimeout > 0 {
			headTimeout = c.ResponseHeaderTimeout
		}
		actx := context.Context(x)
		var cancel context.CancelFunc = func() {}
		if rule.BackendRequestTimeout > 0 {
			actx, cancel = context.WithTimeout(actx, rule.BackendRequestTimeout)
		}
		if h1Direct(x, out, body) {
			// The wait for the head is a read deadline of the backend
			// connection there: no timer or context per request.
			f.serveDirect(actx, &x.gate, out, x, headTimeout)
		} else {
			x.rp = &rpAttempt{}
			if headTimeout > 0 {
				actx, cancel = x.rp.startHeadTimer(actx, headTimeout, cancel)
			}
			req := out.WithContext(actx)
			if body != nil {
				req.Body = io.NopCloser(bytes.NewReader(body))
				req.ContentLength = int64(len(body))
			}
			f.rp.ServeHTTP(&x.gate, req)
			if err := x.rp.err; err != nil {
				f.answerFailed(req, x, err)
			}
		}
		cancel()
		if bal != nil {
			bal.release(eps)
			if bal.outlier != nil {
				f.observeOutlier(bal.outlier, eps, r, w, x)
			}
		}
		if x.retryable == nil {
			x.gate.pass()
			return
		}
		if ctx.Err() != nil {
			writeProxyError(f.log, w, r, x, ctx.Err())
			return
		}
		if x.failover && x.unreachable {
			// Not an attempt of the retry policy: the request never
			// reached a backend.
			failovers++
			attempt--
			continue
		}
		// Only an attempt before the last one, with a retry policy, gets
		// here: proxyError answers the last one unless it fails over.
		if bal != nil && bal.breaker != nil && !retrying {
			if !bal.breaker.retry() {
				noteOutcome(w, outcomeBreakerRetries)
				writeErrorFor(w, r, http.StatusServiceUnavailable)
				return
			}
			retrying = true
			defer bal.breaker.endRetry()
		}
		// After the circuit breaker's retry slot (released on return), so
		// that a retry it refuses is not counted against the budget.
		if budget != nil && !budget.retry(x.backend.Budget, time.Now()) {
			// The Service's retries are past its budget: the spec's
			// answer is 503, whatever the held answer was.
			noteOutcome(w, outcomeRetryBudget)
			writeErrorFor(w, r, http.StatusServiceUnavailable)
			return
		}
		if rule.Retry.Backoff > 0 {
			t := time.NewTimer(rule.Retry.Backoff << min(attempt-1, 6))
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				writeProxyError(f.log, w, r, x, ctx.Err())
				return
			}
		}
	}
}

// observeOutlier counts the attempt just made for its endpoint's passive
// health check. An attempt the client cut short, or whose request body
// failed, says nothing of the endpoint.
func (f *forwarder) observeOutlier(od *config.OutlierDetection, eps *config.Endpoints, r *http.Request, w http.ResponseWriter, x *exchange) {
	if eps == nil || r.Context().Err() != nil || x.bodyFailed() != nil {
		return
	}
	d := f.outliers.observe(od, eps, x.addr, resultOf(int(x.answered)), time.Now())
	if d == 0 {
		return
	}
	f.log.Warn("endpoint ejected by its passive health check", zap.String("endpoint", x.addr),
		zap.String("policy", od.Policy), zap.Duration("for", d))
	if sw, ok := w.(*statusWriter); ok && f.backends != nil {
		f.backends.ObserveEjection(sw.backend)
	}
}

// errNoAnswerInTime is the failure of an attempt whose backend sent no
// final answer's head within Options.BackendResponseTimeout: a 504.
var errNoAnswerInTime = fmt.Errorf("backend sent no answer within the backend response timeout: %w", context.DeadlineExceeded)

// headTimeoutOf is how long an attempt of rule waits for the head of the
// backend's final answer: Options.BackendResponseTimeout, unless the
// route set a timeout of its own (or disabled them), or the rule is a
// KIngress's, which Knative wants without default timeouts.
func (f *forwarder) headTimeoutOf(rule *config.Rule) time.Duration {
	if rule.RequestTimeout != 0 || rule.BackendRequestTimeout != 0 || rule.NetworkHash != "" {
		return 0
	}
	return f.headTimeout
}

// startHeadTimer bounds the wait of a ReverseProxy attempt, whose context
// is ctx and cancel its cancel function, for its answer's head to d: the
// context returned is cancelled with errNoAnswerInTime unless
// modifyResponse stopped the timer first. The cancel function returned
// ends both.
func (a *rpAttempt) startHeadTimer(ctx context.Context, d time.Duration, cancel context.CancelFunc) (context.Context, context.CancelFunc) {
	hctx, hcancel := context.WithCancelCause(ctx)
	a.timer = time.AfterFunc(d, func() { hcancel(errNoAnswerInTime) })
	return hctx, func() {
		a.timer.Stop()
		hcancel(nil)
		cancel()
	}
}

// bufferBody reads a small request body into memory so it can be sent more
// than once. It reports false, leaving the body streamable, when the body is
// larger than maxReplayBody.
func bufferBody(r *http.Request) ([]byte, bool) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return []byte{}, true
	}
	if r.ContentLength > maxReplayBody {
		return nil, false
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, maxReplayBody+1))
	if err != nil || len(buf) > maxReplayBody {
		// Put back what was read so the single attempt sees the whole body.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return nil, false
	}
	return buf, true
}

// mirror sends a copy of the request to a mirror backend and discards the
// answer; it never delays or changes the client's response.
func (f *forwarder) mirror(r *http.Request, body []byte, m *config.Mirror, cfg *config.Config, x *exchange) {
	addr := cfg.Endpoints.Lookup(m.Backend).Pick()
	if addr == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	ctx = context.WithValue(ctx, mirrorBackendKey{}, &m.Backend)
	req := r.Clone(ctx)
	req.RequestURI = ""
	req.URL.Scheme, req.URL.Host = "http", addr
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.Header = mirrorHeader(r, x)
	h2 := m.AppProtocol == appProtocolH2C
	// A mirror claims no connection: it goes through h1plain (see
	// RoundTrip), which also keeps its load off the clients' pool.
	transport := http.RoundTripper(f.h1plain)
	switch {
	case m.TLS != nil:
		req.URL.Scheme = "https"
		transport = f.tls.get(m.TLS, x.clientCert, nil).roundTripper(h2, req)
	case h2:
		transport = f.h2c
	}
	go func() {
		defer cancel()
		resp, err := transport.RoundTrip(req)
		if err != nil {
			log := f.log
			if m.TLS != nil {
				log = log.With(zap.String("backendTLSPolicy", m.TLS.Policy))
			}
			log.Debug("mirror request failed", zap.String("endpoint", addr), zap.Error(err))
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
}

// mirrorBackendKey is the context key of a mirrored copy's backend, for
// trackDial.
type mirrorBackendKey struct{}

// trackDial counts a connection to a backend open, under the backend the
// request it was dialed for was sent to (found in the dial's context:
// transports dial in the request's context, or one that keeps its
// values), and returns what counts it closed. A connection is counted
// under the backend that opened it, though a pool may lend it to the
// request of another backend with the same endpoint.
func (f *forwarder) trackDial(ctx context.Context) func() {
	var b *config.BackendKey
	if m, ok := ctx.Value(mirrorBackendKey{}).(*config.BackendKey); ok {
		b = m
	} else if x, ok := ctx.Value(exchangeKey{}).(*exchange); ok {
		b = &x.backend.Key
	}
	if b == nil || *b == (config.BackendKey{}) {
		return nil
	}
	f.backends.ObserveDial(*b)
	return func() { f.backends.ObserveClose(*b) }
}

// dialConn is the connect timeout and TCP keepalive of the backend's
// policy for a dial of a request's attempt (sockio.Dialer.Conn); zero and
// nil for everything else.
func dialConn(ctx context.Context) (time.Duration, *net.KeepAliveConfig) {
	x, ok := ctx.Value(exchangeKey{}).(*exchange)
	if !ok || x.backend == nil || x.backend.Conn == nil {
		return 0, nil
	}
	conn := x.backend.Conn
	var ka *net.KeepAliveConfig
	if k := conn.KeepAlive; k != nil {
		ka = &net.KeepAliveConfig{Enable: true, Idle: k.Idle, Interval: k.Interval, Count: int(k.Probes)}
	}
	return conn.ConnectTimeout, ka
}

// mirrorHeader prepares the headers of a mirrored copy as ReverseProxy and
// rewrite prepare those of the forwarded request: hop-by-hop headers, those
// the client listed in Connection and client-sent forwarding headers go, and
// Portico sets its own X-Forwarded-*.
func mirrorHeader(r *http.Request, x *exchange) http.Header {
	h := r.Header.Clone()
	removeHopByHop(h)
	delete(h, "Http2-Settings")
	dropClientForwarding(h)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h.Set("X-Forwarded-For", ip)
	}
	h.Set("X-Forwarded-Host", x.origHost)
	h.Set("X-Forwarded-Port", x.port)
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	h.Set("X-Forwarded-Proto", proto)
	return h
}

// pickBackend chooses a backend by weight; nil when every weight is zero
// (the spec says such a rule answers 500).
func pickBackend(rule *config.Rule) *config.Backend {
	switch {
	case len(rule.Backends) == 0 || rule.TotalWeight <= 0:
		return nil
	case len(rule.Backends) == 1:
		return &rule.Backends[0]
	}
	n := rand.Int32N(rule.TotalWeight)
	for i := range rule.Backends {
		b := &rule.Backends[i]
		if n < b.Weight {
			return b
		}
		n -= b.Weight
	}
	return nil
}

// cutByDeadline says when err is the attempt's timeout: a dial or read that
// the poller cut at ctx's deadline can fail just before ctx's own timer
// marks it done, with the poller's "i/o timeout", which is neither a 504
// nor a reason to leave the endpoint out.
func cutByDeadline(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil || !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// isDialError reports whether err is a failure to connect, as opposed to a
// failure of an exchange on an established connection.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
