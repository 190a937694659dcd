package main

import (
	"bytes"
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
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"portico.dev/portico/internal/testkit/grpctest"
	"portico.dev/portico/internal/testkit/testyaml"
)

// The gRPC run (-grpc) measures unary calls per second through each proxy
// that routes gRPC by service (Portico with a GRPCRoute, nginx with
// grpc_pass), both to the same cleartext (h2c) gRPC backend in this
// process, with clients speaking h2c with prior knowledge, as a mesh-less
// cluster's internal gRPC traffic does.

// grpcService and grpcMethod name the one method of the backend: it
// answers each message with the message itself. Messages travel as raw
// bytes (grpctest.RawCodec), so that neither the backend nor the client
// spends time on protobuf: what is measured is the proxy.
const (
	grpcService = "bench.Echo"
	grpcMethod  = "/" + grpcService + "/Echo"
)

// startGRPCBackend serves grpcMethod on loopback until stop is called.
func startGRPCBackend() (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := grpc.NewServer(grpc.ForceServerCodec(grpctest.RawCodec{})) //nolint:staticcheck // the raw codec has no V2 form
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: grpcService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{MethodName: "Echo", Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in []byte
			if err := dec(&in); err != nil {
				return nil, err
			}
			return &in, nil
		}}},
	}, nil)
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), srv.Stop, nil
}

// grpcConfigure writes a peer's configuration for the gRPC run: listen on
// e.Port (h2c), send service grpcService to e.Backend.
type grpcConfigure func(e env) error

