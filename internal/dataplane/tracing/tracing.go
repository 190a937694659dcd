// Package tracing gives every proxied request an OpenTelemetry server span
// and carries W3C trace context (traceparent, tracestate) to the backend, so
// a trace crosses Portico as one hop. Spans leave over OTLP (gRPC or HTTP)
// in batches. It is off unless an endpoint is configured, and the data plane
// then pays one nil check per request.
package tracing

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"portico.dev/portico/config"
)

// Protocols of the OTLP exporter.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http"
)

// Options configure tracing.
type Options struct {
	// Endpoint is the OTLP receiver's host:port. Empty: tracing is off.
	Endpoint string
	// Protocol is ProtocolGRPC (default port 4317) or ProtocolHTTP
	// (OTLP/HTTP protobuf, default port 4318).
	Protocol string
	// Insecure sends spans in plain text instead of TLS.
	Insecure bool
	// SampleRatio is the share of traces Portico starts that are
	// recorded, 0 to 1. A request that arrives with a traceparent follows
	// its sampled flag instead, so a trace is recorded whole or not at all.
	SampleRatio float64
	// ServiceName names Portico in the spans' resource (service.name).
	ServiceName string
	// Version is reported as service.version.
	Version string
	// BatchTimeout bounds how long a finished span waits before it is
	// exported; 0 takes the SDK's default (5 s).
	BatchTimeout time.Duration
}

// Check reports what is wrong with o, naming the flags' terms.
func (o Options) Check() error {
	switch {
	case o.Endpoint == "":
		return nil
	case o.Protocol != ProtocolGRPC && o.Protocol != ProtocolHTTP:
		return fmt.Errorf("tracing protocol %q: want %q or %q", o.Protocol, ProtocolGRPC, ProtocolHTTP)
	case o.SampleRatio < 0 || o.SampleRatio > 1:
		return fmt.Errorf("tracing sample ratio %v: want 0 to 1", o.SampleRatio)
	}
	if _, _, err := net.SplitHostPort(o.Endpoint); err != nil {
		return fmt.Errorf("tracing endpoint %q: want host:port: %w", o.Endpoint, err)
	}
	return nil
}

// Tracer starts and ends the spans of requests. A nil *Tracer is valid and
// does nothing, which is how tracing is off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TraceContext
	// An XTelemetryPolicy's (NewPolicy): the name of every span ("":
	// "{method} {route}") and the attributes it adds, by when they are
	// known.
	spanName                string
	closeConn               func() error // nil but for NewPolicy's
	literal                 []attribute.KeyValue
	headers, atStart, atEnd []config.TracingAttribute
}

// New starts the exporter and returns a Tracer, or nil when o.Endpoint is
// empty. The exporter connects lazily: an unreachable receiver costs
// dropped spans, never requests.
func New(ctx context.Context, o Options) (*Tracer, error) {
	if o.Endpoint == "" {
		return nil, nil
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	name := o.ServiceName
	if name == "" {
		name = "portico"
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", name),
		attribute.String("service.version", o.Version),
	)
	var batch []sdktrace.BatchSpanProcessorOption
	if o.BatchTimeout > 0 {
		batch = append(batch, sdktrace.WithBatchTimeout(o.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, batch...),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.SampleRatio))),
	)
	return &Tracer{provider: tp, tracer: tp.Tracer("portico.dev/portico/proxy")}, nil
}

func newExporter(ctx context.Context, o Options) (sdktrace.SpanExporter, error) {
	if o.Protocol == ProtocolHTTP {
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(o.Endpoint)}
		if o.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		} else {
			opts = append(opts, otlptracehttp.WithTLSClientConfig(&tls.Config{MinVersion: tls.VersionTLS12}))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(o.Endpoint)}
	if o.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	return otlptracegrpc.New(ctx, opts...)
}

// Shutdown exports what is buffered and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	err := t.provider.Shutdown(ctx)
	if t.closeConn != nil {
		err = errors.Join(err, t.closeConn())
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing shutdown: %w", err)
	}
	return nil
}

// Span is one request's server span; the zero Span is none.
type Span struct {
	span trace.Span
}

// Started tells whether s is a span.
func (s Span) Started() bool { return s.span != nil }

