package main

// The external mode (-mode external) drives each peer with load
// generators that are not Go and not this process: wrk for HTTP/1.1
// (plain, over the 1,000 hostnames in turn, and over TLS), h2load for
// HTTP/2 over TLS. What the harness's own client measures is how the
// proxies compare under the same Go client; this is how they compare
// under the clients others use, which spend less CPU per request and so
// leave more of a small machine to the proxy.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Load shapes of the external runs: wrk's connections (kept alive, two
// threads), h2load's connections and streams in flight on each.
const (
	wrkConns      = 64
	wrkThreads    = 2
	h2loadConns   = 4
	h2loadStreams = 16
)

// externalResult is one round of one peer under the external generators.
type externalResult struct {
	Peer, Version    string
	Round            int
	Err              error
	Plain, HTTPS, H2 extLoad
}

// extLoad is what one generator run gave: requests answered with a 2xx,
// failures of any kind, the run's length, the 99th percentile latency
// and the proxy's CPU time meanwhile.
type extLoad struct {
	OK, Failed int
	// Non2xx are the answers other than 2xx and 3xx (wrk's count), part
	// of Failed.
	Non2xx  int
	Elapsed time.Duration
	P99     time.Duration
	CPU     time.Duration
	Err     error
}

func (l extLoad) rate() float64 {
	if l.Elapsed <= 0 {
		return 0
	}
	return float64(l.OK) / l.Elapsed.Seconds()
}

func (l extLoad) cpuPer100k() float64 {
	if l.OK == 0 || l.CPU <= 0 {
		return 0
	}
	return l.CPU.Seconds() * 100000 / float64(l.OK)
}

// generatorsUsable says which generator is missing.
func generatorsUsable() error {
	for _, bin := range []string{"wrk", "h2load"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found (hack/bench-peers.sh installs it): %w", bin, err)
		}
	}
	return nil
}

