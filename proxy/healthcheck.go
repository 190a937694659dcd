package proxy

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"google.golang.org/protobuf/encoding/protowire"

	"portico.dev/portico/config"
)

// Active health checks (config.ActiveHealthCheck): one prober per check
// and endpoint address in the whole configuration, however many rules,
// listeners and policies ask for it. Apply starts the probers a Config
// adds and stops those it drops; a prober whose check and endpoint stay
// keeps its state across Configs. Requests read the state through one
// atomic counter when every probed endpoint is healthy, and a map lookup
// otherwise.

// HealthObserver, when Options.Backends implements it too, is told how
// the counts of a backend's endpoints that active health checks find
// healthy and unhealthy change (metrics).
type HealthObserver interface {
	ObserveHealth(backend config.BackendKey, healthy, unhealthy int)
}

// hcKey names a prober: a check (its ID) of an endpoint.
type hcKey struct{ id, addr string }

// endpointHealth is what requests read of a prober.
type endpointHealth struct{ healthy atomic.Bool }

// healthChecks owns the probers.
type healthChecks struct {
	log      *zap.Logger
	observer HealthObserver // nil: none

	mu      sync.Mutex // serializes apply, close and transitions
	probers map[hcKey]*prober
	closed  bool
	// view is what requests read: every prober's state by key, replaced
	// whole by apply.
	view atomic.Pointer[map[hcKey]*endpointHealth]
	// unhealthy counts the probed endpoints that are not healthy: with
	// none, requests look nothing up.
	unhealthy atomic.Int32

	dialer net.Dialer
	h1     *http.Transport
	h2c    *http2.Transport
	// overTLS are the transports of checks of backends reached over TLS
	// (ActiveHealthCheck.TLS), by BackendTLS ID: the same SNI and
	// validation as their traffic.
	overTLS sync.Map // string -> *hcTLS
	// onTransition, when set (tests), is told of each transition, under
	// mu, before the next probe of the prober.
	onTransition func(p *prober, healthy bool)
}

// prober probes one endpoint with one check.
type prober struct {
	key     hcKey
	check   *config.ActiveHealthCheck
	backend config.BackendKey // for metrics and logs: the first that asked
	state   *endpointHealth
	cancel  context.CancelFunc
	done    chan struct{}
	removed bool // under healthChecks.mu

	// Of the prober's goroutine only: passes and failures in a row, and
	// whether a probe has ended yet.
	passes, fails int32
	probed        bool
}

func newHealthChecks(log *zap.Logger, observer HealthObserver) *healthChecks {
	h := &healthChecks{log: log, observer: observer, probers: map[hcKey]*prober{}}
	h.dialer.KeepAlive = -1 // a probe's connection is short-lived or reused soon
	h.h1 = &http.Transport{
		DialContext:         h.dialer.DialContext,
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	h.h2c = &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return h.dialer.DialContext(ctx, network, addr)
		},
		IdleConnTimeout: time.Minute,
	}
	return h
}

