//go:build linux

package bench

// Standalone at scale: a start from files to the last hostname served, and
// a reload of one changed file, at 10,000 and 100,000 hostnames. The
// configuration is generated (writeSites) in a temporary directory before
// timing. Figures are in README.md, section "Standalone at scale".

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/internal/testkit/testyaml"
	"portico.dev/portico/internal/testkit/usage"
	"portico.dev/portico/proxy"
)

// BenchmarkStandaloneStart/N is `portico serve` standalone starting on N
// hostnames: a Secret (its own certificate), a ListenerSet and an
// HTTPRoute each, in one file. An op is a new file source, run loop (with
// an ACME manager wanting nothing, as serve has) and proxy.Runtime, from
// nothing until the last hostname of the file answers 200 over TLS. It
// reports cpu-ms/op (the whole process, both cores), peakRSS-MB (the
// kernel's high-water mark, reset before the op) and heapB/hostname (the
// heap the running instance holds, after a collection, over what the
// process held before it started).
var startHeapProfile = flag.String("start-heapprofile", "", "write a heap profile of what BenchmarkStandaloneStart's running instance holds, after a collection, to this file")

func BenchmarkStandaloneStart(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { standaloneStart(b, n) })
	}
}

func standaloneStart(b *testing.B, n int) {
	httpPort, httpsPort := freePort(b), freePort(b)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer backend.Close()
	ca, err := snitest.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	config := filepath.Join(dir, "config")
	if _, err := writeSites(config, ca, n, n, int(httpPort), int(httpsPort), backend.Listener.Addr().String()); err != nil {
		b.Fatal(err)
	}
	last := fmt.Sprintf("site-%d.example.com", n-1)
	client := tlsClient(ca, last, int(httpsPort))
	var cpu time.Duration
	var peak, heapPerHost float64
	runtime.GC()
	b.ResetTimer()
	for k := 0; b.Loop(); k++ {
		b.StopTimer()
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		usage.ResetPeakRSS(b)
		cpu0 := usage.CPU()
		b.StartTimer()
		start := time.Now()
		src := filesource.New(config, zap.NewNop())
		src.MaxBytes = 1 << 30
		rt := proxy.New(proxy.Options{BindAddress: "127.0.0.1"}, zap.NewNop())
		manager, err := acme.New(acme.Options{Storage: &certmagic.FileStorage{Path: filepath.Join(dir, fmt.Sprintf("acme-%d", k))}})
		if err != nil {
			b.Fatal(err)
		}
		loop := pipeline.New(pipeline.Options{MinHoldoff: 10 * time.Millisecond, Holdoff: 100 * time.Millisecond, MaxDelay: time.Second, ACMESecrets: true},
			src, rt, manager, pipeline.Outputs{}, zap.NewNop())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- loop.Run(ctx) }()
		for {
			resp, err := client.Get("https://" + last + "/")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case err := <-done:
				b.Fatalf("the loop ended: %v", err)
			case <-time.After(10 * time.Millisecond):
			}
			if time.Since(start) > 30*time.Minute {
				b.Fatalf("%s not served after 30 min: %v", last, err)
			}
		}
		took := time.Since(start)
		b.StopTimer()
		cpu += usage.CPU() - cpu0
		peak = float64(usage.PeakRSS(b)) / (1 << 20)
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		heapPerHost = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / float64(n)
		if *startHeapProfile != "" {
			writeHeapProfile(b, *startHeapProfile)
		}
		b.Logf("%d hostnames: last served %v after start", n, took.Round(time.Millisecond))
		client.CloseIdleConnections()
		cancel()
		<-done
		rt.Close(context.Background())
		manager.Close()
		runtime.KeepAlive(src)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
	b.ReportMetric(peak, "peakRSS-MB")
	b.ReportMetric(heapPerHost, "heapB/hostname")
}

