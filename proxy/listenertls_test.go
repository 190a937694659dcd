package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/sni"
)

// listenerTLSPort serves HTTPS on a port with one listener per hostname
// of clients, each with that ClientTraffic (its TLS on its SNI entry; nil:
// the port's settings); it returns the address and the roots to trust.
func listenerTLSPort(t *testing.T, clients map[string]*config.ClientTraffic) (string, *x509.CertPool) {
	return proxiedTLSPort(t, clients, nil)
}

// proxiedTLSPort is listenerTLSPort reading the PROXY protocol as pp says
// (nil: none).
func proxiedTLSPort(t *testing.T, clients map[string]*config.ClientTraffic, pp *config.ProxyProtocol) (string, *x509.CertPool) {
	t.Helper()
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	backend := echoClientBackend(t)
	port := freePort(t)
	cfg := limitedConfig(t, port, nil, nil, backend)
	base := cfg.Ports[0].All.At(0)
	var names []string
	var ls []*config.Listener
	var entries []*sni.Entry
	for name, ct := range clients {
		var s *sni.Settings
		if ct != nil {
			s = ct.TLS
		}
		pair, err := ca.Issue(snitest.ECDSA, 2, name)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := sni.ParseKeyPair(pair.CertPEM, pair.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		l := *base
		l.Key, l.Hostname = "Gateway/ns/gw/"+name, name
		l.Client = ct
		names, ls = append(names, name), append(ls, &l)
		entries = append(entries, &sni.Entry{Hostname: name, Certificates: []*tls.Certificate{cert}, Value: &l, TLS: s})
	}
	p := cfg.Ports[0]
	p.Protocol = config.HTTPS
	p.Listeners = hostname.NewTable(names, ls)
	p.All = chunked.Of(ls)
	p.SNI = sni.NewTable(entries)
	p.ProxyProtocol = pp
	rt := newRuntime(t)
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port), ca.Pool
}

// handshake dials addr with client and returns the connection's state,
// after one request over it (which brings TLS 1.3's session tickets).
func handshake(t *testing.T, addr string, client *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, client)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	st := c.ConnectionState()
	if st.NegotiatedProtocol != "h2" {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", client.ServerName)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return st, fmt.Errorf("request after the handshake: %w", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return st, nil
}

// TestListenerTLSSettings: a real crypto/tls client sees each listener's
// own settings on a shared port: a minimum version (a TLS 1.2-only client
// refused), a maximum version with one cipher suite, ALPN without h2, and
// session tickets off (no resumption), while the port's other listener
// keeps the defaults.
func TestListenerTLSSettings(t *testing.T) {
	const suite = tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
	addr, roots := listenerTLSPort(t, map[string]*config.ClientTraffic{
		"modern.example.com": {TLS: &sni.Settings{MinVersion: tls.VersionTLS13}},
		"legacy.example.com": {TLS: &sni.Settings{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{suite}}},
		"h1.example.com":     {TLS: &sni.Settings{NextProtos: []string{"http/1.1"}, SessionTicketsDisabled: true}},
		"plain.example.com":  nil,
	})
	client := func(name string) *tls.Config {
		return &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}}
	}

	old := client("modern.example.com")
	old.MaxVersion = tls.VersionTLS12
	if _, err := handshake(t, addr, old); err == nil {
		t.Error("modern: a TLS 1.2 client completed a handshake with a TLS 1.3 minimum")
	}
	if st, err := handshake(t, addr, client("modern.example.com")); err != nil || st.Version != tls.VersionTLS13 {
		t.Errorf("modern: %v, version %x", err, st.Version)
	}
	if st, err := handshake(t, addr, client("legacy.example.com")); err != nil || st.Version != tls.VersionTLS12 || st.CipherSuite != suite {
		t.Errorf("legacy: %v, version %x suite %s, want TLS 1.2 with %s", err, st.Version, tls.CipherSuiteName(st.CipherSuite), tls.CipherSuiteName(suite))
	}
	other := client("legacy.example.com")
	other.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}
	if _, err := handshake(t, addr, other); err == nil {
		t.Error("legacy: a client offering only a suite the listener does not has a handshake")
	}
	if st, err := handshake(t, addr, client("h1.example.com")); err != nil || st.NegotiatedProtocol != "http/1.1" {
		t.Errorf("h1: %v, ALPN %q, want http/1.1", err, st.NegotiatedProtocol)
	}
	if st, err := handshake(t, addr, client("plain.example.com")); err != nil || st.NegotiatedProtocol != "h2" || st.Version != tls.VersionTLS13 {
		t.Errorf("plain: %v, ALPN %q version %x, want the defaults (h2, TLS 1.3)", err, st.NegotiatedProtocol, st.Version)
	}
	old = client("plain.example.com")
	old.MaxVersion = tls.VersionTLS12
	if _, err := handshake(t, addr, old); err != nil {
		t.Errorf("plain: a TLS 1.2 client refused: %v", err)
	}

	// Resumption: tickets off on h1, on (the default) on plain.
	for name, wantResumed := range map[string]bool{"h1.example.com": false, "plain.example.com": true} {
		c := client(name)
		c.NextProtos = []string{"http/1.1"}
		c.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		if _, err := handshake(t, addr, c); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		st, err := handshake(t, addr, c)
		if err != nil || st.DidResume != wantResumed {
			t.Errorf("%s: second connection resumed %v (%v), want %v", name, st.DidResume, err, wantResumed)
		}
	}
}

