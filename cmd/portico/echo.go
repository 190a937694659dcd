package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"
)

// echoResponse is what the sample backend answers: enough for a user (and
// a test) to see which backend served a request and what Portico sent it.
type echoResponse struct {
	Backend string              `json:"backend"`
	Method  string              `json:"method"`
	Host    string              `json:"host"`
	Path    string              `json:"path"`
	Proto   string              `json:"proto"`
	Headers map[string][]string `json:"headers"`
}

func echo(ctx context.Context, args []string, stderr io.Writer) error {
	fs := newFlagSet("echo", stderr)
	addr := fs.String("listen", "127.0.0.1:9180", "address to listen on (the port of the bundled example's backend; cluster mode's admin endpoints are on 9090)")
	name := fs.String("name", "", "name reported in each answer (default: the hostname)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *name == "" {
		*name, _ = os.Hostname()
	}
	log, err := newLogger("console", "info", stderr)
	if err != nil {
		return err
	}
	ln, err := listenEcho(*addr)
	if err != nil {
		return err
	}
	return serveEcho(ctx, ln, *name, log)
}

func listenEcho(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("echo backend: %w", err)
	}
	return ln, nil
}

func serveEcho(ctx context.Context, ln net.Listener, name string, log *zap.Logger) error {
	srv := &http.Server{
		ReadHeaderTimeout: 10 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(echoResponse{Backend: name, Method: r.Method, Host: r.Host, Path: r.URL.RequestURI(), Proto: r.Proto, Headers: r.Header})
		}),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("echo backend listening", zap.String("address", ln.Addr().String()), zap.String("name", name))
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("echo backend: %w", err)
	}
	return nil
}
