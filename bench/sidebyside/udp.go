package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"portico.dev/portico/internal/testkit/testyaml"
)

// The udp mode (-mode udp) compares UDP forwarding: each proxy listens on a
// UDP port and forwards every client's datagrams, in a session per client
// address, to one backend (a UDP echo server in this process), and the
// answers back. -conns clients, each its own socket and session, send a
// datagram and wait for its echo, for -duration, twice: with 64-byte
// datagrams (the rate of datagrams) and with 16 KiB ones (the CPU per
// gigabyte carried). A datagram not answered within 200 ms counts as lost
// and the client goes on.
//
// Portico: a Gateway with one UDP listener and a UDPRoute. nginx: the
// stream module, a udp listener with reuseport and proxy_pass. haproxy
// is not a peer: its community edition (2.6 here) forwards no UDP, its
// frontends and backends refusing udp@ addresses (only its log-forward
// section takes datagrams).
//
// -rounds measures every peer that many times in turn, every other round
// in the other order, with the machine's load average before each run.

// udpSizes are the datagram sizes of the two runs.
var udpSizes = []int{64, 16 << 10}

type udpPeer struct {
	Name      string
	Binary    string
	Version   func() string
	Configure func(e env) error
	Start     func(e env) (*proc, error)
}

func udpPeers(portico string) []udpPeer {
	nginx := lookPath("nginx")
	return []udpPeer{
		{Name: "portico", Binary: portico, Version: func() string { return "this tree" },
			Configure: porticoUDP,
			Start: func(e env) (*proc, error) {
				return startProc(e.Dir, portico, []string{"serve", "--config", filepath.Join(e.Dir, "config"), "--bind-address", "127.0.0.1",
					"--data-dir", filepath.Join(e.Dir, "data")}, nil)
			}},
		{Name: "nginx", Binary: nginx, Version: nginxPeer().Version,
			Configure: nginxUDP,
			Start: func(e env) (*proc, error) {
				return startProc(e.Dir, nginx, []string{"-p", e.Dir, "-e", filepath.Join(e.Dir, "error.log"), "-c", filepath.Join(e.Dir, "nginx.conf")}, nil)
			}},
	}
}

