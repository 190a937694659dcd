package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Server answers the kubelet's probes and Prometheus's scrapes.
type Server struct {
	// Metrics are served on /metrics; nil serves no /metrics.
	Metrics *Metrics
	// Ready reports whether Portico should receive traffic: nil when ready,
	// otherwise why not (the body of a failing /readyz).
	Ready func() error
	Log   *zap.Logger
	// Pprof serves Go's profiles on /debug/pprof/, to clients on loopback
	// only: an operator reaches them through "kubectl port-forward" (which
	// connects from the pod's own loopback) or from the host itself, never
	// from the network the admin port is open to.
	Pprof bool
}

// maxProfile is the longest CPU profile or trace /debug/pprof/ takes.
const maxProfile = 120 * time.Second

// Handler returns the admin endpoints:
//
//	/healthz  200 while the process runs (liveness)
//	/readyz   200 once Ready says so, 503 with the reason otherwise
//	/metrics  Prometheus text exposition
//	/debug/pprof/  Go's profiles, with Pprof, to loopback clients only
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.Ready != nil {
			if err := s.Ready(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, err)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	if s.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.Metrics.Registry(), promhttp.HandlerOpts{}))
	}
	if s.Pprof {
		mux.Handle("GET /debug/pprof/", loopbackOnly(http.HandlerFunc(pprof.Index)))
		mux.Handle("GET /debug/pprof/cmdline", loopbackOnly(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", loopbackOnly(http.HandlerFunc(pprof.Profile)))
		mux.Handle("GET /debug/pprof/symbol", loopbackOnly(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", loopbackOnly(http.HandlerFunc(pprof.Trace)))
	}
	return mux
}

// loopbackOnly refuses requests that do not come from a loopback address.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			http.Error(w, "profiles are served to loopback clients only (kubectl port-forward)", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// writeTimeout bounds the time to answer: 30 s, or with profiles on, as
// long as the longest profile (net/http/pprof refuses a profile longer than
// the server's write timeout).
func (s *Server) writeTimeout() time.Duration {
	if s.Pprof {
		return maxProfile + 10*time.Second
	}
	return 30 * time.Second
}

// Serve serves the admin endpoints on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      s.writeTimeout(),
		IdleTimeout:       60 * time.Second,
	}
	if s.Log != nil {
		srv.ErrorLog = zap.NewStdLog(s.Log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)))
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("admin server shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("admin server: %w", err)
	}
	return nil
}
