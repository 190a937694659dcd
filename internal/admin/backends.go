package admin

import (
	"hash/maphash"
	"maps"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"portico.dev/portico/config"
)

// DefaultMaxBackends is how many backends get series of their own: past
// it, requests to further backends are counted under backend="other", so
// that a cluster with 100,000 Services does not make 100,000 series.
const DefaultMaxBackends = 200

// otherBackends is the backend label of the backends past the limit.
const otherBackends = "other"

// The results of a request sent to a backend: a fixed set.
const (
	backendOK          = "ok"          // answered, with a status below 500
	backendStatus5xx   = "5xx"         // the backend answered 5xx
	backendBadGateway  = "bad_gateway" // 502: the backend could not be reached, or answered badly
	backendUnavailable = "unavailable" // 503: no endpoint ready
	backendTimeout     = "timeout"     // 504, or a route timeout that cut the answer
	backendCut         = "cut"         // the backend failed mid-answer
	backendClientGone  = "client_gone" // the client left before the end
)

// outcomeRetryBudget is proxy's outcome of a request whose retry its
// Service's retry budget refused.
const outcomeRetryBudget = "retry_budget"

var backendResults = []string{backendOK, backendStatus5xx, backendBadGateway, backendUnavailable, backendTimeout, backendCut, backendClientGone}

// backendResult sorts a finished request by what its backend did, from
// the status the client got and how the exchange ended (the outcomes of
// proxy's statusWriter).
func backendResult(code int, outcome string) string {
	switch outcome {
	case "backend_failed", "aborted":
		return backendCut
	case "timeout":
		return backendTimeout
	case "client_gone", "client_reset", "client_slow":
		return backendClientGone
	}
	switch {
	case code == http.StatusBadGateway:
		return backendBadGateway
	case code == http.StatusServiceUnavailable:
		return backendUnavailable
	case code == http.StatusGatewayTimeout:
		return backendTimeout
	case code >= 500:
		return backendStatus5xx
	}
	return backendOK
}

// backendSeries are the children of one backend label.
type backendSeries struct {
	label   string
	results map[string]prometheus.Counter
	retries prometheus.Counter
	refused prometheus.Counter // retries a retry budget refused
	latency prometheus.Observer
	ejected prometheus.Counter
	opened  prometheus.Counter
	open    prometheus.Gauge
	// healthy and unhealthy count the endpoints active health checks
	// probe (an endpoint checked by two checks counts twice).
	healthy, unhealthy prometheus.Gauge
}

// backendShards is how many maps a backendCache spreads its backends
// over, so that adding one copies a small map.
const backendShards = 64

// backendCache finds the series of a backend without hashing labels on
// every request: maps that are never written, each replaced by a copy when
// a backend of its shard is seen for the first time (as counterCache).
// Backends past the limit are kept too, pointing to "other", so that their
// requests find it as fast.
type backendCache struct {
	requests *prometheus.CounterVec
	retries  *prometheus.CounterVec
	refused  *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	ejected  *prometheus.CounterVec
	opened   *prometheus.CounterVec
	open     *prometheus.GaugeVec
	health   *prometheus.GaugeVec
	max      atomic.Int64
	seed     maphash.Seed
	mu       sync.Mutex // serialises the copies and named
	named    int64      // backends with series of their own
	shards   [backendShards]atomic.Pointer[map[config.BackendKey]*backendSeries]
	other    *backendSeries
}

func newBackendCache() *backendCache {
	c := &backendCache{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_backend_requests_total",
			Help: "Requests sent to a backend (namespace/service:port; \"other\" past the limit of backends), by result: ok, 5xx, bad_gateway, unavailable, timeout, cut, client_gone.",
		}, []string{"backend", "result"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_backend_retries_total",
			Help: "Attempts of a route's retry policy after the first, by backend.",
		}, []string{"backend"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_backend_retries_refused_total",
			Help: "Retries not sent because the retry budget of the backend's XBackendTrafficPolicy was spent (the client got 503), by backend.",
		}, []string{"backend"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "portico_backend_request_duration_seconds",
			Help:    "Time from receiving a request's headers to the end of its response, for requests sent to a backend, by backend.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"backend"}),
		ejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_backend_endpoints_ejected_total",
			Help: "Endpoints of a backend left out for a while because they could not be reached, by backend.",
		}, []string{"backend"}),
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_backend_connections_opened_total",
			Help: "Connections opened to a backend's endpoints, on every forwarding path (HTTP/1.1 with or without a body, TLS, h2c and gRPC, upgrades, mirrors), by the backend of the request that opened each: against the requests, how well connections are reused.",
		}, []string{"backend"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_backend_open_connections",
			Help: "Connections open to a backend's endpoints now, idle or carrying requests, on every forwarding path: the size of the backend's connection pool, by the backend of the request that opened each.",
		}, []string{"backend"}),
		health: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "portico_backend_endpoints_health",
			Help: "Endpoints of a backend that a BackendTrafficPolicy's active health check probes, by backend and state: healthy (used) or unhealthy (left out, unless every endpoint of the backend is).",
		}, []string{"backend", "state"}),
	}
	c.seed = maphash.MakeSeed()
	c.max.Store(DefaultMaxBackends)
	c.other = c.series(otherBackends)
	return c
}

