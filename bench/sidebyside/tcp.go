package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"portico.dev/portico/internal/testkit/testyaml"
)

// The tcp mode (-mode tcp) compares plain TCP forwarding: each proxy
// listens on a port and carries every connection to one backend (a TCP
// server in this process) without reading it. Measured alike for each
// proxy, -rounds times with the peers in turn (every other round in the
// other order), each run with the proxy started afresh:
//
//   - connections/s: -conns clients each open a connection, send 64
//     bytes, read their echo and close it, for -duration;
//   - throughput: one connection carries what the backend writes as fast
//     as it can to the client, for -duration; with the proxy's CPU during
//     it, CPU seconds per GB carried.
//
// The machine's load average is read before each run: on a shared machine
// it says how far the figures can be trusted.
//
// Portico: a Gateway with one TCP listener and a TCPRoute. nginx: the
// stream module, a listener with reuseport and proxy_pass. haproxy: mode
// tcp, one thread per core, splice where it helps (option splice-auto).

// tcpEchoSize is what each short connection sends and reads back.
const tcpEchoSize = 64

type tcpPeer struct {
	Name      string
	Binary    string
	Version   func() string
	Configure func(e env) error
	Start     func(e env) (*proc, error)
}

func tcpPeers(portico string) []tcpPeer {
	nginx, haproxy := lookPath("nginx"), lookPath("haproxy")
	return []tcpPeer{
		{Name: "portico", Binary: portico, Version: func() string { return "this tree" },
			Configure: porticoTCP,
			Start: func(e env) (*proc, error) {
				return startProc(e.Dir, portico, []string{"serve", "--config", filepath.Join(e.Dir, "config"), "--bind-address", "127.0.0.1",
					"--data-dir", filepath.Join(e.Dir, "data")}, nil)
			}},
		{Name: "nginx", Binary: nginx, Version: nginxPeer().Version,
			Configure: nginxTCP,
			Start: func(e env) (*proc, error) {
				return startProc(e.Dir, nginx, []string{"-p", e.Dir, "-e", filepath.Join(e.Dir, "error.log"), "-c", filepath.Join(e.Dir, "nginx.conf")}, nil)
			}},
		{Name: "haproxy", Binary: haproxy, Version: haproxyPeer().Version,
			Configure: haproxyTCP,
			Start: func(e env) (*proc, error) {
				return startProc(e.Dir, haproxy, []string{"-W", "-db", "-f", filepath.Join(e.Dir, "haproxy.cfg")}, nil)
			}},
	}
}

func porticoTCP(e env) error {
	dir := filepath.Join(e.Dir, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(porticoGatewayYAML(fmt.Sprintf("{name: tcp, port: %d, protocol: TCP}", e.Port)))
	b.WriteString(testyaml.Backend(e.Backend, 443))
	b.WriteString(`---
apiVersion: gateway.networking.k8s.io/v1
kind: TCPRoute
metadata: {name: echo, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: backend, port: 443}]}]
`)
	return os.WriteFile(filepath.Join(dir, "tcp.yaml"), []byte(b.String()), 0o644)
}

func nginxTCP(e env) error {
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;"
	}
	cfg := fmt.Sprintf(`%s
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes auto;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
stream {
  server {
    listen 127.0.0.1:%[3]d reuseport;
    proxy_pass %[4]s;
    proxy_timeout 60s;
  }
}
`, user, e.Dir, e.Port, e.Backend)
	return os.WriteFile(filepath.Join(e.Dir, "nginx.conf"), []byte(cfg), 0o644)
}

func haproxyTCP(e env) error {
	// maxconn within the file descriptors a shell's limit (20,000 here)
	// allows haproxy: it refuses to start otherwise.
	cfg := fmt.Sprintf(`global
  maxconn 4000
  nbthread %d
defaults
  mode tcp
  option splice-auto
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend tcp
  bind 127.0.0.1:%d
  default_backend backend
backend backend
  server b %s
`, runtime.NumCPU(), e.Port, e.Backend)
	return os.WriteFile(filepath.Join(e.Dir, "haproxy.cfg"), []byte(cfg), 0o644)
}

