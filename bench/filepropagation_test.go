package bench

// New hostname to first 200, standalone from files: a configuration
// directory read by the real file source and its watch, the run loop and
// proxy.Runtime on loopback ports; each op renames a new file into the
// directory, as an operator (or bench/sidebyside) adds a site. Figures are
// in README.md, section "Propagation from files".

import (
	"cmp"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/internal/testkit/testyaml"
	"portico.dev/portico/proxy"
)

// addsCPUProfile profiles the timed adds only: -cpuprofile would be
// mostly the minutes of the first load at 100,000.
var addsCPUProfile = flag.String("adds-cpuprofile", "", "write a CPU profile of BenchmarkFilesNewHostnameFirst200's timed adds to this file")

// timedSource is the file source, noting when its watch said something
// changed and when each snapshot started and ended.
type timedSource struct {
	*filesource.Source
	mu        sync.Mutex
	marks     []time.Time
	snapshots [][2]time.Time
}

func (t *timedSource) Run(ctx context.Context, changed, ready func()) error {
	return t.Source.Run(ctx, func() {
		t.mu.Lock()
		t.marks = append(t.marks, time.Now())
		t.mu.Unlock()
		changed()
	}, ready)
}

func (t *timedSource) Snapshot() (*snapshot.Resources, error) {
	start := time.Now()
	res, err := t.Source.Snapshot()
	t.mu.Lock()
	t.snapshots = append(t.snapshots, [2]time.Time{start, time.Now()})
	t.mu.Unlock()
	return res, err
}

// take returns what was noted since the last take, and forgets it.
func (t *timedSource) take() (marks []time.Time, snapshots [][2]time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	marks, snapshots = t.marks, t.snapshots
	t.marks, t.snapshots = nil, nil
	return marks, snapshots
}

// BenchmarkFilesNewHostnameFirst200 is BenchmarkNewHostnameFirst200 from
// files: the directory holds the Gateway, one backend Service and, per
// hostname, a Secret with its own certificate, a ListenerSet and an
// HTTPRoute, in one file (the shape of bench/sidebyside). Each op writes a
// new site's file aside and renames it into the directory, then polls the
// new hostname as BenchmarkNewHostnameFirst200 does, until the first 200.
// Besides p50-ms, p99-ms and max-ms it reports the medians of the stages:
// rename to the watch's notice (watch-ms), to the snapshot's start
// (holdoff-ms), the snapshot (snapshot-ms), its translation and apply
// (translate-apply-ms) and from the loop's log of the apply to the first
// 200 (serve-ms; negative when the 200 came first).
func BenchmarkFilesNewHostnameFirst200(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { filesNewHostnameFirst200(b, n) })
	}
}

// addStages is where one add's time went.
type addStages struct {
	took                                            time.Duration
	watch, holdoff, snapshot, translateApply, serve time.Duration
	rebuilds, marks, snapshots, polls               int
	// incremental: the last rebuild was a delta.
	incremental bool
}

