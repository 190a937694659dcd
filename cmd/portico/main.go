// Command portico is a Kubernetes Gateway API implementation and L7 reverse
// proxy in one binary.
package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/admin"
	"portico.dev/portico/internal/controlplane/acme"
	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/pipeline"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/kube"
	"portico.dev/portico/kube/secretstorage"
	"portico.dev/portico/proxy"
	"portico.dev/portico/translate"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "check":
		err = check(args[1:], stdout, stderr)
	case "echo":
		err = echo(ctx, args[1:], stderr)
	case "version", "--version", "-version":
		err = printVersion(args[1:], stdout, stderr)
	case "help", "-h", "--help", "-help":
		if len(args) > 1 && args[1] != "help" {
			if !slices.Contains(commands, args[1]) {
				unknownCommand(stderr, args[1])
				return exitUsage
			}
			return run([]string{args[1], "-h"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		unknownCommand(stderr, args[0])
		return exitUsage
	}
	var help *helpRequest
	switch {
	case errors.As(err, &help):
		if err := writeHelp(stdout, help.fs); err != nil {
			return exitFailed
		}
		return exitOK
	case errors.Is(err, errNotServing):
		return exitNotServing
	case err != nil:
		fmt.Fprintf(stderr, "portico %s: %v\n", args[0], err)
		return exitFailed
	}
	return exitOK
}

func newLogger(format, level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	var enc zapcore.Encoder
	switch format {
	case "console", "":
		cfg := zap.NewDevelopmentEncoderConfig()
		cfg.EncodeTime = zapcore.ISO8601TimeEncoder
		enc = zapcore.NewConsoleEncoder(cfg)
	case "json":
		enc = zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	default:
		return nil, fmt.Errorf("--log-format: %q is neither console nor json", format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)), nil
}

// newAccessLog opens the access log: JSON lines to path, or to standard
// output for "-". Writes are buffered (256 KiB, flushed every second) so
// that a request does not wait on a write to the file; close flushes.
func newAccessLog(path string) (*zap.Logger, func(), error) {
	var out zapcore.WriteSyncer = os.Stdout
	if path != "-" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, nil, fmt.Errorf("--access-log: %w", err)
		}
		out = f
	}
	buffered := &zapcore.BufferedWriteSyncer{WS: out, Size: 256 << 10, FlushInterval: time.Second}
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = zapcore.ISO8601TimeEncoder
	cfg.LevelKey, cfg.CallerKey, cfg.StacktraceKey = zapcore.OmitKey, zapcore.OmitKey, zapcore.OmitKey
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(cfg), buffered, zapcore.InfoLevel))
	return log, func() {
		_ = buffered.Stop() // flushes
		if f, ok := out.(*os.File); ok && f != os.Stdout {
			_ = f.Close()
		}
	}, nil
}

// serveFlags are the flags of serve.
type serveFlags struct {
	configPath, logFormat, logLevel, controller, bind, pool *string
	holdoff, minHoldoff, maxDelay, drain                    *time.Duration
	echoAddr, accessLog, adminAddr                          *string
	// sessionKey is the file holding the key of session persistence.
	sessionKey *string
	// http1 is what the deprecated --http1-server was given ("" when not).
	http1                        string
	requestID, failOnBind, pprof *bool
	maxConfig                    *int64
	maxBackends, maxRoutes       *int
	cluster                      *clusterOptions
	gateway                      *gatewayFlags // dataplane.go
	acme                         acmeFlags
	request                      *requestFlags
	tracing                      *tracingFlags
	gc                           *gcFlags
	// limits sets the flags of connection and client limits in proxy
	// options.
	limits func(*proxy.Options)
	// deprecated lists the deprecated names the flags were given by.
	deprecated []string
}

// parseServeFlags reads and checks the flags of serve.
func parseServeFlags(args []string, stderr io.Writer) (*serveFlags, error) {
	fs := newFlagSet("serve", stderr)
	f := &serveFlags{}
	defineServeFlags(fs, f)
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	return f, f.check(fs)
}

