package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTCPMode runs the tcp mode for a second against every peer
// installed: every peer must carry short connections, with a CPU figure,
// and bytes through one connection, with its CPU per GB.
func TestTCPMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every proxy")
	}
	dir := t.TempDir()
	bin, err := buildPortico(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range tcpPeers(bin) {
		if p.Binary != "" {
			names = append(names, p.Name)
		}
	}
	o := options{Peers: names, Duration: time.Second, Conns: 4, Dir: dir, Portico: bin, Rounds: 1, ReadyTimeout: time.Minute}
	results, err := runTCP(t.Context(), o, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != len(names) {
		t.Fatalf("%d results for peers %v", len(results), names)
	}
	for _, r := range results {
		switch {
		case r.Err != nil:
			t.Errorf("%s: %v", r.Peer, r.Err)
		case r.Conns.OK == 0 || r.Conns.Failed > 0 || r.ConnsCPU <= 0:
			t.Errorf("%s: %d connections, %d failed (%v), CPU %v", r.Peer, r.Conns.OK, r.Conns.Failed, r.Conns.FirstErr, r.ConnsCPU)
		case r.Bytes < 1<<20 || r.cpuPerGB() <= 0:
			t.Errorf("%s: %d bytes through one connection, %.2f CPU s / GB", r.Peer, r.Bytes, r.cpuPerGB())
		}
	}
	t.Logf("\n%s", tcpReport(o, results))
}

// TestHAProxyForwardsNoUDP holds bench/README.md's reason for leaving
// haproxy out of the udp mode: the installed haproxy refuses a frontend
// and a backend on UDP addresses.
func TestHAProxyForwardsNoUDP(t *testing.T) {
	haproxy := lookPath("haproxy")
	if haproxy == "" {
		t.Skip("haproxy is not installed (hack/bench-peers.sh)")
	}
	cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(`defaults
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend dns
  bind udp@127.0.0.1:18053
  default_backend dns
backend dns
  server d udp@127.0.0.1:18054
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(haproxy, "-c", "-f", cfg).CombinedOutput()
	if err == nil {
		t.Fatalf("haproxy took a UDP frontend: update the udp mode and bench/README.md\n%s", out)
	}
	if !strings.Contains(string(out), "dgram-type address not acceptable") {
		t.Fatalf("haproxy refused the configuration for another reason:\n%s", out)
	}
}
