package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// retryRuntime serves one route to the endpoints of svc whose rule has
// retry and timeouts, and returns the URL of its port.
func retryRuntime(t *testing.T, endpoints []string, retry *gwv1.HTTPRouteRetry, timeouts *gwv1.HTTPRouteTimeouts) string {
	t.Helper()
	rt := newRuntime(t)
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", "")
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}
	cfg.Endpoints = withEndpoints(cfg.Endpoints, key, config.NewEndpoints(endpoints...))
	cfg.Ports[0].All.At(0).Routes = ruleTable(t, "svc", gwv1.HTTPRouteRule{Retry: retry, Timeouts: timeouts})
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/", p)
}

// TestRetryOnBackendTimeout (HTTPRouteRetryBackendTimeout): an attempt
// that reaches timeouts.backendRequest is given up and retried, and the
// retry's answer is the client's.
func TestRetryOnBackendTimeout(t *testing.T) {
	var calls atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		io.WriteString(w, "second")
	}))
	t.Cleanup(backend.Close)
	attempts := 1
	backendTimeout := gwv1.Duration("200ms")
	url := retryRuntime(t, []string{backend.Listener.Addr().String()},
		&gwv1.HTTPRouteRetry{Attempts: &attempts}, &gwv1.HTTPRouteTimeouts{BackendRequest: &backendTimeout})
	if code, got := body(t, url); code != 200 || got != "second" {
		t.Errorf("%d %q, want 200 from the second attempt", code, got)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("backend saw %d attempts, want 2", n)
	}

	// Without a retry policy the timeout is the answer.
	calls.Store(0)
	url = retryRuntime(t, []string{backend.Listener.Addr().String()}, nil, &gwv1.HTTPRouteTimeouts{BackendRequest: &backendTimeout})
	if code, _ := body(t, url); code != http.StatusGatewayTimeout {
		t.Errorf("no retry policy: %d, want 504", code)
	}
}

// TestRetryOnConnectionError (HTTPRouteRetryConnectionError): a backend
// that drops the connection without answering is retried.
func TestRetryOnConnectionError(t *testing.T) {
	var calls atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		io.WriteString(w, "second")
	}))
	t.Cleanup(backend.Close)
	attempts := 1
	url := retryRuntime(t, []string{backend.Listener.Addr().String()}, &gwv1.HTTPRouteRetry{Attempts: &attempts}, nil)
	// A POST: the transport itself resends no request with a body.
	resp, err := http.Post(url, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != "second" {
		t.Errorf("%d %q, want 200 from the second attempt", resp.StatusCode, got)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("backend saw %d attempts, want 2", n)
	}
}

// TestRetryAttemptsZeroAndDefault: since v1.7 an explicit attempts of 0
// disables retries even with codes listed, and an unset attempts (objects
// that did not get the API's default) means one retry.
func TestRetryAttemptsZeroAndDefault(t *testing.T) {
	var calls atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(backend.Close)
	codes := []gwv1.HTTPRouteRetryStatusCode{503}
	zero := 0
	for _, c := range []struct {
		name  string
		retry *gwv1.HTTPRouteRetry
		want  int32
	}{
		{"attempts 0", &gwv1.HTTPRouteRetry{Codes: codes, Attempts: &zero}, 1},
		{"attempts unset", &gwv1.HTTPRouteRetry{Codes: codes}, 2},
	} {
		calls.Store(0)
		url := retryRuntime(t, []string{backend.Listener.Addr().String()}, c.retry, nil)
		if code, _ := body(t, url); code != http.StatusServiceUnavailable {
			t.Errorf("%s: %d, want the backend's 503", c.name, code)
		}
		if n := calls.Load(); n != c.want {
			t.Errorf("%s: backend saw %d attempts, want %d", c.name, n, c.want)
		}
	}
}