// defineServeFlags defines serve's flags on fs, to be read into f.
func defineServeFlags(fs *flag.FlagSet, f *serveFlags) {
	*f = serveFlags{
		configPath:  fs.String("config", "", "YAML file or directory of Gateway API objects (standalone mode); without it Portico runs in cluster mode"),
		logFormat:   fs.String("log-format", "console", "log format: console or json"),
		logLevel:    fs.String("log-level", "info", "log level: debug, info, warn, error"),
		controller:  fs.String("controller-name", string(wellknown.ControllerName), "serve GatewayClasses with this controllerName"),
		bind:        fs.String("bind-address", "", "IP address the listener ports bind to (default: all)"),
		pool:        fs.String("gateway-address-pool", "", "give every Gateway its own IP from this comma-separated list of addresses and CIDR ranges (the addresses must exist on this host); its ports bind there and its status reports it"),
		holdoff:     fs.Duration("holdoff", 100*time.Millisecond, "wait at most this long after the last change before rebuilding"),
		minHoldoff:  fs.Duration("min-holdoff", 10*time.Millisecond, "wait at least this long after the last change before rebuilding; in between, the wait follows how long the last rebuild took"),
		maxDelay:    fs.Duration("max-delay", time.Second, "rebuild at most this long after the first change of a burst"),
		maxConfig:   fs.Int64("max-config-bytes", filesource.DefaultMaxConfigBytes, "refuse a standalone configuration whose files hold more bytes than this together"),
		drain:       fs.Duration("drain-timeout", 30*time.Second, "how long removed ports and shutdown wait for in-flight requests and open WebSockets before closing them"),
		echoAddr:    fs.String("echo-backend", "", "also run the sample echo backend on this address (the bundled example's is 127.0.0.1:9180)"),
		failOnBind:  fs.Bool("fail-on-bind-error", false, "exit at start-up when a listener port of the first configuration cannot be bound (default: serve the others, report the Gateways Programmed=False and retry every 10s)"),
		requestID:   fs.Bool("request-id", false, "give every request an X-Request-Id (keeping a usable one the client sent), passed to the backend and written to the access log"),
		accessLog:   fs.String("access-log", "", "write one JSON line per request to this file, or to standard output with \"-\" (default: off)"),
		maxBackends: fs.Int("metrics-max-backends", admin.DefaultMaxBackends, "backends (Service ports) whose requests get metric series of their own; the requests of further backends are counted under backend=\"other\""),
		maxRoutes:   fs.Int("metrics-max-routes", admin.DefaultMaxRoutes, "routes whose requests get a route label of their own in the request metrics; the requests of further routes are counted under route=\"other\" (-1: every route, one series per route and status code)"),
		pprof:       fs.Bool("pprof", false, "serve Go's profiles on the admin address under /debug/pprof/, to loopback clients only (kubectl port-forward, or the host itself)"),
		sessionKey:  fs.String("session-key-file", "", "file holding the 32-byte key (64 hex digits) that seals sessionPersistence values; give every replica the same one so that sessions survive restarts and move between replicas (default: a random key per process)"),
		adminAddr:   fs.String("admin-address", "", "serve /healthz, /readyz and /metrics on this address (cluster mode default \":9090\"; standalone: off unless set)"),
		cluster:     clusterFlags(fs),
		gateway:     newGatewayFlags(fs),
		acme:        newACMEFlags(fs),
		request:     newRequestFlags(fs),
		tracing:     newTracingFlags(fs),
		limits:      limitFlags(fs),
		gc:          newGCFlags(fs),
	}
	for old, current := range flagRenames {
		deprecatedAlias(fs, old, current, &f.deprecated)
	}
	fs.Func("http1-server", deprecatedPrefix+"Portico's own HTTP/1 server is the only one (portico is accepted; go was removed)", func(v string) error {
		f.http1 = v
		f.deprecated = append(f.deprecated, "http1-server")
		return nil
	})
}

// check refuses flag values that are wrong, alone or together.
func (f *serveFlags) check(fs *flag.FlagSet) error {
	if err := f.tracing.check(); err != nil {
		return err
	}
	if _, err := f.gc.resolve(environ); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	case f.http1 == "go":
		return errors.New("--http1-server=go was removed: Portico serves HTTP/1 with its own server only; drop the flag")
	case f.http1 != "" && f.http1 != "portico":
		return fmt.Errorf("--http1-server %q: the flag is deprecated and accepts only portico; drop it", f.http1)
	case *f.minHoldoff > *f.holdoff:
		return fmt.Errorf("--min-holdoff %v is longer than --holdoff %v", *f.minHoldoff, *f.holdoff)
	case *f.configPath == "" && f.acme.dataDirSet(fs):
		return errors.New("--data-dir is for standalone mode (--config); in a cluster ACME state lives in Secrets of Portico's namespace")
	case *f.pprof && *f.adminAddr == "" && f.standalone():
		return errors.New("--pprof is served on the admin address, which standalone mode opens only with --admin-address")
	case *f.failOnBind && !f.standalone():
		return errors.New("--fail-on-bind-error is for standalone mode (--config)")
	case *f.configPath != "" && f.cluster.set(fs):
		return errors.New("--kubeconfig, --namespace, --identity, --gateway-address, --gateway-service, --leader-election-*, --kube-api-*, --status-workers and --knative* are for cluster mode, not with --config")
	}
	return f.gateway.check(f, fs)
}

