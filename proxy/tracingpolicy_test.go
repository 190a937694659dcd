package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/dataplane/tracing"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/tracingtest"
)

// The two hosts of policyPort: one a Gateway with an XTelemetryPolicy's
// tracing, one without.
const (
	policyHost = "traced.example.com"
	plainHost  = "plain.example.com"
)

// collectorKey is the Service port of the policy's collector.
var collectorKey = config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: "otel"}, Port: 4318}

// policyRuntime is a Runtime whose process tracing (the flags) exports to
// process, every trace recorded (nil: no process tracing).
func policyRuntime(t *testing.T, process *tracingtest.Receiver) *Runtime {
	t.Helper()
	base := tracing.Options{SampleRatio: 1, ServiceName: "portico-process", Version: "test", BatchTimeout: 20 * time.Millisecond}
	return relRuntime(t, func(o *Options) {
		o.TracingDefaults = base
		if process == nil {
			return
		}
		po := base
		po.Endpoint, po.Protocol, po.Insecure = process.Endpoint, tracing.ProtocolHTTP, true
		tr, err := tracing.New(t.Context(), po)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
		o.Tracer = tr
	})
}

// policyPort applies one HTTP port with a listener of policyHost traced
// by tr (its collector at collectorAddr) and one of plainHost without,
// both routing to backend, and returns the port's address.
func policyPort(t *testing.T, rt *Runtime, backend, collectorAddr string, tr *config.Tracing) string {
	t.Helper()
	traced := &config.Listener{Key: "Gateway/ns/traced/http", Hostname: policyHost, Routes: routeTable(t, "svc"), Tracing: tr}
	plain := &config.Listener{Key: "Gateway/ns/plain/http", Hostname: plainHost, Routes: routeTable(t, "svc")}
	p := freePort(t)
	cfg := &config.Config{
		Ports: []*config.Port{{Number: int32(p), Protocol: config.HTTP,
			Listeners: hostname.NewTable([]string{policyHost, plainHost}, []*config.Listener{traced, plain}),
			All:       chunked.Of([]*config.Listener{traced, plain})}},
		Endpoints: config.NewEndpointTable(map[config.BackendKey]*config.Endpoints{
			{Service: config.NamespacedName{Namespace: "ns", Name: "svc"}, Port: 80}: config.NewEndpoints(backend),
			collectorKey: config.NewEndpoints(collectorAddr),
		}),
	}
	if err := rt.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

// enabledTracing is a policy's tracing to collectorKey, every new trace
// recorded, parents followed.
func enabledTracing(grpc bool) *config.Tracing {
	return &config.Tracing{ID: "ns/policy test", Policy: "ns/policy", Collector: collectorKey, GRPC: grpc,
		SampleRatio: ptrTo(1.0), ParentRatio: 1}
}

func ptrTo[T any](v T) *T { return &v }

// flush closes rt, which exports what its tracers hold.
func flush(t *testing.T, rt *Runtime) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyTracingExportsToItsCollector: the requests of a Gateway with
// an XTelemetryPolicy go to the policy's collector (found through the
// Service's endpoints), under its service and span names, with its
// attributes, and the export requests carry its headers; the other
// Gateway's requests keep the process's tracing. Over both transports.
func TestPolicyTracingExportsToItsCollector(t *testing.T) {
	for _, grpc := range []bool{false, true} {
		t.Run(fmt.Sprintf("grpc=%v", grpc), func(t *testing.T) {
			process := tracingtest.StartHTTP(t)
			collector := tracingtest.StartHTTP(t)
			if grpc {
				collector = tracingtest.StartGRPC(t)
			}
			rt := policyRuntime(t, process)
			backend, seen := traceparentBackend(t)
			tr := enabledTracing(grpc)
			tr.ServiceName, tr.SpanName = "edge-a", "ingress a"
			tr.Headers = []config.TracingHeader{{Name: "Authorization", Value: "Bearer collector-token"}}
			tr.Attributes = []config.TracingAttribute{
				{Name: "user.id", Header: "X-User-Id"},
				{Name: "deployment.environment", Literal: "staging"},
				{Name: "route", From: "http.route"},
				{Name: "method", From: "http.request.method"},
				{Name: "code", From: "http.response.status_code"},
			}
			addr := policyPort(t, rt, backend, collector.Endpoint, tr)
			long := strings.Repeat("u", 1000)
			if code := tracedGet(t, http.DefaultClient, "http://"+addr+"/x", http.Header{"Host": {policyHost}, "X-User-Id": {long}}); code != 200 {
				t.Fatalf("status %d", code)
			}
			if code := tracedGet(t, http.DefaultClient, "http://"+addr+"/y", http.Header{"Host": {plainHost}}); code != 200 {
				t.Fatalf("status %d", code)
			}
			s := collector.Wait(t, 1, 10*time.Second)[0]
			if s.Name != "ingress a" || s.Service != "edge-a" || s.Kind != 2 {
				t.Errorf("policy's span %q service %q kind %v; want \"ingress a\", edge-a, a server span", s.Name, s.Service, s.Kind)
			}
			want := map[string]string{
				"user.id": strings.Repeat("u", 256), "deployment.environment": "staging", "route": "ns/r", "method": "GET", "code": "200",
				"url.path": "/x", "server.address": policyHost,
			}
			for k, v := range want {
				if s.Attributes[k] != v {
					t.Errorf("attribute %s = %q, want %q", k, s.Attributes[k], v)
				}
			}
			if got := collector.Headers().Get("Authorization"); got != "Bearer collector-token" {
				t.Errorf("export request's Authorization %q, want the policy's header", got)
			}
			if tp := seen(); len(tp) != 2 || !strings.Contains(tp[0], s.SpanID) {
				t.Errorf("backend got traceparents %q, want the policy's span %s as the first's parent", tp, s.SpanID)
			}
			p := process.Wait(t, 1, 10*time.Second)[0]
			if p.Name != "GET ns/r" || p.Service != "portico-process" || p.Attributes["server.address"] != plainHost {
				t.Errorf("process's span %q service %q host %q; want the plain Gateway's request under the flags' names", p.Name, p.Service, p.Attributes["server.address"])
			}
			flush(t, rt)
			if n, m := len(collector.Spans()), len(process.Spans()); n != 1 || m != 1 {
				t.Errorf("collector got %d spans, process %d; want one each: a request goes to its Gateway's tracing only", n, m)
			}
		})
	}
}

// TestPolicyTracingDisabled: a policy with mode Disabled stops the
// Gateway's spans, though the process traces every request.
func TestPolicyTracingDisabled(t *testing.T) {
	process := tracingtest.StartHTTP(t)
	rt := policyRuntime(t, process)
	backend, seen := traceparentBackend(t)
	addr := policyPort(t, rt, backend, "127.0.0.1:1", &config.Tracing{ID: "ns/off disabled", Policy: "ns/off", Disabled: true})
	for range 5 {
		tracedGet(t, http.DefaultClient, "http://"+addr+"/", http.Header{"Host": {policyHost}})
	}
	tracedGet(t, http.DefaultClient, "http://"+addr+"/", http.Header{"Host": {plainHost}})
	process.Wait(t, 1, 10*time.Second)
	flush(t, rt)
	spans := process.Spans()
	if len(spans) != 1 || spans[0].Attributes["server.address"] != plainHost {
		t.Errorf("process got %d spans (%v); want only the plain Gateway's", len(spans), spans)
	}
	if tp := seen(); len(tp) != 6 || tp[0] != "" {
		t.Errorf("backend got traceparents %q; an untraced Gateway passes the client's (none) on", tp)
	}
}

// policyRequests sends n requests to the traced host, each with the
// traceparent parent makes of its index ("" for none), 8 at a time over
// kept-alive connections, and returns how many the collector received.
func policyRequests(t *testing.T, tr *config.Tracing, n int, parent func(i int) string) int {
	t.Helper()
	collector := tracingtest.StartHTTP(t)
	rt := policyRuntime(t, nil)
	backend, _ := traceparentBackend(t)
	addr := policyPort(t, rt, backend, collector.Endpoint, tr)
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				h := http.Header{"Host": {policyHost}}
				if p := parent(i); p != "" {
					h.Set("Traceparent", p)
				}
				if code := tracedGet(t, c, "http://"+addr+"/", h); code != 200 {
					t.Errorf("status %d", code)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	flush(t, rt)
	return len(collector.Spans())
}

// traceparent is a W3C traceparent of a trace ID made of i, sampled or
// not. The IDs are spread over the ratio samplers' range (their low 8
// bytes), as random ones are.
func traceparent(i int, sampled bool) string {
	flag := "00"
	if sampled {
		flag = "01"
	}
	// A multiplicative hash spreads consecutive i over 64 bits.
	low := uint64(i+1) * 0x9E3779B97F4A7C15
	return fmt.Sprintf("00-%016x%016x-%016x-%s", uint64(i+1), low, uint64(i+1)|1<<63, flag)
}

// TestPolicyTracingSamplingRate: a policy's samplingRate records that
// share of new traces: 25% of 2000 requests without a parent, within
// five standard deviations of the binomial count (500 ± 97).
func TestPolicyTracingSamplingRate(t *testing.T) {
	tr := enabledTracing(false)
	tr.SampleRatio = ptrTo(0.25)
	got := policyRequests(t, tr, 2000, func(int) string { return "" })
	if got < 403 || got > 597 {
		t.Errorf("%d of 2000 new traces recorded at samplingRate 25%%, want 403 to 597", got)
	}
}

// TestPolicyTracingParentBased: with parentBasedSampling Enabled a
// sampled parent is followed (at its samplingRate) and an unsampled one
// is not, whatever the policy's own rate; Disabled applies the policy's
// rate to every request, parent or not.
func TestPolicyTracingParentBased(t *testing.T) {
	t.Run("respect", func(t *testing.T) {
		tr := enabledTracing(false)
		tr.SampleRatio = ptrTo(0.0)
		if got := policyRequests(t, tr, 200, func(i int) string { return traceparent(i, true) }); got != 200 {
			t.Errorf("%d of 200 sampled parents recorded, want all", got)
		}
		tr = enabledTracing(false)
		tr.SampleRatio = ptrTo(1.0)
		if got := policyRequests(t, tr, 200, func(i int) string { return traceparent(i, false) }); got != 0 {
			t.Errorf("%d of 200 unsampled parents recorded, want none", got)
		}
	})
	t.Run("respect at half", func(t *testing.T) {
		tr := enabledTracing(false)
		tr.SampleRatio, tr.ParentRatio = ptrTo(0.0), 0.5
		// 1000 at 50%: 500 ± 5 standard deviations (79).
		if got := policyRequests(t, tr, 1000, func(i int) string { return traceparent(i, true) }); got < 421 || got > 579 {
			t.Errorf("%d of 1000 sampled parents recorded at parent rate 50%%, want 421 to 579", got)
		}
	})
	t.Run("ignore", func(t *testing.T) {
		tr := enabledTracing(false)
		tr.Parent, tr.SampleRatio = config.ParentIgnore, ptrTo(0.0)
		if got := policyRequests(t, tr, 200, func(i int) string { return traceparent(i, true) }); got != 0 {
			t.Errorf("%d of 200 sampled parents recorded with parents ignored at rate 0, want none", got)
		}
		tr = enabledTracing(false)
		tr.Parent, tr.SampleRatio = config.ParentIgnore, ptrTo(1.0)
		if got := policyRequests(t, tr, 200, func(i int) string { return traceparent(i, false) }); got != 200 {
			t.Errorf("%d of 200 unsampled parents recorded with parents ignored at rate 1, want all", got)
		}
	})
}

// TestPolicyTracingCollectorHangsOrIsDown attacks the exporter: a
// collector that accepts and never answers, and one whose port is
// closed. Every request is still answered, and the spans waiting for a
// collector are bounded: the heap after thousands of recorded requests,
// each with large attributes, stays far below what keeping them would
// take.
func TestPolicyTracingCollectorHangsOrIsDown(t *testing.T) {
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // never read, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		hung.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := closed.Addr().String()
	closed.Close()

	for _, tc := range []struct{ name, addr string }{{"hangs", hung.Addr().String()}, {"down", down}} {
		t.Run(tc.name, func(t *testing.T) {
			rt := policyRuntime(t, nil)
			backend, _ := traceparentBackend(t)
			tr := enabledTracing(false)
			big := strings.Repeat("v", 256)
			for _, h := range []string{"A", "B", "C", "D", "E", "F"} {
				tr.Attributes = append(tr.Attributes, config.TracingAttribute{Name: h, Header: "X-" + h})
			}
			addr := policyPort(t, rt, backend, tc.addr, tr)
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 30 * time.Second}
			defer c.CloseIdleConnections()
			var before runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			const n = 8000
			var wg sync.WaitGroup
			next := make(chan int)
			for range 8 {
				wg.Go(func() {
					for i := range next {
						// Distinct values: nothing shared between spans.
						v := fmt.Sprintf("%08d%s", i, big)
						h := http.Header{"Host": {policyHost}}
						for _, k := range []string{"A", "B", "C", "D", "E", "F"} {
							h.Set("X-"+k, k+v)
						}
						req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
						req.Host, req.Header = policyHost, h
						resp, err := c.Do(req)
						if err != nil {
							t.Errorf("request %d: %v", i, err)
							continue
						}
						resp.Body.Close()
						if resp.StatusCode != 200 {
							t.Errorf("request %d: status %d", i, resp.StatusCode)
						}
					}
				})
			}
			for i := range n {
				next <- i
			}
			close(next)
			wg.Wait()
			var after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&after)
			// Kept, 8000 spans with six distinct 256-byte values each (and
			// the rest of a span) would hold some 40 MB; the exporter's
			// queue holds 2048 (some 10 MB).
			grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("heap grew by %d KB over %d requests", grew>>10, n)
			if grew > 20<<20 {
				t.Errorf("heap grew by %d MB over %d requests to a collector that %s; spans waiting for it must be bounded", grew>>20, n, tc.name)
			}
		})
	}
}
