package bench_test

// Benchmarks of SNI certificate selection at Knative scale; figures and
// commands are in README.md, section "SNI".

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"

	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/sni"
)

var sizes = []int{1000, 10000, 100000}

// hostnameAt is the i-th listener hostname of the workload: like Knative,
// one exact name per Service "svc-I.ns-K.example.com", and one wildcard
// listener per namespace of 20 Services. The names for n are a prefix of the
// names for any larger n, so one set of certificates serves every size.
func hostnameAt(i int) string {
	if i%20 == 0 {
		return fmt.Sprintf("*.ns-%d.example.com", i/20)
	}
	return fmt.Sprintf("svc-%d.ns-%d.example.com", i, i/20)
}

// certStore issues and parses the workload's certificates once per test
// binary run, growing on demand.
type certStore struct {
	mu    sync.Mutex
	ca    *snitest.CA
	pems  []snitest.KeyPair
	certs []*tls.Certificate
}

var store certStore

func (s *certStore) pemsFor(b *testing.B, n int) []snitest.KeyPair {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ca == nil {
		ca, err := snitest.NewCA()
		if err != nil {
			b.Fatal(err)
		}
		s.ca = ca
	}
	if have := len(s.pems); have < n {
		names := make([]string, n-have)
		for i := range names {
			names[i] = hostnameAt(have + i)
		}
		pems, err := s.ca.IssueMany(names, int64(have)+2)
		if err != nil {
			b.Fatal(err)
		}
		s.pems = append(s.pems, pems...)
	}
	return s.pems[:n]
}

func (s *certStore) certsFor(b *testing.B, n int) []*tls.Certificate {
	pems := s.pemsFor(b, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if have := len(s.certs); have < n {
		certs, errs := sni.NewCache().LoadAll(keyPairs(pems[have:n], have), 0)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		s.certs = append(s.certs, certs...)
	}
	return s.certs[:n]
}

func keyPairs(pems []snitest.KeyPair, first int) []sni.KeyPair {
	pairs := make([]sni.KeyPair, len(pems))
	for i, p := range pems {
		pairs[i] = sni.KeyPair{Key: fmt.Sprintf("ns-%d/cert-%d", (first+i)/20, first+i), CertPEM: p.CertPEM, KeyPEM: p.KeyPEM}
	}
	return pairs
}

// hostnames returns the first n hostnames of the workload.
func hostnames(n int) []string {
	hs := make([]string, n)
	for i := range hs {
		hs[i] = hostnameAt(i)
	}
	return hs
}

func entries(certs []*tls.Certificate) []*sni.Entry {
	es := make([]*sni.Entry, len(certs))
	for i, c := range certs {
		es[i] = &sni.Entry{Hostname: hostnameAt(i), Certificates: []*tls.Certificate{c}, Value: i}
	}
	return es
}

// queries returns the lookup mix for a table of n hostnames, in random
// order: 40% exact hits, 30% wildcard hits (10% each at depth 1, 2 and 3
// below the wildcard's suffix), 30% misses (half in a namespace without a
// wildcard listener, half in another domain).
func queries(n int) []string {
	r := rand.New(rand.NewPCG(uint64(n), 42))
	namespaces := (n + 19) / 20
	q := make([]string, 1<<16)
	for i := range q {
		k := r.IntN(namespaces)
		x := r.IntN(1 << 20)
		switch p := r.IntN(100); {
		case p < 40:
			j := r.IntN(n)
			if j%20 == 0 {
				j++ // the exact name next to the wildcard
			}
			q[i] = hostnameAt(min(j, n-1))
		case p < 50:
			q[i] = fmt.Sprintf("x%d.ns-%d.example.com", x, k)
		case p < 60:
			q[i] = fmt.Sprintf("a.x%d.ns-%d.example.com", x, k)
		case p < 70:
			q[i] = fmt.Sprintf("b.a.x%d.ns-%d.example.com", x, k)
		case p < 85:
			q[i] = fmt.Sprintf("svc-%d.nsx-%d.example.com", x, k)
		default:
			q[i] = fmt.Sprintf("svc-%d.ns-%d.example.net", x, k)
		}
	}
	return q
}

// hellos wraps each query in the ClientHelloInfo of a current TLS 1.3
// client, for the peers that select by ClientHelloInfo.
func hellos(qs []string, conn net.Conn) []*tls.ClientHelloInfo {
	hs := make([]*tls.ClientHelloInfo, len(qs))
	for i, q := range qs {
		hs[i] = &tls.ClientHelloInfo{
			ServerName:        q,
			SupportedVersions: []uint16{tls.VersionTLS13, tls.VersionTLS12},
			CipherSuites:      []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256},
			SupportedCurves:   []tls.CurveID{tls.X25519, tls.CurveP256},
			SupportedPoints:   []uint8{0},
			SignatureSchemes:  []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256, tls.PSSWithSHA256, tls.PKCS1WithSHA256},
			Conn:              conn,
		}
	}
	return hs
}

