// Command sidebyside runs Portico and other proxies (nginx, haproxy, caddy)
// one after another on loopback, each serving the same N hostnames with a
// certificate of their own and one backend, the way a Knative cluster
// fronts its Services, and measures each one alike:
//
//   - ready: from starting the process to the last hostname served with its
//     own certificate;
//   - memory: proportional set size of the proxy's processes after the load
//     runs;
//   - handshakes: new TLS connections per second, each one full handshake
//     (no resumption) with a random hostname's SNI and one GET;
//   - requests: GETs per second over kept-alive TLS connections, and the
//     CPU time the proxy used for 100,000 of them (user and system, all its
//     processes and threads);
//   - new hostname: from adding one more hostname the way the proxy takes it
//     (a new file for Portico, a reload for the others) until it is served
//     with its certificate, and the requests to the other hostnames that
//     failed meanwhile.
//
// With -perf-stat it also counts each proxy's system calls and context
// switches per request of the kept-alive runs (kernel.go). With -grpc it
// measures gRPC unary calls per second instead (grpc.go).
// -mode picks other comparisons, each in a file of its own: external
// (external.go), passthrough, udp, and policies (a rate limit and
// consistent hashing, policies.go).
//
// The load generator runs in this process, on the same cores as the proxy
// under test; it checks every answer (status 200, the hostname's own
// certificate). Results go to stdout as a markdown table. bench/README.md
// has the figures and the command that produced them.
package main

import (
	"context"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"portico.dev/portico/internal/testkit/snitest"
)

type options struct {
	N        int
	Peers    []string
	Portico  string
	Duration time.Duration
	Conns    int
	Adds     int
	Dir      string
	// Streams is how many requests each HTTP/2 connection carries at
	// once; Rate the request rate of the paced run (per second).
	Streams, Rate int
	// Rounds is how many times every peer is measured, in turn.
	Rounds int
	// Baseline, when set, names other Portico binaries measured as peers
	// of their own (see withBaselines); PorticoArgs are extra serve flags
	// for all of them.
	Baseline    string
	PorticoArgs []string
	// ReadyTimeout bounds the wait for a proxy to serve every hostname.
	ReadyTimeout time.Duration
	// PerfStat counts system calls and context switches per request of
	// the kept-alive runs (kernel.go).
	PerfStat bool
	// AddRate paces the requests to existing hostnames made while
	// hostnames are added (per second, all together).
	AddRate int
}

func main() { os.Exit(run()) }

