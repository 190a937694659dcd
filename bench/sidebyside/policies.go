package main

// The policies mode (-mode policies) measures what two policies cost, with
// wrk (-t2 -c64, plain HTTP/1.1, kept alive) against Portico and nginx in
// turn, each proxy started afresh for every variant:
//
//   - none: ten endpoints, the proxy's default balancing, no limit (the
//     reference);
//   - limit-unreached: a rate limit per client address no client reaches
//     (the cost of the check);
//   - limit-exceeded: a limit per client address wrk exceeds: the rate of
//     429 answers and the CPU per answer; the admitted rate must be the
//     configured one within 5%;
//   - hash: consistent hashing on the X-User header over the ten endpoints.
//
// Every variant sends the same requests, each with one of 1,000 X-User
// values in turn. The endpoints are one Go backend listening on the same
// port of ten loopback addresses (127.0.0.2 to 127.0.0.11); it counts the
// requests each one got and names itself in X-Backend, for the checks that
// the limit admits what it should and that a user stays on one endpoint.
//
// Portico: a ClientTrafficPolicy rateLimit (key ClientAddress) on the
// Gateway, a BackendTrafficPolicy loadBalancer ConsistentHash on the
// HTTPRoute. nginx: limit_req_zone on $binary_remote_addr with limit_req
// burst nodelay and limit_req_status 429; hash $http_x_user consistent.
// haproxy (with -peers): balance hdr(X-User) with hash-type consistent, and
// no limit (see haproxyPolicies).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// hashEndpoints is how many endpoints the backend has.
const hashEndpoints = 10

// policyVariant is one configuration of the policies mode.
type policyVariant struct {
	Name string
	// Limit is requests per second per client address (0: none), Burst
	// the requests over it a client may send at once.
	Limit, Burst int
	// Hash balances on X-User with consistent hashing.
	Hash bool
}

// Limits of the two rate-limited variants: wrk from one address sends
// tens of thousands a second on two cores, so a million is never reached
// and 2,000 always is; a burst of 100 adds at most 100 requests to a run,
// under 5% of 2,000 per second for runs of a second or more.
var policyVariants = []policyVariant{
	{Name: "none"},
	{Name: "limit-unreached", Limit: 1_000_000, Burst: 1_000_000},
	{Name: "limit-exceeded", Limit: 2000, Burst: 100},
	{Name: "hash", Hash: true},
}

// policyEnv is where a peer of the policies mode listens (plain HTTP on
// 127.0.0.1:Port) and the port its endpoints listen on (on each of
// endpointAddrs).
type policyEnv struct {
	Dir          string
	Port         int
	EndpointPort int
}

func endpointAddrs() []string {
	a := make([]string, hashEndpoints)
	for i := range a {
		a[i] = fmt.Sprintf("127.0.0.%d", i+2)
	}
	return a
}

