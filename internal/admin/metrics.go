// Package admin serves Portico's health checks and Prometheus metrics on a
// port of their own, apart from the ports that carry traffic.
package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"portico.dev/portico/internal/shared/buildinfo"
)

// Metrics holds every metric Portico exports. Its methods are safe for
// concurrent use and do nothing on a nil *Metrics, so callers need no checks
// when metrics are off.
type Metrics struct {
	registry *prometheus.Registry

	requests     *prometheus.CounterVec
	latency      prometheus.Histogram
	generation   prometheus.Gauge
	applies      *prometheus.CounterVec
	translate    prometheus.Histogram
	apply        prometheus.Histogram
	certificates prometheus.Gauge
	leader       prometheus.Gauge
	statusWrites *prometheus.CounterVec
	acme         *prometheus.CounterVec
	handshakes   *prometheus.CounterVec
	streams      *prometheus.CounterVec
	streamBytes  *prometheus.CounterVec
	streamTime   prometheus.Histogram
	certExpiry   prometheus.Gauge
	sinceChange  prometheus.Histogram
	backends     *backendCache
	dataPlanes   *dataPlaneLag
	udp          *udpMetrics

	// counters and grpcCounters hold the child counters of requests and
	// grpcRequests by (route, code).
	counters, grpcCounters *counterCache
	grpcRequests           *prometheus.CounterVec
	// security counts SecurityPolicy decisions (security.go).
	security *prometheus.CounterVec
}

// NewMetrics returns Metrics registered in a registry of their own, with the
// Go runtime and process collectors alongside.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry:   prometheus.NewRegistry(),
		backends:   newBackendCache(),
		dataPlanes: newDataPlaneLag(),
		security:   newSecurityCounter(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_http_requests_total",
			Help: "Requests served, by HTTPRoute (namespace/name; empty when no route matched), status code and outcome " +
				"(complete, client_gone, client_reset, client_slow, backend_failed, timeout, aborted).",
		}, []string{"route", "code", "outcome"}),
		grpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_grpc_requests_total",
			Help: "gRPC calls served, by route (namespace/name; empty when no route matched) and gRPC status code.",
		}, []string{"route", "grpc_status"}),
		// No route label: with one route per hostname and thousands of
		// hostnames, a histogram per route would be too many series.
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_http_request_duration_seconds",
			Help:    "Time from receiving a request's headers to the end of its response.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_config_generation",
			Help: "Generation of the configuration the data plane serves.",
		}),
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_config_applies_total",
			Help: "Configurations handed to the data plane, by result (ok, error).",
		}, []string{"result"}),
		translate: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_translate_duration_seconds",
			Help:    "Time to translate the Kubernetes objects into a configuration.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_apply_duration_seconds",
			Help:    "Time for the data plane to bind ports and swap in a configuration.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		certificates: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_certificates_loaded",
			Help: "TLS Secrets parsed and held for the current configuration.",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_leader",
			Help: "1 while this replica holds the leader lease and writes status, else 0.",
		}),
		statusWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_status_writes_total",
			Help: "Status updates sent to the API server, by kind and result (ok, conflict, error).",
		}, []string{"kind", "result"}),
		acme: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_acme_events_total",
			Help: "ACME certificate events: obtained, failed (an order), renewed, renew_failed.",
		}, []string{"event"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_tls_handshake_failures_total",
			Help: "TLS handshakes that failed, by port and reason (unknown_server_name, not_tls, client_certificate, " +
				"unsupported_parameters, timeout, closed, other).",
		}, []string{"port", "reason"}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_tls_streams_total",
			Help: "TLS streams (TLSRoute) and TCP listener connections (TCPRoute) ended, by route (namespace/name; empty when none " +
				"took the connection), mode (passthrough, terminate, tcp) and outcome (done, idle, no_route, no_backend, handshake).",
		}, []string{"route", "mode", "outcome"}),
		streamBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_tls_stream_bytes_total",
			Help: "Bytes carried by TLS streams and TCP listener connections, by route and direction (up: client to backend, " +
				"down: backend to client).",
		}, []string{"route", "direction"}),
		streamTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_tls_stream_duration_seconds",
			Help:    "How long TLS streams lasted, from their ClientHello to the close of both sides.",
			Buckets: []float64{.01, .1, 1, 10, 60, 300, 1800, 3600},
		}),
		// One number rather than one series per certificate: with a
		// hundred thousand hostnames a series each would be too many, and
		// the alert only needs the first to expire (its name is in the
		// listener's status and the log).
		certExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "portico_certificates_earliest_expiry_timestamp_seconds",
			Help: "Expiry (Unix time) of the certificate that expires first among those loaded; 0 when none is loaded.",
		}),
		sinceChange: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_config_change_to_applied_seconds",
			Help:    "Time from the first change of a burst (an object, a certificate) to the configuration holding it being served.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
	}
	// Series with known label values exist from the start at 0, so that
	// increase() and alerts see the first failure rather than a series
	// appearing at 1.
	for _, e := range []string{"obtained", "failed", "renewed", "renew_failed"} {
		m.acme.WithLabelValues(e)
	}
	for _, r := range []string{"ok", "error"} {
		m.applies.WithLabelValues(r)
	}
	// The kinds and results the status writer reports (kube/statuswriter).
	for _, k := range []string{"GatewayClass", "Gateway", "ListenerSet", "HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute", "BackendTLSPolicy"} {
		for _, r := range []string{"ok", "conflict", "error"} {
			m.statusWrites.WithLabelValues(k, r)
		}
	}
	build := buildinfo.Read()
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "portico_build_info",
		Help: "Always 1; its labels say which build of Portico runs (version, commit, Go release).",
	}, []string{"version", "commit", "goversion"})
	buildInfo.WithLabelValues(build.Version, build.Commit, build.GoVersion).Set(1)
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.grpcRequests, m.latency, m.generation, m.applies, m.translate, m.apply,
		m.certificates, m.leader, m.statusWrites, m.acme, m.handshakes,
		m.streams, m.streamBytes, m.streamTime,
		m.certExpiry, m.sinceChange, buildInfo,
		m.backends.requests, m.backends.retries, m.backends.refused, m.backends.latency, m.backends.ejected,
		m.backends.opened, m.backends.open, m.backends.health, m.dataPlanes, m.security,
	)
	m.counters, m.grpcCounters = newCounterCache(m.requests), newCounterCache(m.grpcRequests)
	m.udp = newUDPMetrics(m.registry)
	return m
}