// run is long because it is mostly the flag list, kept in one place so
// that -h reads in the order the options are documented.
func run() int {
	var o options
	flag.IntVar(&o.N, "n", 1000, "hostnames, each with its own certificate")
	peersFlag := flag.String("peers", "portico,nginx,haproxy,caddy", "proxies to run, comma-separated")
	flag.StringVar(&o.Portico, "portico", "", "Portico binary (default: built from this tree)")
	flag.DurationVar(&o.Duration, "duration", 10*time.Second, "length of each load run")
	flag.IntVar(&o.Conns, "conns", 16, "concurrent connections of the load runs")
	flag.IntVar(&o.Adds, "adds", 5, "hostnames added one at a time, each timed until served")
	flag.IntVar(&o.AddRate, "add-rate", 100, "requests per second to existing hostnames while hostnames are added, to catch a reload that drops them (new connections, paced: unpaced, they take the cores the proxy needs to take the change)")
	keep := flag.Bool("keep", false, "keep the working directory (configurations and logs)")
	flag.DurationVar(&o.ReadyTimeout, "ready-timeout", 10*time.Minute, "how long a proxy may take to serve every hostname")
	flag.IntVar(&o.Streams, "h2-streams", 16, "requests in flight on each HTTP/2 connection (the HTTP/2 run opens conns/4 connections)")
	flag.IntVar(&o.Rate, "rate", 1000, "requests per second of the paced run, whose latency percentiles are reported (keep it below every peer's saturation)")
	flag.IntVar(&o.Rounds, "rounds", 1, "measure every peer this many times, in turn; the report adds medians")
	flag.StringVar(&o.Baseline, "baseline", "", "other Portico binaries, comma-separated, each PATH (the peer portico-base) or NAME=PATH (the peer NAME); add them to -peers")
	porticoArgs := flag.String("portico-args", "", "extra flags for portico serve, space-separated (e.g. --gc-percent=200)")
	grpcRun := flag.Bool("grpc", false, "measure gRPC unary calls through the peers that route gRPC (portico, nginx) instead")
	flag.BoolVar(&o.PerfStat, "perf-stat", false, "count the proxies' system calls and context switches per request in the kept-alive runs (perf stat; root)")
	mode := flag.String("mode", "http", "what to compare: http (TLS termination and HTTP routing), passthrough (TLS passthrough by SNI; peers portico, nginx, haproxy) external (TLS termination and HTTP routing driven by wrk and h2load; peers portico, nginx, haproxy) udp (UDP forwarding in sessions per client address; peers portico, nginx), tcp (TCP forwarding: short connections, throughput and CPU per GB; peers portico, nginx, haproxy) or policies (a rate limit per client address and consistent hashing on a header, driven by wrk; peers portico, nginx, and haproxy for hashing only)")
	flag.Parse()
	o.Peers = strings.Split(*peersFlag, ",")
	o.PorticoArgs = strings.Fields(*porticoArgs)
	if o.PerfStat {
		if err := perfUsable(); err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			return 1
		}
	}
	if (*mode == "passthrough" || *mode == "external" || *mode == "tcp") && !flagSet("peers") {
		o.Peers = []string{"portico", "nginx", "haproxy"}
	}
	if (*mode == "udp" || *mode == "policies") && !flagSet("peers") {
		o.Peers = []string{"portico", "nginx"}
	}

	// Interrupted, the proxy being measured is stopped rather than left
	// running.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	dir, err := os.MkdirTemp("", "portico-sidebyside-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidebyside:", err)
		return 1
	}
	o.Dir = dir
	if *keep {
		fmt.Fprintf(os.Stderr, "working directory: %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if *grpcRun {
		return runGRPCReport(ctx, o)
	}
	if *mode == "external" {
		results, err := runExternal(ctx, o, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			return 1
		}
		fmt.Print(externalReport(o, results))
		for _, r := range results {
			if strings.HasPrefix(r.Peer, "portico") && r.Err != nil {
				return 1
			}
		}
		return 0
	}
	if *mode == "policies" {
		results, err := runPolicies(ctx, o, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			return 1
		}
		fmt.Print(policiesReport(o, results))
		for _, r := range results {
			if r.Peer == "portico" && r.Err != nil {
				return 1
			}
		}
		return 0
	}
	if *mode == "tcp" {
		results, err := runTCP(ctx, o, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			return 1
		}
		fmt.Print(tcpReport(o, results))
		for _, r := range results {
			if r.Peer == "portico" && r.Err != nil {
				return 1
			}
		}
		return 0
	}
	if *mode == "udp" {
		results, err := runUDP(ctx, o, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			return 1
		}
		fmt.Print(udpReport(o, results))
		for _, r := range results {
			if r.Peer == "portico" && r.Err != nil {
				return 1
			}
		}
		return 0
	}
	if *mode == "passthrough" {
		results, err := runPassthrough(ctx, o, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidebyside:", err)
			return 1
		}
		fmt.Print(passthroughReport(o, results))
		for _, r := range results {
			if r.Peer == "portico" && r.Err != nil {
				return 1
			}
		}
		return 0
	}
	results, err := runAll(ctx, o, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidebyside:", err)
		return 1
	}
	fmt.Print(report(o, results))
	fmt.Print(loadReport(o, results))
	if o.PerfStat {
		fmt.Print(kernelReport(results))
	}
	for _, r := range results {
		if r.Peer == "portico" && r.Err != nil {
			return 1
		}
	}
	return 0
}

