package kube

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

// acmeStaticTmpl adds to acmeStandaloneTmpl a ListenerSet on the same
// HTTPS port that did not opt in to ACME, with its own Secret.
const acmeStaticTmpl = `---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: static, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - name: https
    hostname: static.portico.test
    port: {{.HTTPS}}
    protocol: HTTPS
    tls: {certificateRefs: [{name: static-tls}]}
---
apiVersion: v1
kind: Secret
metadata: {name: static-tls, namespace: apps}
type: kubernetes.io/tls
stringData:
  tls.crt: |
{{.Cert}}
  tls.key: |
{{.Key}}
`

// TestStandaloneACMEPebbleOutage runs Portico standalone while Pebble
// cannot reach it for validation: the order fails and is retried, the
// listener's status carries the error, and another HTTPS listener on the
// same port serves throughout. Once validation can reach Portico again,
// the certificate is issued and served.
func TestStandaloneACMEPebbleOutage(t *testing.T) {
	const host, static = "app.portico.test", "static.portico.test"
	ports := map[string]int{"HTTP": freeport.Port(t), "HTTPS": freeport.Port(t)}
	pebble := acmetest.Start(t, acmetest.Options{HTTPPort: ports["HTTP"]})
	// Nothing listens on 127.0.0.3: every validation is refused.
	if err := pebble.SetA(t.Context(), host, "127.0.0.3"); err != nil {
		t.Fatal(err)
	}

	cert := newTestCert(t, static)
	data := map[string]any{"HTTP": ports["HTTP"], "HTTPS": ports["HTTPS"], "Cert": indent(4, cert.certPEM), "Key": indent(4, cert.keyPEM)}
	dir := t.TempDir()
	config := render(t, acmeStandaloneTmpl, data) + render(t, acmeStaticTmpl, data)
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startACMEStandalone(t, dir, pebble, &certmagic.FileStorage{Path: t.TempDir()})

	staticRoots := x509.NewCertPool()
	staticRoots.AddCert(cert.leaf)
	httpsAddr := fmt.Sprintf("127.0.0.1:%d", ports["HTTPS"])
	handshake := func(sni string, roots *x509.CertPool) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", httpsAddr,
			&tls.Config{ServerName: sni, RootCAs: roots, MinVersion: tls.VersionTLS12})
		if err != nil {
			return err
		}
		return conn.Close()
	}
	kubetest.WaitFor(t, 10*time.Second, "handshake for "+static, func() error { return handshake(static, staticRoots) })

	// From now until the end, the other listener keeps serving.
	var (
		stop      = make(chan struct{})
		wg        sync.WaitGroup
		handshook atomic.Int64
		mu        sync.Mutex
		failures  []error
		stopOnce  sync.Once
	)
	halt := func() {
		stopOnce.Do(func() { close(stop) })
		wg.Wait()
	}
	t.Cleanup(halt)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if err := handshake(static, staticRoots); err != nil {
				mu.Lock()
				failures = append(failures, err)
				mu.Unlock()
			} else {
				handshook.Add(1)
			}
		}
	})
	stopStatic := func() {
		halt()
		mu.Lock()
		defer mu.Unlock()
		if handshook.Load() == 0 {
			t.Errorf("%s: no handshake succeeded while ACME was failing", static)
		}
		if len(failures) > 0 {
			t.Errorf("%s: %d of %d handshakes failed while ACME was failing, first: %v",
				static, len(failures), int(handshook.Load())+len(failures), failures[0])
		}
	}

	// The order fails and the status says so.
	kubetest.WaitFor(t, 60*time.Second, "ResolvedRefs with the ACME error", func() error {
		c := a.resolvedRefs()
		if c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "ACME order for "+host+" failed") {
			return fmt.Errorf("ResolvedRefs %+v, want False with the order's error", c)
		}
		return nil
	})
	failedAt := time.Now()
	if a.events.get("failed") == 0 {
		t.Error("the status shows an error but no failed order was counted")
	}
	if a.events.get("obtained") != 0 {
		t.Fatal("a certificate was obtained while validation could not reach Portico")
	}
	if err := handshake(host, pebble.Roots); err == nil {
		t.Errorf("handshake for %s succeeded without a certificate", host)
	}

	// Validation reaches Portico again: a retry obtains the certificate.
	if err := pebble.SetA(t.Context(), host); err != nil {
		t.Fatal(err)
	}
	kubetest.WaitFor(t, 90*time.Second, "certificate for "+host+" served", func() error {
		if c := a.resolvedRefs(); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("ResolvedRefs %+v", c)
		}
		return handshake(host, pebble.Roots)
	})
	t.Logf("certificate for %s served %v after the first failure was reported (%d failed orders)",
		host, time.Since(failedAt).Round(time.Millisecond), a.events.get("failed"))
	stopStatic()
	if got := a.events.get("obtained"); got != 1 {
		t.Errorf("%d certificates obtained, want 1", got)
	}
	if got := a.mgr.Hostnames(); !slices.Equal(got, []string{host}) {
		t.Errorf("manager holds %q, want only %s", got, host)
	}
}
