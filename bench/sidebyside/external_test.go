package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestExternalGenerators runs the external mode on a few hostnames
// against every peer installed, wrk and h2load too (hack/bench-peers.sh
// installs them): every generator run must have answers, none failed,
// and a CPU figure.
func TestExternalGenerators(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every proxy")
	}
	if err := generatorsUsable(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	bin, err := buildPortico(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range peers(bin) {
		if p.Binary != "" && p.Name != "caddy" {
			names = append(names, p.Name)
		}
	}
	o := options{N: 30, Peers: names, Duration: time.Second, Dir: dir, ReadyTimeout: time.Minute, Portico: bin, Rounds: 1}
	results, err := runExternal(t.Context(), o, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("%s: %v", r.Peer, r.Err)
			continue
		}
		for name, l := range map[string]extLoad{"wrk plain": r.Plain, "wrk HTTPS": r.HTTPS, "h2load": r.H2} {
			if l.OK == 0 || l.Failed > 0 || l.P99 <= 0 || l.CPU <= 0 {
				t.Errorf("%s, %s: %d answered, %d failed, p99 %v, CPU %v", r.Peer, name, l.OK, l.Failed, l.P99, l.CPU)
			}
		}
	}
	t.Logf("\n%s", externalReport(o, results))
}

// TestGeneratorReports reads the reports of wrk and h2load as they print
// them.
func TestGeneratorReports(t *testing.T) {
	wrk := `Running 5s test @ http://127.0.0.1:8080/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.29ms    7.03ms 108.45ms   91.33%
    Req/Sec     9.66k     1.61k   13.22k    71.00%
  Latency Distribution
     50%    2.35ms
     75%    4.05ms
     90%    8.87ms
     99%   36.04ms
  96190 requests in 5.00s, 14.13MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 3
Requests/sec:  19228.87
Transfer/sec:      2.82MB
`
	l := parseWrk(wrk)
	if l.Err != nil || l.OK != 96187 || l.Failed != 6 || l.Elapsed != 5*time.Second || l.P99 != 36040*time.Microsecond {
		t.Errorf("wrk: %+v", l)
	}
	h2 := `finished in 5.00s, 13558.20 req/s, 1.02MB/s
requests: 67791 total, 67855 started, 67791 done, 67790 succeeded, 1 failed, 0 errored, 0 timeout
status codes: 67789 2xx, 0 3xx, 1 4xx, 0 5xx
`
	l = parseH2load(h2)
	if l.Err != nil || l.OK != 67789 || l.Failed != 2 || l.Elapsed != 5*time.Second {
		t.Errorf("h2load: %+v", l)
	}
	log := filepath.Join(t.TempDir(), "h2load.log")
	var b []byte
	for i := 1; i <= 200; i++ {
		b = append(b, []byte("1700000000000000\t200\t"+strconv.Itoa(i*10)+"\n")...)
	}
	if err := os.WriteFile(log, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if p99, err := h2loadP99(log); err != nil || p99 != 1990*time.Microsecond {
		t.Errorf("h2load p99: %v %v, want 1.99ms", p99, err)
	}
}