// apply starts the probers cfg asks for that do not run yet and stops
// those it no longer asks for, and waits for the stopped ones to end.
func (h *healthChecks) apply(cfg *config.Config) {
	if len(cfg.HealthChecks) == 0 && h.view.Load() == nil {
		return // no check now or before: nothing to do on every Apply
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	wanted := map[hcKey]bool{}
	var started int
	for _, t := range cfg.HealthChecks {
		eps := cfg.Endpoints.Lookup(t.Backend)
		if eps == nil {
			continue
		}
		for _, addr := range eps.Addrs {
			k := hcKey{t.Check.ID, addr}
			if wanted[k] {
				continue
			}
			wanted[k] = true
			if h.probers[k] != nil {
				continue
			}
			h.start(k, t)
			started++
		}
	}
	var stopped []*prober
	for k, p := range h.probers {
		if !wanted[k] {
			stopped = append(stopped, h.remove(p))
		}
	}
	h.publish()
	h.mu.Unlock()
	for _, p := range stopped {
		<-p.done
	}
	if started > 0 || len(stopped) > 0 {
		h.log.Debug("active health checks changed", zap.Int("probers", len(wanted)), zap.Int("started", started), zap.Int("stopped", len(stopped)))
	}
	if len(wanted) == 0 {
		h.closeIdle()
	}
}

// closeIdle closes every idle probe connection.
func (h *healthChecks) closeIdle() {
	h.h1.CloseIdleConnections()
	h.h2c.CloseIdleConnections()
	h.overTLS.Range(func(k, v any) bool {
		t := v.(*hcTLS)
		t.h1.CloseIdleConnections()
		t.h2.CloseIdleConnections()
		h.overTLS.Delete(k)
		return true
	})
}

// hcTLS are the probe transports of one BackendTLS.
type hcTLS struct {
	h1  *http.Transport
	h2  *http2.Transport
	tcp *tls.Config
}

// tlsFor is the probe transports of b, made on first use. b is only read
// then: the same ID means the same settings.
func (h *healthChecks) tlsFor(b *config.BackendTLS) *hcTLS {
	if t, ok := h.overTLS.Load(b.ID); ok {
		return t.(*hcTLS)
	}
	t := &hcTLS{
		h1: &http.Transport{
			DialContext:         h.dialer.DialContext,
			TLSClientConfig:     backendTLSConfig(b, nil, "http/1.1"),
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
		tcp: backendTLSConfig(b, nil, ""),
	}
	t.tcp.NextProtos = nil
	h2cfg := backendTLSConfig(b, nil, http2.NextProtoTLS)
	t.h2 = &http2.Transport{
		TLSClientConfig: h2cfg,
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			return h.dialTLS(ctx, addr, cfg)
		},
		IdleConnTimeout: time.Minute,
	}
	got, _ := h.overTLS.LoadOrStore(b.ID, t)
	return got.(*hcTLS)
}

// dialTLS connects to addr and completes a handshake with cfg (its
// ServerName the endpoint's host when it names none), within ctx.
func (h *healthChecks) dialTLS(ctx context.Context, addr string, cfg *tls.Config) (net.Conn, error) {
	raw, err := h.dialer.DialContext(ctx, "tcp", addr)
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
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	return c, nil
}

// start runs a prober for k; under h.mu. A new endpoint is unhealthy
// until its first probe passes.
func (h *healthChecks) start(k hcKey, t config.HealthCheckTarget) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &prober{key: k, check: t.Check, backend: t.Backend, state: &endpointHealth{}, cancel: cancel, done: make(chan struct{})}
	h.probers[k] = p
	h.unhealthy.Add(1)
	if h.observer != nil {
		h.observer.ObserveHealth(p.backend, 0, 1)
	}
	go h.run(ctx, p)
}

// remove stops p and forgets it; under h.mu. The caller waits for p.done.
func (h *healthChecks) remove(p *prober) *prober {
	p.cancel()
	p.removed = true
	delete(h.probers, p.key)
	healthy := p.state.healthy.Load()
	if !healthy {
		h.unhealthy.Add(-1)
	}
	if h.observer != nil {
		if healthy {
			h.observer.ObserveHealth(p.backend, -1, 0)
		} else {
			h.observer.ObserveHealth(p.backend, 0, -1)
		}
	}
	return p
}

// publish makes the probers' states what requests read; under h.mu.
func (h *healthChecks) publish() {
	if len(h.probers) == 0 {
		h.view.Store(nil)
		return
	}
	m := make(map[hcKey]*endpointHealth, len(h.probers))
	for k, p := range h.probers {
		m[k] = p.state
	}
	h.view.Store(&m)
}

// close stops every prober and waits for them.
func (h *healthChecks) close() {
	h.mu.Lock()
	h.closed = true
	var stopped []*prober
	for _, p := range h.probers {
		stopped = append(stopped, h.remove(p))
	}
	h.publish()
	h.mu.Unlock()
	for _, p := range stopped {
		<-p.done
	}
	h.closeIdle()
}

// any reports whether some probed endpoint is unhealthy.
func (h *healthChecks) any() bool { return h.unhealthy.Load() > 0 }

