// Package acme obtains and renews certificates over ACME HTTP-01 for the
// hostnames Portico's configuration asks for, and answers the CA's
// challenge requests from shared storage, so that any replica serving the
// hostname's HTTP port can answer them.
//
// Only hostnames handed to Want are ever ordered: a TLS handshake never
// triggers an order or a storage read here, whatever its SNI.
package acme

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/mholt/acmez/v3/acme"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Options configure a Manager.
type Options struct {
	// Directory is the ACME directory URL; empty means Let's Encrypt
	// production.
	Directory string
	// Email is the ACME account's contact, optional.
	Email string
	// EABKeyID and EABMACKey (base64url) bind the account to an existing
	// one at CAs that require External Account Binding.
	EABKeyID, EABMACKey string
	// TrustedRoots, when set, replaces the system roots for talking to the
	// ACME server (a private CA).
	TrustedRoots *x509.CertPool
	// Storage holds accounts, certificates, locks and challenge state;
	// replicas that share it share orders and challenges.
	Storage certmagic.Storage
	// Concurrency bounds the orders in flight at once; 0 means 4.
	Concurrency int
	// MinBackoff and MaxBackoff bound the wait before a failed order is
	// tried again; the wait doubles from one failure to the next. Zero
	// means one minute and one hour.
	MinBackoff, MaxBackoff time.Duration
	// OnChange is called, from another goroutine, whenever a certificate
	// was obtained or renewed, or a hostname's error changed: time to
	// rebuild the configuration.
	OnChange func()
	// Observer, when set, counts orders, failures and renewals.
	Observer Observer
	// OnEvent, when set, is told about every order, failure and renewal
	// with its hostname, on the replica where it happened: with shared
	// storage only one replica orders a hostname, so each is told once.
	// It runs on the ordering goroutine and must not block.
	OnEvent func(Event)
	// RenewalWindowRatio is the part of a certificate's lifetime, counted
	// back from its expiry, in which it is renewed; zero means certmagic's
	// default (one third).
	RenewalWindowRatio float64
	// RenewCheckInterval is how often certificates are checked for
	// renewal; zero means certmagic's default (10 minutes). Short-lived
	// certificates need a shorter interval than their renewal window.
	RenewCheckInterval time.Duration
	// DisableARI renews by RenewalWindowRatio alone, ignoring the renewal
	// window the CA suggests (ACME Renewal Information), which otherwise
	// takes precedence and is picked at random within.
	DisableARI bool
	Logger     *zap.Logger
}

// Observer records ACME events (metrics).
type Observer interface {
	// ObserveACME is told about one event: "obtained", "renewed",
	// "failed" (an order) or "renew_failed".
	ObserveACME(event string)
}

// Event is one ACME outcome for a hostname.
type Event struct {
	Hostname string
	// Kind is what the Observer is told: "obtained", "renewed", "failed"
	// or "renew_failed".
	Kind string
	// Err is why an order or renewal failed.
	Err error
}

// Certificate is an issued certificate chain and its private key, in PEM.
type Certificate struct {
	CertPEM, KeyPEM []byte
}

// Manager orders, stores and renews certificates for a changing set of
// hostnames.
type Manager struct {
	opts   Options
	log    *zap.Logger
	cache  *certmagic.Cache
	cfg    *certmagic.Config
	issuer *certmagic.ACMEIssuer
	sem    chan struct{}
	park   net.Listener

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	wanted map[string]*order
	certs  map[string]Certificate
	errs   map[string]string // copied on write: handed out as a snapshot
}

// order is the work for one wanted hostname; cancel stops it when the
// hostname is no longer wanted.
type order struct {
	cancel context.CancelFunc
}

