// Command portico is a Kubernetes Gateway API implementation and L7 reverse
// proxy in one binary.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/kube"
	"portico.dev/portico/proxy"
)

const usage = `Portico: a Kubernetes Gateway API reverse proxy.

Usage:
  portico serve --config PATH   serve Gateway API objects from YAML files (standalone)
  portico check --config PATH   print the status Portico would write for every Gateway,
                                ListenerSet and HTTPRoute in PATH
  portico echo  --listen ADDR   run a small HTTP backend that echoes requests as JSON

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

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML file or directory of Gateway API objects (standalone mode)")
	logFormat := fs.String("log-format", "console", "log format: console or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	controller := fs.String("controller-name", string(kube.DefaultControllerName), "serve GatewayClasses with this controllerName")
	bind := fs.String("bind-address", "", "IP address the listener ports bind to (default: all)")
	holdoff := fs.Duration("holdoff", 100*time.Millisecond, "wait this long after the last change before rebuilding")
	maxDelay := fs.Duration("max-delay", time.Second, "rebuild at most this long after the first change of a burst")
	drain := fs.Duration("drain-timeout", 30*time.Second, "how long removed ports and shutdown wait for in-flight requests")
	echoAddr := fs.String("echo-backend", "", "also run the sample echo backend on this address (for the bundled example)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(*logFormat, *logLevel, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // best effort on exit
	if *configPath == "" {
		return errors.New("--config is required (cluster mode is not available in this build)")
	}
	if *echoAddr != "" {
		ln, err := listenEcho(*echoAddr)
		if err != nil {
			return err
		}
		go serveEcho(ctx, ln, "example-backend", log.Named("echo"))
	}
	opts := proxy.DefaultOptions()
	opts.BindAddress = *bind
	opts.DrainTimeout = *drain
	rt := proxy.New(opts, log.Named("proxy"))
	s := &kube.Standalone{
		Source:     kube.NewFileSource(*configPath, log.Named("config")),
		Translator: kube.NewTranslator(gwv1.GatewayController(*controller)),
		Runtime:    rt,
		Log:        log.Named("standalone"),
		Holdoff:    *holdoff,
		MaxDelay:   *maxDelay,
	}
	runErr := s.Run(ctx)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	log.Info("shutting down")
	_ = rt.Close(shutdownCtx)
	return runErr
}

func check(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML file or directory of Gateway API objects")
	controller := fs.String("controller-name", string(kube.DefaultControllerName), "controllerName of the GatewayClasses Portico serves")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configPath == "" {
		return errors.New("--config is required")
	}
	res, err := kube.NewFileSource(*configPath, zap.NewNop()).Load()
	if err != nil {
		return err
	}
	_, st := kube.NewTranslator(gwv1.GatewayController(*controller)).Translate(res)
	return kube.WriteStatuses(stdout, res, st, gwv1.GatewayController(*controller), time.Now())
}
