package kube

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

// TestStandaloneServesTenThousandCertificates: one HTTPS port, 10,000
// ListenerSets with a hostname and certificate each (the Knative shape);
// every hostname gets its own certificate at the handshake.
func TestStandaloneServesTenThousandCertificates(t *testing.T) {
	n := 10000
	if testing.Short() {
		n = 500
	}
	port := freeport.Port(t)
	var b strings.Builder
	fmt.Fprintf(&b, gatewayYAML+`  - {name: http, port: %d, protocol: HTTP}
`, freeport.Port(t))
	leaves := make([]*x509.Certificate, n)
	for i := range n {
		host := fmt.Sprintf("svc-%d.apps.example.com", i)
		c := newTestCert(t, host)
		leaves[i] = c.leaf
		fmt.Fprintf(&b, "---\n%s---\n", secretYAML("apps", fmt.Sprintf("cert-%d", i), c))
		fmt.Fprintf(&b, `apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ls-%d, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - {name: https, hostname: %s, port: %d, protocol: HTTPS, tls: {certificateRefs: [{name: cert-%d}]}}
`, i, host, port, i)
	}
	start := time.Now()
	startStandalone(t, map[string]string{"all.yaml": b.String()})
	t.Logf("%d certificates loaded and serving in %v", n, time.Since(start))

	addr := fmt.Sprintf("127.0.0.1:%d", port)
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for range 4 {
		wg.Go(func() {
			for i := range work {
				host := fmt.Sprintf("svc-%d.apps.example.com", i)
				conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{ServerName: host, InsecureSkipVerify: true}) //nolint:gosec // the leaf is compared below
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %v", host, err))
					mu.Unlock()
					continue
				}
				leaf := conn.ConnectionState().PeerCertificates[0]
				conn.Close()
				if !leaf.Equal(leaves[i]) {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: served the certificate of %v", host, leaf.DNSNames))
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if len(failures) > 0 {
		t.Errorf("%d of %d hostnames failed; first: %v", len(failures), n, failures[:min(5, len(failures))])
	}
}
