package kube

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/testkit/acmetest"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/proxy"
)

const acmeStandaloneTmpl = gatewayYAML + `  - {name: http, port: {{.HTTP}}, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata:
  name: app
  namespace: apps
  annotations: {portico.dev/acme: http-01}
spec:
  parentRef: {name: gw}
  listeners:
  - name: https
    hostname: app.portico.test
    port: {{.HTTPS}}
    protocol: HTTPS
    tls: {certificateRefs: [{name: app-tls}]}
`

// acmeEvents counts the manager's events.
type acmeEvents struct {
	mu     sync.Mutex
	counts map[string]int
}

func (e *acmeEvents) ObserveACME(event string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counts[event]++
}

func (e *acmeEvents) get(event string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.counts[event]
}

// acmeStandalone is Portico standalone with an ACME manager.
type acmeStandalone struct {
	s      *pipeline.Loop
	rt     *proxy.Runtime
	mgr    *acme.Manager
	events *acmeEvents
	stop   func()
}

// startACMEStandalone serves dir with an ACME manager over storage that
// orders from pebble; tune, if any, adjusts the manager's options.
func startACMEStandalone(t *testing.T, dir string, pebble *acmetest.Server, storage certmagic.Storage, tune ...func(*acme.Options)) *acmeStandalone {
	log := zaptest.NewLogger(t)
	a := &acmeStandalone{events: &acmeEvents{counts: map[string]int{}}}
	mopts := acme.Options{
		Directory:    pebble.DirectoryURL,
		Email:        "acme@portico.test",
		TrustedRoots: pebble.DirectoryRoots,
		Storage:      storage,
		MinBackoff:   time.Second,
		OnChange:     func() { a.s.Changed() },
		Observer:     a.events,
		Logger:       log.Named("acme"),
	}
	for _, f := range tune {
		f(&mopts)
	}
	mgr, err := acme.New(mopts)
	if err != nil {
		t.Fatal(err)
	}
	a.mgr = mgr
	opts := proxy.DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 5 * time.Second
	opts.Challenges = mgr
	a.rt = proxy.New(opts, log.Named("proxy"))
	a.s = pipeline.New(pipeline.Options{Holdoff: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, ACMESecrets: true},
		filesource.New(dir, log.Named("config")), a.rt, mgr, pipeline.Outputs{}, log.Named("standalone"))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.s.Run(ctx) }()
	var once sync.Once
	a.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
			mgr.Close()
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			defer c()
			_ = a.rt.Close(sctx)
		})
	}
	t.Cleanup(a.stop)
	return a
}

// resolvedRefs is the ResolvedRefs condition of the only listener of the
// ListenerSet apps/app, nil before the first configuration.
func (a *acmeStandalone) resolvedRefs() *metav1.Condition {
	st := a.s.Statuses()
	if st == nil {
		return nil
	}
	ls := st.ListenerSets.At(nn("apps", "app"))
	if len(ls.Listeners) != 1 {
		return nil
	}
	return meta.FindStatusCondition(ls.Listeners[0].Conditions, string(gwv1.ListenerConditionResolvedRefs))
}

// TestStandaloneACMEIssues runs Portico standalone against Pebble: a
// ListenerSet that opted in to ACME, whose Secret exists nowhere, gets a
// certificate that Pebble validated over HTTP-01 on the Gateway's HTTP
// listener, and serves it at the next handshake. After a restart over the
// same data directory the certificate serves again without a new order.
func TestStandaloneACMEIssues(t *testing.T) {
	const host = "app.portico.test"
	ports := map[string]int{"HTTP": freeport.Port(t), "HTTPS": freeport.Port(t)}
	pebble := acmetest.Start(t, acmetest.Options{HTTPPort: ports["HTTP"]})

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gateway.yaml"), []byte(render(t, acmeStandaloneTmpl, ports)), 0o600); err != nil {
		t.Fatal(err)
	}
	storage := &certmagic.FileStorage{Path: t.TempDir()}
	start := time.Now()
	a := startACMEStandalone(t, dir, pebble, storage)

	// Pending first: the order cannot have completed before the first
	// configuration, which is what starts it.
	deadline := time.Now().Add(10 * time.Second)
	for a.resolvedRefs() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if c := a.resolvedRefs(); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "waiting for an ACME certificate for "+host) {
		t.Fatalf("first status: ResolvedRefs %+v, want False waiting for the certificate", c)
	}

	httpsAddr := fmt.Sprintf("127.0.0.1:%d", ports["HTTPS"])
	handshake := func(sni string) (*tls.ConnectionState, error) {
		d := &net.Dialer{Timeout: 2 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", httpsAddr, &tls.Config{ServerName: sni, RootCAs: pebble.Roots, MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		cs := conn.ConnectionState()
		return &cs, nil
	}
	// served waits until the listener resolved and a handshake for host
	// verifies under Pebble's root.
	served := func(a *acmeStandalone) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for {
			var err error
			if c := a.resolvedRefs(); c != nil && c.Status == metav1.ConditionTrue {
				var cs *tls.ConnectionState
				if cs, err = handshake(host); err == nil {
					if leaf := cs.PeerCertificates[0]; !slices.Equal(leaf.DNSNames, []string{host}) {
						t.Errorf("leaf names %q, want [%s]", leaf.DNSNames, host)
					}
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no certificate served for %s after 90s: ResolvedRefs %+v, handshake error %v", host, a.resolvedRefs(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	served(a)
	t.Logf("certificate for %s issued and served %v after start", host, time.Since(start).Round(time.Millisecond))
	if got := a.events.get("obtained"); got != 1 {
		t.Errorf("%d certificates obtained, want 1", got)
	}

	// An unknown SNI is refused and orders nothing.
	if _, err := handshake("other.portico.test"); err == nil {
		t.Error("handshake for a hostname no listener has succeeded")
	}
	time.Sleep(200 * time.Millisecond)
	if got := a.mgr.Hostnames(); !slices.Equal(got, []string{host}) {
		t.Errorf("manager holds %q, want only %s", got, host)
	}
	if got := a.events.get("obtained") + a.events.get("failed"); got != 1 {
		t.Errorf("%d orders finished, want the one for %s", got, host)
	}
	if keys, err := storage.List(context.Background(), "certificates", true); err != nil {
		t.Error(err)
	} else if slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "other.portico.test") }) {
		t.Errorf("storage holds something for the unknown hostname: %q", keys)
	}

	// A challenge path is answered before routes only for tokens in the
	// storage: anything else falls through to routing (404 here, as the
	// HTTP listener has no route).
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/.well-known/acme-challenge/unknown-token", ports["HTTP"]))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown challenge token: status %d, want 404", resp.StatusCode)
	}

	// A restart over the same storage serves the stored certificate.
	a.stop()
	b := startACMEStandalone(t, dir, pebble, storage)
	served(b)
	if got := b.events.get("obtained") + b.events.get("failed"); got != 0 {
		t.Errorf("after a restart: %d orders, want none", got)
	}
}
