package kube

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

const acmeManyGatewayTmpl = gatewayYAML + `  - {name: http, port: {{.HTTP}}, protocol: HTTP}
`

const acmeManyListenerSetTmpl = `---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata:
  name: app-{{.N}}
  namespace: apps
  annotations: {portico.dev/acme: http-01}
spec:
  parentRef: {name: gw}
  listeners:
  - name: https
    hostname: app-{{.N}}.portico.test
    port: {{.HTTPS}}
    protocol: HTTPS
    tls: {certificateRefs: [{name: app-{{.N}}-tls}]}
`

// TestStandaloneACMEManyListenerSets declares 100 ListenerSets with one
// ACME hostname each on one HTTPS port: every hostname is ordered once,
// and each serves its own certificate.
func TestStandaloneACMEManyListenerSets(t *testing.T) {
	if testing.Short() {
		t.Skip("about 90 seconds of ordering, bound by the ACME client's rate limit")
	}
	const n = 100
	// certmagic lets one ACME account place at most ten orders in any ten
	// seconds, so 100 orders take about 90 seconds whatever the
	// concurrency. An order takes about two seconds (Pebble's Retry-After
	// of one second, twice), so the default of 4 in flight already keeps
	// up with that limit; more only waits on it.
	const concurrency = 4
	ports := map[string]int{"HTTP": freeport.Port(t), "HTTPS": freeport.Port(t)}
	pebble := acmetest.Start(t, acmetest.Options{HTTPPort: ports["HTTP"]})

	var yaml strings.Builder
	yaml.WriteString(render(t, acmeManyGatewayTmpl, ports))
	hosts := make([]string, n)
	for i := range n {
		hosts[i] = fmt.Sprintf("app-%d.portico.test", i)
		yaml.WriteString(render(t, acmeManyListenerSetTmpl, map[string]int{"N": i, "HTTPS": ports["HTTPS"]}))
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(yaml.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	a := startACMEStandalone(t, dir, pebble, &certmagic.FileStorage{Path: t.TempDir()}, func(o *acme.Options) {
		o.Concurrency = concurrency
		// Debug logs of 100 orders would cost more than the orders.
		o.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named("acme")
	})
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(ports["HTTPS"]))

	// A hostname once served keeps serving: check the rest each round.
	var mu sync.Mutex
	pending := slices.Clone(hosts)
	kubetest.WaitFor(t, 180*time.Second, fmt.Sprintf("all %d hostnames served", n), func() error {
		mu.Lock()
		defer mu.Unlock()
		var left []string
		var lastErr error
		for _, h := range pending {
			leaf, err := leafFor(addr, h, pebble.Roots)
			if err == nil && !slices.Equal(leaf.DNSNames, []string{h}) {
				err = fmt.Errorf("%s: leaf names %q", h, leaf.DNSNames)
			}
			if err != nil {
				left, lastErr = append(left, h), err
			}
		}
		pending = left
		if len(left) > 0 {
			return fmt.Errorf("%d of %d not served yet, e.g. %v", len(left), n, lastErr)
		}
		return nil
	})
	t.Logf("%d ListenerSets: all %d hostnames served %v after start (concurrency %d)", n, n, time.Since(start).Round(time.Millisecond), concurrency)
	if got := a.events.get("obtained"); got != n {
		t.Errorf("%d orders obtained, want %d", got, n)
	}
	if got := a.events.get("failed"); got != 0 {
		t.Errorf("%d orders failed", got)
	}
}