// runExternal measures every peer of o.Peers with the external
// generators, o.Rounds times in turn.
func runExternal(ctx context.Context, o options, progress io.Writer) ([]externalResult, error) {
	if err := generatorsUsable(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	sites, _, err := makeSites(o.Dir, o.N, 0)
	if err != nil {
		return nil, err
	}
	backend, err := startBackend()
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	hosts := make([]string, len(sites))
	for i, s := range sites {
		hosts[i] = s.Host
	}
	scripts, err := writeWrkScripts(o.Dir, hosts)
	if err != nil {
		return nil, err
	}
	all := withBaselines(peers(o.Portico), o.Baseline)
	var results []externalResult
	for round := range max(o.Rounds, 1) {
		for _, name := range o.Peers {
			if ctx.Err() != nil {
				return results, ctx.Err()
			}
			i := slices.IndexFunc(all, func(p peer) bool { return p.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("unknown peer %q", name)
			}
			p := &all[i]
			if p.Name == "portico" && p.Binary == "" {
				bin, err := buildPortico(o.Dir)
				if err != nil {
					return nil, err
				}
				*p = porticoPeer(bin)
			}
			r := externalResult{Peer: p.Name, Round: round + 1}
			if p.Binary == "" {
				r.Err = errors.New("not installed")
			} else {
				r.Version = p.Version()
				measureExternal(ctx, o, *p, sites, backend.Addr().String(), scripts, &r, logf)
			}
			if r.Err != nil {
				logf("%s: %v", p.Name, r.Err)
			}
			results = append(results, r)
		}
	}
	return results, nil
}

// wrkScripts are wrk's Lua scripts: plain sends each request to the next
// hostname; tls connects to 127.0.0.1 whatever the URL's hostname (which
// names the one site of the run, for SNI and Host).
type wrkScripts struct{ plain, tls string }

func writeWrkScripts(dir string, hosts []string) (wrkScripts, error) {
	var b strings.Builder
	b.WriteString("local hosts = {\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "  %q,\n", h)
	}
	b.WriteString(`}
local reqs = {}
local i = 0
function init(args)
  for k, h in ipairs(hosts) do
    reqs[k] = wrk.format("GET", "/", {Host = h})
  end
end
function request()
  i = i % #reqs + 1
  return reqs[i]
end
`)
	s := wrkScripts{plain: filepath.Join(dir, "wrk-plain.lua"), tls: filepath.Join(dir, "wrk-tls.lua")}
	if err := os.WriteFile(s.plain, []byte(b.String()), 0o644); err != nil {
		return s, err
	}
	tls := `wrk.resolve = function(host, service)
  wrk.addrs = wrk.lookup("127.0.0.1", service)
end
`
	return s, os.WriteFile(s.tls, []byte(tls), 0o644)
}

// measureExternal starts p and runs the three generator loads on it.
func measureExternal(ctx context.Context, o options, p peer, sites []site, backend string, scripts wrkScripts, r *externalResult, logf func(string, ...any)) {
	e, _, pr, _, err := startServing(o, p, sites, len(sites), backend)
	if pr != nil {
		defer pr.stop()
		defer context.AfterFunc(ctx, pr.stop)()
	}
	if err != nil {
		r.Err = err
		return
	}
	pid := pr.cmd.Process.Pid
	secs := strconv.Itoa(max(int(o.Duration.Seconds()), 1))
	host := sites[0].Host
	r.Plain = extMeasured(pid, func() extLoad {
		return runWrk(ctx, o.Dir, "-t", strconv.Itoa(wrkThreads), "-c", strconv.Itoa(wrkConns), "-d", secs+"s", "--latency",
			"-s", scripts.plain, fmt.Sprintf("http://127.0.0.1:%d/", e.Plain))
	})
	logf("%s: wrk plain HTTP/1.1: %.0f req/s, p99 %v, %d failed", p.Name, r.Plain.rate(), r.Plain.P99, r.Plain.Failed)
	r.HTTPS = extMeasured(pid, func() extLoad {
		return runWrk(ctx, o.Dir, "-t", strconv.Itoa(wrkThreads), "-c", strconv.Itoa(wrkConns), "-d", secs+"s", "--latency",
			"-s", scripts.tls, fmt.Sprintf("https://%s:%d/", host, e.Port))
	})
	logf("%s: wrk HTTPS/1.1: %.0f req/s, p99 %v, %d failed", p.Name, r.HTTPS.rate(), r.HTTPS.P99, r.HTTPS.Failed)
	r.H2 = extMeasured(pid, func() extLoad {
		return runH2load(ctx, o.Dir, secs, fmt.Sprintf("127.0.0.1:%d", e.Port), fmt.Sprintf("https://%s:%d/", host, e.Port))
	})
	logf("%s: h2load HTTP/2: %.0f req/s, p99 %v, %d failed", p.Name, r.H2.rate(), r.H2.P99, r.H2.Failed)
	for _, l := range []extLoad{r.Plain, r.HTTPS, r.H2} {
		if l.Err != nil && r.Err == nil {
			r.Err = l.Err
		}
	}
}

// extMeasured runs load and adds the CPU time pid and its descendants used
// meanwhile.
func extMeasured(pid int, load func() extLoad) extLoad {
	before, berr := cpuOf(pid)
	l := load()
	if after, err := cpuOf(pid); err == nil && berr == nil {
		l.CPU = after - before
	}
	return l
}

var (
	wrkRequests = regexp.MustCompile(`(\d+) requests in ([0-9.]+)(us|ms|s|m)`)
	wrkP99      = regexp.MustCompile(`(?m)^\s+99%\s+([0-9.]+)(us|ms|s)\s*$`)
	wrkSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// runWrk runs wrk with args and reads its report.
func runWrk(ctx context.Context, dir string, args ...string) extLoad {
	out, err := exec.CommandContext(ctx, "wrk", args...).CombinedOutput()
	if err != nil {
		return extLoad{Err: fmt.Errorf("wrk: %v: %s", err, out)}
	}
	return parseWrk(string(out))
}

func parseWrk(out string) extLoad {
	var l extLoad
	m := wrkRequests.FindStringSubmatch(out)
	if m == nil {
		l.Err = fmt.Errorf("wrk: no request count in %q", out)
		return l
	}
	total, _ := strconv.Atoi(m[1])
	l.Elapsed = parseUnit(m[2], m[3])
	if m := wrkP99.FindStringSubmatch(out); m != nil {
		l.P99 = parseUnit(m[1], m[2])
	}
	if m := wrkSocket.FindStringSubmatch(out); m != nil {
		for _, v := range m[1:] {
			n, _ := strconv.Atoi(v)
			l.Failed += n
		}
	}
	non2xx := 0
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		non2xx, _ = strconv.Atoi(m[1])
		l.Failed += non2xx
		l.Non2xx = non2xx
	}
	l.OK = total - non2xx
	return l
}

// parseUnit reads wrk's and h2load's durations (a number and a unit).
func parseUnit(num, unit string) time.Duration {
	f, _ := strconv.ParseFloat(num, 64)
	switch unit {
	case "us":
		return time.Duration(f * float64(time.Microsecond))
	case "ms":
		return time.Duration(f * float64(time.Millisecond))
	case "m":
		return time.Duration(f * float64(time.Minute))
	}
	return time.Duration(f * float64(time.Second))
}

var (
	h2loadFinished = regexp.MustCompile(`finished in ([0-9.]+)(us|ms|s)`)
	h2loadRequests = regexp.MustCompile(`requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout`)
	h2loadStatus   = regexp.MustCompile(`status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx`)
)

// runH2load runs h2load for secs seconds against uri, connecting to
// addr, and reads its report; p99 comes from its per-request log.
func runH2load(ctx context.Context, dir, secs, addr, uri string) extLoad {
	logFile := filepath.Join(dir, "h2load.log")
	defer os.Remove(logFile)
	out, err := exec.CommandContext(ctx, "h2load", "-c", strconv.Itoa(h2loadConns), "-m", strconv.Itoa(h2loadStreams), "-t", "1",
		"-D", secs, "--connect-to="+addr, "--log-file="+logFile, uri).CombinedOutput()
	if err != nil {
		return extLoad{Err: fmt.Errorf("h2load: %v: %s", err, out)}
	}
	l := parseH2load(string(out))
	if l.Err == nil {
		l.P99, l.Err = h2loadP99(logFile)
	}
	return l
}

func parseH2load(out string) extLoad {
	var l extLoad
	m := h2loadFinished.FindStringSubmatch(out)
	r := h2loadRequests.FindStringSubmatch(out)
	st := h2loadStatus.FindStringSubmatch(out)
	if m == nil || r == nil || st == nil {
		l.Err = fmt.Errorf("h2load: unexpected report %q", out)
		return l
	}
	l.Elapsed = parseUnit(m[1], m[2])
	l.OK, _ = strconv.Atoi(st[1])
	for _, v := range slices.Concat(r[2:], st[2:]) {
		n, _ := strconv.Atoi(v)
		l.Failed += n
	}
	return l
}

// h2loadP99 is the 99th percentile of the third column of h2load's
// per-request log (microseconds until the end of the answer).
func h2loadP99(path string) (time.Duration, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var v []int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		if us, err := strconv.ParseInt(fields[2], 10, 64); err == nil {
			v = append(v, us)
		}
	}
	if len(v) == 0 {
		return 0, fmt.Errorf("h2load log %s: no requests", path)
	}
	slices.Sort(v)
	return time.Duration(v[len(v)*99/100]) * time.Microsecond, sc.Err()
}

// externalReport formats the rounds and their medians as markdown tables.
func externalReport(o options, results []externalResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "External generators: wrk -t%d -c%d (plain: %d hostnames in turn; HTTPS: one), h2load -c%d -m%d; %v each\n\n",
		wrkThreads, wrkConns, o.N, h2loadConns, h2loadStreams, o.Duration)
	b.WriteString("| peer | round | wrk plain req/s | p99 | CPU s / 100k | wrk HTTPS req/s | p99 | CPU s / 100k | h2load HTTP/2 req/s | p99 | CPU s / 100k |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	cell := func(l extLoad) string {
		s := fmt.Sprintf("%.0f | %v | %.2f", l.rate(), l.P99.Round(10*time.Microsecond), l.cpuPer100k())
		if l.Failed > 0 {
			s = fmt.Sprintf("%.0f (%d failed) | %v | %.2f", l.rate(), l.Failed, l.P99.Round(10*time.Microsecond), l.cpuPer100k())
		}
		return s
	}
	for _, r := range results {
		if r.Err != nil && r.Plain.OK == 0 {
			fmt.Fprintf(&b, "| %s | %d | failed: %v | | | | | | | | |\n", r.Peer, r.Round, r.Err)
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", r.Peer, r.Round, cell(r.Plain), cell(r.HTTPS), cell(r.H2))
	}
	b.WriteString("\nMedians over the rounds:\n\n")
	b.WriteString("| peer | wrk plain req/s | p99 | CPU s / 100k | wrk HTTPS req/s | p99 | CPU s / 100k | h2load HTTP/2 req/s | p99 | CPU s / 100k |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range o.Peers {
		var rs []externalResult
		for _, r := range results {
			if r.Peer == name && r.Plain.OK > 0 {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		med := func(f func(externalResult) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		b.WriteString("| " + name)
		for _, pick := range []func(externalResult) extLoad{
			func(r externalResult) extLoad { return r.Plain },
			func(r externalResult) extLoad { return r.HTTPS },
			func(r externalResult) extLoad { return r.H2 },
		} {
			fmt.Fprintf(&b, " | %.0f | %v | %.2f",
				med(func(r externalResult) float64 { return pick(r).rate() }),
				time.Duration(med(func(r externalResult) float64 { return float64(pick(r).P99) })).Round(10*time.Microsecond),
				med(func(r externalResult) float64 { return pick(r).cpuPer100k() }))
		}
		b.WriteString(" |\n")
	}
	return b.String()
}