// BenchmarkSNILookup compares, on the same certificates and queries:
//   - portico: sni.Table.Lookup;
//   - stdlib: crypto/tls's selection when every certificate is in
//     tls.Config.Certificates (no NameToCertificate): the first certificate
//     the client supports by SupportsCertificate, else the first one;
//   - certmagic: certmagic.Config.GetCertificate over its in-memory cache.
//
// The peers match certificate SANs, whose wildcard covers one label, so
// they answer the depth 2 and 3 wildcard queries with their default.
func BenchmarkSNILookup(b *testing.B) {
	for _, n := range sizes {
		certs := store.certsFor(b, n)
		qs := queries(n)
		mask := len(qs) - 1

		b.Run(fmt.Sprintf("portico/n=%d", n), func(b *testing.B) {
			tab := sni.NewTable(entries(certs))
			b.ReportAllocs()
			found := 0
			cpu := cpuNow()
			for i := 0; b.Loop(); i++ {
				if tab.Lookup(qs[i&mask]) != nil {
					found++
				}
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(found)/float64(b.N), "hit/op")
		})

		b.Run(fmt.Sprintf("stdlib/n=%d", n), func(b *testing.B) {
			cfg := &tls.Config{Certificates: make([]tls.Certificate, n)}
			for i, c := range certs {
				cfg.Certificates[i] = *c
			}
			hs := hellos(qs, nil)
			b.ReportAllocs()
			cpu := cpuNow()
			for i := 0; b.Loop(); i++ {
				stdlibSelect(cfg, hs[i&mask])
			}
			reportCPU(b, cpu)
		})

		b.Run(fmt.Sprintf("certmagic/n=%d", n), func(b *testing.B) {
			cm, stop := certmagicConfig(b, certs)
			defer stop()
			c1, c2 := net.Pipe()
			defer c1.Close()
			defer c2.Close()
			hs := hellos(qs, c1)
			b.ReportAllocs()
			cpu := cpuNow()
			for i := 0; b.Loop(); i++ {
				cm.GetCertificate(hs[i&mask])
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkSNILookupKinds splits the queries of BenchmarkSNILookup by what
// they find, to show where the time of the mix goes: exact hits, wildcard
// hits, misses in a namespace without a wildcard, misses in a domain the
// table does not serve. Each kind runs on its own, so its branches are
// easier to predict than in the mix.
func BenchmarkSNILookupKinds(b *testing.B) {
	for _, n := range sizes {
		certs := store.certsFor(b, n)
		tab := sni.NewTable(entries(certs))
		kinds := map[string][]string{}
		for _, q := range queries(n) {
			kind := "miss-domain"
			switch e := tab.Lookup(q); {
			case e != nil && strings.HasPrefix(e.Hostname, "*."):
				kind = "wildcard"
			case e != nil:
				kind = "exact"
			case strings.HasSuffix(q, ".example.com"):
				kind = "miss-namespace"
			}
			kinds[kind] = append(kinds[kind], q)
		}
		for _, kind := range []string{"exact", "wildcard", "miss-namespace", "miss-domain"} {
			qs := kinds[kind][:1<<13] // every kind has over 8,192 of the 65,536
			const mask = 1<<13 - 1
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					tab.Lookup(qs[i&mask])
				}
			})
		}
	}
}

// stdlibSelect is crypto/tls's own choice for a Config with several
// Certificates, no NameToCertificate and no GetCertificate
// (Config.getCertificate, which is not exported).
func stdlibSelect(cfg *tls.Config, hello *tls.ClientHelloInfo) *tls.Certificate {
	for i := range cfg.Certificates {
		if hello.SupportsCertificate(&cfg.Certificates[i]) == nil {
			return &cfg.Certificates[i]
		}
	}
	return &cfg.Certificates[0]
}

func certmagicConfig(b *testing.B, certs []*tls.Certificate) (*certmagic.Config, func()) {
	var cfg *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return cfg, nil },
		Logger:           zap.NewNop(),
	})
	cfg = certmagic.New(cache, certmagic.Config{
		Storage: &certmagic.FileStorage{Path: b.TempDir()},
		Logger:  zap.NewNop(),
		OCSP:    certmagic.OCSPConfig{DisableStapling: true},
	})
	for _, c := range certs {
		if _, err := cfg.CacheUnmanagedTLSCertificate(context.Background(), *c, nil); err != nil {
			b.Fatal(err)
		}
	}
	return cfg, cache.Stop
}

