package bench

// New hostname to first 200, standalone: the run loop (debounce, translate,
// apply) over an in-memory source holding the workload of "Translate",
// served on loopback ports, and a client polling the new hostname over TLS.
// Figures are in README.md, section "Propagation".

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/proxy"
)

// memorySource is a pipeline.Source whose snapshot the benchmark sets.
type memorySource struct {
	mu      sync.Mutex
	res     *snapshot.Resources
	changed func()
}

func (s *memorySource) Run(ctx context.Context, changed, ready func()) error {
	s.mu.Lock()
	s.changed = changed
	s.mu.Unlock()
	ready()
	<-ctx.Done()
	return nil
}

func (s *memorySource) Snapshot() (*snapshot.Resources, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res, nil
}

func (s *memorySource) set(res *snapshot.Resources) {
	s.mu.Lock()
	s.res = res
	changed := s.changed
	s.mu.Unlock()
	changed()
}

func freePort(b *testing.B) gwv1.PortNumber {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return gwv1.PortNumber(l.Addr().(*net.TCPAddr).Port)
}

// BenchmarkNewHostnameFirst200 adds, per iteration, one ListenerSet, its
// HTTPRoute, Secret, Service and EndpointSlice (to a loopback backend) to
// the source and measures until the first 200 over TLS for the new
// hostname, with the loop's default holdoff (10-100 ms, following the
// rebuilds). It reports the median, the 99th percentile and the worst
// (p50-ms, p99-ms, max-ms): run it with -benchtime 100x or more for p99 to
// be more than the worst but one.
func BenchmarkNewHostnameFirst200(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { newHostnameFirst200(b, n) })
	}
}

func newHostnameFirst200(b *testing.B, n int) {
	httpPort, httpsPort := freePort(b), freePort(b)
	res, ca, err := buildWorkloadOnPorts(n, httpPort, httpsPort)
	if err != nil {
		b.Fatal(err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer backend.Close()
	backendPort, err := strconv.Atoi(backend.Listener.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):])
	if err != nil {
		b.Fatal(err)
	}
	src := &memorySource{res: res}
	rt := proxy.New(proxy.Options{BindAddress: "127.0.0.1"}, zap.NewNop())
	defer rt.Close(context.Background())
	// The rebuilds of each iteration, to tell where a slow one spent its
	// time.
	var reportsMu sync.Mutex
	type rebuild struct {
		pipeline.ApplyReport
		at time.Time // when it was applied
	}
	var reports []rebuild
	loop := pipeline.New(pipeline.Options{MinHoldoff: 10 * time.Millisecond, Holdoff: 100 * time.Millisecond, MaxDelay: time.Second},
		src, rt, nil, pipeline.Outputs{Applied: func(r pipeline.ApplyReport) {
			reportsMu.Lock()
			reports = append(reports, rebuild{r, time.Now()})
			reportsMu.Unlock()
		}}, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for loop.Ready() != nil {
		time.Sleep(10 * time.Millisecond)
	}
	var took []time.Duration
	type slow struct {
		took     time.Duration
		rebuilds []rebuild
		start    time.Time
	}
	var slowest []slow
	startTiming(b)
	for k := 0; b.Loop(); k++ {
		b.StopTimer()
		host := fmt.Sprintf("first-%d.example.com", k)
		next := withHostname(b, res, ca, host, k, backendPort)
		client := &http.Client{Timeout: time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{RootCAs: ca.Pool, ServerName: host},
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "tcp", fmt.Sprintf("127.0.0.1:%d", httpsPort))
			},
		}}
		reportsMu.Lock()
		reports = nil
		reportsMu.Unlock()
		b.StartTimer()
		start := time.Now()
		src.set(next)
		for {
			resp, err := client.Get("https://" + host + "/")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Since(start) > 30*time.Second {
				b.Fatalf("%s not served after 30 s: %v", host, err)
			}
			time.Sleep(time.Millisecond)
		}
		took = append(took, time.Since(start))
		reportsMu.Lock()
		slowest = append(slowest, slow{took[len(took)-1], reports, start})
		reportsMu.Unlock()
		res = next
	}
	slices.SortFunc(slowest, func(a, b slow) int { return cmp.Compare(b.took, a.took) })
	for _, s := range slowest[:min(3, len(slowest))] {
		var parts []string
		for _, r := range s.rebuilds {
			parts = append(parts, fmt.Sprintf("applied at %v (snapshot+translate %v, apply %v)", r.at.Sub(s.start).Round(10*time.Microsecond),
				r.Translate.Round(10*time.Microsecond), r.Apply.Round(10*time.Microsecond)))
		}
		b.Logf("slow iteration: %v; rebuilds: %s", s.took.Round(10*time.Microsecond), strings.Join(parts, "; "))
	}
	reportPercentiles(b, took)
}

// reportPercentiles reports the median, the 99th percentile (nearest rank)
// and the worst of took.
func reportPercentiles(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(took)))) - 1
		return took[min(max(i, 0), len(took)-1)]
	}
	b.ReportMetric(ms(rank(0.50)), "p50-ms")
	b.ReportMetric(ms(rank(0.99)), "p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
	b.Logf("%d iterations: p50 %v, p99 %v, max %v", len(took), rank(0.50), rank(0.99), took[len(took)-1])
}

// withHostname is res with a ListenerSet for host on res's HTTPS port, its
// HTTPRoute, certificate Secret, Service and an EndpointSlice to the
// backend on loopback.
func withHostname(b *testing.B, res *snapshot.Resources, ca *snitest.CA, host string, k, backendPort int) *snapshot.Resources {
	pair, err := ca.Issue(snitest.ECDSA, int64(10_000_000+k), host)
	if err != nil {
		b.Fatal(err)
	}
	ls := res.ListenerSets[0].DeepCopy()
	route := res.HTTPRoutes[0].DeepCopy()
	secret := res.Secrets[0].DeepCopy()
	svc := res.Services[0].DeepCopy()
	slice := res.EndpointSlices[0].DeepCopy()
	name := fmt.Sprintf("first-%d", k)
	hostname := gwv1.Hostname(host)
	ls.Name = name
	ls.Spec.Listeners[0].Hostname = &hostname
	ls.Spec.Listeners[0].TLS.CertificateRefs[0].Name = gwv1.ObjectName(name + "-tls")
	route.Name = name
	route.Spec.ParentRefs[0].Name = gwv1.ObjectName(name)
	route.Spec.Hostnames = []gwv1.Hostname{hostname}
	route.Spec.Rules[0].BackendRefs[0].Name = gwv1.ObjectName(name)
	secret.Name = name + "-tls"
	secret.Data = map[string][]byte{corev1.TLSCertKey: pair.CertPEM, corev1.TLSPrivateKeyKey: pair.KeyPEM}
	svc.Name = name
	slice.Name = name + "-1"
	slice.Labels = map[string]string{discoveryv1.LabelServiceName: name}
	port := int32(backendPort)
	slice.Ports[0].Port = &port
	slice.Endpoints[0].Addresses = []string{"127.0.0.1"}
	next := *res
	next.ListenerSets = append(slices.Clip(res.ListenerSets), ls)
	next.HTTPRoutes = append(slices.Clip(res.HTTPRoutes), route)
	next.Secrets = append(slices.Clip(res.Secrets), secret)
	next.Services = append(slices.Clip(res.Services), svc)
	next.EndpointSlices = append(slices.Clip(res.EndpointSlices), slice)
	return &next
}