// down reports whether check hc left addr out: it was probed and is not
// healthy. An endpoint no prober has (yet) is not left out.
func (h *healthChecks) down(hc *config.ActiveHealthCheck, addr string) bool {
	m := h.view.Load()
	if m == nil {
		return false
	}
	st := (*m)[hcKey{hc.ID, addr}]
	return st != nil && !st.healthy.Load()
}

// size is the number of probers running, for tests.
func (h *healthChecks) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.probers)
}

// run probes p's endpoint until p is stopped: first at once (plus up to
// the jitter), then every interval from the start of the last probe.
func (h *healthChecks) run(ctx context.Context, p *prober) {
	defer close(p.done)
	hc := p.check
	jitter := func() time.Duration {
		if hc.Jitter <= 0 {
			return 0
		}
		return rand.N(hc.Jitter)
	}
	t := time.NewTimer(jitter())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		pctx, cancel := context.WithTimeout(ctx, hc.Timeout)
		err := h.probe(pctx, hc, p.key.addr)
		cancel()
		if ctx.Err() != nil {
			return // stopped mid-probe: the result says nothing
		}
		h.record(p, err)
		t.Reset(max(hc.Interval-time.Since(start), 0) + jitter())
	}
}

// record counts a probe's result and makes the transitions it calls for.
func (h *healthChecks) record(p *prober, err error) {
	hc := p.check
	first := !p.probed
	p.probed = true
	healthy := p.state.healthy.Load()
	if err == nil {
		p.fails = 0
		p.passes++
		if healthy || !first && p.passes < hc.HealthyThreshold {
			return
		}
	} else {
		p.passes = 0
		p.fails++
		if !healthy || p.fails < hc.UnhealthyThreshold {
			if first {
				h.log.Info("endpoint not yet healthy: its first active health check failed", zap.String("endpoint", p.key.addr),
					zap.Stringer("backend", p.backend), zap.String("policy", hc.Policy), zap.Error(err))
			}
			return
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if p.removed {
		return
	}
	p.state.healthy.Store(!healthy)
	if h.onTransition != nil {
		h.onTransition(p, !healthy)
	}
	if healthy {
		h.unhealthy.Add(1)
		h.log.Warn("endpoint unhealthy: it failed its active health check", zap.String("endpoint", p.key.addr),
			zap.Stringer("backend", p.backend), zap.String("policy", hc.Policy), zap.Int32("failures", p.fails), zap.Error(err))
		if h.observer != nil {
			h.observer.ObserveHealth(p.backend, -1, 1)
		}
		return
	}
	h.unhealthy.Add(-1)
	h.log.Info("endpoint healthy: it passed its active health check", zap.String("endpoint", p.key.addr),
		zap.Stringer("backend", p.backend), zap.String("policy", hc.Policy), zap.Int32("passes", p.passes))
	if h.observer != nil {
		h.observer.ObserveHealth(p.backend, 1, -1)
	}
}

// maxProbeAnswer bounds what a probe reads of an answer.
const maxProbeAnswer = 4 << 10

// probe checks addr once as hc says; nil when it passed.
func (h *healthChecks) probe(ctx context.Context, hc *config.ActiveHealthCheck, addr string) error {
	switch hc.Type {
	case config.HealthCheckHTTP:
		return h.probeHTTP(ctx, hc, addr)
	case config.HealthCheckTCP:
		return h.probeTCP(ctx, hc, addr)
	case config.HealthCheckGRPC:
		return h.probeGRPC(ctx, hc, addr)
	}
	return fmt.Errorf("unknown health check type %q", hc.Type)
}

func (h *healthChecks) probeHTTP(ctx context.Context, hc *config.ActiveHealthCheck, addr string) error {
	scheme, transport := "http://", http.RoundTripper(h.h1)
	if hc.TLS != nil {
		scheme, transport = "https://", h.tlsFor(hc.TLS).h1
	}
	req, err := http.NewRequestWithContext(ctx, hc.Method, scheme+addr+hc.Path, nil)
	if err != nil {
		return fmt.Errorf("health check request: %w", err)
	}
	if hc.Host != "" {
		req.Host = hc.Host
	}
	req.Header.Set("User-Agent", "portico-health-check")
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("health check request: %w", err)
	}
	// Read a little so that the connection can serve the next probe.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxProbeAnswer))
	resp.Body.Close()
	if !hc.Expects(resp.StatusCode) {
		return fmt.Errorf("health check answered status %d", resp.StatusCode)
	}
	return nil
}

func (h *healthChecks) probeTCP(ctx context.Context, hc *config.ActiveHealthCheck, addr string) error {
	var c net.Conn
	var err error
	if hc.TLS != nil {
		c, err = h.dialTLS(ctx, addr, h.tlsFor(hc.TLS).tcp)
	} else {
		c, err = h.dialer.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return fmt.Errorf("health check connect: %w", err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	if len(hc.Send) > 0 {
		if _, err := c.Write(hc.Send); err != nil {
			return fmt.Errorf("health check send: %w", err)
		}
	}
	if len(hc.Expect) == 0 {
		return nil
	}
	// The expected bytes may come anywhere in the first few KiB.
	got := make([]byte, 0, 512)
	buf := make([]byte, 512)
	for len(got) < maxProbeAnswer {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if bytes.Contains(got, hc.Expect) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("health check answer without the expected bytes: %w", err)
		}
	}
	return errors.New("health check answer without the expected bytes")
}

// gRPC health protocol (grpc.health.v1): HealthCheckRequest{service = 1}
// and HealthCheckResponse{status = 1}, SERVING being 1.
const (
	grpcHealthPath    = "/grpc.health.v1.Health/Check"
	grpcHealthServing = 1
)

func (h *healthChecks) probeGRPC(ctx context.Context, hc *config.ActiveHealthCheck, addr string) error {
	var msg []byte
	if hc.GRPCService != "" {
		msg = protowire.AppendTag(msg, 1, protowire.BytesType)
		msg = protowire.AppendString(msg, hc.GRPCService)
	}
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)
	scheme, transport := "http://", http.RoundTripper(h.h2c)
	if hc.TLS != nil {
		scheme, transport = "https://", h.tlsFor(hc.TLS).h2
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, scheme+addr+grpcHealthPath, bytes.NewReader(frame))
	if err != nil {
		return fmt.Errorf("grpc health check request: %w", err)
	}
	req.ContentLength = int64(len(frame))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("User-Agent", "portico-health-check")
	resp, err := transport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("grpc health check request: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeAnswer))
	if err != nil {
		return fmt.Errorf("grpc health check answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("grpc health check answered HTTP status %d", resp.StatusCode)
	}
	st := resp.Trailer.Get("Grpc-Status")
	if st == "" {
		st = resp.Header.Get("Grpc-Status") // a trailers-only answer
	}
	if st != "0" {
		return fmt.Errorf("grpc health check answered grpc-status %s: %s", cmp.Or(st, "none"), resp.Trailer.Get("Grpc-Message"))
	}
	if len(body) < 5 || body[0] != 0 || int(binary.BigEndian.Uint32(body[1:5])) != len(body)-5 {
		return errors.New("grpc health check answer is not one uncompressed message")
	}
	status, err := servingStatus(body[5:])
	if err != nil {
		return err
	}
	if status != grpcHealthServing {
		return fmt.Errorf("grpc health check answered serving status %d, not SERVING", status)
	}
	return nil
}

// servingStatus is field 1 of a HealthCheckResponse (0, UNKNOWN, when
// absent).
func servingStatus(b []byte) (uint64, error) {
	var status uint64
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, errors.New("grpc health check answer is not a HealthCheckResponse")
		}
		b = b[n:]
		if num == 1 && typ == protowire.VarintType {
			v, m := protowire.ConsumeVarint(b)
			if m < 0 {
				return 0, errors.New("grpc health check answer is not a HealthCheckResponse")
			}
			status, b = v, b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return 0, errors.New("grpc health check answer is not a HealthCheckResponse")
		}
		b = b[m:]
	}
	return status, nil
}
