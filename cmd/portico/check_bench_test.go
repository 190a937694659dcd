//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/internal/testkit/testyaml"
	procusage "portico.dev/portico/internal/testkit/usage"
)

// BenchmarkCheck5000 is `portico check --config DIR` on 5,000 ListenerSets:
// the Gateway, its backend and 5,000 sites (a Secret with its own
// certificate, a ListenerSet with one HTTPS listener and an HTTPRoute
// each) in one file, generated before timing. An op loads, admits and
// translates them and writes the statuses (to nowhere). It reports
// cpu-ms/op (the whole process, both cores) and peakRSS-MB. Figures are in
// bench/README.md, section "Standalone at scale".
func BenchmarkCheck5000(b *testing.B) {
	const n = 5_000
	ca, err := snitest.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("site-%d.example.com", i)
	}
	pairs, err := ca.IssueMany(hosts, 1)
	if err != nil {
		b.Fatal(err)
	}
	var s strings.Builder
	s.WriteString(testyaml.Gateway + "  - {name: http, port: 8080, protocol: HTTP}\n---\n" + testyaml.Backend("127.0.0.1:9000", 80))
	for i, host := range hosts {
		s.WriteString("---\n")
		s.WriteString(testyaml.Site(fmt.Sprintf("site-%d", i), host, 8443, string(pairs[i].CertPEM), string(pairs[i].KeyPEM)))
	}
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sites.yaml"), []byte(s.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	var peak float64
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		procusage.ResetPeakRSS(b)
		cpu0 := procusage.CPU()
		b.StartTimer()
		if err := check([]string{"--config", dir}, io.Discard, io.Discard); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += procusage.CPU() - cpu0
		peak = float64(procusage.PeakRSS(b)) / (1 << 20)
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
	b.ReportMetric(peak, "peakRSS-MB")
}
