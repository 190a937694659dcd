package bench

// Benchmarks of incremental translate: one object changes in a snapshot of
// 10,000 to 100,000 hostnames of the Knative-shaped workload
// (translate_test.go), translated as the run loop does with the memory of
// the translation before. Figures and commands are in README.md, section
// "Propagation".

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/internal/testkit/usage"
	"portico.dev/portico/proxy"
	"portico.dev/portico/translate"
)

// workloads caches the workload per size: issuing 100,000 certificates
// takes longer than every benchmark of it together.
var (
	workloadsMu sync.Mutex
	workloads   = map[int]*snapshot.Resources{}
)

func workloadOf(b testing.TB, n int) *snapshot.Resources {
	b.Helper()
	workloadsMu.Lock()
	defer workloadsMu.Unlock()
	if res, ok := workloads[n]; ok {
		return res
	}
	res, err := buildTranslateWorkload(n)
	if err != nil {
		b.Fatal(err)
	}
	workloads[n] = res
	return res
}

// extraPairs are the certificates of the hostnames the benchmarks add.
var extraPairs = sync.OnceValues(func() ([]snitest.KeyPair, error) {
	ca, err := snitest.NewCA()
	if err != nil {
		return nil, err
	}
	hosts := make([]string, 64)
	for i := range hosts {
		hosts[i] = fmt.Sprintf("new-%d.example.com", i)
	}
	return ca.IssueMany(hosts, 1_000_000)
})

// ownCopy is a snapshot of its own slices over the shared workload's
// objects, which a benchmark may then change.
func ownCopy(shared *snapshot.Resources) *snapshot.Resources {
	res := *shared
	res.ListenerSets = slices.Clone(shared.ListenerSets)
	res.HTTPRoutes = slices.Clone(shared.HTTPRoutes)
	res.Secrets = slices.Clone(shared.Secrets)
	res.Services = slices.Clone(shared.Services)
	res.EndpointSlices = slices.Clone(shared.EndpointSlices)
	return &res
}

// newHostname is ListenerSet, HTTPRoute and Secret number k of those the
// benchmarks add, in the shape of the workload's.
func newHostname(b *testing.B, like *snapshot.Resources, k int) (*gwv1.ListenerSet, *gwv1.HTTPRoute, *corev1.Secret) {
	pairs, err := extraPairs()
	if err != nil {
		b.Fatal(err)
	}
	ls := like.ListenerSets[0].DeepCopy()
	route := like.HTTPRoutes[0].DeepCopy()
	secret := like.Secrets[0].DeepCopy()
	name := fmt.Sprintf("new-%d", k)
	host := gwv1.Hostname(name + ".example.com")
	created := metav1.NewTime(ls.CreationTimestamp.AddDate(1, 0, 0))
	ls.Name, ls.CreationTimestamp = name, created
	ls.Spec.Listeners[0].Hostname = &host
	ls.Spec.Listeners[0].TLS.CertificateRefs[0].Name = gwv1.ObjectName(name + "-tls")
	route.Name, route.CreationTimestamp = name, created
	route.Spec.ParentRefs[0].Name = gwv1.ObjectName(name)
	route.Spec.Hostnames = []gwv1.Hostname{host}
	secret.Name = name + "-tls"
	p := pairs[k%len(pairs)]
	secret.Data = map[string][]byte{corev1.TLSCertKey: p.CertPEM, corev1.TLSPrivateKeyKey: p.KeyPEM}
	return ls, route, secret
}

// BenchmarkAddHostname adds one ListenerSet, its HTTPRoute and its
// certificate's Secret per iteration, as Knative does for a new Service.
func BenchmarkAddHostname(b *testing.B) {
	for _, n := range []int{10_000, 50_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			res := ownCopy(workloadOf(b, n))
			mem := checkTranslated(b, res)
			startTiming(b)
			start := usage.CPU()
			for k := 0; b.Loop(); k++ {
				var host string
				res, host = withNewHostname(b, res, k)
				var out translate.Output
				out, mem = pipeline.TranslateConcurrently(translate.Settings{}, res, mem)
				if k == 0 {
					checkServes(b, out, host)
				}
			}
			reportCPU(b, start)
		})
	}
}

// withNewHostname is res with newHostname k added, and its hostname.
func withNewHostname(b *testing.B, res *snapshot.Resources, k int) (*snapshot.Resources, string) {
	ls, route, secret := newHostname(b, res, k)
	next := *res
	next.ListenerSets = append(res.ListenerSets, ls)
	next.HTTPRoutes = append(res.HTTPRoutes, route)
	next.Secrets = append(res.Secrets, secret)
	return &next, string(*ls.Spec.Listeners[0].Hostname)
}

