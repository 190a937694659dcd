//go:build linux

package filesource

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/testkit/testyaml"
	"portico.dev/portico/internal/testkit/usage"
)

// BenchmarkSnapshot10k is a standalone start at 10,000 hostnames: one file
// holding a Secret, ListenerSet and HTTPRoute per hostname (the shape of
// bench/sidebyside), read, decoded, defaulted and admitted by a new Source.
// Besides cpu-ms/op (both cores count) it reports the process's peak
// resident memory during the load (peakRSS-MB, the kernel's high-water mark
// reset before each iteration) and the heap the loaded objects hold
// afterwards (heap-MB).
func BenchmarkSnapshot10k(b *testing.B) { benchmarkSnapshot(b, 10_000) }

func benchmarkSnapshot(b *testing.B, n int) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sites.yaml"), sitesYAML(b, n), 0o644); err != nil {
		b.Fatal(err)
	}
	var peak, heapMB float64
	var cpu time.Duration
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		usage.ResetPeakRSS(b)
		before := usage.CPU()
		b.StartTimer()
		res, err := New(dir, zap.NewNop()).Snapshot()
		b.StopTimer()
		cpu += usage.CPU() - before
		if err != nil {
			b.Fatal(err)
		}
		if len(res.HTTPRoutes) != n || len(res.ListenerSets) != n {
			b.Fatalf("loaded %d routes and %d ListenerSets, want %d", len(res.HTTPRoutes), len(res.ListenerSets), n)
		}
		peak = float64(usage.PeakRSS(b)) / (1 << 20)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapMB = float64(ms.HeapAlloc) / (1 << 20)
		runtime.KeepAlive(res)
		b.StartTimer()
	}
	b.ReportMetric(float64(cpu)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
	b.ReportMetric(peak, "peakRSS-MB")
	b.ReportMetric(heapMB, "heap-MB")
}

// sitesYAML is the Gateway, its backend and n sites, each with its own
// certificate Secret (the same key pair: parsing them is not this
// benchmark's business, their size is).
func sitesYAML(b *testing.B, n int) []byte {
	certPEM, keyPEM := selfSigned(b)
	return sitesYAMLWith(n, certPEM, keyPEM)
}

// selfSigned is a certificate and key in PEM, each line indented for a
// YAML block scalar under a key of the top-level mapping.
func selfSigned(b *testing.B) (certPEM, keyPEM string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "example.com"},
		DNSNames:     []string{"*.example.com"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		b.Fatal(err)
	}
	return testyaml.Indent(4, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))) + "\n",
		testyaml.Indent(4, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))) + "\n"
}

// BenchmarkUnmarshalStrictSite decodes the three documents of a site of
// BenchmarkSnapshot10k (a Secret with a certificate and key, a ListenerSet,
// an HTTPRoute) with the library and with unmarshalStrict.
func BenchmarkUnmarshalStrictSite(b *testing.B) {
	certPEM, keyPEM := selfSigned(b)
	split, _ := splitDocuments(sitesYAMLWith(1, certPEM, keyPEM))
	var docs [][]byte
	var kinds [][2]string
	for _, d := range split[2:] {
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(d.raw, &tm); err != nil {
			b.Fatal(err)
		}
		docs = append(docs, d.raw)
		kinds = append(kinds, [2]string{tm.APIVersion, tm.Kind})
	}
	for _, way := range []string{"library", "short"} {
		b.Run(way, func(b *testing.B) {
			plans := newJSONPlans()
			for b.Loop() {
				for i, raw := range docs {
					obj, _ := newObject(kinds[i][0], kinds[i][1])
					var err error
					if way == "library" {
						err = yaml.UnmarshalStrict(raw, obj)
					} else {
						err = unmarshalStrict(raw, obj, plans)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
