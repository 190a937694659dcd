// Package sni picks the TLS certificate for a handshake by the SNI server
// name, over tables of up to O(100,000) listener hostnames per port.
//
// A Table is built once per configuration and shared by every handshake;
// ServerConfig wires it into a tls.Config through GetConfigForClient and
// GetCertificate, and Cache keeps parsed key pairs across rebuilds so that a
// rebuild parses only the Secrets whose bytes changed.
package sni

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync/atomic"

	"portico.dev/portico/internal/shared/hostname"
)

// Entry is one listener on an HTTPS port.
type Entry struct {
	// Hostname is the listener hostname pattern: an exact name,
	// "*.example.com" (any name below example.com, at any depth), or "" for
	// the port's fallback.
	Hostname string
	// Certificates are in the listener's certificateRefs order. Their Leaf
	// may be nil: it is parsed at the first handshake that chooses among
	// several, and kept by the entry.
	Certificates []*tls.Certificate
	// Value is opaque to sni: the proxy keeps its listener here.
	Value any
	// ClientAuth, when set, asks the client for a certificate at the
	// handshake and checks it.
	ClientAuth *ClientAuth
	// TLS, when set, are the listener's own handshake settings
	// (ClientTrafficPolicy tls); nil: the port's.
	TLS *Settings

	// withLeaves is Certificates with every Leaf set, made at the first
	// handshake that chooses among several: hello.SupportsCertificate
	// parses a nil Leaf at every call.
	withLeaves atomic.Pointer[[]*tls.Certificate]
}

// ClientAuth is the client certificate check of an entry.
type ClientAuth struct {
	// ID is the same for the same check in every table (see
	// listeners.ClientValidation.ID).
	ID string
	// CAs are the roots client certificates must chain to.
	CAs *x509.CertPool
	// Optional lets a client without a certificate, or with one that does
	// not verify, complete the handshake anyway.
	Optional bool
}

// Certificate picks the first certificate the client supports
// (hello.SupportsCertificate), else the first one. It fails only when the
// entry has no certificate.
func (e *Entry) Certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	switch len(e.Certificates) {
	case 0:
		return nil, fmt.Errorf("sni: listener hostname %q has no certificate", e.Hostname)
	case 1:
		// Same shortcut as crypto/tls with a single certificate: the client
		// gets it, and reports what it cannot use.
		return e.Certificates[0], nil
	}
	certs := e.leaves()
	for _, c := range certs {
		if hello.SupportsCertificate(c) == nil {
			return c, nil
		}
	}
	return certs[0], nil
}

// leaves returns Certificates with Leaf set, parsing the missing ones on
// first use. The certificates are copies: the originals may be shared by
// other entries and handshakes. A leaf that does not parse stays nil (the
// key pair was checked when loaded, so this does not happen).
func (e *Entry) leaves() []*tls.Certificate {
	if p := e.withLeaves.Load(); p != nil {
		return *p
	}
	out := make([]*tls.Certificate, len(e.Certificates))
	for i, c := range e.Certificates {
		out[i] = c
		if c.Leaf == nil && len(c.Certificate) > 0 {
			if leaf, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
				cp := *c
				cp.Leaf = leaf
				out[i] = &cp
			}
		}
	}
	// Two first handshakes may both parse; either result is the same.
	e.withLeaves.Store(&out)
	return out
}

// Table maps SNI server names to the entries of one port. It is immutable
// and safe for concurrent use.
type Table struct {
	names *hostname.Table[*Entry]
}

// NewTable builds a table. Hostname precedence follows the Gateway API
// listener rules: an exact name beats any wildcard, a longer wildcard suffix
// beats a shorter one, and the entry without hostname is the fallback.
// Hostnames are compared case-insensitively and without a trailing dot; when
// two entries have the same hostname the first one wins. Nil entries are
// skipped.
func NewTable(entries []*Entry) *Table {
	patterns := make([]string, 0, len(entries))
	values := make([]*Entry, 0, len(entries))
	for _, e := range entries {
		if e == nil {
			continue
		}
		patterns = append(patterns, e.Hostname)
		values = append(values, e)
	}
	return &Table{names: hostname.NewTable(patterns, values)}
}

// Lookup returns the entry for serverName, or nil when nothing matches and
// there is no fallback. An empty serverName (a ClientHello without SNI)
// matches only the fallback. It does not allocate. A nil table matches
// nothing.
func (t *Table) Lookup(serverName string) *Entry {
	if t == nil {
		return nil
	}
	e, _ := t.names.Lookup(serverName)
	return e
}

// Len returns the number of distinct hostnames in the table, the fallback
// included.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.names.Len()
}

// With returns a table holding t's entries without those of the hostnames
// in remove, then add, as NewTable builds from that list; t is not changed.
// A change of exact hostnames costs in proportion to the change (see
// hostname.Table.With).
func (t *Table) With(remove []string, add []*Entry) *Table {
	patterns := make([]string, 0, len(add))
	values := make([]*Entry, 0, len(add))
	for _, e := range add {
		if e != nil {
			patterns = append(patterns, e.Hostname)
			values = append(values, e)
		}
	}
	var names *hostname.Table[*Entry]
	if t != nil {
		names = t.names
	}
	return &Table{names: names.With(remove, patterns, values)}
}

// Entries returns the table's entries, in no particular order.
func (t *Table) Entries() []*Entry {
	if t == nil {
		return nil
	}
	_, entries := t.names.Entries()
	return entries
}