func filesNewHostnameFirst200(b *testing.B, n int) {
	httpPort, httpsPort := freePort(b), freePort(b)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer backend.Close()
	ca, err := snitest.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	config := filepath.Join(dir, "config")
	if err := writeSitesDir(config, ca, n, int(httpPort), int(httpsPort), backend.Listener.Addr().String()); err != nil {
		b.Fatal(err)
	}
	src := &timedSource{Source: filesource.New(config, zap.NewNop())}
	src.MaxBytes = 1 << 30
	rt := proxy.New(proxy.Options{BindAddress: "127.0.0.1"}, zap.NewNop())
	defer rt.Close(context.Background())
	// The loop logs each rebuild's snapshot, translation and apply, and
	// whether it was a delta, once the configuration is on the data plane.
	core, logs := observer.New(zap.InfoLevel)
	// As `portico serve` runs standalone: with an ACME manager (wanting
	// nothing here) whose certificates go into the snapshots.
	manager, err := acme.New(acme.Options{Storage: &certmagic.FileStorage{Path: filepath.Join(dir, "acme")}})
	if err != nil {
		b.Fatal(err)
	}
	defer manager.Close()
	loop := pipeline.New(pipeline.Options{MinHoldoff: 10 * time.Millisecond, Holdoff: 100 * time.Millisecond, MaxDelay: time.Second, ACMESecrets: true},
		src, rt, manager, pipeline.Outputs{}, zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	loadStart := time.Now()
	go func() { done <- loop.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for loop.Ready() != nil {
		select {
		case err := <-done:
			b.Fatalf("the loop ended: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	b.Logf("%d hostnames from files served %v after start", n, time.Since(loadStart).Round(time.Millisecond))
	src.take()
	logs.TakeAll()

	if *addsCPUProfile != "" {
		f, err := os.Create(*addsCPUProfile)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	var stages []addStages
	startTiming(b)
	for k := 0; b.Loop(); k++ {
		b.StopTimer()
		host := fmt.Sprintf("first-%d.example.com", k)
		pair, err := ca.Issue(snitest.ECDSA, int64(10_000_000+k), host)
		if err != nil {
			b.Fatal(err)
		}
		tmp := filepath.Join(dir, "added.tmp")
		if err := os.WriteFile(tmp, []byte(siteYAML(fmt.Sprintf("first-%d", k), host, int(httpsPort), pair)), 0o644); err != nil {
			b.Fatal(err)
		}
		client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: ca.Pool, ServerName: host},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", httpsPort))
			},
		}}
		b.StartTimer()
		start := time.Now()
		if err := os.Rename(tmp, filepath.Join(config, fmt.Sprintf("site-%d.yaml", n+k))); err != nil {
			b.Fatal(err)
		}
		polls := 0
		for {
			polls++
			resp, err := client.Get("https://" + host + "/")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Since(start) > 60*time.Second {
				b.Fatalf("%s not served after 60 s: %v", host, err)
			}
			time.Sleep(time.Millisecond)
		}
		end := time.Now()
		b.StopTimer()
		// The first 200 can come before the loop logged its rebuild.
		for deadline := time.Now().Add(10 * time.Second); logs.FilterMessage("config applied").Len() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		marks, snapshots := src.take()
		st := stagesOf(start, end, marks, snapshots, logs.TakeAll())
		st.polls = polls
		stages = append(stages, st)
		client.CloseIdleConnections()
		b.StartTimer()
	}
	b.StopTimer()
	reportStages(b, stages)
}

// stagesOf splits one add, from start (the rename) to end (the first 200),
// at the first notice of the watch after start, the start of the last
// snapshot and the last rebuild the loop logged: its snapshot, translation
// and apply, and when it logged it, once applied.
func stagesOf(start, end time.Time, marks []time.Time, snapshots [][2]time.Time, logged []observer.LoggedEntry) addStages {
	var rebuilds []observer.LoggedEntry
	for _, e := range logged {
		if e.Message == "config applied" {
			rebuilds = append(rebuilds, e)
		}
	}
	st := addStages{took: end.Sub(start), rebuilds: len(rebuilds), marks: len(marks), snapshots: len(snapshots)}
	if len(marks) == 0 || len(snapshots) == 0 || len(rebuilds) == 0 {
		return st
	}
	last := rebuilds[len(rebuilds)-1]
	fields := last.ContextMap()
	st.incremental, _ = fields["incremental"].(bool)
	st.watch = marks[0].Sub(start)
	st.holdoff = snapshots[len(snapshots)-1][0].Sub(marks[0])
	st.snapshot, _ = fields["snapshot"].(time.Duration)
	translated, _ := fields["translate"].(time.Duration)
	applied, _ := fields["apply"].(time.Duration)
	st.translateApply = translated + applied
	st.serve = end.Sub(last.Time)
	return st
}

// reportStages reports the percentiles of the adds, the medians of their
// stages, and logs the three slowest.
func reportStages(b *testing.B, stages []addStages) {
	median := func(f func(addStages) time.Duration) float64 {
		d := make([]time.Duration, len(stages))
		for i, s := range stages {
			d[i] = f(s)
		}
		slices.Sort(d)
		return float64(d[len(d)/2]) / float64(time.Millisecond)
	}
	b.ReportMetric(median(func(s addStages) time.Duration { return s.watch }), "watch-ms")
	b.ReportMetric(median(func(s addStages) time.Duration { return s.holdoff }), "holdoff-ms")
	b.ReportMetric(median(func(s addStages) time.Duration { return s.snapshot }), "snapshot-ms")
	b.ReportMetric(median(func(s addStages) time.Duration { return s.translateApply }), "translate-apply-ms")
	b.ReportMetric(median(func(s addStages) time.Duration { return s.serve }), "serve-ms")
	slow := slices.Clone(stages)
	slices.SortFunc(slow, func(x, y addStages) int { return cmp.Compare(y.took, x.took) })
	for _, s := range slow[:min(3, len(slow))] {
		b.Logf("slow add: %v: watch %v, holdoff %v, snapshot %v, translate+apply %v (delta: %v), served %v after the log (%d notices, %d snapshots, %d rebuilds, %d polls)",
			s.took.Round(10*time.Microsecond), s.watch.Round(10*time.Microsecond), s.holdoff.Round(10*time.Microsecond),
			s.snapshot.Round(10*time.Microsecond), s.translateApply.Round(10*time.Microsecond), s.incremental, s.serve.Round(10*time.Microsecond), s.marks, s.snapshots, s.rebuilds, s.polls)
	}
	took := make([]time.Duration, len(stages))
	for i, s := range stages {
		took[i] = s.took
	}
	reportPercentiles(b, took)
}

// writeSitesDir writes into dir the Gateway (HTTP on httpPort), the
// backend Service with its EndpointSlice to backend (host:port), and n
// sites with a certificate each from ca, HTTPS on httpsPort, in one file.
func writeSitesDir(dir string, ca *snitest.CA, n, httpPort, httpsPort int, backend string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("site-%d.example.com", i)
	}
	pairs, err := ca.IssueMany(hosts, 1)
	if err != nil {
		return fmt.Errorf("issue certificates: %w", err)
	}
	var s strings.Builder
	s.WriteString(testyaml.Gateway)
	fmt.Fprintf(&s, "  - {name: http, port: %d, protocol: HTTP}\n---\n%s", httpPort, testyaml.Backend(backend, 80))
	for i, host := range hosts {
		s.WriteString("---\n")
		s.WriteString(siteYAML(fmt.Sprintf("site-%d", i), host, httpsPort, pairs[i]))
	}
	return os.WriteFile(filepath.Join(dir, "sites.yaml"), []byte(s.String()), 0o644)
}

// siteYAML is testyaml.Site with a key pair of snitest.
func siteYAML(name, host string, port int, pair snitest.KeyPair) string {
	return testyaml.Site(name, host, port, string(pair.CertPEM), string(pair.KeyPEM))
}