// tcpResult is one round of one peer.
type tcpResult struct {
	Peer, Version string
	Round         int
	Err           error
	// Load1 is the machine's one-minute load average before each run:
	// connections, then throughput.
	Load1     [2]float64
	Conns     loadResult
	ConnsCPU  time.Duration
	Bytes     int64
	BytesTime time.Duration
	BytesCPU  time.Duration
}

func (r tcpResult) gbPerSecond() float64 {
	if r.BytesTime <= 0 {
		return 0
	}
	return float64(r.Bytes) / r.BytesTime.Seconds() / 1e9
}

// cpuPerGB is the proxy's CPU seconds per GB carried in the throughput
// run; 0 when unknown.
func (r tcpResult) cpuPerGB() float64 {
	if r.Bytes == 0 || r.BytesCPU <= 0 {
		return 0
	}
	return r.BytesCPU.Seconds() * 1e9 / float64(r.Bytes)
}

// cpuPer10k is the proxy's CPU seconds per 10,000 short connections.
func (r tcpResult) cpuPer10k() float64 {
	if r.Conns.OK == 0 || r.ConnsCPU <= 0 {
		return 0
	}
	return r.ConnsCPU.Seconds() * 10000 / float64(r.Conns.OK)
}

// runTCP measures every peer of o.Peers, o.Rounds times in turn.
func runTCP(ctx context.Context, o options, progress io.Writer) ([]tcpResult, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	backend, err := startTCPBackend()
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	all := tcpPeers(o.Portico)
	var out []tcpResult
	for round := range max(o.Rounds, 1) {
		order := slices.Clone(o.Peers)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			i := slices.IndexFunc(all, func(p tcpPeer) bool { return p.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("unknown peer %q (tcp mode: portico, nginx, haproxy)", name)
			}
			if all[i].Name == "portico" && all[i].Binary == "" {
				bin, err := buildPortico(o.Dir)
				if err != nil {
					return nil, err
				}
				o.Portico = bin
				all = tcpPeers(bin)
			}
			p := all[i]
			if p.Binary == "" {
				logf("%s: not installed (hack/bench-peers.sh installs it); skipped", p.Name)
				continue
			}
			logf("%s round %d: measuring", p.Name, round+1)
			r := measureTCP(ctx, o, p, backend.Addr().String())
			r.Round = round + 1
			if r.Err != nil {
				logf("%s: %v", p.Name, r.Err)
			} else {
				logf("%s: %.0f connections/s, %.2f GB/s through one connection, %.2f CPU s / GB (load %.1f, %.1f)",
					p.Name, r.Conns.rate(), r.gbPerSecond(), r.cpuPerGB(), r.Load1[0], r.Load1[1])
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func measureTCP(ctx context.Context, o options, p tcpPeer, backend string) tcpResult {
	r := tcpResult{Peer: p.Name, Version: p.Version()}
	e := env{Dir: filepath.Join(o.Dir, "tcp-"+p.Name), Backend: backend}
	var err error
	if e.Port, err = freePort(); err == nil {
		err = os.MkdirAll(e.Dir, 0o755)
	}
	if err == nil {
		err = p.Configure(e)
	}
	if err != nil {
		r.Err = fmt.Errorf("configure: %w", err)
		return r
	}
	addr := fmt.Sprintf("127.0.0.1:%d", e.Port)
	pr, err := p.Start(e)
	if err != nil {
		r.Err = err
		return r
	}
	defer pr.stop()
	defer context.AfterFunc(ctx, pr.stop)()
	if err := waitTCP(ctx, addr, pr, o.ReadyTimeout); err != nil {
		r.Err = fmt.Errorf("not ready: %w (log: %s)", err, pr.log)
		return r
	}
	pid := pr.cmd.Process.Pid
	r.Load1[0] = loadAverage()
	before, cpuErr := cpuOf(pid)
	r.Conns = drive(o.Conns, o.Duration, func(ctx context.Context, _ *rand.Rand) error { return tcpPing(ctx, addr) })
	if after, err := cpuOf(pid); err == nil && cpuErr == nil {
		r.ConnsCPU = after - before
	}
	r.Load1[1] = loadAverage()
	before, cpuErr = cpuOf(pid)
	r.Bytes, r.BytesTime, r.Err = tcpBulk(ctx, addr, o.Duration)
	if after, err := cpuOf(pid); err == nil && cpuErr == nil {
		r.BytesCPU = after - before
	}
	return r
}

// loadAverage is the machine's one-minute load average; 0 when unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// waitTCP polls until an echo comes back through addr.
func waitTCP(ctx context.Context, addr string, pr *proc, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		select {
		case <-pr.exited:
			return fmt.Errorf("the proxy exited; last error: %w", last)
		default:
		}
		if last = tcpPing(ctx, addr); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s not served: %w", addr, last)
}

// tcpPing is one short connection: 64 bytes there and back, then closed.
func tcpPing(ctx context.Context, addr string) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	// No TIME_WAIT pile-up on the client's side, as in the other modes.
	_ = c.(*net.TCPConn).SetLinger(0)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	var out, in [tcpEchoSize]byte
	out[0] = 'p'
	if _, err := c.Write(out[:]); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, in[:]); err != nil {
		return fmt.Errorf("no echo: %w", err)
	}
	if in != out {
		return errors.New("echo differs from what was sent")
	}
	return nil
}

// tcpBulk reads what the backend streams down one connection for d.
func tcpBulk(ctx context.Context, addr string, d time.Duration) (int64, time.Duration, error) {
	dl := &net.Dialer{Timeout: 5 * time.Second}
	c, err := dl.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	if _, err := c.Write([]byte{'d'}); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(d))
	buf := make([]byte, 256<<10)
	var n int64
	for {
		k, err := c.Read(buf)
		n += int64(k)
		var ne net.Error
		switch {
		case err == nil:
			continue
		case errors.As(err, &ne) && ne.Timeout():
			return n, time.Since(start), nil
		default:
			return n, time.Since(start), err
		}
	}
}

// startTCPBackend serves plain TCP on loopback. A connection's first byte
// says what it wants: 'd' starts an endless stream of 256 KiB writes;
// anything else is echoed with all that follows.
func startTCPBackend() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveTCPBackend(c)
		}
	}()
	return ln, nil
}

