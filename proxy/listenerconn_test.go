package proxy

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
)

// cleartextPort serves plain HTTP on a port with one listener per
// hostname of clients, each with that ClientTraffic (nil: the port's
// settings), and the port's Cleartext as translate makes it (the
// strictest of them); it returns the address.
func cleartextPort(t *testing.T, clients map[string]*config.ClientTraffic) string {
	t.Helper()
	backend := echoClientBackend(t)
	port := freePort(t)
	cfg := limitedConfig(t, port, nil, nil, backend)
	base := cfg.Ports[0].All.At(0)
	var names []string
	var ls []*config.Listener
	var cleartext *config.ClientTraffic
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range clients {
			if !yield(n) {
				return
			}
		}
	}) {
		l := *base
		l.Key, l.Hostname, l.Client = "Gateway/ns/gw/"+name, name, clients[name]
		names, ls = append(names, name), append(ls, &l)
		if l.Client != nil {
			cleartext = config.Strictest(cleartext, l.Client)
		}
	}
	p := cfg.Ports[0]
	p.Listeners = hostname.NewTable(names, ls)
	p.All = chunked.Of(ls)
	p.Cleartext = cleartext
	rt := newRuntime(t)
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// keptGet sends one kept-alive request for host over c and reads its answer.
func keptGet(t *testing.T, c net.Conn, br *bufio.Reader, host string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: %v", host, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d", host, resp.StatusCode)
	}
}

// serverClosed reports whether the server closed c within d: a read
// that ends in EOF (or a reset) rather than the deadline.
func serverClosed(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := br.ReadByte()
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestListenerHTTP1Timeouts attacks a cleartext port whose listener
// "short" has a ClientTrafficPolicy's HTTP/1 idle and header timeouts of
// 300ms (the port's flags: 120s and 10s). A connection kept alive after
// a request to short is closed within seconds; one kept after a request
// to the port's other listener is not; a second request's head sent
// slowly after a request to short is cut (slowloris); and a first head
// trickled on a new connection, which names no listener yet, is cut by
// the strictest of the port's.
func TestListenerHTTP1Timeouts(t *testing.T) {
	const limit = 300 * time.Millisecond
	addr := cleartextPort(t, map[string]*config.ClientTraffic{
		"short.example.com": {H1IdleTimeout: limit, HeaderTimeout: limit},
		"plain.example.com": nil,
	})
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	t.Run("idle after short", func(t *testing.T) {
		c, br := dial()
		keptGet(t, c, br, "short.example.com")
		if !serverClosed(c, br, 5*time.Second) {
			t.Error("a connection idle after a request to short was kept past 5s (its idleTimeout is 300ms)")
		}
	})
	t.Run("idle after plain", func(t *testing.T) {
		c, br := dial()
		keptGet(t, c, br, "short.example.com")
		keptGet(t, c, br, "plain.example.com")
		if serverClosed(c, br, 2*time.Second) {
			t.Error("a connection idle after a request to plain was closed within 2s (the port's idle timeout is 120s)")
		}
		keptGet(t, c, br, "plain.example.com")
	})
	t.Run("slow second head", func(t *testing.T) {
		c, br := dial()
		keptGet(t, c, br, "short.example.com")
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: short.example.com\r\n"); err != nil {
			t.Fatal(err)
		}
		// The rest of the head, a byte every 100ms: never whole. The
		// port's header timeout is 10s; the listener's cuts it within 2s.
		start := time.Now()
		for time.Since(start) < 2*time.Second {
			time.Sleep(100 * time.Millisecond)
			if _, err := io.WriteString(c, "X"); err != nil {
				return
			}
		}
		if !serverClosed(c, br, 100*time.Millisecond) {
			t.Error("a head trickled for 2s after a request to short was not cut (its headerTimeout is 300ms)")
		}
	})
	t.Run("slow first head", func(t *testing.T) {
		c, br := dial()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\n")
		if !serverClosed(c, br, 5*time.Second) {
			t.Error("a first head withheld for 5s was not cut (the port's strictest headerTimeout is 300ms)")
		}
	})
}

// TestListenerH2CSettings: a cleartext HTTP/2 connection (prior
// knowledge) names no listener before its SETTINGS, so it is told the
// strictest maxConcurrentStreams of its port's listeners, and is closed
// (GOAWAY) after the strictest idle timeout, not the port's flags.
func TestListenerH2CSettings(t *testing.T) {
	addr := cleartextPort(t, map[string]*config.ClientTraffic{
		"few.example.com":  {MaxConcurrentStreams: 3, IdleTimeout: 2 * time.Second},
		"more.example.com": {MaxConcurrentStreams: 20, IdleTimeout: 300 * time.Millisecond},
		"port.example.com": nil,
	})
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
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
	if v, _ := sf.Value(http2.SettingMaxConcurrentStreams); v != 3 {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want the port's strictest, 3", v)
	}
	start := time.Now()
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no GOAWAY before %v", err)
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			break
		}
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("GOAWAY after %v, want the strictest idle timeout (300ms), well before the other listener's 2s", d)
	}
}

// TestListenerHTTP1TimeoutsTLS: on an HTTPS port, an HTTP/1 connection
// whose handshake chose a listener with an idle timeout of its own is
// closed after it, while the port's other listener keeps the flags'.
func TestListenerHTTP1TimeoutsTLS(t *testing.T) {
	addr, roots := listenerTLSPort(t, map[string]*config.ClientTraffic{
		"short.example.com": {H1IdleTimeout: 300 * time.Millisecond},
		"plain.example.com": nil,
	})
	dial := func(name string) (net.Conn, *bufio.Reader) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
			&tls.Config{ServerName: name, RootCAs: roots, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	c, br := dial("short.example.com")
	keptGet(t, c, br, "short.example.com")
	if !serverClosed(c, br, 5*time.Second) {
		t.Error("short: an idle connection was kept past 5s (its idleTimeout is 300ms)")
	}
	c, br = dial("plain.example.com")
	keptGet(t, c, br, "plain.example.com")
	if serverClosed(c, br, 2*time.Second) {
		t.Error("plain: an idle connection was closed within 2s (the port's idle timeout is 120s)")
	}
}
