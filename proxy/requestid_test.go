package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"portico.dev/portico/config"
)

// TestRequestID: with Options.RequestID every request reaches the backend
// with an X-Request-Id, the client's own when it is usable, and the access
// log carries the same; without it Portico adds none.
func TestRequestID(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Join(r.Header.Values(requestIDHeader), ","))
	}))
	t.Cleanup(backend.Close)
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	start := func(on bool) (string, *observer.ObservedLogs) {
		core, logs := observer.New(zapcore.InfoLevel)
		opts := DefaultOptions()
		opts.BindAddress = "127.0.0.1"
		opts.RequestID = on
		opts.AccessLog = zap.New(core)
		rt := New(opts, zap.NewNop())
		t.Cleanup(func() { _ = rt.Close(t.Context()) })
		p := freePort(t)
		cfg := httpPortConfig(t, p, "svc", "")
		cfg.Endpoints = withEndpoints(cfg.Endpoints, key, config.NewEndpoints(backend.Listener.Addr().String()))
		if err := rt.Apply(cfg); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("http://127.0.0.1:%d/", p), logs
	}
	get := func(url string, ids ...string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		for _, id := range ids {
			req.Header.Add(requestIDHeader, id)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	url, logs := start(true)
	a, b := get(url), get(url)
	if len(a) != 32 || strings.Trim(a, "0123456789abcdef") != "" || a == b {
		t.Errorf("generated IDs %q and %q, want two different 32-digit hex IDs", a, b)
	}
	if got := get(url, "client-trace-7"); got != "client-trace-7" {
		t.Errorf("client's ID: backend saw %q", got)
	}
	for _, bad := range [][]string{{strings.Repeat("x", 129)}, {"two words"}, {"a", "b"}} {
		if got := get(url, bad...); len(got) != 32 {
			t.Errorf("client sent %q: backend saw %q, want a generated ID", bad, got)
		}
	}
	// Entries are written once a handler returns, which may be after its
	// client has read the answer.
	logged := func() bool {
		for _, e := range logs.All() {
			if e.ContextMap()["request_id"] == a {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(5 * time.Second); !logged() && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
	}
	if !logged() {
		t.Errorf("no access log entry with request_id %s", a)
	}

	url, _ = start(false)
	if got := get(url); got != "" {
		t.Errorf("off: backend saw %q", got)
	}
	if got := get(url, "client-trace-7"); got != "client-trace-7" {
		t.Errorf("off: the client's header is passed on as it is; backend saw %q", got)
	}
}
