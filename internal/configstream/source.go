package configstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// ErrNoConfiguration is what a data plane's Snapshot returns before its
// first update.
var ErrNoConfiguration = errors.New("no configuration received from the controller yet")

// Source is a data plane's pipeline.Source: the snapshots its controller
// pushes. It keeps the last one while the controller is unreachable, so
// the data plane goes on serving, and reconnects until its context ends.
type Source struct {
	Gateway types.NamespacedName
	// Controller is the controller's host:port.
	Controller string
	// TokenFile holds the projected ServiceAccount token; it is read
	// again for every connection (the kubelet renews it).
	TokenFile string
	// RootCAs verify the controller's certificate.
	RootCAs *x509.CertPool
	// Pod names this data plane in acknowledgements.
	Pod string
	Log *zap.Logger
	// Silence is how long a stream may stay silent (no update, no
	// heartbeat) before it is given up and dialled again.
	Silence time.Duration
	// OnSessionKey, when set, is given the session key the controller
	// sends with each stream (SessionKeyHeader), before any of the
	// stream's snapshots.
	OnSessionKey func(key []byte) error

	mu      sync.Mutex
	latest  *snapshot.Resources
	version string
	taken   string // the version Snapshot last returned
	client  *http.Client
	// pendingAck waits while an acknowledgement is in flight (acking).
	pendingAck *Ack
	acking     bool
}

func (s *Source) httpClient() *http.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = &http.Client{Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: s.RootCAs, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2:   true,
			TLSHandshakeTimeout: 10 * time.Second,
			IdleConnTimeout:     time.Minute,
		}}
	}
	return s.client
}

// Run streams from the controller until ctx ends, calling ready once the
// first snapshot arrived and changed after every new one.
func (s *Source) Run(ctx context.Context, changed, ready func()) error {
	var once sync.Once
	backoff := 250 * time.Millisecond
	for ctx.Err() == nil {
		received, err := s.stream(ctx, func() {
			changed()
			once.Do(ready)
		})
		if ctx.Err() != nil {
			break
		}
		if received {
			backoff = 250 * time.Millisecond
		}
		s.Log.Info("controller stream ended; serving the last configuration and reconnecting", zap.Error(err), zap.Duration("in", backoff))
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
	return nil
}

// stream reads one stream until it ends; received says whether an update
// came.
func (s *Source) stream(ctx context.Context, onUpdate func()) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	token, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return false, fmt.Errorf("read token: %w", err)
	}
	u := url.URL{Scheme: "https", Host: s.Controller, Path: StreamPath, RawQuery: url.Values{"gateway": {s.Gateway.String()}}.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return false, fmt.Errorf("controller answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	if s.OnSessionKey != nil {
		key, err := sessionKeyOf(resp.Header)
		if err == nil && key != nil {
			err = s.OnSessionKey(key)
		}
		if err != nil {
			// Sessions still work, sealed with the data plane's own key:
			// they hold on this replica only.
			s.Log.Warn("session key from the controller refused", zap.Error(err))
		}
	}
	// A controller that vanished without closing the connection is
	// noticed by its silence.
	alive := make(chan struct{}, 1)
	silence := s.Silence
	if silence == 0 {
		silence = 30 * time.Second
	}
	go func() {
		t := time.NewTimer(silence)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-alive:
				t.Reset(silence)
			case <-t.C:
				cancel()
				return
			}
		}
	}()
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return received, fmt.Errorf("read stream: %w", err)
		}
		select {
		case alive <- struct{}{}:
		default:
		}
		var up Update
		if err := json.Unmarshal(line, &up); err != nil {
			return received, fmt.Errorf("decode update: %w", err)
		}
		if up.Version == "" || up.Resources == nil {
			continue // a heartbeat
		}
		s.mu.Lock()
		same := up.Version == s.version
		s.latest, s.version = up.Resources, up.Version
		s.mu.Unlock()
		received = true
		if !same {
			s.Log.Info("configuration received", zap.String("version", up.Version))
			onUpdate()
		}
	}
}

// Snapshot is the last snapshot received.
func (s *Source) Snapshot() (*snapshot.Resources, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.latest == nil {
		return nil, ErrNoConfiguration
	}
	s.taken = s.version
	return s.latest, nil
}

// Acknowledge tells the controller which version the last rebuild
// applied, and what of it could not be (applyErr). It does not block the
// caller. One acknowledgement is in flight at a time, and the latest waiting
// one replaces those before it: a burst of rebuilds costs the controller
// one or two. A failed one is logged; the next rebuild's is sent anyway.
func (s *Source) Acknowledge(applyErr error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := Ack{Gateway: s.Gateway.String(), Pod: s.Pod, Version: s.taken}
	if a.Version == "" {
		return
	}
	if applyErr != nil {
		a.Error = applyErr.Error()
	}
	s.pendingAck = &a
	if s.acking {
		return
	}
	s.acking = true
	go s.sendAcks()
}

// sendAcks sends the waiting acknowledgement until none is left.
func (s *Source) sendAcks() {
	for {
		s.mu.Lock()
		a := s.pendingAck
		s.pendingAck = nil
		if a == nil {
			s.acking = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if err := s.postAck(*a); err != nil {
			s.Log.Info("acknowledgement not delivered", zap.String("version", a.Version), zap.Error(err))
		}
	}
}

func (s *Source) postAck(a Ack) error {
	token, err := os.ReadFile(s.TokenFile)
	if err != nil {
		return fmt.Errorf("read token: %w", err)
	}
	body, err := json.Marshal(a)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u := url.URL{Scheme: "https", Host: s.Controller, Path: AckPath}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.httpClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("controller answered %s", resp.Status)
	}
	return nil
}
