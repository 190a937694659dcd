package admin

import (
	"strings"
	"testing"

	"portico.dev/portico/proxy"
)

// The data plane finds the metric through this interface.
var _ proxy.SecurityObserver = (*Metrics)(nil)

// TestSecurityMetrics: each SecurityPolicy decision counts in
// portico_security_decisions_total by mechanism and result.
func TestSecurityMetrics(t *testing.T) {
	m := NewMetrics()
	base := startServer(t, &Server{Metrics: m})
	m.ObserveSecurity("basic", "allowed")
	m.ObserveSecurity("basic", "allowed")
	m.ObserveSecurity("jwt", "denied")
	_, body := scrape(t, base, "/metrics")
	for _, want := range []string{
		`portico_security_decisions_total{mechanism="basic",result="allowed"} 2`,
		`portico_security_decisions_total{mechanism="jwt",result="denied"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var none *Metrics
	none.ObserveSecurity("basic", "allowed") // off: no panic
}
