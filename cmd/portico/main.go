// Command portico is a Kubernetes Gateway API implementation and L7 reverse
// proxy in one binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/acme"
	"portico.dev/portico/admin"
	"portico.dev/portico/kube"
	"portico.dev/portico/kube/secretstorage"
	"portico.dev/portico/proxy"
)

const usage = `Portico: a Kubernetes Gateway API reverse proxy.

Usage:
  portico serve                 serve the Gateway API objects of the cluster Portico runs in
                                (or of --kubeconfig's), writing their status
  portico serve --config PATH   serve Gateway API objects from YAML files (standalone)
  portico check --config PATH   print the status Portico would write for every Gateway,
                                ListenerSet and HTTPRoute in PATH
  portico echo  --listen ADDR   run a small HTTP backend that echoes requests as JSON
  portico version               print the version, commit and Go release of this build

Run "portico COMMAND -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
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
	case "version":
		err = printVersion(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "portico: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "portico %s: %v\n", args[0], err)
		return 1
	}
	return 0
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

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML file or directory of Gateway API objects (standalone mode); without it Portico runs in cluster mode")
	logFormat := fs.String("log-format", "console", "log format: console or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	controller := fs.String("controller-name", string(kube.DefaultControllerName), "serve GatewayClasses with this controllerName")
	bind := fs.String("bind-address", "", "IP address the listener ports bind to (default: all)")
	pool := fs.String("gateway-address-pool", "", "give every Gateway its own IP from this comma-separated list of addresses and CIDR ranges (the addresses must exist on this host); its ports bind there and its status reports it")
	holdoff := fs.Duration("holdoff", 100*time.Millisecond, "wait at most this long after the last change before rebuilding")
	minHoldoff := fs.Duration("min-holdoff", 10*time.Millisecond, "wait at least this long after the last change before rebuilding; in between, the wait follows how long the last rebuild took")
	maxDelay := fs.Duration("max-delay", time.Second, "rebuild at most this long after the first change of a burst")
	drain := fs.Duration("drain-timeout", 30*time.Second, "how long removed ports and shutdown wait for in-flight requests and open WebSockets before closing them")
	echoAddr := fs.String("echo-backend", "", "also run the sample echo backend on this address (for the bundled example)")
	requestID := fs.Bool("request-id", false, "give every request an X-Request-Id (keeping a usable one the client sent), passed to the backend and written to the access log")
	accessLog := fs.String("access-log", "", "write one JSON line per request to this file, or to standard output with \"-\" (default: off)")
	adminAddr := fs.String("admin-address", "", "serve /healthz, /readyz and /metrics on this address (cluster mode default \":9090\"; standalone: off unless set)")
	cf := clusterFlags(fs)
	af := newACMEFlags(fs)
	rf := newRequestFlags(fs)
	setLimits := limitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if *minHoldoff > *holdoff {
		return fmt.Errorf("--min-holdoff %v is longer than --holdoff %v", *minHoldoff, *holdoff)
	}
	if *configPath == "" && af.dataDirSet(fs) {
		return errors.New("--data-dir is for standalone mode (--config); in a cluster ACME state lives in Secrets of Portico's namespace")
	}
	if *configPath != "" && cf.set(fs) {
		return errors.New("--kubeconfig, --namespace, --identity, --gateway-address, --gateway-service, --leader-election-*, --kube-api-* and --status-workers are for cluster mode, not with --config")
	}
	log, err := newLogger(*logFormat, *logLevel, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // best effort on exit
	if *echoAddr != "" {
		ln, err := listenEcho(*echoAddr)
		if err != nil {
			return err
		}
		go serveEcho(ctx, ln, "example-backend", log.Named("echo"))
	}
	opts := proxy.DefaultOptions()
	if err := rf.apply(&opts); err != nil {
		return err
	}
	opts.BindAddress = *bind
	opts.DrainTimeout = *drain
	setLimits(&opts)
	metrics := admin.NewMetrics()
	opts.Observer = metrics
	opts.Handshakes = metrics
	opts.RequestID = *requestID
	if *accessLog != "" {
		alog, closeLog, err := newAccessLog(*accessLog)
		if err != nil {
			return err
		}
		defer closeLog()
		opts.AccessLog = alog
	}
	var s *kube.Standalone // standalone mode
	var manager *acme.Manager
	// In a cluster the ACME storage needs the API client, made after the
	// data plane: challenges reach the manager once it exists.
	challenges := &lateChallenges{}
	opts.Challenges = challenges
	if *configPath != "" {
		s = &kube.Standalone{}
		mopts, err := af.managerOptions(af.fileStorage(), log.Named("acme"))
		if err != nil {
			return err
		}
		mopts.OnChange = s.Changed
		mopts.Observer = metrics
		if manager, err = acme.New(mopts); err != nil {
			return err
		}
		defer manager.Close()
		challenges.set(manager)
	}
	rt := proxy.New(opts, log.Named("proxy"))
	translator := kube.NewTranslator(gwv1.GatewayController(*controller))
	if translator.AddressPool, err = parseAddressPool(*pool); err != nil {
		return err
	}

	var ready func() error // set by the mode below
	var runErr error
	runCtx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	// The admin server outlives runCtx: probes keep being answered while
	// the data plane drains.
	adminCtx, stopAdmin := context.WithCancel(context.Background())
	defer stopAdmin()
	adminDone := make(chan error, 1)
	startAdmin := func(addr string) error {
		if addr == "" {
			adminDone <- nil
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("--admin-address: %w", err)
		}
		srv := &admin.Server{Metrics: metrics, Log: log.Named("admin"), Ready: func() error {
			// Unready as soon as shutdown starts, so that the Service stops
			// sending new connections while in-flight requests drain.
			if ctx.Err() != nil {
				return errors.New("shutting down")
			}
			return ready()
		}}
		log.Info("admin endpoints listening", zap.Stringer("address", ln.Addr()))
		go func() { adminDone <- srv.Serve(adminCtx, ln) }()
		return nil
	}

	if *configPath == "" {
		addr := *adminAddr
		if addr == "" {
			addr = ":9090"
		}
		c, err := newCluster(cf, translator, rt, metrics, *holdoff, *maxDelay, log)
		if err != nil {
			return err
		}
		c.MinHoldoff = *minHoldoff
		storage, err := secretstorage.New(c.Kube, secretstorage.Options{Namespace: c.LeaderElection.Namespace, Identity: c.LeaderElection.Identity})
		if err != nil {
			return err
		}
		mopts, err := af.managerOptions(storage, log.Named("acme"))
		if err != nil {
			return err
		}
		mopts.OnChange = c.ACMEChanged
		mopts.Observer = metrics
		// Outcomes become Events on the Gateways and ListenerSets that asked,
		// recorded by the replica that placed the order.
		events := kube.NewACMEEvents(c, c.LeaderElection.Identity)
		defer events.Close()
		mopts.OnEvent = events.Record
		if manager, err = acme.New(mopts); err != nil {
			return err
		}
		defer manager.Close()
		c.ACME = manager
		challenges.set(manager)
		ready = c.Ready
		if err := startAdmin(addr); err != nil {
			return err
		}
		runErr = c.Run(runCtx)
	} else {
		s.Source = kube.NewFileSource(*configPath, log.Named("config"))
		s.Translator = translator
		s.Runtime = rt
		s.Log = log.Named("standalone")
		s.MinHoldoff, s.Holdoff, s.MaxDelay = *minHoldoff, *holdoff, *maxDelay
		s.OnApply = func(r kube.ApplyReport) {
			metrics.ConfigApplied(r.Generation, r.Translate, r.Apply, r.Certificates, r.Err)
			metrics.SetCertificatesExpiry(translator.Certs.EarliestExpiry())
		}
		s.ACME = manager
		ready = func() error {
			if s.Generation() == 0 {
				return errors.New("no configuration applied yet")
			}
			return nil
		}
		if err := startAdmin(*adminAddr); err != nil {
			return err
		}
		runErr = s.Run(runCtx)
	}
	cancelRun()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	log.Info("shutting down")
	_ = rt.Close(shutdownCtx)
	stopAdmin()
	if err := <-adminDone; err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

func check(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML file or directory of Gateway API objects")
	controller := fs.String("controller-name", string(kube.DefaultControllerName), "controllerName of the GatewayClasses Portico serves")
	output := fs.String("o", "yaml", "output format: yaml (a stream of objects) or json (one List of them)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configPath == "" {
		return errors.New("--config is required")
	}
	if *output != "yaml" && *output != "json" {
		return fmt.Errorf("-o: %q is neither yaml nor json", *output)
	}
	res, err := kube.NewFileSource(*configPath, zap.NewNop()).Load()
	if err != nil {
		return err
	}
	_, st := kube.NewTranslator(gwv1.GatewayController(*controller)).Translate(res)
	if *output == "json" {
		return writeStatusesJSON(stdout, func(w io.Writer) error {
			return kube.WriteStatuses(w, res, st, gwv1.GatewayController(*controller), time.Now())
		})
	}
	return kube.WriteStatuses(stdout, res, st, gwv1.GatewayController(*controller), time.Now())
}