// logDeprecated logs each deprecated flag name used, once.
func (f *serveFlags) logDeprecated(log *zap.Logger) {
	seen := map[string]bool{}
	for _, name := range f.deprecated {
		if !seen[name] {
			seen[name] = true
			if current, ok := flagRenames[name]; ok {
				log.Warn("deprecated flag", zap.String("flag", "--"+name), zap.String("use", "--"+current))
			} else {
				log.Warn("deprecated flag", zap.String("flag", "--"+name), zap.String("why", flagRetired[name]))
			}
		}
	}
}

// flagRenames maps each deprecated flag name to its current one: names
// one could take for another's ("controller" was three things), kept
// working a while.
var flagRenames = map[string]string{"controller": "controller-address", "data-plane-controller": "data-plane-controller-address"}

// flagRetired says why each deprecated flag without a successor is no
// longer needed; it is accepted, with the one value that changes nothing,
// for one release.
var flagRetired = map[string]string{"http1-server": "Portico's own HTTP/1 server is the only one; drop the flag"}

func (f *serveFlags) standalone() bool { return *f.configPath != "" }

// pipelineOptions is where the flags become the run loop's options, for
// both modes.
func (f *serveFlags) pipelineOptions() (pipeline.Options, error) {
	opts := pipeline.Options{
		Translate:   translate.Settings{ControllerName: gwv1.GatewayController(*f.controller)},
		MinHoldoff:  *f.minHoldoff,
		Holdoff:     *f.holdoff,
		MaxDelay:    *f.maxDelay,
		ACMESecrets: f.standalone(),
	}
	var err error
	if opts.Translate.AddressPool, err = parseAddressPool(*f.pool); err != nil {
		return opts, err
	}
	if !f.standalone() {
		if opts.Translate.Shared, err = f.cluster.sharedAddresses(); err != nil {
			return opts, err
		}
		if opts.Translate.Knative, err = f.cluster.knative.settings(); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// proxyOptions are the data plane's options.
func (f *serveFlags) proxyOptions(metrics *admin.Metrics) (proxy.Options, error) {
	opts := proxy.DefaultOptions()
	if err := f.request.apply(&opts); err != nil {
		return opts, err
	}
	opts.BindAddress = *f.bind
	opts.DrainTimeout = *f.drain
	f.limits(&opts)
	opts.Observer = metrics
	opts.Backends = metrics
	metrics.SetMaxBackends(*f.maxBackends)
	metrics.SetMaxRoutes(*f.maxRoutes)
	opts.Handshakes = metrics
	opts.Streams = metrics
	opts.UDP = metrics
	opts.RequestID = *f.requestID
	if *f.sessionKey != "" {
		key, err := readSessionKey(*f.sessionKey)
		if err != nil {
			return opts, err
		}
		opts.SessionKey = key
	}
	return opts, nil
}

// readSessionKey reads a key of session persistence: 64 hex digits.
func readSessionKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--session-key-file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("--session-key-file %s: want 64 hex digits (32 bytes)", path)
	}
	return key, nil
}

