package admin

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// dataPlaneLag exports how far behind the per-Gateway data planes are:
// for each Gateway with a data plane of its own, how long the
// configuration its data plane has not acknowledged has been waiting, and
// the longest of those. Sampled when scraped from what the controller
// knows (kube.Cluster.DataPlaneLag).
type dataPlaneLag struct {
	perGateway, oldest *prometheus.Desc
	lag                atomic.Pointer[func() map[string]time.Duration]
}

func newDataPlaneLag() *dataPlaneLag {
	return &dataPlaneLag{
		perGateway: prometheus.NewDesc("portico_dataplane_unacknowledged_seconds",
			"Per-Gateway data planes: how long the configuration published for the Gateway (namespace/name) has waited for its data plane's acknowledgement; 0 once acknowledged.",
			[]string{"gateway"}, nil),
		// Exported in every mode (0 without data planes), so that an alert
		// on it needs no absent().
		oldest: prometheus.NewDesc("portico_dataplanes_oldest_unacknowledged_seconds",
			"The longest any per-Gateway data plane has left its latest configuration unacknowledged; 0 when every one has acknowledged, or there are none.",
			nil, nil),
	}
}

// SetDataPlaneLag sets what says, by Gateway (namespace/name), how long
// its data plane's latest configuration has waited unacknowledged (0:
// acknowledged); called at every scrape.
func (m *Metrics) SetDataPlaneLag(lag func() map[string]time.Duration) {
	if m != nil {
		m.dataPlanes.lag.Store(&lag)
	}
}

func (d *dataPlaneLag) Describe(ch chan<- *prometheus.Desc) {
	ch <- d.perGateway
	ch <- d.oldest
}

func (d *dataPlaneLag) Collect(ch chan<- prometheus.Metric) {
	var oldest time.Duration
	if lag := d.lag.Load(); lag != nil {
		for gw, l := range (*lag)() {
			oldest = max(oldest, l)
			ch <- prometheus.MustNewConstMetric(d.perGateway, prometheus.GaugeValue, l.Seconds(), gw)
		}
	}
	ch <- prometheus.MustNewConstMetric(d.oldest, prometheus.GaugeValue, oldest.Seconds())
}
