package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// loadReport formats the kept-alive runs of every result as a markdown
// table, and when peers were measured in more than one round, the median
// of each figure over the rounds.
func loadReport(o options, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nKept-alive runs: %d connections (HTTP/2: %d connections, %d streams each); paced: %d requests/s over %d TLS connections, latency from when each request was due\n\n",
		o.Conns, max(o.Conns/4, 1), o.Streams, o.Rate, o.Conns)
	b.WriteString("| peer | round | plain HTTP/1.1 req/s | CPU s / 100k | HTTPS/1.1 req/s | CPU s / 100k | HTTP/2 req/s | CPU s / 100k | paced p50 / p99 / p99.9 | CPU s / 100k |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Ready == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.2f | %s | %.2f | %s | %.2f | %s | %.2f |\n", r.Peer, r.Round,
			rateCell(r.Plain), r.Plain.cpuPer100k(), rateCell(r.Requests), r.Requests.cpuPer100k(),
			rateCell(r.H2), r.H2.cpuPer100k(), latencyCell(r.Paced), r.Paced.cpuPer100k())
	}
	if max(o.Rounds, 1) == 1 {
		return b.String()
	}
	b.WriteString("\nMedians over the rounds:\n\n")
	b.WriteString("| peer | plain HTTP/1.1 req/s | CPU s / 100k | HTTPS/1.1 req/s | CPU s / 100k | HTTP/2 req/s | CPU s / 100k | paced p50 / p99 / p99.9 | CPU s / 100k |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range o.Peers {
		var rs []result
		for _, r := range results {
			if r.Peer == name && r.Ready != 0 {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		med := func(f func(result) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		dur := func(f func(result) time.Duration) time.Duration {
			return time.Duration(med(func(r result) float64 { return float64(f(r)) })).Round(10 * time.Microsecond)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.0f | %.2f | %.0f | %.2f | %v / %v / %v | %.2f |\n", name,
			med(func(r result) float64 { return r.Plain.rate() }), med(func(r result) float64 { return r.Plain.cpuPer100k() }),
			med(func(r result) float64 { return r.Requests.rate() }), med(func(r result) float64 { return r.Requests.cpuPer100k() }),
			med(func(r result) float64 { return r.H2.rate() }), med(func(r result) float64 { return r.H2.cpuPer100k() }),
			dur(func(r result) time.Duration { return r.Paced.P50 }), dur(func(r result) time.Duration { return r.Paced.P99 }),
			dur(func(r result) time.Duration { return r.Paced.P999 }), med(func(r result) float64 { return r.Paced.cpuPer100k() }))
	}
	return b.String()
}

func rateCell(l loadResult) string {
	s := fmt.Sprintf("%.0f", l.rate())
	if l.Failed > 0 {
		s += fmt.Sprintf(" (%d failed: %v)", l.Failed, l.FirstErr)
	}
	return s
}

func latencyCell(l loadResult) string {
	s := fmt.Sprintf("%v / %v / %v", l.P50.Round(10*time.Microsecond), l.P99.Round(10*time.Microsecond), l.P999.Round(10*time.Microsecond))
	if l.Failed > 0 {
		s += fmt.Sprintf(" (%d failed: %v)", l.Failed, l.FirstErr)
	}
	return s
}