// openAccessLog sets opts.AccessLog as --access-log asks; the func
// returned closes it.
func (f *serveFlags) openAccessLog(opts *proxy.Options) (func(), error) {
	if *f.accessLog == "" {
		return func() {}, nil
	}
	alog, closeLog, err := newAccessLog(*f.accessLog)
	if err != nil {
		return nil, err
	}
	opts.AccessLog = alog
	return closeLog, nil
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	f, err := parseServeFlags(args, stderr)
	if err != nil {
		return err
	}
	if f.standalone() {
		// Before anything starts: the loop would log that a previous
		// configuration keeps serving, when there is none.
		if _, err := os.Stat(*f.configPath); err != nil {
			if errors.Is(err, iofs.ErrNotExist) {
				return fmt.Errorf("--config %s: no such file or directory", *f.configPath)
			}
			return fmt.Errorf("--config: %w", err)
		}
	}
	popts, err := f.pipelineOptions()
	if err != nil {
		return err
	}
	metrics := admin.NewMetrics()
	opts, err := f.proxyOptions(metrics)
	if err != nil {
		return err
	}
	log, err := newLogger(*f.logFormat, *f.logLevel, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // best effort on exit
	f.logDeprecated(log)
	gc, _ := f.gc.resolve(environ) // checked by parseServeFlags
	gc.apply(log)
	if *f.echoAddr != "" {
		ln, err := listenEcho(*f.echoAddr)
		if err != nil {
			return err
		}
		go serveEcho(ctx, ln, "example-backend", log.Named("echo"))
	}
	closeLog, err := f.openAccessLog(&opts)
	if err != nil {
		return err
	}
	defer closeLog()
	tracer, err := f.tracing.start(ctx)
	if err != nil {
		return err
	}
	opts.Tracer = tracer
	// Challenges reach the ACME manager once it exists, after the data
	// plane (in a cluster its storage needs the API client).
	challenges := &lateChallenges{}
	opts.Challenges = challenges
	opts.FileLimit = raiseFileLimit(log)
	if opts.SessionKey == nil && !f.standalone() && !f.gateway.enabled() && f.cluster.sessionSecret != "" {
		// Before the data plane: it seals sessions from its first request.
		key, err := f.cluster.sharedSessionKey(ctx)
		if err != nil {
			// Sessions still work, each replica sealing its own: a
			// session then holds only on the replica that opened it.
			log.Warn("session persistence: no key shared between replicas; each seals sessions with its own", zap.Error(err))
		} else {
			opts.SessionKey = key
		}
	}
	if !f.gateway.enabled() {
		// Per-Gateway data planes get keys derived from it, when it is
		// shared (configstream.DeriveSessionKey).
		f.cluster.sharedKey = opts.SessionKey
	}
	rt := proxy.New(opts, log.Named("proxy"))

	m, err := f.newMode(popts, rt, metrics, challenges, log)
	if err != nil {
		return err
	}
	defer m.close()
	adminAddr := *f.adminAddr
	if adminAddr == "" && !f.standalone() {
		adminAddr = ":9090"
	}
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	if *f.failOnBind {
		go func() {
			select {
			case err := <-m.firstApply:
				if err != nil {
					cancelRun(fmt.Errorf("--fail-on-bind-error: the first configuration was not applied in full: %w", err))
				}
			case <-runCtx.Done():
			}
		}()
	}
	// The admin server outlives runCtx: probes keep being answered while
	// the data plane drains.
	adminCtx, stopAdmin := context.WithCancel(context.Background())
	defer stopAdmin()
	adminDone, err := startAdmin(ctx, adminCtx, adminAddr, *f.pprof, metrics, readiness(m.loop.Ready, rt.Ready), log)
	if err != nil {
		return err
	}
	runErr := m.loop.Run(runCtx)
	if cause := context.Cause(runCtx); runErr == nil && ctx.Err() == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		runErr = cause
	}
	cancelRun(nil)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), *f.drain)
	defer cancel()
	log.Info("shutting down")
	_ = rt.Close(shutdownCtx)
	// After the data plane: the last requests' spans go out too.
	if err := tracer.Shutdown(shutdownCtx); err != nil {
		log.Warn("tracing shutdown", zap.Error(err))
	}
	stopAdmin()
	// The admin server's own shutdown may take seconds for a request in
	// flight; shutting down as a whole stays within the drain timeout,
	// and what the admin server still serves then ends with the process.
	select {
	case err := <-adminDone:
		if err != nil && runErr == nil {
			runErr = err
		}
	case <-shutdownCtx.Done():
		log.Warn("admin server still serving at the end of the drain timeout")
	}
	return runErr
}

// mode is the run loop over the source of one mode, with what must be
// closed when it ends.
type mode struct {
	loop    *pipeline.Loop
	closers []func()
	// firstApply receives the error of applying the first configuration
	// (nil when it was applied in full), in standalone mode.
	firstApply chan error
}

func (m *mode) close() {
	for _, c := range slices.Backward(m.closers) {
		c()
	}
}