func grpcConfigurations() map[string]grpcConfigure {
	return map[string]grpcConfigure{
		"portico": func(e env) error {
			dir := filepath.Join(e.Dir, "config")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			cfg := fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: portico}
spec: {controllerName: portico.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: portico
  listeners:
  - {name: grpc, port: %d, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GRPCRoute
metadata: {name: echo, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{method: {service: %s}}]
    backendRefs: [{name: backend, port: 80}]
---
`, e.Port, grpcService) + testyaml.Backend(e.Backend, 80)
			return os.WriteFile(filepath.Join(dir, "grpc.yaml"), []byte(cfg), 0o644)
		},
		"nginx": func(e env) error {
			if err := os.MkdirAll(filepath.Join(e.Dir, "tmp"), 0o755); err != nil {
				return err
			}
			cfg := nginxHead(e) + fmt.Sprintf(`  upstream backend { server %s; keepalive 64; }
  server {
    listen 127.0.0.1:%d http2;
    location /%s/ { grpc_pass grpc://backend; }
  }
}
`, e.Backend, e.Port, grpcService)
			return os.WriteFile(filepath.Join(e.Dir, "nginx.conf"), []byte(cfg), 0o644)
		},
	}
}

// grpcResult is what was measured of one peer in the gRPC run.
type grpcResult struct {
	Peer, Version string
	Err           error
	Calls         loadResult
	CPU           time.Duration // of the proxy's processes during the calls
	Memory        int64
}

// runGRPC measures each peer of o.Peers that has a gRPC configuration.
func runGRPC(ctx context.Context, o options, progress io.Writer) ([]grpcResult, error) {
	logf := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	backend, stop, err := startGRPCBackend()
	if err != nil {
		return nil, err
	}
	defer stop()
	configs := grpcConfigurations()
	all := peers(o.Portico)
	var results []grpcResult
	for _, name := range o.Peers {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		i := slices.IndexFunc(all, func(p peer) bool { return p.Name == name })
		configure, ok := configs[name]
		if i < 0 || !ok {
			logf("%s: no gRPC configuration; skipped", name)
			continue
		}
		p := all[i]
		if p.Name == "portico" && p.Binary == "" {
			bin, err := buildPortico(o.Dir)
			if err != nil {
				return nil, err
			}
			p = porticoPeer(bin)
		}
		if p.Binary == "" {
			logf("%s: not installed (hack/bench-peers.sh installs it); skipped", p.Name)
			continue
		}
		logf("%s: measuring gRPC", p.Name)
		r := measureGRPC(ctx, o, p, configure, backend)
		if r.Err != nil {
			logf("%s: %v", p.Name, r.Err)
		} else {
			logf("%s: %.0f calls/s, %d failed", p.Name, r.Calls.rate(), r.Calls.Failed)
		}
		results = append(results, r)
	}
	return results, nil
}

func measureGRPC(ctx context.Context, o options, p peer, configure grpcConfigure, backend string) grpcResult {
	r := grpcResult{Peer: p.Name, Version: p.Version()}
	e := env{Dir: filepath.Join(o.Dir, p.Name+"-grpc"), Backend: backend}
	var err error
	if e.Port, err = freePort(); err == nil {
		err = os.MkdirAll(e.Dir, 0o755)
	}
	if err == nil {
		err = configure(e)
	}
	if err != nil {
		r.Err = fmt.Errorf("configure: %w", err)
		return r
	}
	pr, err := p.Start(e)
	if err != nil {
		r.Err = err
		return r
	}
	defer pr.stop()
	defer context.AfterFunc(ctx, pr.stop)()

	// The connections are made once the proxy serves: one refused
	// before would wait out gRPC's reconnection backoff.
	conns := make(chan *grpc.ClientConn, o.Conns+1)
	dial := func() error {
		cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", e.Port), grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(grpctest.RawCodec{}))) //nolint:staticcheck // the raw codec has no V2 form
		if err == nil {
			conns <- cc
		}
		return err
	}
	defer func() {
		for len(conns) > 0 {
			(<-conns).Close()
		}
	}()
	payload := bytes.Repeat([]byte("x"), 100)
	call := func(ctx context.Context, _ *rand.Rand) error {
		// As many connections as workers: a worker always finds one idle.
		cc := <-conns
		defer func() { conns <- cc }()
		var out []byte
		if err := cc.Invoke(ctx, grpcMethod, &payload, &out, grpc.WaitForReady(true)); err != nil {
			return err
		}
		if !bytes.Equal(out, payload) {
			return errors.New("the answer is not the message sent")
		}
		return nil
	}
	if err := waitGRPC(ctx, pr, dial, call, o.ReadyTimeout); err != nil {
		r.Err = fmt.Errorf("not ready: %w (log: %s)", err, pr.log)
		return r
	}
	// The probe's connection is dropped: the load uses o.Conns fresh ones.
	(<-conns).Close()
	for range o.Conns {
		if err := dial(); err != nil {
			r.Err = err
			return r
		}
	}
	cpuBefore, cpuErr := cpuOf(pr.cmd.Process.Pid)
	r.Calls = drive(o.Conns, o.Duration, call)
	if cpuAfter, err := cpuOf(pr.cmd.Process.Pid); err == nil && cpuErr == nil {
		r.CPU = cpuAfter - cpuBefore
	}
	r.Memory, _ = memoryOf(pr.cmd.Process.Pid)
	return r
}

// waitGRPC dials a connection and calls through it until one call
// succeeds, the proxy exits or timeout passes.
func waitGRPC(ctx context.Context, pr *proc, dial func() error, call func(context.Context, *rand.Rand) error, timeout time.Duration) error {
	if err := dial(); err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := call(cctx, nil)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-pr.exited:
			return errors.New("the proxy exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

// grpcReport formats the gRPC results as a markdown table.
func grpcReport(o options, results []grpcResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gRPC unary calls (100-byte messages) over h2c, %d connections, runs of %v; %d cores\n\n", o.Conns, o.Duration, runtime.NumCPU())
	b.WriteString("| peer | version | calls/s (p50 / p99) | CPU s / 100k calls | memory (PSS) |\n|---|---|---|---|---|\n")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(&b, "| %s | %s | failed: %v | | |\n", r.Peer, r.Version, r.Err)
			continue
		}
		cpu := "-"
		if n := r.Calls.OK; n > 0 && r.CPU > 0 {
			cpu = fmt.Sprintf("%.2f", r.CPU.Seconds()*100000/float64(n))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.1f MiB |\n", r.Peer, r.Version, loadCell(r.Calls), cpu, float64(r.Memory)/(1<<20))
	}
	return b.String()
}
