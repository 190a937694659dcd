package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"text/template"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/net/http2"

	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/testkit/testyaml"
	"portico.dev/portico/proxy"
)

// testCert is a self-signed certificate for one hostname.
type testCert struct {
	certPEM, keyPEM string
	leaf            *x509.Certificate
}

func newTestCert(t testing.TB, host string) testCert {
	t.Helper()
	return newTestCertFor(t, host)
}

// indent is testyaml.Indent, short for the many fixtures that use it.
func indent(n int, s string) string { return testyaml.Indent(n, s) }

const classYAML = testyaml.Class

// gatewayYAML is testyaml.Gateway: the class and apps/gw up to its listeners.
const gatewayYAML = testyaml.Gateway

// backend is a real HTTP server that names itself in every answer.
type backend struct {
	name string
	addr string // ip:port
	hits atomic.Int64
}

func startBackend(t testing.TB, name string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, addr: ln.Addr().String()}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.hits.Add(1)
			w.Header().Set("X-Backend", name)
			w.Header().Set("X-Seen-Host", r.Host)
			w.Header().Set("X-Seen-Path", r.URL.RequestURI())
			w.Header().Set("X-Seen-Forwarded-For", r.Header.Get("X-Forwarded-For"))
			w.Header().Set("X-Seen-Forwarded-Proto", r.Header.Get("X-Forwarded-Proto"))
			w.Header().Set("X-Seen-Client-Cert", r.Header.Get("X-Forwarded-Client-Cert"))
			if d := r.URL.Query().Get("sleep"); d != "" {
				if dur, err := time.ParseDuration(d); err == nil {
					time.Sleep(dur)
				}
			}
			fmt.Fprintf(w, "%s %s", name, r.URL.Path)
		}),
	}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return b
}

func (b *backend) host() string { h, _, _ := net.SplitHostPort(b.addr); return h }
func (b *backend) port() string { _, p, _ := net.SplitHostPort(b.addr); return p }

// serviceYAML is a Service plus the EndpointSlice that points it at a real
// loopback backend.
func serviceYAML(ns, name string, b *backend) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  ports:
  - {name: http, port: 80, targetPort: %[4]s}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[2]s-1
  namespace: %[1]s
  labels: {kubernetes.io/service-name: %[2]s}
addressType: IPv4
ports:
- {name: http, port: %[4]s}
endpoints:
- addresses: [%[3]s]
  conditions: {ready: true}
`, ns, name, b.host(), b.port())
}

func secretYAML(ns, name string, c testCert) string {
	return testyaml.Secret(ns, name, c.certPEM, c.keyPEM)
}

// harness runs standalone mode (the run loop over a file source) on a
// config directory, in process, with real sockets.
type harness struct {
	t   testing.TB
	dir string
	s   *pipeline.Loop
	rt  *proxy.Runtime
}

func startStandalone(t testing.TB, files map[string]string) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{t: t, dir: dir}
	for name, content := range files {
		h.write(name, content)
	}
	log := zaptest.NewLogger(t)
	opts := proxy.DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.DrainTimeout = 5 * time.Second
	h.rt = proxy.New(opts, log.Named("proxy"))
	h.s = pipeline.New(pipeline.Options{Holdoff: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, ACMESecrets: true},
		filesource.New(dir, log.Named("config")), h.rt, nil, pipeline.Outputs{}, log.Named("standalone"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.s.Run(ctx) }()
	// Generation moves once the first configuration is on the data plane;
	// ten thousand objects take a while to admit and their certificates
	// to parse under the race detector.
	deadline := time.Now().Add(3 * time.Minute)
	for h.s.Generation() < 1 {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("standalone stopped: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("initial config never applied")
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Cleanup(func() {
		cancel()
		<-done
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		defer c()
		_ = h.rt.Close(sctx)
	})
	return h
}

// write replaces a config file atomically, as editors and ConfigMap mounts do.
func (h *harness) write(name, content string) {
	h.t.Helper()
	tmp := filepath.Join(h.dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(h.dir, name)); err != nil {
		h.t.Fatal(err)
	}
}

// waitGeneration waits until at least gen configs were applied.
func (h *harness) waitGeneration(gen int64) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for h.s.Generation() < gen {
		if time.Now().After(deadline) {
			h.t.Fatalf("config generation %d never applied (at %d)", gen, h.s.Generation())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func render(t testing.TB, text string, data any) string {
	t.Helper()
	var buf bytes.Buffer
	if err := template.Must(template.New("").Parse(text)).Execute(&buf, data); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// httpClient sends every request to addr whatever the URL's host says, so
// tests can use real hostnames.
func httpClient(addr string) *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
			DisableKeepAlives: false,
		},
	}
}

// tlsClient trusts roots and dials addr for every host; ALPN h2 and http/1.1.
func tlsClient(addr string, roots *x509.CertPool, h2 bool) *http.Client {
	d := &net.Dialer{Timeout: 2 * time.Second}
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}
	cfg := &tls.Config{RootCAs: roots}
	if h2 {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http2.Transport{
			TLSClientConfig: cfg,
			DialTLSContext: func(ctx context.Context, network, a string, c *tls.Config) (net.Conn, error) {
				raw, err := dial(ctx, network, a)
				if err != nil {
					return nil, err
				}
				host, _, _ := net.SplitHostPort(a)
				c = c.Clone()
				c.ServerName = host
				tc := tls.Client(raw, c)
				if err := tc.HandshakeContext(ctx); err != nil {
					raw.Close()
					return nil, err
				}
				return tc, nil
			},
		}}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial, TLSClientConfig: cfg}}
}

func get(t testing.TB, c *http.Client, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), resp.Header
}
