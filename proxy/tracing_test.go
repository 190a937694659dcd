package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"portico.dev/portico/internal/dataplane/tracing"
	"portico.dev/portico/internal/testkit/tracingtest"
)

// tracedRuntime is a Runtime on loopback that exports spans to rc.
func tracedRuntime(t *testing.T, rc *tracingtest.Receiver, protocol string, ratio float64) *Runtime {
	t.Helper()
	tr, err := tracing.New(t.Context(), tracing.Options{
		Endpoint: rc.Endpoint, Protocol: protocol, Insecure: true, SampleRatio: ratio,
		Version: "test", BatchTimeout: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return relRuntime(t, func(o *Options) { o.Tracer = tr })
}

// traceparentBackend answers 200 (or status when the path is /fail) and
// remembers the traceparent of every request it got.
func traceparentBackend(t *testing.T) (string, func() []string) {
	var mu sync.Mutex
	var seen []string
	addr, _ := relBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Traceparent"))
		mu.Unlock()
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
	return addr, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func tracedGet(t *testing.T, c *http.Client, url string, header http.Header) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := header.Get("Host"); h != "" {
		req.Host = h
		header.Del("Host")
	}
	req.Header = header
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestTracingContinuesTheClientsTrace: a request with a traceparent gets a
// server span that is its child, the backend gets a traceparent naming
// that span, and the span says what became of the request; over both OTLP
// transports.
func TestTracingContinuesTheClientsTrace(t *testing.T) {
	for _, protocol := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		t.Run(protocol, func(t *testing.T) {
			var rc *tracingtest.Receiver
			if protocol == tracing.ProtocolGRPC {
				rc = tracingtest.StartGRPC(t)
			} else {
				rc = tracingtest.StartHTTP(t)
			}
			rt := tracedRuntime(t, rc, protocol, 0) // ratio 0: only the parent's flag records
			backend, seen := traceparentBackend(t)
			addr := relHTTPPort(t, rt, backend)
			const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			code := tracedGet(t, http.DefaultClient, "http://"+addr+"/fail?token=secret",
				http.Header{"Traceparent": {"00-" + traceID + "-" + parentID + "-01"}, "User-Agent": {"trace-test"}})
			if code != http.StatusServiceUnavailable {
				t.Fatalf("status %d, want the backend's 503", code)
			}
			spans := rc.Wait(t, 1, 10*time.Second)
			s := spans[0]
			if s.TraceID != traceID || s.ParentSpanID != parentID || s.Kind != 2 /* SERVER */ {
				t.Errorf("span trace %s parent %s kind %v; want trace %s parent %s, a server span", s.TraceID, s.ParentSpanID, s.Kind, traceID, parentID)
			}
			tp := seen()
			if len(tp) != 1 || tp[0] != "00-"+traceID+"-"+s.SpanID+"-01" {
				t.Errorf("backend got traceparent %q, want Portico's span %s as the parent", tp, s.SpanID)
			}
			want := map[string]string{
				"http.request.method":       "GET",
				"url.path":                  "/fail",
				"url.scheme":                "http",
				"http.response.status_code": "503",
				"http.route":                "ns/r",
				"portico.upstream.address":  backend,
				"user_agent.original":       "trace-test",
				"network.protocol.version":  "1.1",
			}
			for k, v := range want {
				if s.Attributes[k] != v {
					t.Errorf("attribute %s = %q, want %q", k, s.Attributes[k], v)
				}
			}
			for k, v := range s.Attributes {
				if strings.Contains(v, "secret") {
					t.Errorf("attribute %s carries the query: %q", k, v)
				}
			}
			if !s.StatusError || s.Name != "GET ns/r" || s.Service != "portico" {
				t.Errorf("span %q error=%v service %q; want \"GET ns/r\", an error (5xx), service portico", s.Name, s.StatusError, s.Service)
			}
		})
	}
}

// TestTracingStartsTraces: without a traceparent (or with a malformed one)
// Portico starts the trace. With ratio 1 the span is exported as a root;
// with ratio 0 nothing is exported but the backend still gets a
// traceparent, unsampled, so its own spans join one trace.
func TestTracingStartsTraces(t *testing.T) {
	rc := tracingtest.StartGRPC(t)
	rt := tracedRuntime(t, rc, tracing.ProtocolGRPC, 1)
	backend, seen := traceparentBackend(t)
	addr := relHTTPPort(t, rt, backend)
	tracedGet(t, http.DefaultClient, "http://"+addr+"/", http.Header{"Traceparent": {"00-not-a-trace-01"}})
	s := rc.Wait(t, 1, 10*time.Second)[0]
	if s.ParentSpanID != "" || len(s.TraceID) != 32 {
		t.Errorf("span trace %q parent %q, want a new root", s.TraceID, s.ParentSpanID)
	}
	if tp := seen(); len(tp) != 1 || tp[0] != "00-"+s.TraceID+"-"+s.SpanID+"-01" {
		t.Errorf("backend got %q, want Portico's span, sampled (the malformed header replaced)", tp)
	}

	rc0 := tracingtest.StartGRPC(t)
	rt0 := tracedRuntime(t, rc0, tracing.ProtocolGRPC, 0)
	backend0, seen0 := traceparentBackend(t)
	addr0 := relHTTPPort(t, rt0, backend0)
	tracedGet(t, http.DefaultClient, "http://"+addr0+"/", http.Header{})
	tp := seen0()
	if len(tp) != 1 || !strings.HasPrefix(tp[0], "00-") || !strings.HasSuffix(tp[0], "-00") {
		t.Errorf("backend got %q, want an unsampled traceparent", tp)
	}
	// Shutdown exports what is batched: nothing must be there.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rt0.Close(ctx)
	time.Sleep(100 * time.Millisecond)
	if n := len(rc0.Spans()); n != 0 {
		t.Errorf("ratio 0 exported %d spans", n)
	}
}

// TestTracingTLSAttributes: a request over HTTPS carries the session's
// version, cipher and SNI name.
func TestTracingTLSAttributes(t *testing.T) {
	rc := tracingtest.StartHTTP(t)
	rt := tracedRuntime(t, rc, tracing.ProtocolHTTP, 1)
	backend, _ := traceparentBackend(t)
	addr, cfg := relHTTPSPort(t, rt, backend)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}, Timeout: 5 * time.Second}
	defer c.CloseIdleConnections()
	if code := tracedGet(t, c, "https://"+addr+"/", http.Header{"Host": {relHostname}}); code != 200 {
		t.Fatalf("status %d", code)
	}
	s := rc.Wait(t, 1, 10*time.Second)[0]
	want := map[string]string{
		"url.scheme":               "https",
		"tls.client.server_name":   relHostname,
		"tls.protocol.version":     "1.3",
		"network.protocol.version": "2",
	}
	for k, v := range want {
		if s.Attributes[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, s.Attributes[k], v)
		}
	}
	if s.Attributes["tls.cipher"] != tls.CipherSuiteName(tls.TLS_AES_128_GCM_SHA256) && !strings.HasPrefix(s.Attributes["tls.cipher"], "TLS_") {
		t.Errorf("tls.cipher %q", s.Attributes["tls.cipher"])
	}
}

// BenchmarkForwardTracing is BenchmarkForward with tracing on, every trace
// recorded and exported over OTLP/gRPC to a receiver in the process: the
// worst case. BenchmarkForwardTracingUnsampled records none but still
// starts the trace and passes it on.
func BenchmarkForwardTracing(b *testing.B)          { benchmarkForwardTracing(b, 1) }
func BenchmarkForwardTracingUnsampled(b *testing.B) { benchmarkForwardTracing(b, 0) }

func benchmarkForwardTracing(b *testing.B, ratio float64) {
	rc := tracingtest.StartGRPC(b)
	tr, err := tracing.New(b.Context(), tracing.Options{Endpoint: rc.Endpoint, Protocol: tracing.ProtocolGRPC, Insecure: true, SampleRatio: ratio})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	opts := DefaultOptions()
	opts.Tracer = tr
	benchmarkForward(b, opts)
}