func runGRPCReport(ctx context.Context, o options) int {
	results, err := runGRPC(ctx, o, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidebyside:", err)
		return 1
	}
	fmt.Print(grpcReport(o, results))
	for _, r := range results {
		if r.Peer == "portico" && r.Err != nil {
			return 1
		}
	}
	return 0
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// result is what was measured of one peer.
type result struct {
	Peer, Version string
	Err           error // the peer could not be measured
	Ready         time.Duration
	Memory        int64
	Round         int
	Handshakes    loadResult
	// Requests is kept-alive HTTP/1.1 over TLS, Plain the same without
	// TLS, H2 HTTP/2 over TLS with several streams per connection, Paced
	// kept-alive HTTP/1.1 over TLS at a fixed rate.
	Requests, Plain, H2, Paced loadResult
	Adds                       []time.Duration
	AddFailures                int // requests to other hostnames that failed during the adds
	AddRequests                int
}

// runAll prepares the sites and the backend and measures each peer in turn.
func runAll(ctx context.Context, o options, progress io.Writer) ([]result, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	start := time.Now()
	sites, added, err := makeSites(o.Dir, o.N, o.Adds)
	if err != nil {
		return nil, err
	}
	logf("%d certificates issued in %v", o.N+o.Adds, time.Since(start).Round(time.Millisecond))

	backend, err := startBackend()
	if err != nil {
		return nil, err
	}
	defer backend.Close()

	all := withBaselines(peers(o.Portico), o.Baseline)
	var results []result
	for round := range max(o.Rounds, 1) {
		for _, name := range o.Peers {
			r, err := runPeer(ctx, o, all, name, sites, added, backend.Addr().String(), logf)
			if err != nil {
				return nil, err
			}
			r.Round = round + 1
			results = append(results, r)
		}
	}
	return results, nil
}

// withBaselines adds to all the Portico binaries of the -baseline flag:
// PATH is the peer portico-base, NAME=PATH the peer NAME.
func withBaselines(all []peer, flagValue string) []peer {
	for _, b := range strings.Split(flagValue, ",") {
		if b == "" {
			continue
		}
		name, path, ok := strings.Cut(b, "=")
		if !ok {
			name, path = "portico-base", b
		}
		base := porticoPeer(path)
		base.Name, base.Version = name, func() string { return path }
		all = append(all, base)
	}
	return all
}

// runPeer measures the peer called name once.
func runPeer(ctx context.Context, o options, all []peer, name string, sites, added []site, backend string, logf func(string, ...any)) (result, error) {
	{
		if ctx.Err() != nil {
			return result{}, ctx.Err()
		}
		i := slices.IndexFunc(all, func(p peer) bool { return p.Name == name })
		if i < 0 {
			return result{}, fmt.Errorf("unknown peer %q", name)
		}
		p := &all[i]
		if p.Name == "portico" && p.Binary == "" {
			bin, err := buildPortico(o.Dir)
			if err != nil {
				return result{}, err
			}
			*p = porticoPeer(bin)
		}
		if p.Binary == "" {
			logf("%s: not installed (hack/bench-peers.sh installs it); skipped", p.Name)
			return result{Peer: p.Name, Err: errors.New("not installed")}, nil
		}
		logf("%s: measuring", p.Name)
		r := measure(ctx, o, *p, sites, added, backend, logf)
		if r.Err != nil {
			logf("%s: %v", p.Name, r.Err)
		}
		return r, nil
	}
}

// measure runs one peer through every measurement; a failure ends its run
// and is kept in the result.
func measure(ctx context.Context, o options, p peer, sites, added []site, backend string, logf func(string, ...any)) result {
	r := result{Peer: p.Name, Version: p.Version()}
	e, c, pr, hosts, err := startServing(o, p, slices.Concat(sites, added), len(sites), backend)
	if pr != nil {
		defer pr.stop()
		defer context.AfterFunc(ctx, pr.stop)()
	}
	if err != nil {
		r.Err = err
		return r
	}
	r.Ready = time.Since(pr.started)
	logf("%s: every hostname served %v after start", p.Name, r.Ready.Round(time.Millisecond))

	r.Handshakes = c.handshakes(hosts, o.Conns, o.Duration)
	logf("%s: %.0f handshakes/s, %d failed", p.Name, r.Handshakes.rate(), r.Handshakes.Failed)
	keptAliveRuns(c, o, hosts, pr.cmd.Process.Pid, &r, logf)
	if r.Memory, err = memoryOf(pr.cmd.Process.Pid); err != nil {
		logf("%s: memory: %v", p.Name, err)
	}

	addSites(c, p, e, pr, hosts, sites, added, o.AddRate, &r, logf)
	return r
}

// startServing configures p to serve the first n of sites (the rest are
// added later, but the client knows their certificates), starts it and
// waits until it serves them all. The process, once started, is returned
// even with an error, for the caller to stop.
func startServing(o options, p peer, sites []site, n int, backend string) (env, *client, *proc, []string, error) {
	e := env{Dir: filepath.Join(o.Dir, p.Name), Backend: backend}
	var err error
	if e.Port, err = freePort(); err == nil {
		e.Spare, err = freePort()
	}
	if err == nil {
		e.Plain, err = freePort()
	}
	if strings.HasPrefix(p.Name, "portico") {
		e.Args = o.PorticoArgs
	}
	if err == nil {
		err = os.MkdirAll(e.Dir, 0o755)
	}
	if err == nil {
		err = p.Configure(e, sites[:n])
	}
	if err != nil {
		return e, nil, nil, nil, fmt.Errorf("configure: %w", err)
	}
	c := &client{addr: fmt.Sprintf("127.0.0.1:%d", e.Port), plain: fmt.Sprintf("127.0.0.1:%d", e.Plain), leafs: map[string][]byte{}}
	for _, s := range sites {
		c.leafs[s.Host] = leafDER(s)
	}
	hosts := make([]string, n)
	for i, s := range sites[:n] {
		hosts[i] = s.Host
	}
	start := time.Now()
	pr, err := p.Start(e)
	if err != nil {
		return e, c, nil, hosts, err
	}
	pr.started = start
	// Waits end early when the proxy exits.
	c.exited = pr.exited
	if _, err := c.waitServed(hosts[len(hosts)-1], start, o.ReadyTimeout); err != nil {
		return e, c, pr, hosts, fmt.Errorf("not ready: %w (log: %s)", err, pr.log)
	}
	if _, err := c.waitServed(hosts[0], start, time.Minute); err != nil {
		return e, c, pr, hosts, fmt.Errorf("not ready: %w", err)
	}
	return e, c, pr, hosts, nil
}

// addSites adds the added sites to p one at a time, each timed until it is
// served, with new connections to the existing hostnames going on
// meanwhile, rate a second: a reload that drops them shows in
// r.AddFailures. They are paced: back to back, two workers' handshakes
// held both cores of a small machine, and the adds measured how long the
// proxy waited for a core behind the harness's own load.
func addSites(c *client, p peer, e env, pr *proc, hosts []string, sites, added []site, rate int, r *result, logf func(string, ...any)) {
	var bgOK, bgFailed atomic.Int64
	var stopped atomic.Bool
	bgCtx, bgStop := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	const workers = 2
	every := time.Duration(0)
	if rate > 0 {
		every = workers * time.Second / time.Duration(rate)
	}
	for w := range workers {
		bg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 9))
			next := time.Now()
			for !stopped.Load() {
				if every > 0 {
					next = next.Add(every)
					time.Sleep(time.Until(next))
				}
				err := c.get(bgCtx, hosts[rnd.IntN(len(hosts))])
				switch {
				case stopped.Load():
				case err != nil:
					bgFailed.Add(1)
				default:
					bgOK.Add(1)
				}
			}
		})
	}
	current := slices.Clone(sites)
	for _, s := range added {
		t := time.Now()
		if err := p.Add(e, pr, current, s); err != nil {
			r.Err = fmt.Errorf("add %s: %w", s.Host, err)
			break
		}
		took, err := c.waitServed(s.Host, t, 5*time.Minute)
		if err != nil {
			r.Err = fmt.Errorf("add: %w", err)
			break
		}
		r.Adds = append(r.Adds, took)
		current = append(current, s)
		logf("%s: %s served %v after it was added", p.Name, s.Host, took.Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond) // let a reload settle before the next
	}
	stopped.Store(true)
	bgStop()
	bg.Wait()
	r.AddFailures, r.AddRequests = int(bgFailed.Load()), int(bgOK.Load()+bgFailed.Load())
}

