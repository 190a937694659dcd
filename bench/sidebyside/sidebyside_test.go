package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSideBySide runs the harness on a few hostnames against every peer
// that is installed (hack/bench-peers.sh installs them; hack/test.sh runs
// it): each one must serve every hostname with its own certificate, take a
// new one, and answer every request of the load runs.
func TestSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every proxy")
	}
	dir := t.TempDir()
	bin, err := buildPortico(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range peers(bin) {
		if p.Binary == "" {
			t.Logf("%s is not installed (hack/bench-peers.sh): not run", p.Name)
			continue
		}
		names = append(names, p.Name)
	}
	o := options{N: 30, Peers: names, Duration: 500 * time.Millisecond, Conns: 4, Adds: 2, Dir: dir, ReadyTimeout: time.Minute, Portico: bin,
		Streams: 4, Rate: 200, Rounds: 1, AddRate: 100}
	results, err := runAll(t.Context(), o, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		switch {
		case r.Err != nil:
			t.Errorf("%s: %v", r.Peer, r.Err)
		case r.Handshakes.OK == 0 || r.Handshakes.Failed > 0:
			t.Errorf("%s: handshakes %d ok, %d failed (%v)", r.Peer, r.Handshakes.OK, r.Handshakes.Failed, r.Handshakes.FirstErr)
		case r.Requests.OK == 0 || r.Requests.Failed > 0:
			t.Errorf("%s: requests %d ok, %d failed (%v)", r.Peer, r.Requests.OK, r.Requests.Failed, r.Requests.FirstErr)
		case r.Plain.OK == 0 || r.Plain.Failed > 0:
			t.Errorf("%s: plain requests %d ok, %d failed (%v)", r.Peer, r.Plain.OK, r.Plain.Failed, r.Plain.FirstErr)
		case r.H2.OK == 0 || r.H2.Failed > 0:
			t.Errorf("%s: HTTP/2 requests %d ok, %d failed (%v)", r.Peer, r.H2.OK, r.H2.Failed, r.H2.FirstErr)
		case r.Paced.OK == 0 || r.Paced.Failed > 0 || r.Paced.P999 < r.Paced.P50:
			t.Errorf("%s: paced requests %d ok, %d failed (%v), p50 %v p99.9 %v", r.Peer, r.Paced.OK, r.Paced.Failed, r.Paced.FirstErr, r.Paced.P50, r.Paced.P999)
		case len(r.Adds) != o.Adds:
			t.Errorf("%s: %d of %d hostnames added", r.Peer, len(r.Adds), o.Adds)
		case r.AddRequests == 0:
			t.Errorf("%s: no request to the existing hostnames during the adds", r.Peer)
		case r.Memory <= 0:
			t.Errorf("%s: no memory figure", r.Peer)
		}
	}
	t.Logf("\n%s%s", report(o, results), loadReport(o, results))
}

// TestConfigurationsValid has each installed proxy check the configuration
// the harness writes for it, and Portico report no False condition.
func TestConfigurationsValid(t *testing.T) {
	dir := t.TempDir()
	sites, _, err := makeSites(dir, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin", "portico")
	for _, p := range peers(bin) {
		t.Run(p.Name, func(t *testing.T) {
			if p.Name == "portico" {
				if testing.Short() {
					t.Skip("builds Portico")
				}
				if _, err := buildPortico(dir); err != nil {
					t.Fatal(err)
				}
			}
			if p.Binary == "" {
				t.Skipf("%s is not installed (hack/bench-peers.sh)", p.Name)
			}
			e := env{Dir: filepath.Join(dir, p.Name), Port: 18443, Spare: 18080, Plain: 18082, Backend: "127.0.0.1:18081"}
			if err := os.MkdirAll(e.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := p.Configure(e, sites); err != nil {
				t.Fatal(err)
			}
			if err := p.Check(e); err != nil {
				t.Error(err)
			}
		})
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func TestConditionsHold(t *testing.T) {
	ok := `apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: a, namespace: apps}
status:
  conditions:
  - {type: Accepted, status: "True"}
  listeners:
  - name: https
    conditions:
    - {type: Conflicted, status: "False"}
    - {type: Programmed, status: "True"}
`
	bad := `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: apps}
status:
  parents:
  - conditions:
    - {type: Accepted, status: "True"}
    - {type: ResolvedRefs, status: "False", message: Secret not found}
`
	if err := conditionsHold([]byte(ok)); err != nil {
		t.Errorf("Conflicted=False taken for a failure: %v", err)
	}
	err := conditionsHold([]byte(ok + "---\n" + bad))
	if err == nil || !strings.Contains(err.Error(), "HTTPRoute apps/r: ResolvedRefs=False (Secret not found)") {
		t.Errorf("a False ResolvedRefs of a route parent: %v", err)
	}
}
