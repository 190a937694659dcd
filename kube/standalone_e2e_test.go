package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
)

const gatewayTmpl = gatewayYAML + `  - {name: http, port: {{.HTTP}}, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ls-a, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - name: https
    hostname: a.example.com
    port: {{.HTTPS}}
    protocol: HTTPS
    tls: {certificateRefs: [{name: cert-a}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ls-b, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - name: https
    hostname: b.example.com
    port: {{.HTTPS}}
    protocol: HTTPS
    tls: {certificateRefs: [{name: cert-b}]}
`

const routesTmpl = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: plain, namespace: apps}
spec:
  parentRefs: [{name: gw, sectionName: http}]
  hostnames: [plain.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
    backendRefs: [{name: svc-a, port: 80}]
  - matches: [{path: {type: Exact, value: /exact}}]
    backendRefs: [{name: svc-b, port: 80}]
  - matches: [{path: {type: PathPrefix, value: /empty}}]
    backendRefs: [{name: svc-empty, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-a, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: ls-a}]
  rules:
  - backendRefs: [{name: svc-b, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-b, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: ls-b}]
  rules:
  - backendRefs: [{name: svc-c, port: 80}]
`

type e2eSetup struct {
	h              *harness
	httpAddr       string
	httpsAddr      string
	certA, certB   testCert
	roots          *x509.CertPool
	bkA, bkB, bkC  *backend
	ports          map[string]int
	backendsConfig string
}

func newE2E(t *testing.T) *e2eSetup {
	e := &e2eSetup{
		certA: newTestCert(t, "a.example.com"),
		certB: newTestCert(t, "b.example.com"),
		bkA:   startBackend(t, "backend-a"),
		bkB:   startBackend(t, "backend-b"),
		bkC:   startBackend(t, "backend-c"),
		ports: map[string]int{"HTTP": freeport.Port(t), "HTTPS": freeport.Port(t)},
	}
	e.roots = x509.NewCertPool()
	e.roots.AddCert(e.certA.leaf)
	e.roots.AddCert(e.certB.leaf)
	e.backendsConfig = strings.Join([]string{
		serviceYAML("apps", "svc-a", e.bkA),
		serviceYAML("apps", "svc-b", e.bkB),
		serviceYAML("apps", "svc-c", e.bkC),
		`apiVersion: v1
kind: Service
metadata: {name: svc-empty, namespace: apps}
spec:
  ports: [{name: http, port: 80}]
`,
		secretYAML("apps", "cert-a", e.certA),
		secretYAML("apps", "cert-b", e.certB),
	}, "---\n")
	e.h = startStandalone(t, map[string]string{
		"gateway.yaml":  render(t, gatewayTmpl, e.ports),
		"routes.yaml":   routesTmpl,
		"backends.yaml": e.backendsConfig,
	})
	e.httpAddr = fmt.Sprintf("127.0.0.1:%d", e.ports["HTTP"])
	e.httpsAddr = fmt.Sprintf("127.0.0.1:%d", e.ports["HTTPS"])
	return e
}

func TestStandaloneServesHTTPAndHTTPS(t *testing.T) {
	e := newE2E(t)
	c := httpClient(e.httpAddr)

	cases := []struct {
		url     string
		status  int
		backend string
	}{
		{"http://plain.example.com/api/users", 200, "backend-a"},
		{"http://plain.example.com/api", 200, "backend-a"},
		{"http://plain.example.com/apifoo", 404, ""},
		{"http://plain.example.com/exact", 200, "backend-b"},
		{"http://plain.example.com/exact/more", 404, ""},
		{"http://plain.example.com/", 404, ""},
		{"http://unknown.example.com/api", 404, ""},
		{"http://plain.example.com/empty/x", 503, ""},
	}
	for _, tc := range cases {
		status, _, hdr := get(t, c, tc.url)
		if status != tc.status || hdr.Get("X-Backend") != tc.backend {
			t.Errorf("GET %s = %d from %q, want %d from %q", tc.url, status, hdr.Get("X-Backend"), tc.status, tc.backend)
		}
	}

	// Forwarding: Host and path kept, client-sent forwarding headers replaced.
	req, _ := http.NewRequest("GET", "http://plain.example.com/api/./a//b%3B?q=1", nil)
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	req.Header.Set("X-Forwarded-Proto", "https")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("X-Seen-Host"); got != "plain.example.com" {
		t.Errorf("backend saw Host %q", got)
	}
	if got := resp.Header.Get("X-Seen-Path"); got != "/api/a/b%3B?q=1" {
		t.Errorf("backend saw path %q, want its normal form (dot segments and repeated slashes gone, escapes kept)", got)
	}
	if got := resp.Header.Get("X-Seen-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("backend saw X-Forwarded-For %q, want only the client address", got)
	}
	if got := resp.Header.Get("X-Seen-Forwarded-Proto"); got != "http" {
		t.Errorf("backend saw X-Forwarded-Proto %q", got)
	}

	// HTTPS: each ListenerSet hostname gets its own certificate by SNI,
	// over HTTP/1.1 and HTTP/2.
	for _, h2 := range []bool{false, true} {
		tc := tlsClient(e.httpsAddr, e.roots, h2)
		for host, want := range map[string]string{"a.example.com": "backend-b", "b.example.com": "backend-c"} {
			resp, err := tc.Get("https://" + host + "/x")
			if err != nil {
				t.Fatalf("h2=%v GET https://%s: %v", h2, host, err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != want {
				t.Errorf("h2=%v %s: %d from %q, want 200 from %q", h2, host, resp.StatusCode, resp.Header.Get("X-Backend"), want)
			}
			if leaf := resp.TLS.PeerCertificates[0]; leaf.Subject.CommonName != host {
				t.Errorf("%s served certificate for %q", host, leaf.Subject.CommonName)
			}
			if wantProto := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != wantProto {
				t.Errorf("%s: protocol %s", host, resp.Proto)
			}
			if got := resp.Header.Get("X-Seen-Forwarded-Proto"); got != "https" {
				t.Errorf("%s: backend saw X-Forwarded-Proto %q", host, got)
			}
		}
	}

	// A connection made for a.example.com may not be used for b.example.com.
	conn, err := tls.Dial("tcp", e.httpsAddr, &tls.Config{RootCAs: e.roots, ServerName: "a.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: b.example.com\r\n\r\n")
	buf := make([]byte, 64)
	n, _ := conn.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "HTTP/1.1 421") {
		t.Errorf("misdirected request got %q, want 421", buf[:n])
	}

	// No listener for the SNI and no fallback: the handshake fails.
	_, err = tls.Dial("tcp", e.httpsAddr, &tls.Config{RootCAs: e.roots, ServerName: "c.example.com"})
	if err == nil || !strings.Contains(err.Error(), "unrecognized name") {
		t.Errorf("handshake for an unknown name: %v, want unrecognized_name", err)
	}
}

func TestStandaloneH2CPriorKnowledge(t *testing.T) {
	e := newE2E(t)
	tr := &http2.Transport{
		AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, _ string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, e.httpAddr)
		},
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i := 0; i < 3; i++ {
		status, _, hdr := get(t, c, "http://plain.example.com/api/h2c")
		if status != 200 || hdr.Get("X-Backend") != "backend-a" {
			t.Fatalf("h2c request: %d from %q", status, hdr.Get("X-Backend"))
		}
	}
}

// TestStandaloneHotSwap rewrites the config continuously while clients
// send requests: routes that stay never fail, new routes serve after the
// change, and removed routes stop.
func TestStandaloneHotSwap(t *testing.T) {
	e := newE2E(t)
	ctx, cancel := context.WithCancel(context.Background())
	var ok, failed atomic.Int64
	var failures sync.Map
	var wg sync.WaitGroup
	clients := []struct {
		client *http.Client
		url    string
		want   string
	}{
		{httpClient(e.httpAddr), "http://plain.example.com/api/steady", "backend-a"},
		{tlsClient(e.httpsAddr, e.roots, false), "https://a.example.com/steady", "backend-b"},
		{tlsClient(e.httpsAddr, e.roots, true), "https://b.example.com/steady", "backend-c"},
		{httpClient(e.httpAddr), "http://plain.example.com/api/slow?sleep=50ms", "backend-a"},
	}
	for _, c := range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := c.client.Get(c.url)
				if err != nil {
					failed.Add(1)
					failures.Store(err.Error(), true)
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Header.Get("X-Backend") != c.want {
					failed.Add(1)
					failures.Store(fmt.Sprintf("%s: %d from %q", c.url, resp.StatusCode, resp.Header.Get("X-Backend")), true)
					continue
				}
				ok.Add(1)
			}
		})
	}

	// Each rewrite adds a route for a new path and a new ListenerSet for a
	// new hostname; the previous ones go away.
	const rounds = 25
	for i := 1; i <= rounds; i++ {
		extra := fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: extra, namespace: apps}
spec:
  parentRefs: [{name: gw, sectionName: http}]
  hostnames: [plain.example.com]
  rules:
  - matches: [{path: {type: PathPrefix, value: /round-%d}}]
    backendRefs: [{name: svc-c, port: 80}]
`, i)
		e.h.write("extra.yaml", extra)
		// The write goes through a temporary file whose own event may
		// move the generation before the rename does: wait for what the
		// new file says rather than for a generation.
		kubetest.WaitFor(t, 10*time.Second, fmt.Sprintf("round %d", i), func() error {
			if status, backend, err := fetch(httpClient(e.httpAddr), fmt.Sprintf("http://plain.example.com/round-%d", i)); err != nil || status != 200 || backend != "backend-c" {
				return fmt.Errorf("new route answered %d from %q (%v)", status, backend, err)
			}
			if i == 1 {
				return nil
			}
			if status, _, err := fetch(httpClient(e.httpAddr), fmt.Sprintf("http://plain.example.com/round-%d", i-1)); err != nil || status != 404 {
				return fmt.Errorf("removed route answered %d (%v)", status, err)
			}
			return nil
		})
	}
	// A new HTTPS hostname through a new ListenerSet, with its certificate.
	certD := newTestCert(t, "d.example.com")
	e.h.write("extra-ls.yaml", secretYAML("apps", "cert-d", certD)+"---\n"+fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ls-d, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - {name: https, hostname: d.example.com, port: %d, protocol: HTTPS, tls: {certificateRefs: [{name: cert-d}]}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: route-d, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: ls-d}]
  rules:
  - backendRefs: [{name: svc-a, port: 80}]