// checkServes fails unless host is on port 443 with its routes.
func checkServes(b *testing.B, out translate.Output, host string) {
	b.Helper()
	for _, p := range out.Config.Ports {
		if p.Number == 443 {
			if l, ok := p.Listeners.Lookup(host); ok && l.Routes != nil && p.SNI.Lookup(host) != nil {
				return
			}
		}
	}
	b.Fatalf("%s is not served", host)
}

// BenchmarkDeleteListenerSet deletes one ListenerSet per iteration at
// 10,000 and 100,000: its hostname leaves, its route loses its parent.
func BenchmarkDeleteListenerSet(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			res := ownCopy(workloadOf(b, n))
			mem := checkTranslated(b, res)
			startTiming(b)
			start := usage.CPU()
			for b.Loop() {
				next := *res
				next.ListenerSets = res.ListenerSets[:len(res.ListenerSets)-1]
				res = &next
				_, mem = pipeline.TranslateConcurrently(translate.Settings{}, res, mem)
			}
			reportCPU(b, start)
		})
	}
}

// BenchmarkRotateSecret replaces one certificate's Secret per iteration at
// 10,000 and 100,000 with one holding another key pair. The copy of the
// Secret list is the benchmark's, as a source makes one per snapshot.
func BenchmarkRotateSecret(b *testing.B) {
	pairs, err := extraPairs()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			res := ownCopy(workloadOf(b, n))
			mem := checkTranslated(b, res)
			startTiming(b)
			start := usage.CPU()
			for k := 0; b.Loop(); k++ {
				i := k * 7919 % len(res.Secrets)
				rotated := res.Secrets[i].DeepCopy()
				p := pairs[k%len(pairs)]
				rotated.Data = map[string][]byte{corev1.TLSCertKey: p.CertPEM, corev1.TLSPrivateKeyKey: p.KeyPEM}
				next := *res
				next.Secrets = slices.Clone(res.Secrets)
				next.Secrets[i] = rotated
				res = &next
				_, mem = pipeline.TranslateConcurrently(translate.Settings{}, res, mem)
			}
			reportCPU(b, start)
		})
	}
}

// BenchmarkChangeEndpointSlice replaces one EndpointSlice per iteration at
// 100,000, the most frequent change in a cluster.
func BenchmarkChangeEndpointSlice(b *testing.B) {
	res := ownCopy(workloadOf(b, 100_000))
	mem := checkTranslated(b, res)
	startTiming(b)
	start := usage.CPU()
	for k := 0; b.Loop(); k++ {
		res, _ = withChangedSlice(res, k)
		_, mem = pipeline.TranslateConcurrently(translate.Settings{}, res, mem)
	}
	reportCPU(b, start)
}

// withChangedSlice is res with EndpointSlice k*7919 (modulo their number:
// spread over the list) replaced by one with another address, and the new
// one.
func withChangedSlice(res *snapshot.Resources, k int) (*snapshot.Resources, *discoveryv1.EndpointSlice) {
	i := k * 7919 % len(res.EndpointSlices)
	changed := res.EndpointSlices[i].DeepCopy()
	changed.Endpoints[0].Addresses = []string{fmt.Sprintf("10.200.%d.%d", k>>8&0xff, k&0xff)}
	next := *res
	next.EndpointSlices = slices.Clone(res.EndpointSlices)
	next.EndpointSlices[i] = changed
	return &next, changed
}

// BenchmarkTranslateApply is one change at 100,000 hostnames translated as
// the run loop does and applied to a proxy.Runtime serving the workload on
// loopback ports, as the run loop applies it (statuses aside). cpu-ms/op
// counts both; apply-us/op is the wall time of Runtime.Apply alone. The
// first iteration checks that the runtime serves the change.
func BenchmarkTranslateApply(b *testing.B) {
	b.Run("EndpointSlice", func(b *testing.B) {
		translateApply(b, func(res *snapshot.Resources, k int) (*snapshot.Resources, func(*proxy.Runtime, config.PortKey)) {
			next, es := withChangedSlice(res, k)
			key := config.BackendKey{Service: config.NamespacedName{Namespace: es.Namespace, Name: es.Labels[discoveryv1.LabelServiceName]}, Port: 80}
			want := net.JoinHostPort(es.Endpoints[0].Addresses[0], strconv.Itoa(int(*es.Ports[0].Port)))
			return next, func(rt *proxy.Runtime, _ config.PortKey) {
				if eps := rt.Current().Endpoints.Lookup(key); eps == nil || !slices.Equal(eps.Addrs, []string{want}) {
					b.Fatalf("endpoints of %v after the change: %v, want [%s]", key, eps, want)
				}
			}
		})
	})
	b.Run("AddHostname", func(b *testing.B) {
		translateApply(b, func(res *snapshot.Resources, k int) (*snapshot.Resources, func(*proxy.Runtime, config.PortKey)) {
			next, host := withNewHostname(b, res, k)
			return next, func(rt *proxy.Runtime, https config.PortKey) { checkCertificate(b, rt, https, host) }
		})
	})
}

