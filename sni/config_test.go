package sni

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"portico.dev/portico/internal/testkit/snitest"
)

// testServer serves TLS on 127.0.0.1 with a ServerConfig over the table in
// cur. After the handshake it writes the Value of the entry that remember
// received for the connection, then echoes lines.
type testServer struct {
	addr string
	cur  atomic.Pointer[Table]

	mu         sync.Mutex
	remembered map[net.Conn]*Entry
}

func startServer(t *testing.T, tab *Table) *testServer {
	t.Helper()
	s := &testServer{remembered: make(map[net.Conn]*Entry)}
	s.cur.Store(tab)
	cfg := ServerConfig(&tls.Config{MinVersion: tls.VersionTLS12},
		func() *Table { return s.cur.Load() },
		func(c net.Conn, e *Entry) {
			s.mu.Lock()
			s.remembered[c] = e
			s.mu.Unlock()
		})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	var wg sync.WaitGroup
	var conns sync.Map
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Go(func() {
				defer c.Close()
				defer conns.Delete(c)
				c.SetDeadline(time.Now().Add(10 * time.Second))
				tc := tls.Server(c, cfg)
				if err := tc.Handshake(); err != nil {
					return
				}
				s.mu.Lock()
				e := s.remembered[c]
				delete(s.remembered, c)
				s.mu.Unlock()
				if e == nil {
					fmt.Fprintf(tc, "no entry remembered\n")
					return
				}
				fmt.Fprintf(tc, "%v\n", e.Value)
				io.Copy(tc, tc)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return s
}

type clientConn struct {
	*tls.Conn
	r     *bufio.Reader
	entry string // the Value the server remembered
}

func (s *testServer) dial(cfg *tls.Config) (*clientConn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", s.addr, cfg)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("read remembered entry: %w", err)
	}
	return &clientConn{Conn: c, r: r, entry: line[:len(line)-1]}, nil
}

// leafOf is the certificate a client saw.
func (c *clientConn) leaf() *x509.Certificate {
	return c.ConnectionState().PeerCertificates[0]
}

func (c *clientConn) echo(msg string) error {
	if _, err := fmt.Fprintf(c, "%s\n", msg); err != nil {
		return err
	}
	got, err := c.r.ReadString('\n')
	if err != nil {
		return err
	}
	if got != msg+"\n" {
		return fmt.Errorf("echo %q, got %q", msg, got)
	}
	return nil
}

func sameCert(a *x509.Certificate, b *tls.Certificate) bool {
	return a.Equal(b.Leaf)
}

// clientConfig skips chain verification on purpose: a listener wildcard
// covers names at any depth, a certificate SAN wildcard only one label, and
// these tests are about which certificate the server picks.
func clientConfig(serverName string) *tls.Config {
	return &tls.Config{ServerName: serverName, InsecureSkipVerify: true}
}

func TestServeCertificatePerSNI(t *testing.T) {
	certs := map[string]*tls.Certificate{
		"a.example.com":   issue(t, snitest.ECDSA, "a.example.com"),
		"*.example.com":   issue(t, snitest.ECDSA, "*.example.com"),
		"*.b.example.com": issue(t, snitest.ECDSA, "*.b.example.com"),
		"":                issue(t, snitest.ECDSA, "fallback.test"),
	}
	var entries []*Entry
	for h, c := range certs {
		entries = append(entries, &Entry{Hostname: h, Certificates: []*tls.Certificate{c}, Value: "listener " + h})
	}
	s := startServer(t, NewTable(entries))
	tests := []struct{ sni, want string }{
		{"a.example.com", "a.example.com"},
		{"A.Example.COM", "a.example.com"},
		{"x.example.com", "*.example.com"},
		{"x.y.z.example.com", "*.example.com"},
		{"b.example.com", "*.example.com"},
		{"x.b.example.com", "*.b.example.com"},
		{"x.y.b.example.com", "*.b.example.com"},
		{"example.com", ""},
		{"other.test", ""},
		{"", ""}, // no SNI extension at all
	}
	for _, tt := range tests {
		c, err := s.dial(clientConfig(tt.sni))
		if err != nil {
			t.Errorf("SNI %q: %v", tt.sni, err)
			continue
		}
		if !sameCert(c.leaf(), certs[tt.want]) {
			t.Errorf("SNI %q: got certificate for %v, want the one of listener %q", tt.sni, c.leaf().DNSNames, tt.want)
		}
		if c.entry != "listener "+tt.want {
			t.Errorf("SNI %q: remember got %q, want listener %q", tt.sni, c.entry, tt.want)
		}
		c.Close()
	}
}

func TestServePicksKeyTypeTheClientSupports(t *testing.T) {
	// SupportsCertificate also checks the SNI against the SANs.
	ec := issue(t, snitest.ECDSA, "dual.example.com", "rsa-first.example.com")
	rs := issue(t, snitest.RSA, "dual.example.com", "rsa-first.example.com")
	s := startServer(t, NewTable([]*Entry{
		{Hostname: "dual.example.com", Certificates: []*tls.Certificate{ec, rs}, Value: "dual"},
		{Hostname: "rsa-first.example.com", Certificates: []*tls.Certificate{rs, ec}, Value: "rsa-first"},
	}))
	tls12 := func(sni string, suites ...uint16) *tls.Config {
		cfg := clientConfig(sni)
		cfg.MaxVersion = tls.VersionTLS12
		cfg.CipherSuites = suites
		return cfg
	}
	tests := []struct {
		name string
		cfg  *tls.Config
		want *tls.Certificate
	}{
		{"TLS 1.3 client, ECDSA listed first", clientConfig("dual.example.com"), ec},
		{"RSA-only TLS 1.2 client", tls12("dual.example.com", tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256), rs},
		{"TLS 1.3 client, RSA listed first", clientConfig("rsa-first.example.com"), rs},
		{"ECDSA-only TLS 1.2 client, RSA listed first", tls12("rsa-first.example.com", tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256), ec},
	}
	for _, tt := range tests {
		c, err := s.dial(tt.cfg)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !sameCert(c.leaf(), tt.want) {
			t.Errorf("%s: got a %v certificate, want %v", tt.name, c.leaf().PublicKeyAlgorithm, tt.want.Leaf.PublicKeyAlgorithm)
		}
		c.Close()
	}
}

func TestServeUnknownNameWithoutFallback(t *testing.T) {
	s := startServer(t, NewTable([]*Entry{
		{Hostname: "a.example.com", Certificates: []*tls.Certificate{issue(t, snitest.ECDSA, "a.example.com")}},
		{Hostname: "broken.example.com"}, // no usable certificate
	}))
	for _, sni := range []string{"b.example.com", "", "broken.example.com"} {
		for _, max := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
			cfg := clientConfig(sni)
			cfg.MaxVersion = max
			_, err := s.dial(cfg)
			var opErr *net.OpError
			if !errors.As(err, &opErr) || opErr.Op != "remote error" || opErr.Err.Error() != "tls: unrecognized name" {
				t.Errorf("SNI %q, max version %x: error %v, want the unrecognized_name alert", sni, max, err)
			}
		}
	}
}