func serveTCPBackend(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return
	}
	if b[0] != 'd' {
		if _, err := c.Write(b[:]); err == nil {
			_, _ = io.Copy(c, c)
		}
		return
	}
	buf := make([]byte, 256<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// tcpReport formats the rounds and their medians as markdown tables.
func tcpReport(o options, results []tcpResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "TCP forwarding to one backend; runs of %v; %d clients opening connections of a %d-byte echo; one connection for the throughput; %d cores\n\n",
		o.Duration, o.Conns, tcpEchoSize, runtime.NumCPU())
	b.WriteString("| peer | version | round | load avg (1 min) | new connections/s (p50 / p99) | proxy CPU s / 10k connections | GB/s through one connection | proxy CPU s / GB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Err != nil && r.Conns.OK == 0 {
			fmt.Fprintf(&b, "| %s | %s | %d | %.1f | failed: %v | | | |\n", r.Peer, r.Version, r.Round, r.Load1[0], r.Err)
			continue
		}
		bulk := fmt.Sprintf("%.2f", r.gbPerSecond())
		if r.Err != nil {
			bulk += fmt.Sprintf(" (failed: %v)", r.Err)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f, %.1f | %s | %s | %s | %s |\n", r.Peer, r.Version, r.Round, r.Load1[0], r.Load1[1],
			loadCell(r.Conns), figure(r.cpuPer10k()), bulk, figure(r.cpuPerGB()))
	}
	b.WriteString("\nMedians over the rounds:\n\n")
	b.WriteString("| peer | new connections/s | proxy CPU s / 10k connections | GB/s through one connection | proxy CPU s / GB |\n")
	b.WriteString("|---|---|---|---|---|\n")
	for _, name := range o.Peers {
		var rs []tcpResult
		for _, r := range results {
			if r.Peer == name && r.Err == nil {
				rs = append(rs, r)
			}
		}
		if len(rs) == 0 {
			continue
		}
		med := func(f func(tcpResult) float64) float64 {
			x := make([]float64, len(rs))
			for i, r := range rs {
				x[i] = f(r)
			}
			slices.Sort(x)
			return x[len(x)/2]
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %.2f | %s |\n", name, med(func(r tcpResult) float64 { return r.Conns.rate() }),
			figure(med(tcpResult.cpuPer10k)), med(tcpResult.gbPerSecond), figure(med(tcpResult.cpuPerGB)))
	}
	return b.String()
}

// figure is v with two decimals, "-" when 0 (not measured).
func figure(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
