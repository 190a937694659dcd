package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// BenchmarkClusterNewHostname measures, with N ListenerSets (each an
// HTTPS hostname with its own certificate and HTTPRoute) already served,
// the time from creating one more ListenerSet and HTTPRoute through the API
// server to the first 200 for the new hostname through Portico. Its
// certificate Secret exists beforehand, as it would once issued. Debouncing
// is at the serve command's defaults (holdoff 10-100ms following the
// rebuilds, max delay 1s).
//
//	go test -run '^$' -bench 'BenchmarkClusterNewHostname/10000$' -benchtime 100x -timeout 45m ./kube/
//
// It reports the median, the 99th percentile and the worst of its
// iterations, and how long Portico took from start to serving every
// hostname with its statuses written (startup-s).
func BenchmarkClusterNewHostname(b *testing.B) {
	for _, n := range []int{1000, 10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { clusterNewHostname(b, n) })
	}
}

func clusterNewHostname(b *testing.B, present int) {
	f := newClusterFixture(b)
	ctx := context.Background()
	gws := f.Gateway.GatewayV1()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	f.Service("apps", "svc", f.Backend("backend"))
	port := int32(freeport.Port(b))
	// A Gateway needs a listener of its own; this one serves nothing.
	createClassAndGateway(b, f.Gateway, freeport.Port(b))

	certs := map[string]testCert{}
	var certsMu sync.Mutex
	host := func(i int) string { return fmt.Sprintf("h%d.example.com", i) }
	secret := func(i int) {
		c := newTestCert(b, host(i))
		certsMu.Lock()
		certs[host(i)] = c
		certsMu.Unlock()
		mustCreate(b)(f.Kube.CoreV1().Secrets("apps").Create(ctx, tlsSecret("apps", fmt.Sprintf("cert-%d", i), c), metav1.CreateOptions{}))
	}
	listenerSetAndRoute := func(i int) {
		mustCreate(b)(gws.ListenerSets("apps").Create(ctx, &gwv1.ListenerSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: fmt.Sprintf("ls-%d", i)},
			Spec: gwv1.ListenerSetSpec{
				ParentRef: gwv1.ParentGatewayReference{Name: "gw"},
				Listeners: []gwv1.ListenerEntry{{
					Name: "https", Hostname: ptr.To(gwv1.Hostname(host(i))),
					Port: gwv1.PortNumber(port), Protocol: gwv1.HTTPSProtocolType,
					TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: gwv1.ObjectName(fmt.Sprintf("cert-%d", i))}}},
				}},
			},
		}, metav1.CreateOptions{}))
		lsKind := gwv1.Kind("ListenerSet")
		mustCreate(b)(gws.HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: fmt.Sprintf("r-%d", i)},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Kind: &lsKind, Name: gwv1.ObjectName(fmt.Sprintf("ls-%d", i))}}},
				Rules:           []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{backendRef("svc")}}},
			},
		}, metav1.CreateOptions{}))
	}
	start := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				secret(i)
				listenerSetAndRoute(i)
			}
		})
	}
	for i := range present {
		work <- i
	}
	close(work)
	wg.Wait()
	progress(b, "created %d Secrets, ListenerSets and HTTPRoutes in %v", present, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	p := f.startPortico(f.Env.Config, "127.0.0.1", "portico-bench", func(s *replicaSetup) {
		s.opts.MinHoldoff, s.opts.Holdoff, s.opts.MaxDelay = 10*time.Millisecond, 100*time.Millisecond, time.Second
		s.readyWithin = 30 * time.Minute
	})
	first := func(i int) error {
		certsMu.Lock()
		leaf := certs[host(i)].leaf
		certsMu.Unlock()
		return fetchTLS(p.addr(port), host(i), leaf)
	}
	kubetest.WaitFor(b, 30*time.Minute, "all hostnames served", func() error { return first(present - 1) })
	served := time.Since(start)
	progress(b, "every hostname served after %v", served.Round(time.Millisecond))
	// At 100,000 there are 200,000 statuses to write first, the best part
	// of an hour on two cores, bounded by the API server. The measurement
	// waits for them: while they are written, the API server the new
	// objects go through is saturated, and what is measured is its queue.
	statusWait := 90 * time.Minute
	for deadline := time.Now().Add(statusWait); !p.c.writer.Stats().Idle && time.Now().Before(deadline); {
		time.Sleep(time.Second)
	}
	startup := time.Since(start)
	if !p.c.writer.Stats().Idle {
		progress(b, "measuring with the first statuses still being written: %d written after %v", p.c.writer.Stats().Writes, startup.Round(time.Millisecond))
		startup = 0 // not known
	} else {
		progress(b, "Portico started: every hostname served after %v, %d statuses written after %v", served.Round(time.Millisecond), p.c.writer.Stats().Writes, startup.Round(time.Millisecond))
	}

	var took []time.Duration
	b.ReportAllocs()
	for n := 0; b.Loop(); n++ {
		b.StopTimer()
		i := present + n
		gen := p.loop.Generation()
		secret(i)
		kubetest.WaitFor(b, 10*time.Second, "Secret seen", func() error {
			if p.loop.Generation() == gen {
				return errors.New("no rebuild yet")
			}
			return nil
		})
		b.StartTimer()
		t0 := time.Now()
		listenerSetAndRoute(i)
		deadline := t0.Add(30 * time.Second)
		for first(i) != nil {
			if time.Now().After(deadline) {
				b.Fatalf("%s not served after 30s: %v", host(i), first(i))
			}
			time.Sleep(time.Millisecond)
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	rank := func(p float64) time.Duration {
		return took[min(max(int(math.Ceil(p*float64(len(took))))-1, 0), len(took)-1)]
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(rank(0.5)), "p50-ms")
	b.ReportMetric(ms(rank(0.99)), "p99-ms")
	b.ReportMetric(ms(took[len(took)-1]), "max-ms")
	b.ReportMetric(served.Seconds(), "served-s")
	b.ReportMetric(startup.Seconds(), "startup-s")
	b.Logf("new hostname to first 200, %d runs: p50 %v, p99 %v, max %v", len(took), rank(0.5), rank(0.99), took[len(took)-1])
}

// progress logs a step of a long benchmark and, with -v, prints it at once:
// b.Logf shows only when the benchmark ends, which at 100,000 is an hour
// later.
func progress(b *testing.B, format string, args ...any) {
	b.Helper()
	b.Logf(format, args...)
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format(time.TimeOnly), fmt.Sprintf(format, args...))
	}
}

// fetchTLS makes one HTTPS request for host on a new connection and
// returns nil on a 200 from the backend with leaf as the certificate.
func fetchTLS(addr, host string, leaf *x509.Certificate) error {
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{ServerName: host, InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
	if err != nil {
		return err
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != "backend" {
		return fmt.Errorf("%s: %d from %q", host, resp.StatusCode, resp.Header.Get("X-Backend"))
	}
	if !resp.TLS.PeerCertificates[0].Equal(leaf) {
		return fmt.Errorf("%s: served another certificate", host)
	}
	return nil
}
