package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"portico.dev/portico/internal/testkit/testyaml"
)

// The passthrough mode (-mode passthrough) compares TLS passthrough by SNI:
// each proxy reads the ClientHello of a connection, picks the backend by
// its server name among the N hostnames, and forwards the client's own TLS
// session without terminating it. The backend (a Go TLS server in this
// process) holds every site's certificate; the client checks that the
// certificate it sees is the site's own, which proves the session went
// through untouched and to the backend of that name. Measured alike for
// each proxy:
//
//   - connections/s: new connections, each a full handshake with a random
//     hostname's SNI and a one-byte round trip, then closed;
//   - bytes/s: what one connection carries from the backend to the client
//     for the length of a run.
//
// Portico: a Gateway with one TLS Passthrough listener and one TLSRoute per
// hostname. nginx: the stream module, ssl_preread and a map of every
// hostname. haproxy: mode tcp, req.ssl_sni against a file of every
// hostname.

// passthroughPeer is one proxy in passthrough mode.
type passthroughPeer struct {
	Name      string
	Binary    string
	Version   func() string
	Configure func(e env, hosts []string) error
	Start     func(e env) (*proc, error)
}

func passthroughPeers(portico string) []passthroughPeer {
	nginx, haproxy := lookPath("nginx"), lookPath("haproxy")
	return []passthroughPeer{
		{Name: "portico", Binary: portico, Version: func() string { return "this tree" },
			Configure: porticoPassthrough,
			Start: func(e env) (*proc, error) {
				return startProc(e.Dir, portico, []string{"serve", "--config", filepath.Join(e.Dir, "config"), "--bind-address", "127.0.0.1",
					"--data-dir", filepath.Join(e.Dir, "data")}, nil)
			}},
		{Name: "nginx", Binary: nginx, Version: nginxPeer().Version,
			Configure: nginxPassthrough,
			Start: func(e env) (*proc, error) {
				return startProc(e.Dir, nginx, []string{"-p", e.Dir, "-e", filepath.Join(e.Dir, "error.log"), "-c", filepath.Join(e.Dir, "nginx.conf")}, nil)
			}},
		{Name: "haproxy", Binary: haproxy, Version: haproxyPeer().Version,
			Configure: haproxyPassthrough,
			Start: func(e env) (*proc, error) {
				return startProc(e.Dir, haproxy, []string{"-W", "-db", "-f", filepath.Join(e.Dir, "haproxy.cfg")}, nil)
			}},
	}
}

func porticoPassthrough(e env, hosts []string) error {
	dir := filepath.Join(e.Dir, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(porticoGatewayYAML(fmt.Sprintf("{name: tls, port: %d, protocol: TLS, tls: {mode: Passthrough}}", e.Port)))
	b.WriteString(testyaml.Backend(e.Backend, 443))
	for i, h := range hosts {
		fmt.Fprintf(&b, `---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: site-%d, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  hostnames: [%s]
  rules: [{backendRefs: [{name: backend, port: 443}]}]
`, i, h)
	}
	return os.WriteFile(filepath.Join(dir, "sites.yaml"), []byte(b.String()), 0o644)
}

func nginxPassthrough(e env, hosts []string) error {
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `%s
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes auto;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
stream {
  map_hash_max_size 262144;
  map_hash_bucket_size 128;
  map $ssl_preread_server_name $site {
    default "";
`, user, e.Dir)
	for _, h := range hosts {
		fmt.Fprintf(&b, "    %s %s;\n", h, e.Backend)
	}
	fmt.Fprintf(&b, `  }
  server {
    listen 127.0.0.1:%d;
    ssl_preread on;
    preread_timeout 10s;
    proxy_pass $site;
  }
}
`, e.Port)
	return os.WriteFile(filepath.Join(e.Dir, "nginx.conf"), []byte(b.String()), 0o644)
}