func (c *backendCache) series(label string) *backendSeries {
	s := &backendSeries{label: label, results: make(map[string]prometheus.Counter, len(backendResults)),
		retries: c.retries.WithLabelValues(label), refused: c.refused.WithLabelValues(label), latency: c.latency.WithLabelValues(label),
		ejected: c.ejected.WithLabelValues(label), opened: c.opened.WithLabelValues(label),
		open: c.open.WithLabelValues(label), healthy: c.health.WithLabelValues(label, "healthy"),
		unhealthy: c.health.WithLabelValues(label, "unhealthy")}
	for _, r := range backendResults {
		s.results[r] = c.requests.WithLabelValues(label, r)
	}
	return s
}

func (c *backendCache) get(key config.BackendKey) *backendSeries {
	sh := &c.shards[maphash.Comparable(c.seed, key)%backendShards]
	if m := sh.Load(); m != nil {
		if s, ok := (*m)[key]; ok {
			return s
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var m map[config.BackendKey]*backendSeries
	if old := sh.Load(); old != nil {
		m = *old
	}
	if s, ok := m[key]; ok {
		return s
	}
	s := c.other
	if c.named < c.max.Load() {
		c.named++
		s = c.series(key.String())
	}
	m = maps.Clone(m)
	if m == nil {
		m = make(map[config.BackendKey]*backendSeries, 1)
	}
	m[key] = s
	sh.Store(&m)
	return s
}

// ObserveEjection records an endpoint of backend left out because it could
// not be reached (see proxy.BackendObserver).
func (m *Metrics) ObserveEjection(backend config.BackendKey) {
	if m != nil {
		m.backends.get(backend).ejected.Inc()
	}
}

// ObserveHealth records a change of the endpoints of backend that active
// health checks find healthy and unhealthy (see proxy.HealthObserver).
func (m *Metrics) ObserveHealth(backend config.BackendKey, healthy, unhealthy int) {
	if m != nil {
		s := m.backends.get(backend)
		s.healthy.Add(float64(healthy))
		s.unhealthy.Add(float64(unhealthy))
	}
}

// ObserveDial records a connection opened to backend (see
// proxy.BackendObserver): an atomic add to two series.
func (m *Metrics) ObserveDial(backend config.BackendKey) {
	if m != nil {
		s := m.backends.get(backend)
		s.opened.Inc()
		s.open.Inc()
	}
}

// ObserveClose records the close of a connection ObserveDial recorded.
func (m *Metrics) ObserveClose(backend config.BackendKey) {
	if m != nil {
		m.backends.get(backend).open.Dec()
	}
}

// SetMaxRoutes sets how many routes get a route label of their own in the
// request metrics (see DefaultMaxRoutes); negative: every route. Call it
// before the first request.
func (m *Metrics) SetMaxRoutes(n int) {
	if m != nil {
		m.counters.maxRoutes.Store(int64(n))
		m.grpcCounters.maxRoutes.Store(int64(n))
	}
}

// SetMaxBackends sets how many backends get series of their own (see
// DefaultMaxBackends); 0 counts every backend under "other". Call it
// before the first request.
func (m *Metrics) SetMaxBackends(n int) {
	if m != nil {
		m.backends.max.Store(int64(max(n, 0)))
	}
}

// ObserveBackend records one finished request sent to backend (see
// proxy.BackendObserver): its result, the retries it took and its time.
func (m *Metrics) ObserveBackend(backend config.BackendKey, code int, outcome string, attempts int, d time.Duration) {
	if m == nil {
		return
	}
	s := m.backends.get(backend)
	s.results[backendResult(code, outcome)].Inc()
	if attempts > 1 {
		s.retries.Add(float64(attempts - 1))
	}
	if outcome == outcomeRetryBudget {
		s.refused.Inc()
	}
	s.latency.Observe(d.Seconds())
}