// newMode builds the source, the outputs and the ACME manager of the mode
// the flags ask for, and the loop over them.
func (f *serveFlags) newMode(popts pipeline.Options, rt *proxy.Runtime, metrics *admin.Metrics, challenges *lateChallenges, log *zap.Logger) (*mode, error) {
	if f.gateway.enabled() {
		return f.newGatewayMode(popts, rt, metrics, challenges, log)
	}
	m := &mode{firstApply: make(chan error, 1)}
	out := pipeline.Outputs{Applied: func(r pipeline.ApplyReport) {
		if r.Generation == 1 {
			m.firstApply <- r.Err
		}
		metrics.ConfigApplied(r.Generation, r.Translate, r.Apply, r.Certificates, r.Err)
		metrics.ObserveChangeApplied(r.SinceChange)
		metrics.SetCertificatesExpiry(r.CertificatesExpire)
	}}
	var source pipeline.Source
	var storage certmagic.Storage
	var c *kube.Cluster
	if f.standalone() {
		fsrc := filesource.New(*f.configPath, log.Named("config"))
		fsrc.MaxBytes = *f.maxConfig
		source = fsrc
		storage = f.acme.fileStorage()
		warnForeign := foreignClassWarner(popts.Translate.ControllerName, log.Named("standalone"))
		out.Statuses = func(st *status.Computed, changed *status.Changed, res *snapshot.Resources) {
			warnForeign(res)
			pipeline.LogProblems(log.Named("standalone"), st, changed)
		}
	} else {
		var err error
		if c, err = newCluster(f.cluster, popts.Translate.ControllerName, metrics, log); err != nil {
			return nil, err
		}
		if storage, err = secretstorage.New(c.Kube, secretstorage.Options{Namespace: c.LeaderElection.Namespace, Identity: c.LeaderElection.Identity}); err != nil {
			return nil, err
		}
		source, out.Statuses, out.Facts, out.ACME, out.DataPlanes = c, c.WriteStatuses, c.Facts, c.WriteACME, c.WriteDataPlanes
		// Data planes ask the controller about challenges the CA sends them.
		c.Challenges = challenges
		if popts.Translate.Knative != nil {
			kn, err := newKnative(c, f.cluster, popts.Translate.Knative)
			if err != nil {
				return nil, err
			}
			source, out.Knative = kn, kn.WriteKnative
		}
	}
	mopts, err := f.acme.managerOptions(storage, log.Named("acme"))
	if err != nil {
		return nil, err
	}
	// The manager tells the loop about certificates, the loop tells the
	// manager which it wants: the loop is made after the manager.
	var loop *pipeline.Loop
	mopts.OnChange = func() { loop.Changed() }
	mopts.Observer = metrics
	if c != nil {
		// Outcomes become Events on the Gateways and ListenerSets that
		// asked, recorded by the replica that placed the order.
		events := kube.NewACMEEvents(c, c.LeaderElection.Identity)
		m.closers = append(m.closers, events.Close)
		mopts.OnEvent = events.Record
	}
	manager, err := acme.New(mopts)
	if err != nil {
		m.close()
		return nil, err
	}
	m.closers = append(m.closers, manager.Close)
	challenges.set(manager)
	if c != nil {
		c.ACME = manager
	}
	name := "cluster"
	if f.standalone() {
		name = "standalone"
	}
	loop = pipeline.New(popts, source, rt, manager, out, log.Named(name))
	m.loop = loop
	return m, nil
}

// readiness is what /readyz answers: a configuration applied, and every
// port able to accept connections (a port whose accepts keep failing, out
// of files, would only make new clients time out).
func readiness(applied, accepting func() error) func() error {
	return func() error {
		if err := applied(); err != nil {
			return err
		}
		return accepting()
	}
}

// startAdmin serves the admin endpoints on addr ("" for none) until
// adminCtx ends; readiness fails as soon as ctx ends, so that the Service
// stops sending new connections while in-flight requests drain.
func startAdmin(ctx, adminCtx context.Context, addr string, pprof bool, metrics *admin.Metrics, ready func() error, log *zap.Logger) (<-chan error, error) {
	done := make(chan error, 1)
	if addr == "" {
		done <- nil
		return done, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--admin-address: %w", err)
	}
	srv := &admin.Server{Metrics: metrics, Log: log.Named("admin"), Pprof: pprof, Ready: func() error {
		if ctx.Err() != nil {
			return errors.New("shutting down")
		}
		return ready()
	}}
	log.Info("admin endpoints listening", zap.Stringer("address", ln.Addr()))
	go func() { done <- srv.Serve(adminCtx, ln) }()
	return done, nil
}