func haproxyPassthrough(e env, hosts []string) error {
	list := filepath.Join(e.Dir, "hosts.lst")
	if err := os.WriteFile(list, []byte(strings.Join(hosts, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`global
  maxconn 8000
  nbthread %d
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend sites
  bind 127.0.0.1:%d
  tcp-request inspect-delay 10s
  tcp-request content accept if { req.ssl_hello_type 1 }
  use_backend backend if { req.ssl_sni -f %s }
backend backend
  server b %s
`, runtime.NumCPU(), e.Port, list, e.Backend)
	return os.WriteFile(filepath.Join(e.Dir, "haproxy.cfg"), []byte(cfg), 0o644)
}

// passthroughResult is what was measured of one peer.
type passthroughResult struct {
	Peer, Version string
	Err           error
	Conns         loadResult
	ConnsCPU      time.Duration
	Bytes         int64
	BytesTime     time.Duration
}

// runPassthrough measures every peer of o in passthrough mode and prints
// the table.
func runPassthrough(ctx context.Context, o options, progress io.Writer) ([]passthroughResult, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	sites, _, err := makeSites(o.Dir, o.N, 0)
	if err != nil {
		return nil, err
	}
	backend, err := startTLSBackend(sites)
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	c := &client{leafs: map[string][]byte{}}
	hosts := make([]string, len(sites))
	for i, s := range sites {
		hosts[i] = s.Host
		c.leafs[s.Host] = leafDER(s)
	}
	var out []passthroughResult
	for _, name := range o.Peers {
		i := slices.IndexFunc(passthroughPeers(""), func(p passthroughPeer) bool { return p.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown peer %q (passthrough mode: portico, nginx, haproxy)", name)
		}
		p := passthroughPeers(o.Portico)[i]
		if p.Name == "portico" && p.Binary == "" {
			bin, err := buildPortico(o.Dir)
			if err != nil {
				return nil, err
			}
			p = passthroughPeers(bin)[i]
		}
		if p.Binary == "" {
			logf("%s: not installed (hack/bench-peers.sh installs it); skipped", p.Name)
			continue
		}
		logf("%s: measuring", p.Name)
		r := measurePassthrough(ctx, o, p, c, hosts, backend.Addr().String())
		if r.Err != nil {
			logf("%s: %v", p.Name, r.Err)
		} else {
			logf("%s: %.0f connections/s, %.0f MiB/s through one connection", p.Name, r.Conns.rate(), float64(r.Bytes)/r.BytesTime.Seconds()/(1<<20))
		}
		out = append(out, r)
	}
	return out, nil
}

func measurePassthrough(ctx context.Context, o options, p passthroughPeer, c *client, hosts []string, backend string) passthroughResult {
	r := passthroughResult{Peer: p.Name, Version: p.Version()}
	e := env{Dir: filepath.Join(o.Dir, "passthrough-"+p.Name), Backend: backend}
	var err error
	if e.Port, err = freePort(); err == nil {
		err = os.MkdirAll(e.Dir, 0o755)
	}
	if err == nil {
		err = p.Configure(e, hosts)
	}
	if err != nil {
		r.Err = fmt.Errorf("configure: %w", err)
		return r
	}
	c.addr = fmt.Sprintf("127.0.0.1:%d", e.Port)
	pr, err := p.Start(e)
	if err != nil {
		r.Err = err
		return r
	}
	defer pr.stop()
	defer context.AfterFunc(ctx, pr.stop)()
	if err := waitPassthrough(ctx, c, pr, hosts[len(hosts)-1], o.ReadyTimeout); err != nil {
		r.Err = fmt.Errorf("not ready: %w (log: %s)", err, pr.log)
		return r
	}
	cpuBefore, cpuErr := cpuOf(pr.cmd.Process.Pid)
	r.Conns = drive(o.Conns, o.Duration, func(ctx context.Context, rnd *rand.Rand) error {
		return c.passthroughPing(ctx, hosts[rnd.IntN(len(hosts))])
	})
	if cpuAfter, err := cpuOf(pr.cmd.Process.Pid); err == nil && cpuErr == nil {
		r.ConnsCPU = cpuAfter - cpuBefore
	}
	r.Bytes, r.BytesTime, r.Err = c.passthroughBulk(ctx, hosts[0], o.Duration)
	return r
}

// waitPassthrough polls until host is reached through the proxy.
func waitPassthrough(ctx context.Context, c *client, pr *proc, host string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		select {
		case <-pr.exited:
			return fmt.Errorf("the proxy exited; last error: %w", last)
		default:
		}
		if last = c.passthroughPing(ctx, host); last == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s not served: %w", host, last)
}

// dialTLS connects through the proxy with host as SNI and checks that the
// certificate is the site's own: the backend's, untouched.
func (c *client) dialTLS(ctx context.Context, host string) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return nil, err
	}
	_ = raw.(*net.TCPConn).SetLinger(0)                                                                          // no TIME_WAIT pile-up, as in get
	conn := tls.Client(raw, &tls.Config{ServerName: host, InsecureSkipVerify: true, CurvePreferences: curves()}) //nolint:gosec // leaf compared below
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("%s: handshake: %w", host, err)
	}
	if err := c.checkLeaf(host, conn.ConnectionState()); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// passthroughPing is one new connection: handshake, one byte there and
// back, close.
func (c *client) passthroughPing(ctx context.Context, host string) error {
	conn, err := c.dialTLS(ctx, host)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte{'p'}); err != nil {
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil || b[0] != 'p' {
		return fmt.Errorf("%s: no echo: %v", host, err)
	}
	return nil
}

// passthroughBulk reads what the backend streams down one connection for d.
func (c *client) passthroughBulk(ctx context.Context, host string, d time.Duration) (int64, time.Duration, error) {
	conn, err := c.dialTLS(ctx, host)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if _, err := conn.Write([]byte{'d'}); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(d))
	n, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		return n, time.Since(start), err
	}
	return n, time.Since(start), nil
}

