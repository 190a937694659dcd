package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// outcomeObserver records what the requests metric is told.
type outcomeObserver struct {
	mu    sync.Mutex
	calls []string // "route code outcome"
}

func (o *outcomeObserver) ObserveRequest(route string, code int, outcome string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("%s %d %s", route, code, outcome))
}

func (o *outcomeObserver) ObserveGRPC(string, int) {}

func (o *outcomeObserver) seen(call string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.calls {
		if c == call {
			return true
		}
	}
	return false
}

// outcomeLine waits (bounded) for the access log line of path and returns
// its status and outcome.
func outcomeLine(t *testing.T, logs *observer.ObservedLogs, path string) (int64, string) {
	t.Helper()
	var status int64
	var outcome string
	found := waitFor(5*time.Second, func() bool {
		for _, e := range logs.All() {
			m := e.ContextMap()
			if m["path"] == path {
				status, _ = m["status"].(int64)
				outcome, _ = m["outcome"].(string)
				return true
			}
		}
		return false
	})
	if !found {
		t.Errorf("no access log line for %s after 5s", path)
	}
	return status, outcome
}

// TestAttackAbortedRequestsLogged: a request that does not end normally
// (its client cuts a download, its HTTP/2 stream is reset mid-answer, its
// backend fails mid-answer on either forwarding path, a route timeout
// fires mid-answer) gets its access log line, metric and span all the
// same, with how it ended in a field of a fixed set. These were written
// only when the handler returned normally: 0 lines for 418 cut downloads.
func TestAttackAbortedRequestsLogged(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	obs := &outcomeObserver{}
	set := func(o *Options) {
		o.AccessLog = zap.New(core)
		o.Observer = obs
	}
	backend, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path[len(r.URL.Path)-5:] {
		case "/down": // a download without end
			chunk := make([]byte, 64<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				http.NewResponseController(w).Flush() //nolint:errcheck // test backend
			}
		case "/brkn": // a head, part of the body, and the end
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n")
			c.Close()
		case "/stal": // a head, part of the body, then nothing
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "part")
			http.NewResponseController(w).Flush() //nolint:errcheck // test backend
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	})
	timeout := gwv1.Duration("300ms")
	rt, addr := awaitRuntime(t, set, backend, &gwv1.HTTPRouteTimeouts{BackendRequest: &timeout})
	_ = rt

	// An HTTP/1 client that leaves mid-download.
	c := relDial(t, addr)
	io.WriteString(c, "GET /h1/down HTTP/1.1\r\nHost: a\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	c.Close()

	// An HTTP/2 stream reset by its client mid-answer.
	c = relDial(t, addr)
	h := newH2Client(t, c, "http")
	if err := h.get(1, "/h2/down"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for data := false; !data; {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() }) //nolint:errcheck // test client
			}
		case *http2.DataFrame:
			data = true
		}
	}
	if err := h.write(func(fr *http2.Framer) error { return fr.WriteRSTStream(1, http2.ErrCodeCancel) }); err != nil {
		t.Fatal(err)
	}

	// A backend that fails mid-answer, on the direct path (GET) and
	// ReverseProxy's (POST with a body); a route timeout mid-answer.
	for _, req := range []string{
		"GET /direct/brkn HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /rp/brkn HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
		"GET /direct/stal HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /rp/stal HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
	} {
		c := relDial(t, addr)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, req)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
		}
		if err == nil {
			t.Errorf("%.20q: the answer reached the client whole", req)
		}
		c.Close()
	}

	for _, tc := range []struct {
		path, outcome string
	}{
		{"/h1/down", outcomeClientGone},
		{"/h2/down", outcomeClientReset},
		{"/direct/brkn", outcomeBackendFailed},
		{"/rp/brkn", outcomeBackendFailed},
		{"/direct/stal", outcomeTimeout},
		{"/rp/stal", outcomeTimeout},
	} {
		status, outcome := outcomeLine(t, logs, tc.path)
		if outcome != tc.outcome || status != http.StatusOK {
			t.Errorf("%s: logged %d %q, want 200 %q", tc.path, status, outcome, tc.outcome)
		}
		if call := "ns/r 200 " + tc.outcome; !obs.seen(call) {
			t.Errorf("%s: the requests metric was not told %q", tc.path, call)
		}
	}
	if n := logs.Len(); n != 6 {
		t.Errorf("%d access log lines for 6 requests", n)
	}
}
