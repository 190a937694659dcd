package sni

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
)

// ServerConfig returns the tls.Config an HTTPS port serves with.
//
// base carries the protocol settings (MinVersion, NextProtos, ClientAuth,
// session ticket keys...) and is not modified; its Certificates,
// NameToCertificate, GetCertificate and GetConfigForClient are ignored.
//
// table is called once per handshake and returns the current table, so a
// new table takes effect at the next handshake while established connections
// carry on. remember, when not nil, is called with hello.Conn (the net.Conn
// that tls.Server wraps, not the *tls.Conn) and the chosen entry before the
// handshake goes on; it is called for resumed sessions too.
//
// A server name that matches no entry, or an entry without certificates,
// fails the handshake with the unrecognized_name alert, and such a client
// cannot resume a session either.
func ServerConfig(base *tls.Config, table func() *Table, remember func(net.Conn, *Entry)) *tls.Config {
	s := &server{table: table, remember: remember}
	if base != nil {
		s.base = base.Clone()
	} else {
		s.base = &tls.Config{}
	}
	s.base.Certificates = nil
	s.base.NameToCertificate = nil
	s.base.GetCertificate = nil
	s.base.GetConfigForClient = nil

	// crypto/tls answers a config without any certificate with the
	// unrecognized_name alert; disabling tickets keeps a client from
	// resuming a session past the missing name.
	s.refuse = s.base.Clone()
	s.refuse.SessionTicketsDisabled = true

	outer := s.base.Clone()
	outer.GetConfigForClient = s.configForClient
	// Only reached if something bypasses GetConfigForClient.
	outer.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return certificate(s.table(), hello)
	}
	return outer
}

type server struct {
	base     *tls.Config
	refuse   *tls.Config
	table    func() *Table
	remember func(net.Conn, *Entry)
	current  atomic.Pointer[tableConfig]
}

// tableConfig is the config handed to handshakes while one table is
// current. Its GetCertificate is bound to that table, so the certificate
// always comes from the same table as the entry given to remember, even when
// the table is swapped in the middle of a handshake. One clone per table
// swap, instead of one per handshake.
type tableConfig struct {
	table *Table
	cfg   *tls.Config
	// withClientAuth holds, per ClientAuth and Settings, cfg asking for
	// client certificates and with those settings: entryConfig ->
	// *tls.Config. The entries of a port share them, so there are few.
	withClientAuth sync.Map
}

// entryConfig is what an entry's config differs by.
type entryConfig struct {
	auth *ClientAuth
	tls  *Settings
}

// forEntry returns the config for a handshake that chose e.
func (c *tableConfig) forEntry(e *Entry) *tls.Config {
	if e.ClientAuth == nil && e.TLS == nil {
		return c.cfg
	}
	key := entryConfig{e.ClientAuth, e.TLS}
	if cfg, ok := c.withClientAuth.Load(key); ok {
		return cfg.(*tls.Config)
	}
	cfg := c.cfg.Clone()
	e.TLS.apply(cfg)
	if e.ClientAuth == nil {
		actual, _ := c.withClientAuth.LoadOrStore(key, cfg)
		return actual.(*tls.Config)
	}
	cfg.ClientCAs = e.ClientAuth.CAs
	if e.ClientAuth.Optional {
		// Asked for, not required and not checked: the handshake goes on
		// with or without one.
		cfg.ClientAuth = tls.RequestClientCert
	} else {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	actual, _ := c.withClientAuth.LoadOrStore(key, cfg)
	return actual.(*tls.Config)
}

func (s *server) configForClient(hello *tls.ClientHelloInfo) (*tls.Config, error) {
	t := s.table()
	e := t.Lookup(hello.ServerName)
	if e == nil || len(e.Certificates) == 0 {
		return s.refuse, nil
	}
	if s.remember != nil {
		s.remember(hello.Conn, e)
	}
	return s.configFor(t).forEntry(e), nil
}

func (s *server) configFor(t *Table) *tableConfig {
	if c := s.current.Load(); c != nil && c.table == t {
		return c
	}
	cfg := s.base.Clone()
	cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return certificate(t, hello)
	}
	// Session tickets stay valid across swaps: crypto/tls encrypts them
	// with the keys of the outer config unless base set keys explicitly,
	// which the clone then shares.
	c := &tableConfig{table: t, cfg: cfg}
	s.current.Store(c)
	return c
}

// certificate returns (nil, nil) when nothing matches, which crypto/tls
// turns into the unrecognized_name alert because the config has no
// certificates of its own.
func certificate(t *Table, hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	e := t.Lookup(hello.ServerName)
	if e == nil || len(e.Certificates) == 0 {
		return nil, nil
	}
	return e.Certificate(hello)
}