// BenchmarkSNIHandshake runs full TLS 1.3 handshakes (ECDSA P-256, no
// resumption) through sni.ServerConfig, client and server in this process
// over an in-memory pipe. The client verifies the chain.
//   - table=1: a table of one name;
//   - table=100000/same-name: 100,000 names, the client always asks for the
//     same one: what the table size alone costs;
//   - table=100000/all-names: 100,000 names, a different one each time, so
//     each handshake also uses a certificate and key that are cold in the
//     CPU caches (and that the client has not parsed before).
func BenchmarkSNIHandshake(b *testing.B) {
	all := entries(store.certsFor(b, 100000))
	var exact []string // names with a certificate that verifies for them
	for _, e := range all {
		if e.Hostname[0] != '*' {
			exact = append(exact, e.Hostname)
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(exact), func(i, j int) { exact[i], exact[j] = exact[j], exact[i] })
	client := &tls.Config{RootCAs: store.ca.Pool, MinVersion: tls.VersionTLS13}
	type config struct {
		name   string
		server *tls.Config
		names  []string
	}
	serverFor := func(es []*sni.Entry) *tls.Config {
		tab := sni.NewTable(es)
		return sni.ServerConfig(&tls.Config{MinVersion: tls.VersionTLS13, SessionTicketsDisabled: true},
			func() *sni.Table { return tab }, func(net.Conn, *sni.Entry) {})
	}
	big := serverFor(all)
	configs := []config{
		{"table=1", serverFor(all[1:2]), []string{all[1].Hostname}},
		{"table=100000/same-name", big, []string{all[1].Hostname}},
		{"table=100000/all-names", big, exact},
	}
	handshake := func(b *testing.B, server *tls.Config, name string) {
		c1, c2 := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- tls.Server(c2, server).Handshake() }()
		cc := client.Clone()
		cc.ServerName = name
		err := tls.Client(c1, cc).Handshake()
		if serr := <-done; serr != nil && err == nil {
			err = serr
		}
		c1.Close()
		c2.Close()
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range configs {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := cpuNow()
			for i := 0; b.Loop(); i++ {
				handshake(b, c.server, c.names[i%len(c.names)])
			}
			reportCPU(b, cpu)
		})
	}
	// The same three, one handshake of each per op, timed separately: a
	// change in background load hits all three alike, so their ratios are
	// steadier than those of separate runs.
	b.Run("interleaved", func(b *testing.B) {
		spent := make([]time.Duration, len(configs))
		cpu := make([]time.Duration, len(configs))
		for i := 0; b.Loop(); i++ {
			for j, c := range configs {
				start, startCPU := time.Now(), cpuNow()
				handshake(b, c.server, c.names[i%len(c.names)])
				spent[j] += time.Since(start)
				cpu[j] += cpuNow() - startCPU
			}
		}
		for j, c := range configs {
			b.ReportMetric(float64(spent[j].Nanoseconds())/float64(b.N), "ns/hs:"+c.name)
			b.ReportMetric(float64(cpu[j].Nanoseconds())/float64(b.N), "cpu-ns/hs:"+c.name)
		}
		b.ReportMetric(float64(cpu[2])/float64(cpu[0]), "cpu-ratio:all-names/table=1")
		b.ReportMetric(float64(cpu[1])/float64(cpu[0]), "cpu-ratio:same-name/table=1")
	})
}