`, e.ports["HTTPS"]))
	roots := e.roots.Clone()
	roots.AddCert(certD.leaf)
	kubetest.WaitFor(t, 10*time.Second, "new ListenerSet hostname", func() error {
		if status, backend, err := fetch(tlsClient(e.httpsAddr, roots, false), "https://d.example.com/"); err != nil || status != 200 || backend != "backend-a" {
			return fmt.Errorf("%d from %q (%v)", status, backend, err)
		}
		return nil
	})

	time.Sleep(100 * time.Millisecond)
	cancel()
	wg.Wait()
	failures.Range(func(k, _ any) bool { t.Errorf("request failed during swaps: %v", k); return true })
	if failed.Load() != 0 || ok.Load() < 50 {
		t.Errorf("during %d config swaps: %d requests ok, %d failed", rounds+1, ok.Load(), failed.Load())
	}
	t.Logf("%d requests ok across %d config swaps", ok.Load(), rounds+1)
}

// TestStandaloneBrokenEditKeepsServing: a config that does not parse, or
// holds an object the API server would refuse (a port out of range, a
// hostname no listener could have), is reported with its file and document,
// and the last good one keeps serving: not one request fails meanwhile.
func TestStandaloneBrokenEditKeepsServing(t *testing.T) {
	httpPort := func(port int) func(e *e2eSetup) string {
		return func(e *e2eSetup) string {
			return render(t, gatewayTmpl, map[string]int{"HTTP": port, "HTTPS": e.ports["HTTPS"]})
		}
	}
	for _, tc := range []struct {
		name, file string
		content    func(e *e2eSetup) string
		names      []string // what the error must say
	}{
		{"bad YAML", "broken.yaml", func(*e2eSetup) string { return "apiVersion: v1\nkind: Service\nmetadata: {name: x\n" },
			[]string{"broken.yaml"}},
		{"listener port 70000", "gateway.yaml", httpPort(70000), []string{"gateway.yaml:", "document 2", "spec.listeners[0].port"}},
		{"listener port 0", "gateway.yaml", httpPort(0), []string{"gateway.yaml:", "document 2", "spec.listeners[0].port"}},
		{"two wildcards", "gateway.yaml", func(e *e2eSetup) string {
			return strings.Replace(httpPort(e.ports["HTTP"])(e), "hostname: a.example.com", "hostname: '*.*.example.com'", 1)
		}, []string{"gateway.yaml:", "document 3", "spec.listeners[0].hostname"}},
		{"service port 70000", "more.yaml", func(*e2eSetup) string {
			return "apiVersion: v1\nkind: Service\nmetadata: {name: svc-x, namespace: apps}\nspec: {ports: [{name: http, port: 70000}]}\n"
		}, []string{"more.yaml:1: document 1", "spec.ports[0].port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newE2E(t)
			gen := e.h.s.Generation()
			stop := make(chan struct{})
			var served, failed atomic.Int64
			done := make(chan struct{})
			go func() {
				defer close(done)
				c := httpClient(e.httpAddr)
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := c.Get("http://plain.example.com/api/x")
					if err != nil || resp.StatusCode != 200 {
						failed.Add(1)
					} else {
						served.Add(1)
					}
					if resp != nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}()
			e.h.write(tc.file, tc.content(e))
			deadline := time.Now().Add(5 * time.Second)
			var lastErr error
			for lastErr == nil {
				lastErr = e.h.s.LastError()
				if time.Now().After(deadline) {
					t.Fatal("broken edit was never reported")
				}
				time.Sleep(10 * time.Millisecond)
			}
			// Requests keep flowing a little after the report, when a
			// wrongly applied configuration would have closed the port.
			time.Sleep(200 * time.Millisecond)
			close(stop)
			<-done
			for _, want := range tc.names {
				if !strings.Contains(lastErr.Error(), want) {
					t.Errorf("error does not say %q: %v", want, lastErr)
				}
			}
			if e.h.s.Generation() != gen {
				t.Errorf("a broken config was applied")
			}
			if failed.Load() != 0 || served.Load() == 0 {
				t.Errorf("around the broken edit: %d requests served, %d failed", served.Load(), failed.Load())
			}
		})
	}
}

// TestStandaloneBrokenCertificateUpdateKeepsServing: a Secret updated with
// data that is no key pair (here a certificate that does not match its key)
// leaves its hostname with the certificate it had, over real handshakes,
// instead of taking the listener down or falling back to another one.
func TestStandaloneBrokenCertificateUpdateKeepsServing(t *testing.T) {
	e := newE2E(t)
	gen := e.h.s.Generation()
	mismatched := testCert{certPEM: e.certB.certPEM, keyPEM: e.certA.keyPEM}
	e.h.write("backends.yaml", strings.Replace(e.backendsConfig,
		secretYAML("apps", "cert-a", e.certA), secretYAML("apps", "cert-a", mismatched), 1))
	e.h.waitGeneration(gen + 1)
	for _, h2 := range []bool{false, true} {
		resp, err := tlsClient(e.httpsAddr, e.roots, h2).Get("https://a.example.com/x")
		if err != nil {
			t.Fatalf("h2=%v: after a broken certificate update: %v", h2, err)
		}
		resp.Body.Close()
		if leaf := resp.TLS.PeerCertificates[0]; resp.StatusCode != 200 || !leaf.Equal(e.certA.leaf) {
			t.Errorf("h2=%v: %d with the certificate of %q, want 200 with the previous certificate of a.example.com",
				h2, resp.StatusCode, leaf.Subject.CommonName)
		}
	}
}