func TestServeRotatesOnTableSwap(t *testing.T) {
	old := issue(t, snitest.ECDSA, "rot.example.com")
	s := startServer(t, NewTable([]*Entry{{Hostname: "rot.example.com", Certificates: []*tls.Certificate{old}, Value: "v1"}}))
	sessions := tls.NewLRUClientSessionCache(4)
	cfg := clientConfig("rot.example.com")
	cfg.ClientSessionCache = sessions

	first, err := s.dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if !sameCert(first.leaf(), old) || first.entry != "v1" {
		t.Fatalf("before the swap: entry %q, certificate serial %v", first.entry, first.leaf().SerialNumber)
	}

	renewed := issue(t, snitest.ECDSA, "rot.example.com")
	s.cur.Store(NewTable([]*Entry{{Hostname: "rot.example.com", Certificates: []*tls.Certificate{renewed}, Value: "v2"}}))

	// A full handshake after the swap presents the new certificate.
	second, err := s.dial(clientConfig("rot.example.com"))
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if !sameCert(second.leaf(), renewed) || second.entry != "v2" {
		t.Errorf("after the swap: entry %q, certificate serial %v, want serial %v", second.entry, second.leaf().SerialNumber, renewed.Leaf.SerialNumber)
	}
	// The connection made before the swap keeps working.
	if err := first.echo("still there"); err != nil {
		t.Errorf("connection from before the swap: %v", err)
	}
	// A session ticket issued before the swap still resumes, and remember
	// sees the resumed connection with the current entry.
	resumed, err := s.dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if !resumed.ConnectionState().DidResume {
		t.Error("session from before the swap did not resume")
	}
	if resumed.entry != "v2" {
		t.Errorf("resumed connection: remember got %q, want v2", resumed.entry)
	}
}

func TestServeMissCannotResume(t *testing.T) {
	tab := NewTable([]*Entry{{Hostname: "a.example.com", Certificates: []*tls.Certificate{issue(t, snitest.ECDSA, "a.example.com")}}})
	s := startServer(t, tab)
	cfg := clientConfig("a.example.com")
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	c, err := s.dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// The listener goes away; its old session must not open a connection.
	s.cur.Store(NewTable(nil))
	if _, err := s.dial(cfg); err == nil {
		t.Error("session for a removed hostname resumed")
	}
}

