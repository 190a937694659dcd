package proxy

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/sni"
)

type handshakeFailures struct {
	mu  sync.Mutex
	got []string
}

func (h *handshakeFailures) ObserveHandshakeFailure(port, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, port+" "+reason)
}

func (h *handshakeFailures) wait(t *testing.T, want string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		h.mu.Lock()
		i := slices.Index(h.got, want)
		if i >= 0 {
			h.got = slices.Delete(h.got, i, i+1)
		}
		h.mu.Unlock()
		if i >= 0 {
			return
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t.Fatalf("no failure %q observed; got %q", want, h.got)
}

// TestHandshakeFailuresObserved: failed TLS handshakes on a real HTTPS
// port are counted by reason, and a handshake that succeeds is not.
func TestHandshakeFailuresObserved(t *testing.T) {
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(name string) *tls.Certificate {
		pair, err := ca.Issue(snitest.ECDSA, int64(len(name)), name)
		if err != nil {
			t.Fatal(err)
		}
		c, err := sni.ParseKeyPair(pair.CertPEM, pair.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	open := &config.Listener{Key: "Gateway/ns/gw/open", Hostname: "open.example.com", Routes: routeTable(t, "svc")}
	strict := &config.Listener{Key: "Gateway/ns/gw/strict", Hostname: "strict.example.com", Routes: routeTable(t, "svc"),
		ClientAuth: &sni.ClientAuth{ID: "strict", CAs: ca.Pool}}
	entries := []*sni.Entry{
		{Hostname: open.Hostname, Certificates: []*tls.Certificate{leaf(open.Hostname)}, Value: open},
		{Hostname: strict.Hostname, Certificates: []*tls.Certificate{leaf(strict.Hostname)}, Value: strict, ClientAuth: strict.ClientAuth},
	}
	all := []*config.Listener{open, strict}

	failures := &handshakeFailures{}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.Handshakes = failures
	rt := New(opts, zap.NewNop())
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", slowBackend(t, "a"))
	cfg.Ports[0].Protocol = config.HTTPS
	cfg.Ports[0].All = chunked.Of(all)
	cfg.Ports[0].Listeners = hostname.NewTable([]string{open.Hostname, strict.Hostname}, all)
	cfg.Ports[0].SNI = sni.NewTable(entries)
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", p)
	port := fmt.Sprint(p)

	handshake := func(c *tls.Config) error {
		conn, err := tls.Dial("tcp", addr, c)
		if err != nil {
			return err
		}
		defer conn.Close()
		// A TLS 1.3 server checks the client certificate after the
		// client has finished: a read tells whether it was refused.
		fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", c.ServerName)
		_, err = conn.Read(make([]byte, 1))
		return err
	}

	if err := handshake(&tls.Config{ServerName: "open.example.com", RootCAs: ca.Pool}); err != nil {
		t.Fatalf("handshake with a served name: %v", err)
	}
	if err := handshake(&tls.Config{ServerName: "nobody.example.com", RootCAs: ca.Pool}); err == nil ||
		!strings.Contains(err.Error(), "unrecognized name") {
		t.Fatalf("unknown name: %v, want unrecognized name", err)
	}
	failures.wait(t, port+" "+HandshakeUnknownName)

	if err := handshake(&tls.Config{ServerName: "strict.example.com", RootCAs: ca.Pool}); err == nil {
		t.Fatal("no client certificate: served")
	}
	failures.wait(t, port+" "+HandshakeClientCertificate)

	if err := handshake(&tls.Config{ServerName: "open.example.com", RootCAs: ca.Pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}); err == nil {
		t.Fatal("TLS 1.1: served")
	}
	failures.wait(t, port+" "+HandshakeUnsupported)

	plain, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprint(plain, "GET / HTTP/1.1\r\nHost: open.example.com\r\n\r\n")
	answer, _ := io.ReadAll(plain)
	plain.Close()
	if !strings.Contains(string(answer), "400") {
		t.Errorf("plain HTTP on the TLS port: %q", answer)
	}
	failures.wait(t, port+" "+HandshakeNotTLS)

	gone, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	failures.wait(t, port+" "+HandshakeClosed)

	time.Sleep(50 * time.Millisecond) // anything late would show now
	failures.mu.Lock()
	defer failures.mu.Unlock()
	if len(failures.got) != 0 {
		t.Errorf("more failures than handshakes that failed: %q", failures.got)
	}
}

// TestHandshakeReason: the error texts of crypto/tls and net/http map to
// their reasons.
func TestHandshakeReason(t *testing.T) {
	for detail, want := range map[string]string{
		"tls: no certificates configured":                                                    HandshakeUnknownName,
		"client sent an HTTP request to an HTTPS server":                                     HandshakeNotTLS,
		"tls: first record does not look like a TLS handshake":                               HandshakeNotTLS,
		"tls: client didn't provide a certificate":                                           HandshakeClientCertificate,
		"tls: failed to verify certificate: x509: certificate signed by unknown authority":   HandshakeClientCertificate,
		"tls: invalid signature by the client certificate: crypto/ecdsa: verification error": HandshakeClientCertificate,
		"tls: client offered only unsupported versions: [302 301]":                           HandshakeUnsupported,
		"tls: no cipher suite supported by both client and server; client offered: [a]":      HandshakeUnsupported,
		"tls: client requested unsupported application protocols ([\"x\"])":                  HandshakeUnsupported,
		"read tcp 127.0.0.1:443->127.0.0.1:5000: i/o timeout":                                HandshakeTimeout,
		"EOF": HandshakeClosed,
		"read tcp 127.0.0.1:443->127.0.0.1:5000: read: connection reset by peer": HandshakeClosed,
		"local error: tls: bad record MAC":                                       HandshakeOther,
		"tls: no key exchanges supported by both client and server":              HandshakeUnsupported,
		"tls: client offered only incompatible point formats":                    HandshakeUnsupported,
		"remote error: tls: unsupported certificate":                             HandshakeOther,
	} {
		if got := handshakeReason(detail); got != want {
			t.Errorf("%q: %s, want %s", detail, got, want)
		}
	}
}

// TestAccessLog: one entry per request, with what was asked, the answer,
// the route and the endpoint; a request no route matched has neither.
func TestAccessLog(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.AccessLog = zap.New(core)
	rt := New(opts, zap.NewNop())
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	p := freePort(t)
	backend := slowBackend(t, "backend-a")
	cfg := httpPortConfig(t, p, "svc", backend)
	cfg.Ports[0].Listeners = hostname.NewTable([]string{"a.example.com"}, cfg.Ports[0].All.Slice())
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	get := func(host, path string) {
		t.Helper()
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", p, path), nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body) //nolint:errcheck // test
		resp.Body.Close()
	}
	get("a.example.com", "/x?token=secret")
	get("b.example.com", "/y")

	var entries []map[string]any
	for deadline := time.Now().Add(5 * time.Second); len(entries) < 2 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		entries = entries[:0]
		for _, e := range logs.All() {
			entries = append(entries, e.ContextMap())
		}
	}
	if len(entries) != 2 {
		t.Fatalf("%d entries, want 2: %v", len(entries), entries)
	}
	slices.SortFunc(entries, func(a, b map[string]any) int { return strings.Compare(a["host"].(string), b["host"].(string)) })
	served, missed := entries[0], entries[1]
	for k, want := range map[string]any{
		"method": "GET", "host": "a.example.com", "path": "/x", "proto": "HTTP/1.1",
		"status": int64(200), "bytes": int64(len("backend-a")), "route": "ns/r", "upstream": backend,
	} {
		if served[k] != want {
			t.Errorf("served %s = %v (%T), want %v", k, served[k], served[k], want)
		}
	}
	if !strings.HasPrefix(served["remote"].(string), "127.0.0.1:") {
		t.Errorf("remote %v", served["remote"])
	}
	if d, _ := served["duration"].(time.Duration); d <= 0 {
		t.Errorf("duration %v", served["duration"])
	}
	if missed["status"] != int64(404) || missed["route"] != nil || missed["upstream"] != nil {
		t.Errorf("unrouted request: %v", missed)
	}
}

// TestClientGoneIs499: a request whose client leaves before the answer is
// logged and counted with 499, not with a status nobody sent.
func TestClientGoneIs499(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	obs := &observed{}
	opts := DefaultOptions()
	opts.BindAddress = "127.0.0.1"
	opts.AccessLog = zap.New(core)
	opts.Observer = obs
	rt := New(opts, zap.NewNop())
	t.Cleanup(func() { _ = rt.Close(t.Context()) })
	p := freePort(t)
	if err := rt.Apply(httpPortConfig(t, p, "svc", slowBackend(t, "slow"))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d/?delay=2s", p), nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("answered before the client gave up")
	}
	for deadline := time.Now().Add(5 * time.Second); logs.Len() == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if logs.Len() != 1 || logs.All()[0].ContextMap()["status"] != int64(statusClientClosed) {
		t.Fatalf("access log %v, want one entry with 499", logs.All())
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if !slices.Equal(obs.calls, []string{"ns/r 499"}) {
		t.Errorf("observed %q", obs.calls)
	}
}
