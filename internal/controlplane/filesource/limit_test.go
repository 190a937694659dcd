package filesource

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap"

	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/internal/testkit/testyaml"
)

// TestDefaultLimitHoldsTheScale: the default size limit holds 100,000
// hostnames, each with a certificate's Secret (a real ECDSA key pair in
// PEM), a ListenerSet and an HTTPRoute, with a quarter to spare, so that
// the scale Portico is built for needs no flag.
func TestDefaultLimitHoldsTheScale(t *testing.T) {
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	host := "svc-99999.ns-999.example.com"
	pair, err := ca.Issue(snitest.ECDSA, 99999, host)
	if err != nil {
		t.Fatal(err)
	}
	site := testyaml.Secret("ns-999", "svc-99999-tls", string(pair.CertPEM), string(pair.KeyPEM)) + fmt.Sprintf(`---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: svc-99999, namespace: ns-999}
spec:
  parentRef: {name: gw, namespace: knative-serving}
  listeners:
  - {name: https, hostname: %[1]s, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: svc-99999-tls}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: svc-99999, namespace: ns-999}
spec:
  parentRefs: [{kind: ListenerSet, name: svc-99999}]
  hostnames: [%[1]s]
  rules: [{backendRefs: [{name: svc-99999, port: 80}]}]
---
`, host)
	if need := int64(len(site)) * 100_000 * 5 / 4; need > DefaultMaxConfigBytes {
		t.Errorf("100,000 sites of %d bytes, and a quarter more, need %d bytes: over the default limit of %d", len(site), need, DefaultMaxConfigBytes)
	}
}

// TestFileOverLimitNotRead: a file larger than the limit is refused by its
// size, without reading it: a file of a gigabyte (sparse, taking no disk)
// at a limit of 64 MiB allocates nothing near the limit.
func TestFileOverLimitNotRead(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "huge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	src := New(dir, zap.NewNop())
	src.MaxBytes = 64 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err = src.Snapshot()
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "huge.yaml") || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("got %v, want an error naming huge.yaml and the limit", err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 16<<20 {
		t.Errorf("refusing the file allocated %d MiB", allocated>>20)
	}
}

// TestFullReadHashesUnchangedFilesAsTheyStream: a full read (a resync)
// of a file whose bytes did not change keeps its objects and does not
// hold its bytes (a 1 MiB file costs well under 1 MiB of allocations); an
// edit that keeps the file's size is still seen by its hash.
func TestFullReadHashesUnchangedFilesAsTheyStream(t *testing.T) {
	d := fileDir{t, t.TempDir()}
	padding := "# " + strings.Repeat("x", 1<<20) + "\n"
	d.put("a.yaml", routeYAML("a", "/a")+padding)
	s := watched(d.dir)
	first := routesByName(t, s)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s.readAllNext()
	second := routesByName(t, s)
	runtime.ReadMemStats(&after)
	if second["a"] != first["a"] {
		t.Error("a full read of an unchanged file made new objects")
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 256<<10 {
		t.Errorf("a full read of an unchanged 1 MiB file allocated %d KiB", allocated>>10)
	}
	d.put("a.yaml", routeYAML("a", "/b")+padding)
	s.readAllNext()
	if third := routesByName(t, s); pathOf(third["a"]) != "/b" {
		t.Errorf("an edit of the same size: path %s, want /b", pathOf(third["a"]))
	}
}