// Start opens the server span of r, a child of the trace context r carries
// (a new trace when it carries none or an invalid one), and rewrites r's
// traceparent and tracestate to name this span, so the backend's spans are
// its children. It returns r with the span in its context.
func (t *Tracer) Start(r *http.Request) (*http.Request, Span) {
	return t.StartAt(r, time.Time{})
}

// StartAt is Start for a request received at start (zero: now).
func (t *Tracer) StartAt(r *http.Request, start time.Time) (*http.Request, Span) {
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name := r.Method
	if t.spanName != "" {
		name = t.spanName
	}
	attrs := requestAttributes(r)
	if t.literal != nil || t.headers != nil || t.atStart != nil {
		attrs = t.policyStart(r, attrs)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
	if !start.IsZero() {
		opts = append(opts, trace.WithTimestamp(start))
	}
	ctx, span := t.tracer.Start(ctx, name, opts...)
	// Extract ignores a malformed traceparent; it must not reach the
	// backend next to ours.
	r.Header.Del("Traceparent")
	r.Header.Del("Tracestate")
	t.prop.Inject(ctx, propagation.HeaderCarrier(r.Header))
	return r.WithContext(ctx), Span{span: span}
}

// Outcome is what the proxy knows of a request once it was answered.
type Outcome struct {
	Route    string // "namespace/name" of the HTTPRoute, "" when none matched
	Upstream string // endpoint of the last attempt, "" when none was made
	Status   int
	// End is how the exchange ended, from a small fixed set ("complete",
	// "client_gone", "backend_failed", ...); "" for complete. Failed says
	// that the answer was cut short on the server's side (the backend
	// failed, a timeout fired), an error whatever its status.
	End    string
	Failed bool
}

// End closes s with what became of the request.
func (t *Tracer) End(s Span, o Outcome) {
	if !s.span.IsRecording() {
		s.span.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, attribute.Int("http.response.status_code", o.Status))
	if o.End != "" {
		attrs = append(attrs, attribute.String("portico.outcome", o.End))
	}
	if o.Route != "" {
		attrs = append(attrs, attribute.String("http.route", o.Route))
		if t.spanName == "" {
			s.span.SetName(spanName(s.span, o.Route))
		}
	}
	if o.Upstream != "" {
		attrs = append(attrs, attribute.String("portico.upstream.address", o.Upstream))
	}
	if t.atEnd != nil {
		attrs = t.policyEnd(attrs)
	}
	s.span.SetAttributes(attrs...)
	switch {
	case o.Status >= 500:
		// Server spans mark only 5xx as errors: a 4xx is the client's.
		s.span.SetStatus(codes.Error, http.StatusText(o.Status))
	case o.Failed:
		s.span.SetStatus(codes.Error, o.End)
	}
	s.span.End()
}

// spanName is "{method} {route}", the method being the name Start gave.
func spanName(s trace.Span, route string) string {
	if ro, ok := s.(sdktrace.ReadOnlySpan); ok {
		return ro.Name() + " " + route
	}
	return route
}

// requestAttributes are the span's attributes known when the request
// arrives. The query is left out: it may carry secrets.
func requestAttributes(r *http.Request) []attribute.KeyValue {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		attribute.String("http.request.method", r.Method),
		attribute.String("url.scheme", scheme),
		attribute.String("url.path", r.URL.Path),
		attribute.String("server.address", r.Host),
		attribute.String("network.protocol.version", protocolVersion(r)),
	)
	if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		attrs = append(attrs, attribute.String("client.address", host))
		if p, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, attribute.Int("client.port", p))
		}
	}
	if ua := r.UserAgent(); ua != "" {
		attrs = append(attrs, attribute.String("user_agent.original", ua))
	}
	if cs := r.TLS; cs != nil {
		attrs = append(attrs,
			attribute.String("tls.protocol.version", strings.TrimPrefix(tls.VersionName(cs.Version), "TLS ")),
			attribute.String("tls.cipher", tls.CipherSuiteName(cs.CipherSuite)),
			attribute.String("tls.client.server_name", cs.ServerName),
		)
	}
	return attrs
}

func protocolVersion(r *http.Request) string {
	switch r.ProtoMajor {
	case 2:
		return "2"
	case 3:
		return "3"
	}
	return fmt.Sprintf("%d.%d", r.ProtoMajor, r.ProtoMinor)
}