// translateApply runs BenchmarkTranslateApply with change making each
// iteration's snapshot from the one before, and the check of its first.
func translateApply(b *testing.B, change func(*snapshot.Resources, int) (*snapshot.Resources, func(*proxy.Runtime, config.PortKey))) {
	res := ownCopy(workloadOf(b, 100_000))
	mem := checkTranslated(b, res)
	// Nothing changed since: the Config of the translation mem is from.
	out, mem := pipeline.TranslateConcurrently(translate.Settings{}, res, mem)
	ports := map[int32]int32{80: int32(freePort(b)), 443: int32(freePort(b))}
	rt := proxy.New(proxy.Options{BindAddress: "127.0.0.1"}, zap.NewNop())
	defer rt.Close(context.Background())
	if err := rt.Apply(onPorts(out.Config, ports)); err != nil {
		b.Fatal(err)
	}
	var applying time.Duration
	startTiming(b)
	start := usage.CPU()
	for k := 0; b.Loop(); k++ {
		var check func(*proxy.Runtime, config.PortKey)
		res, check = change(res, k)
		out, mem = pipeline.TranslateConcurrently(translate.Settings{}, res, mem)
		cfg := onPorts(out.Config, ports)
		applyStart := time.Now()
		if err := rt.Apply(cfg); err != nil {
			b.Fatal(err)
		}
		applying += time.Since(applyStart)
		if k == 0 {
			checkStart := usage.CPU()
			check(rt, config.PortKey{Number: ports[443]})
			start += usage.CPU() - checkStart // not the runtime's work
		}
	}
	reportCPU(b, start)
	b.ReportMetric(float64(applying.Microseconds())/float64(b.N), "apply-us/op")
}

// onPorts is cfg with its ports renumbered by to: the workload's 80 and
// 443 moved to free loopback ports.
func onPorts(cfg *config.Config, to map[int32]int32) *config.Config {
	moved := *cfg
	moved.Ports = make([]*config.Port, len(cfg.Ports))
	for i, p := range cfg.Ports {
		c := *p
		c.Number = to[p.Number]
		moved.Ports[i] = &c
	}
	return &moved
}

// checkCertificate fails unless a handshake with rt's port for host gets
// a certificate for host.
func checkCertificate(b *testing.B, rt *proxy.Runtime, port config.PortKey, host string) {
	addr := rt.Addr(port.Address, port.Number)
	if addr == nil {
		b.Fatalf("port %s is not bound", port)
	}
	// The workload's CA is not at hand here: the name is what is checked.
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr.String(), &tls.Config{ServerName: host, InsecureSkipVerify: true})
	if err != nil {
		b.Fatalf("handshake for %s: %v", host, err)
	}
	defer conn.Close()
	if err := conn.ConnectionState().PeerCertificates[0].VerifyHostname(host); err != nil {
		b.Fatalf("handshake for %s: %v", host, err)
	}
}

// BenchmarkStartup100k is the first translation at 100,000 hostnames, from
// objects already loaded to a Config that serves them: every key pair
// parsed, every table built. Besides cpu-ms/op it reports the peak resident
// memory of the process during the translation (peakRSS-MB: the kernel's
// high-water mark, reset before each iteration, so it includes the loaded
// objects) and the heap held afterwards by the objects and what translate
// keeps (heap-MB).
func BenchmarkStartup100k(b *testing.B) {
	res := workloadOf(b, 100_000)
	var peak, heapMB float64
	startTiming(b)
	start := usage.CPU()
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		usage.ResetPeakRSS(b)
		b.StartTimer()
		out, mem := pipeline.TranslateConcurrently(translate.Settings{}, res, translate.Memory{})
		b.StopTimer()
		peak = float64(usage.PeakRSS(b)) / (1 << 20)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heapMB = float64(ms.HeapAlloc) / (1 << 20)
		runtime.KeepAlive(out)
		runtime.KeepAlive(mem)
		b.StartTimer()
	}
	reportCPU(b, start)
	b.ReportMetric(peak, "peakRSS-MB")
	b.ReportMetric(heapMB, "heap-MB")
}