func TestServerConfigLeavesBaseAlone(t *testing.T) {
	cert := issue(t, snitest.ECDSA, "base.example.com")
	base := &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2", "http/1.1"}}
	cfg := ServerConfig(base, func() *Table { return nil }, nil)
	if len(base.Certificates) != 1 || base.GetConfigForClient != nil {
		t.Error("base was modified")
	}
	if len(cfg.Certificates) != 0 || cfg.GetConfigForClient == nil || len(cfg.NextProtos) != 2 {
		t.Errorf("config: %d certificates, NextProtos %v", len(cfg.Certificates), cfg.NextProtos)
	}
}

// TestServeSwapDuringHandshakes flips between two tables while handshakes
// run: every connection must get the certificate of the entry that remember
// received, whichever table that came from.
func TestServeSwapDuringHandshakes(t *testing.T) {
	certA := issue(t, snitest.ECDSA, "swap.example.com")
	certB := issue(t, snitest.ECDSA, "swap.example.com")
	tabA := NewTable([]*Entry{{Hostname: "swap.example.com", Certificates: []*tls.Certificate{certA}, Value: "A"}})
	tabB := NewTable([]*Entry{{Hostname: "*.example.com", Certificates: []*tls.Certificate{certB}, Value: "B"}})
	s := startServer(t, tabA)

	stop := make(chan struct{})
	var swapper sync.WaitGroup
	swapper.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				s.cur.Store(tabB)
			} else {
				s.cur.Store(tabA)
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	var clients sync.WaitGroup
	for range 4 {
		clients.Go(func() {
			for range 10 {
				c, err := s.dial(clientConfig("swap.example.com"))
				if err != nil {
					t.Error(err)
					return
				}
				want := map[string]*tls.Certificate{"A": certA, "B": certB}[c.entry]
				if want == nil || !sameCert(c.leaf(), want) {
					t.Errorf("remember got entry %q but the client saw serial %v", c.entry, c.leaf().SerialNumber)
				}
				c.Close()
			}
		})
	}
	clients.Wait()
	close(stop)
	swapper.Wait()
}

// TestServeClientAuth: an entry with ClientAuth asks the client for a
// certificate: required and checked against its CAs, or, when optional,
// asked for without being required; entries without one ask nothing.
func TestServeClientAuth(t *testing.T) {
	clients, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	strangers, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	clientCert := func(ca *snitest.CA) tls.Certificate {
		p, err := ca.IssueClient(serial.Add(1), "client")
		if err != nil {
			t.Fatal(err)
		}
		c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	good, stranger := clientCert(clients), clientCert(strangers)
	s := startServer(t, NewTable([]*Entry{
		{Hostname: "strict.example.com", Certificates: []*tls.Certificate{issue(t, snitest.ECDSA, "strict.example.com")}, Value: "strict",
			ClientAuth: &ClientAuth{CAs: clients.Pool}},
		{Hostname: "lenient.example.com", Certificates: []*tls.Certificate{issue(t, snitest.ECDSA, "lenient.example.com")}, Value: "lenient",
			ClientAuth: &ClientAuth{CAs: clients.Pool, Optional: true}},
		{Hostname: "open.example.com", Certificates: []*tls.Certificate{issue(t, snitest.ECDSA, "open.example.com")}, Value: "open"},
	}))
	try := func(sni string, cert *tls.Certificate) (asked bool, err error) {
		cfg := clientConfig(sni)
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			asked = true
			if cert == nil {
				return &tls.Certificate{}, nil
			}
			return cert, nil
		}
		c, err := s.dial(cfg)
		if err == nil {
			err = c.echo("ping")
			c.Close()
		}
		return asked, err
	}
	cases := []struct {
		sni       string
		cert      *tls.Certificate
		wantAsked bool
		wantOK    bool
	}{
		{"strict.example.com", &good, true, true},
		{"strict.example.com", &stranger, true, false},
		{"strict.example.com", nil, true, false},
		{"lenient.example.com", &good, true, true},
		{"lenient.example.com", &stranger, true, true},
		{"lenient.example.com", nil, true, true},
		{"open.example.com", &good, false, true},
	}
	for _, c := range cases {
		who := "no certificate"
		if c.cert == &good {
			who = "a client of the CA"
		} else if c.cert == &stranger {
			who = "a stranger"
		}
		asked, err := try(c.sni, c.cert)
		if asked != c.wantAsked || (err == nil) != c.wantOK {
			t.Errorf("%s with %s: asked %v, err %v; want asked %v, ok %v", c.sni, who, asked, err, c.wantAsked, c.wantOK)
		}
	}
}