// BenchmarkStandaloneReload/N is a change of one site in a directory of N
// hostnames split into files of 1,000 sites: an op renames a new version
// of one file into place (one HTTPRoute's backend port changed), waits for
// the watch's notice and takes the file source's snapshot. It reports
// cpu-ms/op and admitted/op, the objects held to the API server's rules
// again (the changed file's documents whose bytes changed).
func BenchmarkStandaloneReload(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { standaloneReload(b, n) })
	}
}

func standaloneReload(b *testing.B, n int) {
	const perFile = 1_000
	ca, err := snitest.NewCA()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	config := filepath.Join(dir, "config")
	files, err := writeSites(config, ca, n, perFile, 8080, 8443, "127.0.0.1:9000")
	if err != nil {
		b.Fatal(err)
	}
	src := filesource.New(config, zap.NewNop())
	src.MaxBytes = 1 << 30
	changed := make(chan struct{}, 1)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- src.Run(ctx, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		}, func() { close(ready) })
	}()
	defer func() { cancel(); <-done }()
	<-ready
	if _, err := src.Snapshot(); err != nil {
		b.Fatal(err)
	}
	var cpu time.Duration
	admitted := src.Admissions()
	runtime.GC()
	b.ResetTimer()
	for k := 0; b.Loop(); k++ {
		b.StopTimer()
		// Site k of file k: its route's backend port goes from 80 to 81
		// and back on every visit.
		f := files[k%len(files)]
		site := k % perFile
		f.sites[site] = strings.Replace(f.sites[site], "port: 80}", "port: 81}", 1)
		if k/len(files)%2 == 1 {
			f.sites[site] = strings.Replace(f.sites[site], "port: 81}", "port: 80}", 1)
		}
		tmp := filepath.Join(dir, "next.tmp")
		if err := os.WriteFile(tmp, []byte(strings.Join(f.sites, "---\n")), 0o644); err != nil {
			b.Fatal(err)
		}
		select {
		case <-changed:
		default:
		}
		cpu0 := usage.CPU()
		b.StartTimer()
		if err := os.Rename(tmp, f.path); err != nil {
			b.Fatal(err)
		}
		<-changed
		if _, err := src.Snapshot(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cpu += usage.CPU() - cpu0
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
	b.ReportMetric(float64(src.Admissions()-admitted)/float64(b.N), "admitted/op")
}

// siteFile is one file of writeSites: its path and its documents.
type siteFile struct {
	path  string
	sites []string
}

// writeSites writes into dir the Gateway (HTTP on httpPort) and the
// backend Service with its EndpointSlice to backend (host:port) in
// gateway.yaml, and n sites with a certificate each from ca, HTTPS on
// httpsPort, perFile to a file (sites-0000.yaml, ...).
func writeSites(dir string, ca *snitest.CA, n, perFile, httpPort, httpsPort int, backend string) ([]*siteFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("site-%d.example.com", i)
	}
	pairs, err := ca.IssueMany(hosts, 1)
	if err != nil {
		return nil, fmt.Errorf("issue certificates: %w", err)
	}
	gateway := testyaml.Gateway + fmt.Sprintf("  - {name: http, port: %d, protocol: HTTP}\n---\n%s", httpPort, testyaml.Backend(backend, 80))
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(gateway), 0o644); err != nil {
		return nil, err
	}
	var files []*siteFile
	for i, host := range hosts {
		if i%perFile == 0 {
			files = append(files, &siteFile{path: filepath.Join(dir, fmt.Sprintf("sites-%04d.yaml", i/perFile))})
		}
		f := files[len(files)-1]
		f.sites = append(f.sites, siteYAML(fmt.Sprintf("site-%d", i), host, httpsPort, pairs[i]))
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, []byte(strings.Join(f.sites, "---\n")), 0o644); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// tlsClient asks host on 127.0.0.1:port over TLS, trusting ca, a new
// connection each time.
func tlsClient(ca *snitest.CA, host string, port int) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: ca.Pool, ServerName: host},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", port))
		},
	}}
}

// writeHeapProfile writes the heap profile to path.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}
