package admin

import "github.com/prometheus/client_golang/prometheus"

func newSecurityCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "portico_security_decisions_total",
		Help: "Decisions of SecurityPolicies, by mechanism (address, api_key, basic, policy) and result " +
			"(allowed, missing, denied, limited, overloaded, malformed, invalid).",
	}, []string{"mechanism", "result"})
}

// ObserveSecurity records one decision of a SecurityPolicy (see
// proxy.SecurityObserver); both labels are from fixed sets.
func (m *Metrics) ObserveSecurity(mechanism, result string) {
	if m != nil {
		m.security.WithLabelValues(mechanism, result).Inc()
	}
}