// New returns a Manager; Close stops it.
func New(opts Options) (*Manager, error) {
	if opts.Storage == nil {
		return nil, errors.New("acme: no storage")
	}
	opts.Directory = cmp.Or(opts.Directory, certmagic.LetsEncryptProductionCA)
	opts.Concurrency = cmp.Or(opts.Concurrency, 4)
	opts.MinBackoff = cmp.Or(opts.MinBackoff, time.Minute)
	opts.MaxBackoff = cmp.Or(opts.MaxBackoff, time.Hour)
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if (opts.EABKeyID == "") != (opts.EABMACKey == "") {
		return nil, errors.New("acme: External Account Binding needs both a key ID and an HMAC key")
	}
	// certmagic's HTTP-01 solver binds the challenge port itself unless
	// something already listens there, in which case it leaves the answer
	// to that listener, from the challenge state it puts in the storage.
	// Portico's own HTTP listeners answer; this parked loopback socket is
	// the "something" that keeps certmagic from ever binding a real port.
	park, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("acme: parking the solver's port: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		opts:   opts,
		log:    opts.Logger,
		sem:    make(chan struct{}, opts.Concurrency),
		park:   park,
		ctx:    ctx,
		cancel: cancel,
		wanted: map[string]*order{},
		certs:  map[string]Certificate{},
		errs:   map[string]string{},
	}
	m.wg.Go(func() {
		for {
			c, err := park.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	})

	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert:   func(certmagic.Certificate) (*certmagic.Config, error) { return m.cfg, nil },
		RenewCheckInterval: opts.RenewCheckInterval,
		// The cache's own lines (maintenance started and stopped, naming
		// the cache's pointer) say nothing to an operator, and a Portico
		// that uses no ACME would print them all the same.
		Logger: opts.Logger.WithOptions(zap.IncreaseLevel(zapcore.WarnLevel)),
	})
	m.cfg = certmagic.New(m.cache, certmagic.Config{
		Storage:            opts.Storage,
		RenewalWindowRatio: opts.RenewalWindowRatio,
		DisableARI:         opts.DisableARI,
		Logger:             opts.Logger,
		OnEvent:            m.onEvent,
	})
	tmpl := certmagic.ACMEIssuer{
		CA:                      opts.Directory,
		TestCA:                  opts.Directory,
		Email:                   opts.Email,
		Agreed:                  true,
		TrustedRoots:            opts.TrustedRoots,
		DisableTLSALPNChallenge: true,
		ListenHost:              "127.0.0.1",
		AltHTTPPort:             park.Addr().(*net.TCPAddr).Port,
		Logger:                  opts.Logger,
	}
	if opts.EABKeyID != "" {
		tmpl.ExternalAccount = &acme.EAB{KeyID: opts.EABKeyID, MACKey: opts.EABMACKey}
	}
	m.issuer = certmagic.NewACMEIssuer(m.cfg, tmpl)
	m.cfg.Issuers = []certmagic.Issuer{unattended{m.issuer}}
	return m, nil
}

// Close stops every order and the renewal of every certificate.
func (m *Manager) Close() {
	m.cancel()
	m.mu.Lock()
	for host, o := range m.wanted {
		o.cancel()
		delete(m.wanted, host)
	}
	m.mu.Unlock()
	_ = m.park.Close()
	// Maintenance first: it may start loading a renewed certificate.
	m.cache.Stop()
	m.wg.Wait()
}

// HandleHTTPChallenge answers r if it is an ACME HTTP-01 challenge request
// for a token in the storage, and reports whether it did.
func (m *Manager) HandleHTTPChallenge(w http.ResponseWriter, r *http.Request) bool {
	return m.issuer.HandleHTTPChallenge(w, r)
}

// Want makes hosts the set of hostnames to hold certificates for: new ones
// are ordered (or loaded from the storage), ones no longer listed stop
// being renewed.
func (m *Manager) Want(hosts []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return
	}
	keep := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		keep[h] = true
		if _, ok := m.wanted[h]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(m.ctx)
		m.wanted[h] = &order{cancel: cancel}
		m.wg.Go(func() { m.run(ctx, h) })
	}
	var gone []certmagic.SubjectIssuer
	for h, o := range m.wanted {
		if keep[h] {
			continue
		}
		o.cancel()
		delete(m.wanted, h)
		delete(m.certs, h)
		if _, ok := m.errs[h]; ok {
			m.errs = cloneWithout(m.errs, h)
		}
		gone = append(gone, certmagic.SubjectIssuer{Subject: h})
	}
	if len(gone) > 0 {
		m.cache.RemoveManaged(gone)
	}
}

// Certificate returns the certificate held for host, if any.
func (m *Manager) Certificate(host string) (Certificate, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.certs[host]
	return c, ok
}

// Errors returns the last error of every wanted hostname that has no
// certificate yet, or whose last order failed. The map is a snapshot: a
// new one is made whenever it changes, so comparing maps tells whether
// anything changed. Do not modify it.
func (m *Manager) Errors() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.errs
}

// run obtains host's certificate, or loads it from the storage, and puts
// it under certmagic's maintenance, which renews it. A failure is retried
// after a backoff that doubles up to MaxBackoff.
func (m *Manager) run(ctx context.Context, host string) {
	backoff := m.opts.MinBackoff
	for {
		err := m.manage(ctx, host)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			m.setError(host, "")
			return
		}
		m.log.Warn("ACME order failed; retrying", zap.String("hostname", host), zap.Duration("in", backoff), zap.Error(err))
		m.setError(host, describeError(err))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, m.opts.MaxBackoff)
	}
}