// Registry returns the registry the metrics live in, to serve or to add to.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// ObserveRequest records one finished request: the HTTPRoute that served it
// ("namespace/name", or "" when none matched), its status code and how long
// it took. The data plane calls it once per request.
func (m *Metrics) ObserveRequest(route string, code int, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	m.counters.get(route, code, outcome).Inc()
	m.latency.Observe(d.Seconds())
}

// ObserveGRPC records the gRPC status of one finished gRPC call, which
// ObserveRequest also records as a request.
func (m *Metrics) ObserveGRPC(route string, status int) {
	if m == nil {
		return
	}
	m.grpcCounters.get(route, status, "").Inc()
}

// ObserveStream records one ended TLS stream or TCP listener connection
// (see proxy.StreamObserver).
// Streams are long next to a label lookup: no cache as for requests.
func (m *Metrics) ObserveStream(route, mode, outcome string, up, down int64, d time.Duration) {
	if m == nil {
		return
	}
	m.streams.WithLabelValues(route, mode, outcome).Inc()
	if up > 0 {
		m.streamBytes.WithLabelValues(route, "up").Add(float64(up))
	}
	if down > 0 {
		m.streamBytes.WithLabelValues(route, "down").Add(float64(down))
	}
	m.streamTime.Observe(d.Seconds())
}

// ObserveHandshakeFailure records a TLS handshake that failed on port
// ("number" or "address:number") for reason (see proxy.HandshakeObserver).
// Looking the labels up costs little next to the handshake itself.
func (m *Metrics) ObserveHandshakeFailure(port, reason string) {
	if m == nil {
		return
	}
	m.handshakes.WithLabelValues(port, reason).Inc()
}

// ConfigApplied records a configuration handed to the data plane: its
// generation, the time translate and apply took, and the number of
// certificates it holds. err is the apply error, nil on success; the
// generation gauge only moves on success since it says what is served.
func (m *Metrics) ConfigApplied(generation int64, translate, apply time.Duration, certificates int, err error) {
	if m == nil {
		return
	}
	m.translate.Observe(translate.Seconds())
	m.apply.Observe(apply.Seconds())
	if err != nil {
		m.applies.WithLabelValues("error").Inc()
		return
	}
	m.applies.WithLabelValues("ok").Inc()
	m.generation.Set(float64(generation))
	m.certificates.Set(float64(certificates))
}

// ObserveChangeApplied records how long a change took to be served (see
// pipeline.ApplyReport.SinceChange); 0 records nothing.
func (m *Metrics) ObserveChangeApplied(d time.Duration) {
	if m == nil || d <= 0 {
		return
	}
	m.sinceChange.Observe(d.Seconds())
}

// SetCertificatesExpiry records when the first of the loaded certificates
// expires (the zero time when none is loaded).
func (m *Metrics) SetCertificatesExpiry(earliest time.Time) {
	if m == nil {
		return
	}
	if earliest.IsZero() {
		m.certExpiry.Set(0)
		return
	}
	m.certExpiry.Set(float64(earliest.Unix()))
}

// SetLeader records whether this replica leads.
func (m *Metrics) SetLeader(leading bool) {
	if m == nil {
		return
	}
	if leading {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

// StatusWritten records one status update of kind with its result: "ok",
// "conflict" (retried) or "error".
func (m *Metrics) StatusWritten(kind, result string) {
	if m == nil {
		return
	}
	m.statusWrites.WithLabelValues(kind, result).Inc()
}

// ObserveACME records one ACME event: "obtained", "failed", "renewed" or
// "renew_failed".
func (m *Metrics) ObserveACME(event string) {
	if m == nil {
		return
	}
	m.acme.WithLabelValues(event).Inc()
}
