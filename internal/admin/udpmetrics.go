package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// udpMetrics are the series of UDP listeners (UDPRoute), by route
// ("namespace/name", a bounded set: a client's addresses are never a
// label).
type udpMetrics struct {
	sessions  *prometheus.CounterVec
	datagrams *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	drops     *prometheus.CounterVec
	duration  prometheus.Histogram
}

func newUDPMetrics(reg *prometheus.Registry) *udpMetrics {
	u := &udpMetrics{
		sessions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_udp_sessions_total",
			Help: "UDP sessions (UDPRoute) ended, by route and outcome (idle, evicted, refused, drained, closed).",
		}, []string{"route", "outcome"}),
		datagrams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_udp_datagrams_total",
			Help: "Datagrams carried by ended UDP sessions, by route and direction (up: client to backend, down: backend to client).",
		}, []string{"route", "direction"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_udp_bytes_total",
			Help: "Payload bytes carried by ended UDP sessions, by route and direction.",
		}, []string{"route", "direction"}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "portico_udp_dropped_total",
			Help: "Client datagrams dropped without a session, by route (empty when the listener has none) and reason " +
				"(no_route, no_backend, full).",
		}, []string{"route", "reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "portico_udp_session_duration_seconds",
			Help:    "How long UDP sessions lasted, from their first datagram to their end (the idle timeout included).",
			Buckets: []float64{.01, .1, 1, 10, 60, 300, 1800, 3600},
		}),
	}
	reg.MustRegister(u.sessions, u.datagrams, u.bytes, u.drops, u.duration)
	return u
}

// ObserveUDPSession records one ended UDP session (see proxy.UDPObserver).
func (m *Metrics) ObserveUDPSession(route, outcome string, datagramsUp, datagramsDown, bytesUp, bytesDown int64, d time.Duration) {
	if m == nil {
		return
	}
	u := m.udp
	u.sessions.WithLabelValues(route, outcome).Inc()
	add := func(v *prometheus.CounterVec, direction string, n int64) {
		if n > 0 {
			v.WithLabelValues(route, direction).Add(float64(n))
		}
	}
	add(u.datagrams, "up", datagramsUp)
	add(u.datagrams, "down", datagramsDown)
	add(u.bytes, "up", bytesUp)
	add(u.bytes, "down", bytesDown)
	u.duration.Observe(d.Seconds())
}

// ObserveUDPDrop records a client datagram dropped without a session.
func (m *Metrics) ObserveUDPDrop(route, reason string) {
	if m == nil {
		return
	}
	m.udp.drops.WithLabelValues(route, reason).Inc()
}