func (m *Manager) manage(ctx context.Context, host string) error {
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-m.sem }()
	if err := m.cfg.ManageSync(ctx, []string{host}); err != nil {
		return err
	}
	return m.load(ctx, host)
}

// load reads host's certificate and key from the storage.
func (m *Manager) load(ctx context.Context, host string) error {
	key := m.issuer.IssuerKey()
	certPEM, err := m.opts.Storage.Load(ctx, certmagic.StorageKeys.SiteCert(key, host))
	if err != nil {
		return fmt.Errorf("loading the certificate of %s: %w", host, err)
	}
	keyPEM, err := m.opts.Storage.Load(ctx, certmagic.StorageKeys.SitePrivateKey(key, host))
	if err != nil {
		return fmt.Errorf("loading the private key of %s: %w", host, err)
	}
	m.mu.Lock()
	_, wanted := m.wanted[host]
	if wanted {
		m.certs[host] = Certificate{CertPEM: certPEM, KeyPEM: keyPEM}
	}
	m.mu.Unlock()
	if wanted && m.opts.OnChange != nil {
		m.opts.OnChange()
	}
	return nil
}

// setError records host's last error ("" clears it) and tells OnChange
// when that changed what the statuses say.
func (m *Manager) setError(host, msg string) {
	m.mu.Lock()
	_, wanted := m.wanted[host]
	changed := wanted && m.errs[host] != msg
	if changed {
		if msg == "" {
			m.errs = cloneWithout(m.errs, host)
		} else {
			errs := make(map[string]string, len(m.errs)+1)
			for k, v := range m.errs {
				errs[k] = v
			}
			errs[host] = msg
			m.errs = errs
		}
	}
	m.mu.Unlock()
	if changed && m.opts.OnChange != nil {
		m.opts.OnChange()
	}
}

// onEvent counts certmagic's events and picks up renewed certificates.
func (m *Manager) onEvent(ctx context.Context, event string, data map[string]any) error {
	renewal, _ := data["renewal"].(bool)
	host, _ := data["identifier"].(string)
	errv, _ := data["error"].(error)
	switch event {
	case "cert_obtained":
		if renewal {
			m.observe(host, "renewed", nil)
			// Renewals happen in certmagic's maintenance, outside run.
			m.wg.Go(func() {
				if err := m.load(m.ctx, host); err != nil && m.ctx.Err() == nil {
					m.log.Error("renewed certificate not loaded", zap.String("hostname", host), zap.Error(err))
				}
			})
		} else {
			m.observe(host, "obtained", nil)
		}
	case "cert_failed":
		if renewal {
			m.observe(host, "renew_failed", errv)
		} else {
			m.observe(host, "failed", errv)
		}
	}
	return nil
}

func (m *Manager) observe(host, event string, err error) {
	if m.opts.Observer != nil {
		m.opts.Observer.ObserveACME(event)
	}
	if m.opts.OnEvent != nil {
		m.opts.OnEvent(Event{Hostname: host, Kind: event, Err: err})
	}
}

// Hostnames returns the wanted hostnames, sorted.
func (m *Manager) Hostnames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.wanted))
	for h := range m.wanted {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

func cloneWithout(in map[string]string, drop string) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		if k != drop {
			out[k] = v
		}
	}
	return out
}

// unattended is the ACME issuer with its checks before an order made
// non-interactive: run synchronously, certmagic would otherwise ask on the
// terminal for an email address when none is configured, and Portico is a
// server with nobody at the terminal. (The cost: certmagic no longer tells
// the CA which certificate a renewal replaces, a hint it gives only to an
// issuer of its own type.)
type unattended struct {
	*certmagic.ACMEIssuer
}

func (u unattended) PreCheck(ctx context.Context, names []string, _ bool) error {
	return u.ACMEIssuer.PreCheck(ctx, names, false)
}

// urlPath matches the path part of URLs in error texts: challenge URLs
// carry a token that changes with every order.
var urlPath = regexp.MustCompile(`(https?://[^/\s"]+)/[^\s"]*`)

// describeError is the listener-status text of a failed order: the CA's
// problem when it sent one, with URLs cut to their host, so the message
// says why without changing on every retry (each change of a status is a
// rebuild and an API write).
func describeError(err error) string {
	msg := err.Error()
	var p acme.Problem
	if errors.As(err, &p) {
		msg = strings.TrimPrefix(p.Type, "urn:ietf:params:acme:error:")
		if p.Detail != "" {
			msg += ": " + p.Detail
		}
	}
	msg = urlPath.ReplaceAllString(msg, "$1/...")
	if len(msg) > 400 {
		msg = msg[:400] + "..."
	}
	return msg
}
