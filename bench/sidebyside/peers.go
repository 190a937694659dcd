package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/testkit/testyaml"
)

// site is one hostname with its own certificate, as a Knative Service
// brings it.
type site struct {
	Host     string
	CertFile string // leaf PEM
	KeyFile  string // key PEM
	PEMFile  string // leaf and key in one file, for haproxy
	CertPEM  []byte
	KeyPEM   []byte
}

// env is what every peer is given: where to listen, where the backend is,
// and a directory of its own.
type env struct {
	Dir     string
	Port    int // HTTPS, on 127.0.0.1
	Backend string
	Spare   int // another free loopback port: caddy's admin API, the HTTP listener Portico's Gateway needs
	Plain   int // plain HTTP, on 127.0.0.1: the same sites without TLS
	// Args are extra arguments for Portico (-portico-args).
	Args []string
}

// peer is one proxy under test. Configure writes a configuration serving
// sites; Start runs the proxy; Add makes it serve one more site with as
// little as the proxy allows (what an operator would do: a file and a
// reload signal, or an API call).
type peer struct {
	Name      string
	Binary    string
	Version   func() string
	Configure func(e env, sites []site) error
	Start     func(e env) (*proc, error)
	Add       func(e env, p *proc, sites []site, added site) error
	// Check validates a configuration without serving it, when the proxy
	// can.
	Check func(e env) error
}

func peers(portico string) []peer {
	return []peer{porticoPeer(portico), nginxPeer(), haproxyPeer(), caddyPeer()}
}

// proc is a started proxy; exited is closed when its main process ends.
type proc struct {
	// started is when the process was started.
	started  time.Time
	cmd      *exec.Cmd
	exited   chan struct{}
	log      string
	stopOnce sync.Once
}

