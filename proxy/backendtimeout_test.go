package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// headTimeoutPort serves a plain HTTP port whose one route (with timeouts,
// and made a KIngress's rule when knative is set) goes to backend, on a
// runtime whose backend response timeout is d; it returns the port's
// address.
func headTimeoutPort(t *testing.T, d time.Duration, backend string, timeouts *gwv1.HTTPRouteTimeouts, knative bool) string {
	t.Helper()
	rt := relRuntime(t, func(o *Options) { o.BackendResponseTimeout = d })
	p := freePort(t)
	cfg := httpPortConfig(t, p, "svc", backend)
	routes := ruleTable(t, "svc", gwv1.HTTPRouteRule{Timeouts: timeouts})
	if knative {
		rule, _ := routes.Match(httptest.NewRequest(http.MethodGet, "http://app.example.com/svc", nil))
		rule.NetworkHash = "hash"
	}
	cfg.Ports[0].All.At(0).Routes = routes
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// silentBackend reads requests and answers none, or (for a path ending in
// /late) sends its head at once and its body after 600 ms.
func silentBackend(t *testing.T) string {
	backend, _ := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			if slices.Contains(head, "Content-Length: 3") {
				_, _ = br.Discard(3)
			}
			if len(head) > 0 && strings.HasSuffix(head[0], "/late HTTP/1.1") {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
				time.Sleep(600 * time.Millisecond)
				io.WriteString(c, "late")
				continue
			}
		}
	})
	return backend
}

// askWithin sends a request for path (a GET, which takes the direct path,
// or a POST with a body, ReverseProxy's) and waits at most wait: the
// answer's status and body, or 0 when none came in time.
func askWithin(t *testing.T, addr, method, path string, wait time.Duration) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err) // may run on a goroutine of its own
		return 0, ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(wait))
	req := method + " " + path + " HTTP/1.1\r\nHost: app.example.com\r\n\r\n"
	if method == http.MethodPost {
		req = method + " " + path + " HTTP/1.1\r\nHost: app.example.com\r\nContent-Length: 3\r\n\r\nabc"
	}
	io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAttackBackendNeverAnswers: a backend that takes requests and never
// answers held the client for as long as the client waited. The backend
// response timeout answers 504 once it passed without the head of an
// answer, on both forwarding paths; a body slower than it after a prompt
// head is not cut. A route that sets timeouts of its own (or disables
// them) and a KIngress's rule (Knative wants no default timeouts) get
// none.
func TestAttackBackendNeverAnswers(t *testing.T) {
	const d = 300 * time.Millisecond
	backend := silentBackend(t)
	methods := []string{http.MethodGet, http.MethodPost}

	addr := headTimeoutPort(t, d, backend, nil, false)
	for _, m := range methods {
		start := time.Now()
		status, _ := askWithin(t, addr, m, "/svc", 5*time.Second)
		if took := time.Since(start); status != http.StatusGatewayTimeout || took < d || took > 3*time.Second {
			t.Errorf("%s to a silent backend: %d after %v, want 504 after %v", m, status, took.Round(time.Millisecond), d)
		}
		if status, body := askWithin(t, addr, m, "/svc/late", 5*time.Second); status != http.StatusOK || body != "late" {
			t.Errorf("%s, body slower than the timeout: %d %q, want 200 \"late\"", m, status, body)
		}
	}

	var wg sync.WaitGroup
	disabled := gwv1.Duration("0s")
	long := gwv1.Duration("10s")
	for name, addr := range map[string]string{
		"route with timeouts.request":         headTimeoutPort(t, d, backend, &gwv1.HTTPRouteTimeouts{Request: &long}, false),
		"route with timeouts disabled":        headTimeoutPort(t, d, backend, &gwv1.HTTPRouteTimeouts{Request: &disabled, BackendRequest: &disabled}, false),
		"KIngress rule":                       headTimeoutPort(t, d, backend, nil, true),
		"runtime with the timeout turned off": headTimeoutPort(t, -1, backend, nil, false),
	} {
		for _, m := range methods {
			wg.Go(func() {
				if status, _ := askWithin(t, addr, m, "/svc", 4*d); status != 0 {
					t.Errorf("%s, %s: answered %d within %v; want no default timeout", name, m, status, 4*d)
				}
			})
		}
	}
	wg.Wait()
}

// TestHeadTimeoutOnPooledConnection: the wait for a head is bounded by a
// deadline left on the backend connection from one request to the next
// (armHead). On one pooled connection, in turn: a prompt answer; a head
// at once and a body slower than the timeout, which must arrive whole;
// one more prompt answer; and a request never answered, which must get
// its 504 after about the timeout (not before most of it passed, not
// long after).
func TestHeadTimeoutOnPooledConnection(t *testing.T) {
	const timeout = 300 * time.Millisecond
	backend, accepted := scriptedBackend(t, func(c net.Conn, br *bufio.Reader) {
		for {
			head, err := readHead(br)
			if err != nil {
				return
			}
			switch target := targetOf(head); target {
			case "/svc/slow-body":
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n")
				time.Sleep(2 * timeout)
				io.WriteString(c, "slow")
			case "/svc/never":
			default:
				io.WriteString(c, pathAnswer(target))
			}
		}
	})
	addr := headTimeoutPort(t, timeout, backend, nil, false)
	c := relDial(t, addr)
	for _, path := range []string{"/svc/prompt", "/svc/slow-body", "/svc/prompt-again"} {
		resp, body := exchangeOn(t, c, "GET "+path+" HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
		want := path
		if path == "/svc/slow-body" {
			want = "slow"
		}
		if resp.StatusCode != http.StatusOK || body != want {
			t.Fatalf("GET %s: %d %q, want 200 %q", path, resp.StatusCode, body, want)
		}
	}
	start := time.Now()
	resp, _ := exchangeOn(t, c, "GET /svc/never HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	took := time.Since(start)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("never answered: %d, want 504", resp.StatusCode)
	}
	if took < timeout-timeout/64-10*time.Millisecond || took > timeout+2*time.Second {
		t.Errorf("504 after %v, want about %v", took, timeout)
	}
	if n := accepted(); n != 1 {
		t.Errorf("%d backend connections, want the one pooled", n)
	}
}