// porticoPolicies writes the standalone configuration of variant v.
func porticoPolicies(e policyEnv, v policyVariant) error {
	dir := filepath.Join(e.Dir, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(porticoGatewayYAML(fmt.Sprintf("{name: http, port: %d, protocol: HTTP}", e.Port)))
	fmt.Fprintf(&b, `apiVersion: v1
kind: Service
metadata: {name: backend, namespace: apps}
spec:
  ports: [{port: 80, targetPort: %[1]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: backend
  namespace: apps
  labels: {kubernetes.io/service-name: backend}
addressType: IPv4
ports: [{port: %[1]d}]
endpoints: [{addresses: [%[2]s], conditions: {ready: true}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bench, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: backend, port: 80}]}]
`, e.EndpointPort, strings.Join(endpointAddrs(), ", "))
	if v.Limit > 0 {
		fmt.Fprintf(&b, `---
apiVersion: portico.dev/v1alpha1
kind: ClientTrafficPolicy
metadata: {name: limit, namespace: apps}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  rateLimit: {requests: %d, unit: Second, burst: %d, key: {type: ClientAddress}}
`, v.Limit, v.Burst)
	}
	if v.Hash {
		b.WriteString(`---
apiVersion: portico.dev/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: hash, namespace: apps}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: bench}]
  loadBalancer: {type: ConsistentHash, consistentHash: {type: Header, header: {name: X-User}}}
`)
	}
	return os.WriteFile(filepath.Join(dir, "policies.yaml"), []byte(b.String()), 0o644)
}

// nginxPolicies writes nginx.conf for variant v. The hash directive comes
// before keepalive, which nginx requires of a balancing method.
func nginxPolicies(e policyEnv, v policyVariant) error {
	if err := os.MkdirAll(filepath.Join(e.Dir, "tmp"), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(nginxHead(env{Dir: e.Dir}))
	limit := ""
	if v.Limit > 0 {
		fmt.Fprintf(&b, "  limit_req_zone $binary_remote_addr zone=perclient:10m rate=%dr/s;\n  limit_req_status 429;\n", v.Limit)
		limit = fmt.Sprintf("limit_req zone=perclient burst=%d nodelay; ", v.Burst)
	}
	b.WriteString("  upstream backend {\n")
	if v.Hash {
		b.WriteString("    hash $http_x_user consistent;\n")
	}
	for _, a := range endpointAddrs() {
		fmt.Fprintf(&b, "    server %s:%d;\n", a, e.EndpointPort)
	}
	b.WriteString("    keepalive 64;\n  }\n")
	fmt.Fprintf(&b, `  server {
    listen 127.0.0.1:%d;
    location / { %sproxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
`, e.Port, limit)
	return os.WriteFile(filepath.Join(e.Dir, "nginx.conf"), []byte(b.String()), 0o644)
}

// haproxyPolicies writes haproxy.cfg for variant v, which has no rate
// limit: haproxy's per-address limit is a stick table counting requests
// over a sliding window, denied ones included, so a client above the limit
// stays above it and is denied nearly everything instead of admitted at
// the limit; that is not the token bucket of the other two.
func haproxyPolicies(e policyEnv, v policyVariant) error {
	if v.Limit > 0 {
		return errors.New("haproxy: no rate limit comparable to a token bucket")
	}
	var b strings.Builder
	fmt.Fprintf(&b, `global
  maxconn 8000
  nbthread %d
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend bench
  bind 127.0.0.1:%d
  default_backend backend
backend backend
  http-reuse safe
`, runtime.NumCPU(), e.Port)
	if v.Hash {
		b.WriteString("  balance hdr(X-User)\n  hash-type consistent\n")
	}
	for i, a := range endpointAddrs() {
		fmt.Fprintf(&b, "  server e%d %s:%d\n", i, a, e.EndpointPort)
	}
	return os.WriteFile(filepath.Join(e.Dir, "haproxy.cfg"), []byte(b.String()), 0o644)
}

// policyPeer is a proxy of the policies mode.
type policyPeer struct {
	Name      string
	Binary    string
	Version   func() string
	Configure func(e policyEnv, v policyVariant) error
	Start     func(e policyEnv) (*proc, error)
	// Skips says which variants the peer has no counterpart for.
	Skips func(v policyVariant) bool
}

func policyPeers(portico string) []policyPeer {
	nginx, haproxy := lookPath("nginx"), lookPath("haproxy")
	return []policyPeer{
		{Name: "portico", Binary: portico, Version: func() string { return "this tree" }, Configure: porticoPolicies,
			Start: func(e policyEnv) (*proc, error) {
				return startProc(e.Dir, portico, []string{"serve", "--config", filepath.Join(e.Dir, "config"), "--bind-address", "127.0.0.1",
					"--data-dir", filepath.Join(e.Dir, "data")}, nil)
			}},
		{Name: "nginx", Binary: nginx, Version: nginxPeer().Version, Configure: nginxPolicies,
			Start: func(e policyEnv) (*proc, error) {
				return startProc(e.Dir, nginx, []string{"-p", e.Dir, "-e", filepath.Join(e.Dir, "error.log"), "-c", filepath.Join(e.Dir, "nginx.conf")}, nil)
			}},
		{Name: "haproxy", Binary: haproxy, Version: haproxyPeer().Version, Configure: haproxyPolicies,
			Start: func(e policyEnv) (*proc, error) {
				return startProc(e.Dir, haproxy, []string{"-W", "-db", "-f", filepath.Join(e.Dir, "haproxy.cfg")}, nil)
			},
			Skips: func(v policyVariant) bool { return v.Limit > 0 }},
	}
}

// endpoints is the backend of the policies mode: one HTTP server on the
// same port of each of endpointAddrs, counting its requests.
type endpoints struct {
	Port  int
	hits  [hashEndpoints]atomic.Int64
	close func()
}

func startEndpoints() (*endpoints, error) {
	var lastErr error
	// The port is free on the first address; another process may hold
	// it on the others, hence the attempts.
	for range 10 {
		ep, err := listenEndpoints()
		if err == nil {
			return ep, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("endpoints: %w", lastErr)
}

func listenEndpoints() (*endpoints, error) {
	ep := &endpoints{}
	var servers []*http.Server
	ep.close = func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}
	for i, a := range endpointAddrs() {
		ln, err := net.Listen("tcp", net.JoinHostPort(a, strconv.Itoa(ep.Port)))
		if err != nil {
			ep.close()
			return nil, err
		}
		if i == 0 {
			ep.Port = ln.Addr().(*net.TCPAddr).Port
		}
		name := strconv.Itoa(i)
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				ep.hits[i].Add(1)
				w.Header().Set("Content-Type", "text/plain")
				w.Header().Set("X-Backend", name)
				_, _ = io.WriteString(w, "ok\n")
			}),
			ReadHeaderTimeout: 10 * time.Second,
		}
		servers = append(servers, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	return ep, nil
}

func (ep *endpoints) counts() []int64 {
	c := make([]int64, hashEndpoints)
	for i := range c {
		c[i] = ep.hits[i].Load()
	}
	return c
}

// policyResult is one variant of one peer in one round.
type policyResult struct {
	Peer, Version, Variant string
	Limit, Burst           int
	Round                  int
	Err                    error
	Load                   extLoad
	// Rejected are the answers other than 2xx and 3xx (429 in the
	// limit-exceeded variant, which checks that status beforehand).
	Rejected int
	// Hits is what each endpoint got during the wrk run.
	Hits []int64
}

// answers is every answer of the run, admitted or not.
func (r policyResult) answers() int { return r.Load.OK + r.Rejected }

func (r policyResult) answerRate() float64 {
	if r.Load.Elapsed <= 0 {
		return 0
	}
	return float64(r.answers()) / r.Load.Elapsed.Seconds()
}

func (r policyResult) cpuPer100kAnswers() float64 {
	if r.answers() == 0 || r.Load.CPU <= 0 {
		return 0
	}
	return r.Load.CPU.Seconds() * 100000 / float64(r.answers())
}

// limitOff is how far the admitted rate is from the limit, as a fraction
// of it. The burst, admitted at once when the run starts with a full
// bucket, is not part of the rate: it is taken off the requests admitted.
func (r policyResult) limitOff() float64 {
	if r.Load.Elapsed <= 0 || r.Limit <= 0 {
		return 0
	}
	admitted := float64(r.Load.OK-r.Burst) / r.Load.Elapsed.Seconds()
	return admitted/float64(r.Limit) - 1
}

// writeUserScript writes wrk's script: each request with the next of
// 1,000 X-User values.
func writeUserScript(dir string) (string, error) {
	path := filepath.Join(dir, "wrk-users.lua")
	return path, os.WriteFile(path, []byte(`local reqs = {}
local i = 0
function init(args)
  for k = 1, 1000 do
    reqs[k] = wrk.format("GET", "/", {["X-User"] = "user-" .. k})
  end
end
function request()
  i = i % #reqs + 1
  return reqs[i]
end
`), 0o644)
}

// runPolicies measures every variant of every peer of o.Peers, o.Rounds
// times in turn, each variant of each peer with the proxy started afresh.
func runPolicies(ctx context.Context, o options, progress io.Writer) ([]policyResult, error) {
	if err := generatorsUsable(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	ep, err := startEndpoints()
	if err != nil {
		return nil, err
	}
	defer ep.close()
	script, err := writeUserScript(o.Dir)
	if err != nil {
		return nil, err
	}
	all := policyPeers(o.Portico)
	var results []policyResult
	for round := range max(o.Rounds, 1) {
		// Every other round takes the peers in the other order, so that
		// neither always runs just after the other's load.
		order := slices.Clone(o.Peers)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range policyVariants {
			for _, name := range order {
				if ctx.Err() != nil {
					return results, ctx.Err()
				}
				i := slices.IndexFunc(all, func(p policyPeer) bool { return p.Name == name })
				if i < 0 {
					return nil, fmt.Errorf("unknown peer %q (policies mode: portico, nginx, haproxy)", name)
				}
				if all[i].Name == "portico" && all[i].Binary == "" {
					bin, err := buildPortico(o.Dir)
					if err != nil {
						return nil, err
					}
					all = policyPeers(bin)
				}
				p := all[i]
				if p.Skips != nil && p.Skips(v) {
					continue
				}
				r := policyResult{Peer: p.Name, Variant: v.Name, Limit: v.Limit, Burst: v.Burst, Round: round + 1}
				if p.Binary == "" {
					r.Err = errors.New("not installed")
				} else {
					r.Version = p.Version()
					measurePolicy(ctx, o, p, v, ep, script, &r)
				}
				if r.Err != nil {
					logf("%s %s: %v", p.Name, v.Name, r.Err)
				} else {
					logf("%s %s: %.0f answers/s (%d 2xx, %d rejected), p99 %v, %.2f CPU s / 100k", p.Name, v.Name,
						r.answerRate(), r.Load.OK, r.Rejected, r.Load.P99, r.cpuPer100kAnswers())
				}
				results = append(results, r)
			}
		}
	}
	return results, nil
}

// measurePolicy starts p configured for v, checks what v promises and runs
// wrk on it.
func measurePolicy(ctx context.Context, o options, p policyPeer, v policyVariant, ep *endpoints, script string, r *policyResult) {
	e := policyEnv{Dir: filepath.Join(o.Dir, fmt.Sprintf("%s-%s-%d", p.Name, v.Name, r.Round)), EndpointPort: ep.Port}
	var err error
	if e.Port, err = freePort(); err == nil {
		err = os.MkdirAll(e.Dir, 0o755)
	}
	if err == nil {
		err = p.Configure(e, v)
	}
	if err != nil {
		r.Err = fmt.Errorf("configure: %w", err)
		return
	}
	pr, err := p.Start(e)
	if err != nil {
		r.Err = err
		return
	}
	defer pr.stop()
	defer context.AfterFunc(ctx, pr.stop)()
	url := fmt.Sprintf("http://127.0.0.1:%d/", e.Port)
	if err := waitAnswering(ctx, pr, url, time.Minute); err != nil {
		r.Err = fmt.Errorf("not ready: %w (log: %s)", err, pr.log)
		return
	}
	switch {
	case v.Hash:
		err = checkUsersStay(url)
	case v.Limit > 0 && v.Limit < 100_000:
		err = checkRejects(url, v.Burst)
	}
	if err != nil {
		r.Err = err
		return
	}
	// The checks' requests spent the bucket; it refills before the run.
	time.Sleep(time.Second)
	before := ep.counts()
	secs := strconv.Itoa(max(int(o.Duration.Seconds()), 1))
	r.Load = extMeasured(pr.cmd.Process.Pid, func() extLoad {
		return runWrk(ctx, o.Dir, "-t", strconv.Itoa(wrkThreads), "-c", strconv.Itoa(wrkConns), "-d", secs+"s", "--latency", "-s", script, url)
	})
	r.Err = r.Load.Err
	r.Rejected = r.Load.Non2xx
	after := ep.counts()
	r.Hits = make([]int64, hashEndpoints)
	for i := range after {
		r.Hits[i] = after[i] - before[i]
	}
}

// waitAnswering polls url until it answers 200.
func waitAnswering(ctx context.Context, pr *proc, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-pr.exited:
			return errors.New("exited")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no 200 from %s within %v: %v", url, limit, last)
}

// checkRejects sends requests from one address over kept-alive
// connections until some are answered 429 (at least four times the burst,
// at most for 5 s), and wants no status but 200 and 429: wrk counts every
// other answer as one, and the limit-exceeded variant's rejections are
// these. It sends until it sees a rejection rather than a fixed number:
// on a busy machine a fixed burst may arrive slower than the limit admits.
func checkRejects(url string, burst int) error {
	const workers = 32
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	seen := map[int]int{}
	deadline := time.Now().Add(5 * time.Second)
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, n := range seen {
			total += n
		}
		return total >= 4*burst && seen[http.StatusTooManyRequests] > 0 || time.Now().After(deadline)
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for !done() {
				code := 0
				if resp, err := client.Get(url); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				seen[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	others := false
	for code := range seen {
		others = others || code != http.StatusOK && code != http.StatusTooManyRequests
	}
	if seen[http.StatusTooManyRequests] == 0 || others {
		return fmt.Errorf("over the limit, answers by status (0: no answer): %v; want 200 and 429 only, some 429", seen)
	}
	return nil
}

// checkUsersStay wants every request of a user answered by the same
// endpoint, and the users spread over more than one.
func checkUsersStay(url string) error {
	used := map[string]bool{}
	for u := range 20 {
		first := ""
		for range 5 {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set("X-User", fmt.Sprintf("user-%d", u))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("hash check: %w", err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			got := resp.Header.Get("X-Backend")
			if first == "" {
				first = got
			}
			if got != first {
				return fmt.Errorf("hash check: user-%d went to endpoints %s and %s", u, first, got)
			}
		}
		used[first] = true
	}
	if len(used) < 2 {
		return fmt.Errorf("hash check: 20 users all on endpoint %v", used)
	}
	return nil
}

// policiesReport formats the rounds and their medians as markdown tables.
func policiesReport(o options, results []policyResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "wrk -t%d -c%d, plain HTTP/1.1 kept alive, %v each, X-User one of 1,000 in turn; %d endpoints; limits per client address: %s\n\n",
		wrkThreads, wrkConns, o.Duration, hashEndpoints, limitsText())
	b.WriteString("| peer | variant | round | answers/s | 2xx/s | rejected/s | p99 | CPU s / 100k answers | admitted (burst off) vs limit | endpoints' share (min / max) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(&b, "| %s | %s | %d | failed: %v | | | | | | |\n", r.Peer, r.Variant, r.Round, r.Err)
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.0f | %.0f | %.0f | %v | %.2f | %s | %s |\n", r.Peer, r.Variant, r.Round,
			r.answerRate(), r.Load.rate(), r.answerRate()-r.Load.rate(), r.Load.P99.Round(10*time.Microsecond), r.cpuPer100kAnswers(),
			limitCell(r), shareCell(r.Hits))
	}
	b.WriteString("\nMedians over the rounds:\n\n")
	b.WriteString("| peer | variant | answers/s | 2xx/s | rejected/s | p99 | CPU s / 100k answers |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, v := range policyVariants {
		for _, name := range o.Peers {
			var rs []policyResult
			for _, r := range results {
				if r.Peer == name && r.Variant == v.Name && r.Err == nil {
					rs = append(rs, r)
				}
			}
			if len(rs) == 0 {
				continue
			}
			med := func(f func(policyResult) float64) float64 {
				x := make([]float64, len(rs))
				for i, r := range rs {
					x[i] = f(r)
				}
				slices.Sort(x)
				return x[len(x)/2]
			}
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.0f | %.0f | %v | %.2f |\n", name, v.Name,
				med(policyResult.answerRate), med(func(r policyResult) float64 { return r.Load.rate() }),
				med(func(r policyResult) float64 { return r.answerRate() - r.Load.rate() }),
				time.Duration(med(func(r policyResult) float64 { return float64(r.Load.P99) })).Round(10*time.Microsecond),
				med(policyResult.cpuPer100kAnswers))
		}
	}
	return b.String()
}

func limitsText() string {
	var parts []string
	for _, v := range policyVariants {
		if v.Limit > 0 {
			parts = append(parts, fmt.Sprintf("%s %d/s burst %d", v.Name, v.Limit, v.Burst))
		}
	}
	return strings.Join(parts, ", ")
}

// limitCell says, for the variant a client exceeds, how far the admitted
// rate (burst taken off) is from the limit, and whether within 5%.
func limitCell(r policyResult) string {
	if r.Limit == 0 || r.Rejected == 0 {
		return "-"
	}
	off := r.limitOff()
	verdict := "within 5%"
	if math.Abs(off) > 0.05 {
		verdict = "OUTSIDE 5%"
	}
	return fmt.Sprintf("%+.1f%% (%s)", 100*off, verdict)
}

func shareCell(hits []int64) string {
	var total int64
	for _, h := range hits {
		total += h
	}
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%% / %.1f%%", 100*float64(slices.Min(hits))/float64(total), 100*float64(slices.Max(hits))/float64(total))
}
