package kube

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/freeport"
)

const gepE2EGateway = gatewayYAML + `  - {name: http, port: {{.HTTP}}, protocol: HTTP, hostname: gw.example.com}
`

// The winner is the older ListenerSet. Creation times are explicit: this
// test is about serving, and first-seen times of the file source are
// checked on their own (TestFileSourceLaterObjectsAreNewer).
const gepE2EWinner = `apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ls-winner, namespace: apps, creationTimestamp: "2025-01-01T00:00:00Z"}
spec:
  parentRef: {name: gw}
  listeners:
  - name: app
    hostname: app.example.com
    port: {{.HTTPS}}
    protocol: HTTPS
    tls: {certificateRefs: [{name: winner-tls}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-winner, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: ls-winner}]
  rules: [{backendRefs: [{name: svc-winner, port: 80}]}]
`

// The loser arrives later and wants the same hostname and port; its other
// listener does not conflict, so the ListenerSet itself is accepted.
const gepE2ELoser = `apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ls-loser, namespace: apps, creationTimestamp: "2025-02-01T00:00:00Z"}
spec:
  parentRef: {name: gw}
  listeners:
  - name: app
    hostname: app.example.com
    port: {{.HTTPS}}
    protocol: HTTPS
    tls: {certificateRefs: [{name: loser-tls}]}
  - name: other
    hostname: other.example.com
    port: {{.HTTPS}}
    protocol: HTTPS
    tls: {certificateRefs: [{name: other-tls}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-loser, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: ls-loser}]
  rules: [{backendRefs: [{name: svc-loser, port: 80}]}]
`

// TestGEP1713ConflictedListenerEndToEnd serves ListenerSet listeners over
// real sockets: a newer ListenerSet listener that conflicts with an older
// one serves nothing (the older one keeps the hostname, its certificate and
// its backend), while the newer ListenerSet's other listener serves; once
// the winner's file is deleted, the former loser takes the hostname over.
func TestGEP1713ConflictedListenerEndToEnd(t *testing.T) {
	ports := map[string]int{"HTTP": freeport.Port(t), "HTTPS": freeport.Port(t)}
	winnerCert := newTestCert(t, "app.example.com")
	loserCert := newTestCert(t, "app.example.com")
	otherCert := newTestCert(t, "other.example.com")
	roots := x509.NewCertPool()
	for _, c := range []testCert{winnerCert, loserCert, otherCert} {
		roots.AddCert(c.leaf)
	}
	bkWinner, bkLoser := startBackend(t, "backend-winner"), startBackend(t, "backend-loser")

	h := startStandalone(t, map[string]string{
		"gateway.yaml": render(t, gepE2EGateway, ports),
		"winner.yaml":  render(t, gepE2EWinner, ports) + "---\n" + secretYAML("apps", "winner-tls", winnerCert),
		"backends.yaml": serviceYAML("apps", "svc-winner", bkWinner) + "---\n" + serviceYAML("apps", "svc-loser", bkLoser) +
			"---\n" + secretYAML("apps", "loser-tls", loserCert) + "---\n" + secretYAML("apps", "other-tls", otherCert),
	})
	addr := fmt.Sprintf("127.0.0.1:%d", ports["HTTPS"])

	gepEventually(t, "the winner serves app.example.com", func() error {
		return gepServes(addr, roots, "app.example.com", "backend-winner", winnerCert)
	})

	h.write("loser.yaml", render(t, gepE2ELoser, ports))
	gepEventually(t, "the loser's other listener serves", func() error {
		return gepServes(addr, roots, "other.example.com", "backend-loser", otherCert)
	})
	// Same config generation as above: the conflicted listener's route and
	// certificate are nowhere, app.example.com is still the winner's.
	for range 3 {
		if err := gepServes(addr, roots, "app.example.com", "backend-winner", winnerCert); err != nil {
			t.Fatalf("with a conflicting newer ListenerSet: %v", err)
		}
	}

	if err := os.Remove(filepath.Join(h.dir, "winner.yaml")); err != nil {
		t.Fatal(err)
	}
	gepEventually(t, "the former loser serves app.example.com", func() error {
		return gepServes(addr, roots, "app.example.com", "backend-loser", loserCert)
	})
	if err := gepServes(addr, roots, "other.example.com", "backend-loser", otherCert); err != nil {
		t.Errorf("after the winner is gone: %v", err)
	}
	if hits := bkWinner.hits.Load(); hits == 0 {
		t.Error("the winner's backend never got a request")
	}
}

// gepServes sends one request on a new connection (so that each call sees
// the current config) and checks the backend that answered and the
// certificate the handshake presented.
func gepServes(addr string, roots *x509.CertPool, host, backend string, cert testCert) error {
	c := tlsClient(addr, roots, false)
	defer c.CloseIdleConnections()
	resp, err := c.Get("https://" + host + "/")
	if err != nil {
		return fmt.Errorf("GET https://%s/: %w", host, err)
	}
	defer resp.Body.Close()
	got := resp.Header.Get("X-Backend")
	if resp.StatusCode != 200 || got != backend {
		return fmt.Errorf("GET https://%s/: %d from %q, want 200 from %q", host, resp.StatusCode, got, backend)
	}
	if leaf := resp.TLS.PeerCertificates[0]; !bytes.Equal(leaf.Raw, cert.leaf.Raw) {
		return fmt.Errorf("GET https://%s/: the handshake presented another certificate (serial %s, want %s)", host, leaf.SerialNumber, cert.leaf.SerialNumber)
	}
	return nil
}

// gepEventually retries check until it passes: a file change reaches the
// data plane after the watch, the debounce and the swap.
func gepEventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var errs []string
	for {
		err := check()
		if err == nil {
			return
		}
		if len(errs) == 0 || errs[len(errs)-1] != err.Error() {
			errs = append(errs, err.Error())
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened:\n  %s", what, strings.Join(errs, "\n  "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