// startTLSBackend serves every site's certificate by SNI on loopback.
// A connection's first byte says what it wants: 'p' is echoed, 'd' starts
// an endless stream of 64 KiB writes.
func startTLSBackend(sites []site) (net.Listener, error) {
	certs := make(map[string]*tls.Certificate, len(sites))
	for _, s := range sites {
		kp, err := tls.X509KeyPair(s.CertPEM, s.KeyPEM)
		if err != nil {
			return nil, err
		}
		certs[s.Host] = &kp
	}
	cfg := &tls.Config{
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := certs[h.ServerName]; c != nil {
				return c, nil
			}
			return nil, errors.New("unknown name")
		},
		SessionTicketsDisabled: true,
		CurvePreferences:       curves(),
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveBackendConn(c)
		}
	}()
	return ln, nil
}

func serveBackendConn(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return
	}
	if b[0] != 'd' {
		_, _ = c.Write(b[:])
		return
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// passthroughReport formats the passthrough results as a markdown table.
func passthroughReport(o options, results []passthroughResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "TLS passthrough by SNI, %d hostnames; runs of %v, %d connections for the connection rate; %d cores\n\n", o.N, o.Duration, o.Conns, runtime.NumCPU())
	b.WriteString("| peer | version | new connections/s (p50 / p99) | proxy CPU s / 10k connections | MiB/s through one connection |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Err != nil && r.Conns.OK == 0 {
			fmt.Fprintf(&b, "| %s | %s | failed: %v | | |\n", r.Peer, r.Version, r.Err)
			continue
		}
		cpu := "-"
		if r.Conns.OK > 0 && r.ConnsCPU > 0 {
			cpu = fmt.Sprintf("%.2f", r.ConnsCPU.Seconds()*10000/float64(r.Conns.OK))
		}
		bulk := "-"
		if r.BytesTime > 0 {
			bulk = fmt.Sprintf("%.0f", float64(r.Bytes)/r.BytesTime.Seconds()/(1<<20))
		}
		if r.Err != nil {
			bulk += fmt.Sprintf(" (failed: %v)", r.Err)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Peer, r.Version, loadCell(r.Conns), cpu, bulk)
	}
	return b.String()
}