// cpuNow is the CPU time of the whole process. On a machine shared with
// other work, ns/op also counts the time other processes hold the cores;
// CPU time does not.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64((cpuNow()-since).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkSNILoad measures the first load of 100,000 ECDSA Secrets (parse,
// key check, table build) with one worker per core and with one worker.
func BenchmarkSNILoad(b *testing.B) {
	const n = 100000
	pairs := keyPairs(store.pemsFor(b, n), 0)
	names := hostnames(n)
	for _, workers := range []int{0, 1} {
		b.Run(fmt.Sprintf("n=%d/workers=%d", n, workers), func(b *testing.B) {
			for b.Loop() {
				certs, errs := sni.NewCache().LoadAll(pairs, workers)
				es := make([]*sni.Entry, n)
				for i := range certs {
					if errs[i] != nil {
						b.Fatal(errs[i])
					}
					es[i] = &sni.Entry{Hostname: names[i], Certificates: certs[i : i+1]}
				}
				sni.NewTable(es)
			}
		})
	}
}

// BenchmarkSNIRebuild measures a configuration rebuild at 100,000 Secrets
// when one of them changed: every Secret goes through Cache.Load (99,999 of
// them are byte-equal and not parsed), then the table is rebuilt.
func BenchmarkSNIRebuild(b *testing.B) {
	const n = 100000
	pairs := keyPairs(store.pemsFor(b, n), 0)
	spare := store.pemsFor(b, n+1)[n] // the changed Secret alternates with this
	cache := sni.NewCache()
	if _, errs := cache.LoadAll(pairs, 0); errs[0] != nil {
		b.Fatal(errs[0])
	}
	cache.Sweep()
	changed := pairs[n/2]
	names := hostnames(n)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := changed
		if i%2 == 0 {
			p.CertPEM, p.KeyPEM = spare.CertPEM, spare.KeyPEM
		}
		es := make([]*sni.Entry, n)
		for j := range pairs {
			q := pairs[j]
			if j == n/2 {
				q = p
			}
			cert, err := cache.Load(q.Key, q.CertPEM, q.KeyPEM)
			if err != nil {
				b.Fatal(err)
			}
			es[j] = &sni.Entry{Hostname: names[j], Certificates: []*tls.Certificate{cert}}
		}
		sni.NewTable(es)
		cache.Sweep()
	}
}

// BenchmarkSNIHeap reports the heap held per loaded ECDSA certificate at
// 100,000: the Cache (parsed chain, private key, Leaf) plus the Table,
// measured with runtime.MemStats after a GC. The PEM input is not counted:
// it belongs to the Secrets, which exist before and after the load.
func BenchmarkSNIHeap(b *testing.B) {
	const n = 100000
	pairs := keyPairs(store.pemsFor(b, n), 0)
	pemBytes := 0
	for _, p := range pairs {
		pemBytes += len(p.CertPEM) + len(p.KeyPEM)
	}
	var perCert float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		cache := sni.NewCache()
		certs, _ := cache.LoadAll(pairs, 0)
		es := make([]*sni.Entry, n)
		for i := range certs {
			es[i] = &sni.Entry{Hostname: hostnameAt(i), Certificates: certs[i : i+1]}
		}
		tab := sni.NewTable(es)
		runtime.GC()
		runtime.ReadMemStats(&after)
		perCert = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(cache)
		runtime.KeepAlive(tab)
	}
	b.ReportMetric(perCert, "heapB/cert")
	b.ReportMetric(float64(pemBytes)/n, "pemB/cert")
}
