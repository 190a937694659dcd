package kube

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/acme"
	"portico.dev/portico/proxy"
)

// Standalone serves the objects of YAML files with no cluster: load,
// translate, apply, and again whenever the files change.
type Standalone struct {
	Source     *FileSource
	Translator *Translator
	Runtime    *proxy.Runtime
	Log        *zap.Logger
	// MinHoldoff, Holdoff and MaxDelay debounce file changes (see
	// Debouncer; MinHoldoff 0 keeps the holdoff fixed at Holdoff).
	MinHoldoff time.Duration
	Holdoff    time.Duration
	MaxDelay   time.Duration
	// OnApply, when set, is told about every rebuild (metrics).
	OnApply func(ApplyReport)
	// ACME, when set, obtains the certificates of listeners that opted in
	// to ACME. Its certificates reach translate as Portico-managed Secrets
	// of the names the listeners ask for, as they would in a cluster; a
	// Secret of that name in the files wins. Its OnChange must call
	// Changed.
	ACME *acme.Manager

	debouncer atomic.Pointer[Debouncer]

	mu         sync.Mutex
	generation int64
	lastErr    error
	lastACME   []ACMECertificate
	statuses   *Statuses
}

// Statuses returns the statuses of the configuration applied last, nil
// before the first.
func (s *Standalone) Statuses() *Statuses {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statuses
}

// Changed asks for a rebuild, as an edited file does: the ACME manager
// calls it when a certificate arrived or an order failed.
func (s *Standalone) Changed() {
	if d := s.debouncer.Load(); d != nil {
		d.Mark()
	}
}

// withACME adds the ACME manager's state to res: its errors, and a
// managed Secret for every certificate it holds that no file defines.
func (s *Standalone) withACME(res *Resources) *Resources {
	out := *res
	out.ACMEErrors = s.ACME.Errors()
	have := make(map[types.NamespacedName]bool, len(res.Secrets))
	for _, sec := range res.Secrets {
		have[nn(sec.Namespace, sec.Name)] = true
	}
	for _, c := range s.lastACME {
		if have[c.Secret] {
			continue
		}
		if cert, ok := s.ACME.Certificate(c.Hostname); ok {
			out.Secrets = append(slices.Clip(out.Secrets), ManagedSecret(c, cert.CertPEM, cert.KeyPEM))
			have[c.Secret] = true
		}
	}
	return &out
}

// Reload loads the files and applies them. On any error the running
// configuration stays as it is and the error is returned (and logged).
func (s *Standalone) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	res, err := s.Source.Load()
	if err != nil {
		s.lastErr = err
		s.Log.Error("config not applied; the previous config keeps serving", zap.Error(err))
		return err
	}
	if s.ACME != nil {
		res = s.withACME(res)
	}
	cfg, st := s.Translator.Translate(res)
	s.generation++
	cfg.Generation = s.generation
	translated := time.Since(start)
	err = s.Runtime.Apply(cfg)
	if s.OnApply != nil {
		s.OnApply(ApplyReport{Generation: cfg.Generation, Translate: translated, Apply: time.Since(start) - translated, Certificates: s.Translator.Certs.Len(), Err: err})
	}
	if err != nil {
		s.lastErr = err
		s.Log.Error("config not applied; the previous config keeps serving", zap.Int64("generation", cfg.Generation), zap.Error(err))
		return err
	}
	s.lastErr = nil
	s.statuses = st
	if s.ACME != nil {
		s.lastACME = st.ACME
		s.ACME.Want(acmeHostnames(st.ACME))
	}
	LogProblems(s.Log, st)
	s.Log.Info("config loaded", zap.Int64("generation", cfg.Generation), zap.Duration("translate", translated), zap.Duration("total", time.Since(start)),
		zap.Int("gateways", len(res.Gateways)), zap.Int("listenerSets", len(res.ListenerSets)), zap.Int("httpRoutes", len(res.HTTPRoutes)))
	return nil
}

// Generation returns the number of configs applied so far.
func (s *Standalone) Generation() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// Run applies the files, then watches them until ctx ends. The first load
// must succeed: starting on a broken config would serve nothing silently.
func (s *Standalone) Run(ctx context.Context) error {
	d := NewAdaptiveDebouncer(s.MinHoldoff, s.Holdoff, s.MaxDelay)
	s.debouncer.Store(d)
	// Watch before the first load so that no edit in between is missed.
	if err := s.Source.Watch(ctx, d.Mark); err != nil {
		return err
	}
	if err := s.Reload(); err != nil {
		return fmt.Errorf("initial config: %w", err)
	}
	d.Run(ctx, func() { _ = s.Reload() })
	return nil
}