// keptAliveRuns runs the kept-alive loads, plain, over TLS, HTTP/2 and
// paced, one after another, into r.
func keptAliveRuns(c *client, o options, hosts []string, pid int, r *result, logf func(string, ...any)) {
	run := func(load func() loadResult) loadResult { return measured(pid, o.PerfStat, logf, load) }
	r.Requests = run(func() loadResult { return c.requests(hosts, o.Conns, o.Duration) })
	logf("%s: %.0f requests/s kept alive over TLS, %d failed", r.Peer, r.Requests.rate(), r.Requests.Failed)
	r.Plain = run(func() loadResult { return c.plainRequests(hosts, o.Conns, o.Duration) })
	logf("%s: %.0f requests/s kept alive in plain HTTP, %d failed", r.Peer, r.Plain.rate(), r.Plain.Failed)
	r.H2 = run(func() loadResult { return c.h2Requests(hosts, max(o.Conns/4, 1), o.Streams, o.Duration) })
	logf("%s: %.0f requests/s over HTTP/2, %d failed", r.Peer, r.H2.rate(), r.H2.Failed)
	r.Paced = run(func() loadResult { return c.paced(hosts, o.Conns, o.Rate, o.Duration) })
	logf("%s: at %d requests/s, p50 %v p99 %v p99.9 %v, %d failed", r.Peer, o.Rate, r.Paced.P50, r.Paced.P99, r.Paced.P999, r.Paced.Failed)
}