func porticoUDP(e env) error {
	dir := filepath.Join(e.Dir, "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(porticoGatewayYAML(fmt.Sprintf("{name: udp, port: %d, protocol: UDP}", e.Port)))
	b.WriteString(testyaml.Backend(e.Backend, 443))
	b.WriteString(`---
apiVersion: gateway.networking.k8s.io/v1
kind: UDPRoute
metadata: {name: echo, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: backend, port: 443}]}]
`)
	return os.WriteFile(filepath.Join(dir, "udp.yaml"), []byte(b.String()), 0o644)
}

func nginxUDP(e env) error {
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
    listen 127.0.0.1:%[3]d udp reuseport;
    proxy_pass %[4]s;
    proxy_timeout 60s;
  }
}
`, user, e.Dir, e.Port, e.Backend)
	return os.WriteFile(filepath.Join(e.Dir, "nginx.conf"), []byte(cfg), 0o644)
}

// udpRun is one run of one datagram size.
type udpRun struct {
	Size      int
	Exchanges int64 // datagrams answered
	Lost      int64
	Elapsed   time.Duration
	CPU       time.Duration
	// Load1 is the machine's one-minute load average before the run.
	Load1 float64
}

// rate is the datagrams through the proxy per second: each exchange is
// two, one each way.
func (run udpRun) rate() float64 {
	return float64(2*run.Exchanges) / run.Elapsed.Seconds()
}

// cpuPerGB is the proxy's CPU seconds per GB carried (both ways); 0 when
// unknown.
func (run udpRun) cpuPerGB() float64 {
	if run.Exchanges == 0 || run.CPU <= 0 {
		return 0
	}
	return run.CPU.Seconds() * 1e9 / float64(2*run.Exchanges*int64(run.Size))
}

// cpuPerMillion is the proxy's CPU seconds per million datagrams; 0 when
// unknown.
func (run udpRun) cpuPerMillion() float64 {
	if run.Exchanges == 0 || run.CPU <= 0 {
		return 0
	}
	return run.CPU.Seconds() * 1e6 / float64(2*run.Exchanges)
}

type udpResult struct {
	Peer, Version string
	Round         int
	Err           error
	Runs          []udpRun
}

func runUDP(ctx context.Context, o options, progress io.Writer) ([]udpResult, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	backend, err := startUDPEcho()
	if err != nil {
		return nil, err
	}
	defer backend.Close()
	var out []udpResult
	for round := range max(o.Rounds, 1) {
		order := slices.Clone(o.Peers)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			i := slices.IndexFunc(udpPeers(""), func(p udpPeer) bool { return p.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("unknown peer %q (udp mode: portico, nginx; haproxy's community edition forwards no UDP)", name)
			}
			if udpPeers(o.Portico)[i].Name == "portico" && o.Portico == "" {
				bin, err := buildPortico(o.Dir)
				if err != nil {
					return nil, err
				}
				o.Portico = bin
			}
			p := udpPeers(o.Portico)[i]
			if p.Binary == "" {
				logf("%s: not installed (hack/bench-peers.sh installs it); skipped", p.Name)
				continue
			}
			logf("%s round %d: measuring", p.Name, round+1)
			r := measureUDP(ctx, o, p, backend.LocalAddr().String())
			r.Round = round + 1
			if r.Err != nil {
				logf("%s: %v", p.Name, r.Err)
			}
			out = append(out, r)
		}
	}
	return out, nil
}

func measureUDP(ctx context.Context, o options, p udpPeer, backend string) udpResult {
	r := udpResult{Peer: p.Name, Version: p.Version()}
	e := env{Dir: filepath.Join(o.Dir, "udp-"+p.Name), Backend: backend}
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
	if err := waitUDP(ctx, addr, pr, o.ReadyTimeout); err != nil {
		r.Err = fmt.Errorf("not ready: %w (log: %s)", err, pr.log)
		return r
	}
	for _, size := range udpSizes {
		load := loadAverage()
		before, cpuErr := cpuOf(pr.cmd.Process.Pid)
		run, err := udpLoad(ctx, addr, o.Conns, size, o.Duration)
		run.Load1 = load
		if err != nil {
			r.Err = err
			return r
		}
		if after, err := cpuOf(pr.cmd.Process.Pid); err == nil && cpuErr == nil {
			run.CPU = after - before
		}
		r.Runs = append(r.Runs, run)
	}
	return r
}

// waitUDP polls until a datagram sent to addr comes back.
func waitUDP(ctx context.Context, addr string, pr *proc, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		select {
		case <-pr.exited:
			return fmt.Errorf("the proxy exited; last error: %w", last)
		default:
		}
		if last = udpPing(addr); last == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not served: %w", addr, last)
}

func udpPing(addr string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 16)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "ping" {
		return fmt.Errorf("answer %q", buf[:n])
	}
	return nil
}

// udpLoad runs clients, each its own socket, sending datagrams of size
// and waiting for each echo, for d.
func udpLoad(ctx context.Context, addr string, clients, size int, d time.Duration) (udpRun, error) {
	run := udpRun{Size: size}
	var answered, lost atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := time.Now()
	end := start.Add(d)
	for range clients {
		c, err := net.Dial("udp", addr)
		if err != nil {
			return run, err
		}
		wg.Go(func() {
			defer c.Close()
			out, in := make([]byte, size), make([]byte, size+1)
			for ctx.Err() == nil && time.Now().Before(end) {
				if _, err := c.Write(out); err != nil {
					errs <- err
					return
				}
				_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
				n, err := c.Read(in)
				var ne net.Error
				switch {
				case errors.As(err, &ne) && ne.Timeout():
					lost.Add(1)
				case err != nil:
					errs <- err
					return
				case n != size:
					errs <- fmt.Errorf("echo of %d bytes, sent %d", n, size)
					return
				default:
					answered.Add(1)
				}
			}
		})
	}
	wg.Wait()
	run.Elapsed = time.Since(start)
	run.Exchanges, run.Lost = answered.Load(), lost.Load()
	select {
	case err := <-errs:
		return run, err
	default:
	}
	return run, nil
}

// startUDPEcho answers every datagram with itself, from one socket read by
// as many goroutines as there are cores.
func startUDPEcho() (*net.UDPConn, error) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	_ = c.SetReadBuffer(4 << 20)
	_ = c.SetWriteBuffer(4 << 20)
	for range runtime.NumCPU() {
		go func() {
			buf := make([]byte, 65536)
			for {
				n, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				_, _ = c.WriteToUDPAddrPort(buf[:n], from)
			}
		}()
	}
	return c, nil
}

// udpReport formats the udp results as markdown tables, each round and
// the medians over them: per run, datagrams through the proxy per second
// (each exchange is two: one each way), lost exchanges, and the proxy's
// CPU per million datagrams and per GB carried (both ways).
func udpReport(o options, results []udpResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "UDP forwarding, one backend; %d clients (sessions), each sending a datagram and waiting for its echo; runs of %v; %d cores\n\n", o.Conns, o.Duration, runtime.NumCPU())
	b.WriteString("| peer | version | round | load avg (1 min) | datagram size | datagrams/s through the proxy | lost | proxy CPU s / million datagrams | proxy CPU s / GB |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Err != nil && len(r.Runs) == 0 {
			fmt.Fprintf(&b, "| %s | %s | %d | | failed: %v | | | | |\n", r.Peer, r.Version, r.Round, r.Err)
			continue
		}
		for _, run := range r.Runs {
			fmt.Fprintf(&b, "| %s | %s | %d | %.1f | %d B | %.0f | %d | %s | %s |\n", r.Peer, r.Version, r.Round, run.Load1, run.Size,
				run.rate(), run.Lost, figure(run.cpuPerMillion()), figure(run.cpuPerGB()))
		}
	}
	b.WriteString("\nMedians over the rounds:\n\n")
	b.WriteString("| peer | datagram size | datagrams/s through the proxy | lost | proxy CPU s / million datagrams | proxy CPU s / GB |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, name := range o.Peers {
		for _, size := range udpSizes {
			var runs []udpRun
			for _, r := range results {
				for _, run := range r.Runs {
					if r.Peer == name && run.Size == size {
						runs = append(runs, run)
					}
				}
			}
			if len(runs) == 0 {
				continue
			}
			med := func(f func(udpRun) float64) float64 {
				x := make([]float64, len(runs))
				for i, run := range runs {
					x[i] = f(run)
				}
				slices.Sort(x)
				return x[len(x)/2]
			}
			fmt.Fprintf(&b, "| %s | %d B | %.0f | %.0f | %s | %s |\n", name, size, med(udpRun.rate),
				med(func(run udpRun) float64 { return float64(run.Lost) }), figure(med(udpRun.cpuPerMillion)), figure(med(udpRun.cpuPerGB)))
		}
	}
	return b.String()
}
