package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/proxy"
)

// Standalone serves the objects of YAML files with no cluster: load,
// translate, apply, and again whenever the files change.
type Standalone struct {
	Source     *FileSource
	Translator *Translator
	Runtime    *proxy.Runtime
	Log        *zap.Logger
	Holdoff    time.Duration
	MaxDelay   time.Duration
	// OnApply, when set, is told about every rebuild (metrics).
	OnApply func(ApplyReport)

	mu         sync.Mutex
	generation int64
	lastErr    error
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
	d := NewDebouncer(s.Holdoff, s.MaxDelay)
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