// withCPU runs a load and adds the CPU time pid and its descendants used
// meanwhile.
func withCPU(pid int, load func() loadResult) loadResult {
	before, berr := cpuOf(pid)
	r := load()
	if after, err := cpuOf(pid); err == nil && berr == nil {
		r.CPU = after - before
	}
	return r
}

// makeSites issues n+adds certificates, svc-I.ns-K.example.com with 20
// Services per namespace, and writes them out for the peers that read
// files.
func makeSites(dir string, n, adds int) (sites, added []site, err error) {
	ca, err := snitest.NewCA()
	if err != nil {
		return nil, nil, err
	}
	names := make([]string, n+adds)
	for i := range names {
		names[i] = fmt.Sprintf("svc-%d.ns-%d.example.com", i, i/20)
	}
	pairs, err := ca.IssueMany(names, 2)
	if err != nil {
		return nil, nil, err
	}
	certs := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		return nil, nil, err
	}
	all := make([]site, len(names))
	for i, kp := range pairs {
		s := site{
			Host:     names[i],
			CertFile: filepath.Join(certs, fmt.Sprintf("%d.crt", i)),
			KeyFile:  filepath.Join(certs, fmt.Sprintf("%d.key", i)),
			PEMFile:  filepath.Join(certs, fmt.Sprintf("%d.pem", i)),
			CertPEM:  kp.CertPEM,
			KeyPEM:   kp.KeyPEM,
		}
		for path, data := range map[string][]byte{s.CertFile: kp.CertPEM, s.KeyFile: kp.KeyPEM, s.PEMFile: slices.Concat(kp.CertPEM, kp.KeyPEM)} {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				return nil, nil, err
			}
		}
		all[i] = s
	}
	return all[:n], all[n:], nil
}

func leafDER(s site) []byte {
	b, _ := pem.Decode(s.CertPEM)
	if b == nil {
		return nil
	}
	return b.Bytes
}

// startBackend serves a short 200 on loopback, for every peer alike.
func startBackend() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "ok\n")
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	return ln, nil
}

func buildPortico(dir string) (string, error) {
	bin := filepath.Join(dir, "bin", "portico")
	cmd := exec.Command("go", "build", "-o", bin, "portico.dev/portico/cmd/portico")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build portico: %v: %s", err, out)
	}
	return bin, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// report formats the results as a markdown table.
func report(o options, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d hostnames, one ECDSA P-256 certificate each; load runs of %v with %d connections; %d cores\n\n", o.N, o.Duration, o.Conns, runtime.NumCPU())
	b.WriteString("| peer | version | ready | memory (PSS) | handshakes/s (p50 / p99) | kept-alive req/s (p50 / p99) | CPU s / 100k kept-alive | new hostname served after (median / worst) | failed during adds |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Ready == 0 {
			fmt.Fprintf(&b, "| %s | %s | failed: %v | | | | | | |\n", r.Peer, r.Version, r.Err)
			continue
		}
		adds := "-"
		if len(r.Adds) > 0 {
			s := slices.Clone(r.Adds)
			slices.Sort(s)
			adds = fmt.Sprintf("%v / %v", s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
		}
		if r.Err != nil {
			adds += fmt.Sprintf(" (then failed: %v)", r.Err)
		}
		cpu := "-"
		if v := r.Requests.cpuPer100k(); v > 0 {
			cpu = fmt.Sprintf("%.2f", v)
		}
		fmt.Fprintf(&b, "| %s | %s | %v | %.1f MiB | %s | %s | %s | %s | %d of %d |\n",
			r.Peer, r.Version, r.Ready.Round(time.Millisecond), float64(r.Memory)/(1<<20),
			loadCell(r.Handshakes), loadCell(r.Requests), cpu, adds, r.AddFailures, r.AddRequests)
	}
	return b.String()
}

func loadCell(l loadResult) string {
	s := fmt.Sprintf("%.0f (%v / %v)", l.rate(), l.P50.Round(10*time.Microsecond), l.P99.Round(10*time.Microsecond))
	if l.Failed > 0 {
		s += fmt.Sprintf(", %d failed (%v)", l.Failed, l.FirstErr)
	}
	return s
}