// startProc starts bin with args, its output in dir/<bin>.log.
func startProc(dir, bin string, args []string, envv []string) (*proc, error) {
	logPath := filepath.Join(dir, filepath.Base(bin)+".log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), envv...)
	// Its own process group, so that stop reaches the workers too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); log.Close(); close(p.exited) }()
	return p, nil
}

// stop ends the process group of p: SIGTERM, then SIGKILL. It may be
// called more than once.
func (p *proc) stop() { p.stopOnce.Do(p.kill) }

func (p *proc) kill() {
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

func output(bin string, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// Portico: a directory of Gateway API YAML in standalone mode, one Secret,
// ListenerSet and HTTPRoute per site, as a Knative Service would bring them
// in a cluster. A new site is one more file; Portico watches the directory.
func porticoPeer(bin string) peer {
	return peer{
		Name:    "portico",
		Binary:  bin,
		Version: func() string { return "this tree" },
		Configure: func(e env, sites []site) error {
			dir := filepath.Join(e.Dir, "config")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			var b strings.Builder
			b.WriteString(porticoGatewayYAML(fmt.Sprintf("{name: http, port: %d, protocol: HTTP}", e.Spare)))
			b.WriteString(testyaml.Backend(e.Backend, 80))
			for i, s := range sites {
				b.WriteString("---\n")
				writePorticoSite(&b, e, i, s)
			}
			return os.WriteFile(filepath.Join(dir, "sites.yaml"), []byte(b.String()), 0o644)
		},
		Start: func(e env) (*proc, error) {
			return startProc(e.Dir, bin, append([]string{"serve", "--config", filepath.Join(e.Dir, "config"), "--bind-address", "127.0.0.1",
				"--data-dir", filepath.Join(e.Dir, "data")}, e.Args...), nil)
		},
		Add: func(e env, _ *proc, sites []site, added site) error {
			var b strings.Builder
			writePorticoSite(&b, e, len(sites), added)
			// Written aside and renamed, so the watcher never reads half a
			// file.
			tmp := filepath.Join(e.Dir, "added.tmp")
			if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, filepath.Join(e.Dir, "config", fmt.Sprintf("site-%d.yaml", len(sites))))
		},
		Check: func(e env) error {
			out, err := exec.Command(bin, "check", "--config", filepath.Join(e.Dir, "config")).CombinedOutput()
			if err != nil {
				return fmt.Errorf("portico check: %v: %s", err, out)
			}
			return conditionsHold(out)
		},
	}
}

// porticoGatewayYAML is the GatewayClass and the Gateway apps/gw with one
// listener (a YAML flow mapping), which takes ListenerSets of its namespace.
func porticoGatewayYAML(listener string) string {
	return `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: portico}
spec: {controllerName: portico.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: apps}
spec:
  gatewayClassName: portico
  allowedListeners: {namespaces: {from: Same}}
  listeners:
  - ` + listener + `
---
`
}

func writePorticoSite(b *strings.Builder, e env, i int, s site) {
	fmt.Fprintf(b, `apiVersion: v1
kind: Secret
metadata: {name: cert-%d, namespace: apps}
type: kubernetes.io/tls
stringData:
  tls.crt: |
%s  tls.key: |
%s---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: site-%d, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - {name: https, hostname: %s, port: %d, protocol: HTTPS, tls: {certificateRefs: [{name: cert-%d}]}}
  - {name: http, hostname: %s, port: %d, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: site-%d, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: site-%d}]
  hostnames: [%s]
  rules: [{backendRefs: [{name: backend, port: 80}]}]
`, i, indent(s.CertPEM, "    "), indent(s.KeyPEM, "    "), i, s.Host, e.Port, i, s.Host, e.Plain, i, i, s.Host)
}

func indent(pem []byte, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(string(pem)) {
		b.WriteString(prefix)
		b.WriteString(line)
	}
	return b.String()
}

// nginx: one server block per site; a new site is a rewritten
// configuration and SIGHUP to the master, which starts new workers.
func nginxPeer() peer {
	bin := lookPath("nginx")
	conf := func(e env) string { return filepath.Join(e.Dir, "nginx.conf") }
	write := func(e env, sites []site) error {
		var b strings.Builder
		b.WriteString(nginxHead(e))
		fmt.Fprintf(&b, `  server_names_hash_max_size 262144;
  server_names_hash_bucket_size 128;
  ssl_protocols TLSv1.2 TLSv1.3;
  ssl_session_tickets off;
  ssl_session_cache off;
  upstream backend { server %s; keepalive 64; }
`, e.Backend)
		for _, s := range sites {
			fmt.Fprintf(&b, `  server {
    listen 127.0.0.1:%d ssl http2;
    listen 127.0.0.1:%d;
    server_name %s;
    ssl_certificate %s;
    ssl_certificate_key %s;
    location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
`, e.Port, e.Plain, s.Host, s.CertFile, s.KeyFile)
		}
		b.WriteString("}\n")
		return os.WriteFile(conf(e), []byte(b.String()), 0o644)
	}
	return peer{
		Name:    "nginx",
		Binary:  bin,
		Version: func() string { return strings.TrimPrefix(output(bin, "-v"), "nginx version: nginx/") },
		Configure: func(e env, sites []site) error {
			if err := os.MkdirAll(filepath.Join(e.Dir, "tmp"), 0o755); err != nil {
				return err
			}
			return write(e, sites)
		},
		Start: func(e env) (*proc, error) {
			return startProc(e.Dir, bin, []string{"-p", e.Dir, "-e", filepath.Join(e.Dir, "error.log"), "-c", conf(e)}, nil)
		},
		Add: func(e env, p *proc, sites []site, added site) error {
			if err := write(e, append(sites[:len(sites):len(sites)], added)); err != nil {
				return err
			}
			return p.cmd.Process.Signal(syscall.SIGHUP)
		},
		Check: func(e env) error {
			out, err := exec.Command(bin, "-t", "-p", e.Dir, "-e", filepath.Join(e.Dir, "error.log"), "-c", conf(e)).CombinedOutput()
			if err != nil {
				return fmt.Errorf("nginx -t: %v: %s", err, out)
			}
			return nil
		},
	}
}

// nginxHead is the start of an nginx configuration, up to the first
// directive of the http block: workers, files under e.Dir, no access log.
func nginxHead(e env) string {
	user := ""
	if os.Geteuid() == 0 {
		// Workers would run as nobody and could not use the
		// temporary directories below.
		user = "user root;"
	}
	return fmt.Sprintf(`%s
worker_processes auto;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  # Kept-alive connections (HTTP/1.1 and HTTP/2) carry any number of
  # requests, as Portico's and haproxy's do: at nginx's default of 1,000,
  # h2load counts the streams refused after its GOAWAY as failures.
  keepalive_requests 1000000;
  client_body_temp_path %[2]s/tmp/body;
  proxy_temp_path %[2]s/tmp/proxy;
  fastcgi_temp_path %[2]s/tmp/fastcgi;
  uwsgi_temp_path %[2]s/tmp/uwsgi;
  scgi_temp_path %[2]s/tmp/scgi;
`, user, e.Dir)
}

// haproxy: one frontend with a crt-list of every site; a new site is a
// rewritten crt-list and SIGUSR2 to the master (master-worker mode), which
// reloads.
func haproxyPeer() peer {
	bin := lookPath("haproxy")
	conf := func(e env) string { return filepath.Join(e.Dir, "haproxy.cfg") }
	writeList := func(e env, sites []site) error {
		var b strings.Builder
		for _, s := range sites {
			fmt.Fprintf(&b, "%s %s\n", s.PEMFile, s.Host)
		}
		return os.WriteFile(filepath.Join(e.Dir, "crt-list.txt"), []byte(b.String()), 0o644)
	}
	return peer{
		Name:   "haproxy",
		Binary: bin,
		Version: func() string {
			// "HAProxy version 2.6.12-1 2023/03/01 - https://haproxy.org/"
			if f := strings.Fields(output(bin, "-v")); len(f) > 2 {
				return f[2]
			}
			return "unknown"
		},
		Configure: func(e env, sites []site) error {
			cfg := fmt.Sprintf(`global
  maxconn 8000
  nbthread %d
  tune.ssl.default-dh-param 2048
  ssl-default-bind-options no-tls-tickets
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend sites
  bind 127.0.0.1:%d ssl crt-list %s alpn h2,http/1.1
  bind 127.0.0.1:%d
  default_backend backend
backend backend
  http-reuse safe
  server b %s
`, runtime.NumCPU(), e.Port, filepath.Join(e.Dir, "crt-list.txt"), e.Plain, e.Backend)
			if err := os.WriteFile(conf(e), []byte(cfg), 0o644); err != nil {
				return err
			}
			return writeList(e, sites)
		},
		Start: func(e env) (*proc, error) {
			return startProc(e.Dir, bin, []string{"-W", "-db", "-f", conf(e)}, nil)
		},
		Add: func(e env, p *proc, sites []site, added site) error {
			if err := writeList(e, append(sites[:len(sites):len(sites)], added)); err != nil {
				return err
			}
			return p.cmd.Process.Signal(syscall.SIGUSR2)
		},
		Check: func(e env) error {
			out, err := exec.Command(bin, "-c", "-f", conf(e)).CombinedOutput()
			if err != nil {
				return fmt.Errorf("haproxy -c: %v: %s", err, out)
			}
			return nil
		},
	}
}

// caddy: a Caddyfile with one site block per site and automatic HTTPS
// off; a new site is a rewritten Caddyfile loaded through the admin API
// ("caddy reload").
func caddyPeer() peer {
	bin := lookPath("caddy")
	conf := func(e env) string { return filepath.Join(e.Dir, "Caddyfile") }
	caddyEnv := func(e env) []string {
		return []string{"HOME=" + e.Dir, "XDG_DATA_HOME=" + filepath.Join(e.Dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(e.Dir, "config")}
	}
	write := func(e env, sites []site) error {
		var b strings.Builder
		fmt.Fprintf(&b, `{
  admin 127.0.0.1:%d
  auto_https off
  grace_period 1s
}
`, e.Spare)
		for _, s := range sites {
			fmt.Fprintf(&b, `https://%s:%d {
  bind 127.0.0.1
  tls %s %s
  reverse_proxy %s
}
http://%s:%d {
  bind 127.0.0.1
  reverse_proxy %s
}
`, s.Host, e.Port, s.CertFile, s.KeyFile, e.Backend, s.Host, e.Plain, e.Backend)
		}
		return os.WriteFile(conf(e), []byte(b.String()), 0o644)
	}
	return peer{
		Name:      "caddy",
		Binary:    bin,
		Version:   func() string { return output(bin, "version") },
		Configure: write,
		Start: func(e env) (*proc, error) {
			return startProc(e.Dir, bin, []string{"run", "--config", conf(e), "--adapter", "caddyfile"}, caddyEnv(e))
		},
		Add: func(e env, _ *proc, sites []site, added site) error {
			if err := write(e, append(sites[:len(sites):len(sites)], added)); err != nil {
				return err
			}
			cmd := exec.Command(bin, "reload", "--config", conf(e), "--adapter", "caddyfile", "--address", fmt.Sprintf("127.0.0.1:%d", e.Spare))
			cmd.Env = append(os.Environ(), caddyEnv(e)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("caddy reload: %v: %s", err, out)
			}
			return nil
		},
		Check: func(e env) error {
			cmd := exec.Command(bin, "validate", "--config", conf(e), "--adapter", "caddyfile")
			cmd.Env = append(os.Environ(), caddyEnv(e)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("caddy validate: %v: %s", err, out)
			}
			return nil
		},
	}
}

// lookPath finds a proxy on PATH or in /usr/sbin, which is not on every
// user's PATH; "" when it is not installed.
func lookPath(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/sbin", name); isExecutable(p) {
		return p
	}
	return ""
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// conditionsHold reads the YAML stream of "portico check" and fails on any
// Accepted, Programmed or ResolvedRefs condition that is not True.
func conditionsHold(stream []byte) error {
	for doc := range strings.SplitSeq(string(stream), "\n---\n") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			return fmt.Errorf("portico check output: %w", err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		var bad []string
		walkConditions(obj["status"], func(c map[string]any) {
			switch c["type"] {
			case "Accepted", "Programmed", "ResolvedRefs":
				if c["status"] != "True" {
					bad = append(bad, fmt.Sprintf("%v=%v (%v)", c["type"], c["status"], c["message"]))
				}
			}
		})
		if len(bad) > 0 {
			return fmt.Errorf("%v %v/%v: %s", obj["kind"], meta["namespace"], meta["name"], strings.Join(bad, "; "))
		}
	}
	return nil
}

// walkConditions calls f for every condition under v, at any depth (the
// object's, its listeners', its route parents').
func walkConditions(v any, f func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if list, ok := x.([]any); ok && k == "conditions" {
				for _, c := range list {
					if c, ok := c.(map[string]any); ok {
						f(c)
					}
				}
				continue
			}
			walkConditions(x, f)
		}
	case []any:
		for _, x := range v {
			walkConditions(x, f)
		}
	}
}