// h2Settings opens an HTTP/2 connection to name at addr and returns the
// server's first SETTINGS, and the connection.
func h2Settings(t *testing.T, addr, name string, roots *x509.CertPool) (map[http2.SettingID]uint32, *tls.Conn, *http2.Framer) {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if c.ConnectionState().NegotiatedProtocol != "h2" {
		t.Fatalf("%s: ALPN %q", name, c.ConnectionState().NegotiatedProtocol)
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	f, err := fr.ReadFrame()
	if err != nil {
		t.Fatal(err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok {
		t.Fatalf("first frame %T, want SETTINGS", f)
	}
	out := map[http2.SettingID]uint32{}
	_ = sf.ForeachSetting(func(s http2.Setting) error { out[s.ID] = s.Val; return nil })
	return out, c, fr
}

// TestListenerHTTP2Settings: an HTTP/2 connection whose handshake chose a
// listener with its own maxConcurrentStreams is told that many streams,
// and one idle longer than the listener's idle timeout is closed (GOAWAY),
// while the port's other listener keeps the port's settings.
func TestListenerHTTP2Settings(t *testing.T) {
	addr, roots := listenerTLSPort(t, map[string]*config.ClientTraffic{
		"few.example.com":   {MaxConcurrentStreams: 3, IdleTimeout: 300 * time.Millisecond},
		"plain.example.com": nil,
	})
	few, c, fr := h2Settings(t, addr, "few.example.com", roots)
	if few[http2.SettingMaxConcurrentStreams] != 3 {
		t.Errorf("few: SETTINGS_MAX_CONCURRENT_STREAMS %d, want 3", few[http2.SettingMaxConcurrentStreams])
	}
	plain, _, _ := h2Settings(t, addr, "plain.example.com", roots)
	if got, want := plain[http2.SettingMaxConcurrentStreams], DefaultOptions().MaxConcurrentStreams; got == 3 || (want > 0 && got != want) {
		t.Errorf("plain: SETTINGS_MAX_CONCURRENT_STREAMS %d, want the port's %d", got, want)
	}
	// The port's idle timeout is minutes: a GOAWAY within 10 s is the
	// listener's.
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("few: no GOAWAY before %v", err)
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			break
		}
	}
}

// TestProxyProtocolBeforeTLS: on an HTTPS port the PROXY header comes
// before the ClientHello; the address it gives is the one the backend
// sees (in X-Forwarded-For), and a connection without it is refused
// before any handshake.
func TestProxyProtocolBeforeTLS(t *testing.T) {
	addr, roots := proxiedTLSPort(t, map[string]*config.ClientTraffic{"app.example.com": nil}, &config.ProxyProtocol{})
	dial := func(header string) (*tls.Conn, error) {
		raw, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return nil, err
		}
		_ = raw.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(raw, header); err != nil {
			raw.Close()
			return nil, err
		}
		c := tls.Client(raw, &tls.Config{ServerName: "app.example.com", RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err := c.Handshake(); err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
	c, err := dial("PROXY TCP6 2001:db8::9 2001:db8::1 40000 443\r\n")
	if err != nil {
		t.Fatalf("handshake after a PROXY header: %v", err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "2001:db8::9" {
		t.Errorf("the backend saw the client as %q, want 2001:db8::9", body)
	}
	if _, err := dial(""); err == nil {
		t.Error("a handshake without the required PROXY header succeeded")
	}
}
