package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPolicyConfigurations has Portico, nginx and haproxy check the configuration
// of every variant of the policies mode, and Portico's data-plane
// configuration hold what the variant measures: the limit per client
// address with its burst, consistent hashing on X-User, ten endpoints.
func TestPolicyConfigurations(t *testing.T) {
	dir := t.TempDir()
	var bin string
	if !testing.Short() {
		var err error
		if bin, err = buildPortico(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range policyPeers(bin) {
		for _, v := range policyVariants {
			t.Run(p.Name+"/"+v.Name, func(t *testing.T) {
				if p.Binary == "" {
					t.Skipf("%s is not built or not installed (hack/bench-peers.sh)", p.Name)
				}
				e := policyEnv{Dir: filepath.Join(dir, p.Name+"-"+v.Name), Port: 18082, EndpointPort: 18081}
				if err := os.MkdirAll(e.Dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if p.Skips != nil && p.Skips(v) {
					t.Skipf("%s has no %s variant", p.Name, v.Name)
				}
				if err := p.Configure(e, v); err != nil {
					t.Fatal(err)
				}
				if p.Name == "haproxy" {
					out, err := exec.Command(p.Binary, "-c", "-f", filepath.Join(e.Dir, "haproxy.cfg")).CombinedOutput()
					if err != nil {
						t.Fatalf("haproxy -c: %v: %s", err, out)
					}
					return
				}
				if p.Name == "nginx" {
					out, err := exec.Command(p.Binary, "-t", "-p", e.Dir, "-e", filepath.Join(e.Dir, "error.log"), "-c", filepath.Join(e.Dir, "nginx.conf")).CombinedOutput()
					if err != nil {
						t.Fatalf("nginx -t: %v: %s", err, out)
					}
					return
				}
				checkPorticoPolicies(t, p.Binary, e, v)
			})
		}
	}
}

func checkPorticoPolicies(t *testing.T, bin string, e policyEnv, v policyVariant) {
	t.Helper()
	config := filepath.Join(e.Dir, "config")
	out, err := exec.Command(bin, "check", "--config", config).CombinedOutput()
	if err != nil {
		t.Fatalf("portico check: %v: %s", err, out)
	}
	if err := conditionsHold(out); err != nil {
		t.Fatal(err)
	}
	dp, err := exec.Command(bin, "check", "--config", config, "-o", "config").Output()
	if err != nil {
		t.Fatalf("portico check -o config: %v", err)
	}
	cfg := string(dp)
	var want []string
	for _, a := range endpointAddrs() {
		want = append(want, fmt.Sprintf("- %s:%d", a, e.EndpointPort))
	}
	if v.Limit > 0 {
		want = append(want, fmt.Sprintf("requests: %d", v.Limit), "per: 1s", fmt.Sprintf("burst: %d", v.Burst), "key: ClientAddress")
	}
	if v.Hash {
		want = append(want, "algorithm: ConsistentHash", "hashOn: Header", "hashName: X-User")
	}
	for _, w := range want {
		if !strings.Contains(cfg, w) {
			t.Errorf("data-plane configuration lacks %q:\n%s", w, cfg)
		}
	}
	if v.Limit == 0 && strings.Contains(cfg, "rateLimit:") {
		t.Errorf("variant %s has a rate limit:\n%s", v.Name, cfg)
	}
	if !v.Hash && strings.Contains(cfg, "ConsistentHash") {
		t.Errorf("variant %s hashes:\n%s", v.Name, cfg)
	}
}

// TestLimitVerdict checks the 5% verdict on the admitted rate, the burst
// taken off.
func TestLimitVerdict(t *testing.T) {
	run := func(ok int) policyResult {
		return policyResult{Limit: 2000, Burst: 100, Rejected: 1000, Load: extLoad{OK: ok, Elapsed: 10 * time.Second}}
	}
	for _, c := range []struct {
		ok     int
		within bool
	}{
		{20000 + 100, true},  // the limit, once the burst is off
		{20900 + 100, true},  // +4.5%
		{21200 + 100, false}, // +6%
		{19100 + 100, true},  // -4.5%
		{18800 + 100, false}, // -6%
	} {
		cell := limitCell(run(c.ok))
		if strings.Contains(cell, "within 5%") != c.within {
			t.Errorf("%d admitted in 10 s at 2000/s, burst 100: %s", c.ok, cell)
		}
	}
	if cell := limitCell(policyResult{Limit: 1_000_000, Burst: 1_000_000, Load: extLoad{OK: 300000, Elapsed: 10 * time.Second}}); cell != "-" {
		t.Errorf("a limit never reached judged: %s", cell)
	}
}

// TestPolicyMode runs the policies mode for a second a variant against
// every peer installed: every run must have answers and a CPU figure, the
// exceeded limit must reject and admit its rate within 5%, and the hashed
// users must reach every endpoint.
func TestPolicyMode(t *testing.T) {
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
	for _, p := range policyPeers(bin) {
		if p.Binary != "" {
			names = append(names, p.Name)
		}
	}
	o := options{Peers: names, Duration: time.Second, Dir: dir, Portico: bin, Rounds: 1}
	results, err := runPolicies(t.Context(), o, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		switch {
		case r.Err != nil:
			t.Errorf("%s %s: %v", r.Peer, r.Variant, r.Err)
		case r.Load.OK == 0 || r.Load.CPU <= 0 || r.Load.P99 <= 0:
			t.Errorf("%s %s: %d answered, CPU %v, p99 %v", r.Peer, r.Variant, r.Load.OK, r.Load.CPU, r.Load.P99)
		case r.Variant == "limit-exceeded" && (r.Rejected == 0 || !strings.Contains(limitCell(r), "within 5%")):
			t.Errorf("%s %s: %d rejected, admitted vs limit %s", r.Peer, r.Variant, r.Rejected, limitCell(r))
		case r.Variant != "limit-exceeded" && r.Rejected > 0:
			t.Errorf("%s %s: %d rejected", r.Peer, r.Variant, r.Rejected)
		case r.Variant == "hash" && slices.Min(r.Hits) == 0:
			t.Errorf("%s %s: an endpoint got nothing: %v", r.Peer, r.Variant, r.Hits)
		}
	}
	t.Logf("\n%s", policiesReport(o, results))
}
