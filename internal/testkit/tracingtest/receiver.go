// Package tracingtest is an in-process OTLP trace receiver for tests, over
// gRPC and over HTTP, on loopback.
package tracingtest

import (
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// Span is what a test checks of a received span.
type Span struct {
	TraceID, SpanID, ParentSpanID string // hex
	Name                          string
	Kind                          tracepb.Span_SpanKind
	Attributes                    map[string]string // every value as text
	StatusError                   bool
	Service                       string // resource service.name
}

// Receiver collects the spans exported to it.
type Receiver struct {
	// Endpoint is the host:port to export to.
	Endpoint string

	mu    sync.Mutex
	spans []Span
	added chan struct{}
	// headers are those of the last export request (gRPC metadata, or
	// HTTP headers).
	headers http.Header
}

func newReceiver() *Receiver { return &Receiver{added: make(chan struct{}, 1)} }

// StartGRPC serves OTLP/gRPC on a loopback port until the test ends.
func StartGRPC(t testing.TB) *Receiver {
	t.Helper()
	rc := newReceiver()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc.Endpoint = ln.Addr().String()
	srv := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(srv, grpcService{rc: rc})
	go srv.Serve(ln) //nolint:errcheck // ends with Stop
	t.Cleanup(srv.Stop)
	return rc
}

// StartHTTP serves OTLP/HTTP (protobuf) on a loopback port until the test
// ends.
func StartHTTP(t testing.TB) *Receiver {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ServeHTTP(t, ln)
}

// ServeHTTP serves OTLP/HTTP (protobuf) on ln (one bound in a network
// namespace, say) until the test ends.
func ServeHTTP(t testing.TB, ln net.Listener) *Receiver {
	t.Helper()
	rc := newReceiver()
	rc.Endpoint = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		req := &collectorpb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(body, req)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rc.sawHeaders(r.Header)
		rc.add(req)
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out) //nolint:errcheck // the exporter retries
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	return rc
}

type grpcService struct {
	collectorpb.UnimplementedTraceServiceServer
	rc *Receiver
}

func (s grpcService) Export(ctx context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := http.Header{}
	for k, vs := range md {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	s.rc.sawHeaders(h)
	s.rc.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (rc *Receiver) add(req *collectorpb.ExportTraceServiceRequest) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := text(attrs(rs.GetResource().GetAttributes())["service.name"])
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				got := Span{
					TraceID:      hex.EncodeToString(sp.GetTraceId()),
					SpanID:       hex.EncodeToString(sp.GetSpanId()),
					ParentSpanID: hex.EncodeToString(sp.GetParentSpanId()),
					Name:         sp.GetName(),
					Kind:         sp.GetKind(),
					Attributes:   map[string]string{},
					StatusError:  sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					Service:      service,
				}
				for k, v := range attrs(sp.GetAttributes()) {
					got.Attributes[k] = text(v)
				}
				rc.spans = append(rc.spans, got)
			}
		}
	}
	select {
	case rc.added <- struct{}{}:
	default:
	}
}

// Wait returns the spans received once there are at least n, failing the
// test after timeout.
func (rc *Receiver) Wait(t testing.TB, n int, timeout time.Duration) []Span {
	t.Helper()
	deadline := time.After(timeout)
	for {
		rc.mu.Lock()
		if len(rc.spans) >= n {
			out := append([]Span(nil), rc.spans...)
			rc.mu.Unlock()
			return out
		}
		rc.mu.Unlock()
		select {
		case <-rc.added:
		case <-deadline:
			t.Fatalf("received %d spans after %v, want %d", len(rc.Spans()), timeout, n)
		}
	}
}

func (rc *Receiver) sawHeaders(h http.Header) {
	rc.mu.Lock()
	rc.headers = h.Clone()
	rc.mu.Unlock()
}

// Headers returns the headers (or gRPC metadata) of the last export.
func (rc *Receiver) Headers() http.Header {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.headers.Clone()
}

// Spans returns the spans received so far.
func (rc *Receiver) Spans() []Span {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]Span(nil), rc.spans...)
}

func attrs(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue()
	}
	return m
}

func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return ""
}
