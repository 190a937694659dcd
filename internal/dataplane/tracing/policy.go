package tracing

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"portico.dev/portico/config"
)

// Bounds of a policy's exporter: whatever its collector does, a Gateway
// holds at most maxQueuedSpans finished spans (more are dropped, never
// waited for), and an export that does not finish in exportTimeout is
// given up.
const (
	maxQueuedSpans   = 2048
	maxExportBatch   = 512
	exportTimeout    = 5 * time.Second
	maxAttributeText = 256 // bytes of a header's value on a span
)

// Dialer opens a connection to one of the collector's endpoints, as the
// configuration in force has them.
type Dialer func(ctx context.Context) (net.Conn, error)

// NewPolicy starts the exporter of an XTelemetryPolicy's tracing, t (not
// Disabled): spans of the Gateway's requests go over OTLP to the
// endpoints dial reaches, with t's sampling, names and attributes. What
// t leaves unset comes from base, the process's options (sample ratio,
// service name, version, batch timeout). Like New, it never connects
// before a span is exported.
func NewPolicy(ctx context.Context, t *config.Tracing, base Options, dial Dialer) (*Tracer, error) {
	exp, closeConn, err := policyExporter(ctx, t, dial)
	if err != nil {
		return nil, fmt.Errorf("tracing exporter of %s: %w", t.Policy, err)
	}
	name := t.ServiceName
	if name == "" {
		name = base.ServiceName
	}
	if name == "" {
		name = "portico"
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", name),
		attribute.String("service.version", base.Version),
	)
	batch := []sdktrace.BatchSpanProcessorOption{
		sdktrace.WithMaxQueueSize(maxQueuedSpans),
		sdktrace.WithMaxExportBatchSize(maxExportBatch),
		sdktrace.WithExportTimeout(exportTimeout),
	}
	if base.BatchTimeout > 0 {
		batch = append(batch, sdktrace.WithBatchTimeout(base.BatchTimeout))
	}
	ratio := base.SampleRatio
	if t.SampleRatio != nil {
		ratio = *t.SampleRatio
	}
	root := sdktrace.TraceIDRatioBased(ratio)
	sampler := root
	if t.Parent == config.ParentRespect {
		sampled := sdktrace.AlwaysSample()
		if t.ParentRatio < 1 {
			// Keyed by the trace ID, as the root's is: each hop that
			// downsamples keeps whole traces.
			sampled = sdktrace.TraceIDRatioBased(t.ParentRatio)
		}
		sampler = sdktrace.ParentBased(root,
			sdktrace.WithRemoteParentSampled(sampled),
			sdktrace.WithRemoteParentNotSampled(sdktrace.NeverSample()))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, batch...),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sampler),
	)
	out := &Tracer{provider: tp, tracer: tp.Tracer("portico.dev/portico/proxy"), spanName: t.SpanName, closeConn: closeConn}
	for _, a := range t.Attributes {
		switch {
		case a.Literal != "":
			out.literal = append(out.literal, attribute.String(a.Name, a.Literal))
		case a.Header != "":
			out.headers = append(out.headers, a)
		case endKnown(a.From):
			out.atEnd = append(out.atEnd, a)
		default:
			out.atStart = append(out.atStart, a)
		}
	}
	return out, nil
}

// endKnown tells whether attribute key is known only once the request
// was answered (Tracer.End sets it).
func endKnown(key string) bool {
	switch key {
	case "http.response.status_code", "http.route", "portico.outcome", "portico.upstream.address":
		return true
	}
	return false
}

// policyExporter is an OTLP exporter whose every connection goes where
// dial says; the endpoint it is given is only a name. Over gRPC, the
// connection is the exporter's to close once it is shut down.
func policyExporter(ctx context.Context, t *config.Tracing, dial Dialer) (sdktrace.SpanExporter, func() error, error) {
	headers := make(map[string]string, len(t.Headers))
	for _, h := range t.Headers {
		headers[h.Name] = h.Value
	}
	const endpoint = "collector.invalid:4318"
	if t.GRPC {
		// passthrough: the name is never resolved, dial picks the address.
		conn, err := grpc.NewClient("passthrough:///"+endpoint,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return dial(ctx) }))
		if err != nil {
			return nil, nil, err
		}
		exp, err := otlptracegrpc.New(ctx,
			otlptracegrpc.WithGRPCConn(conn),
			otlptracegrpc.WithHeaders(headers),
			otlptracegrpc.WithTimeout(exportTimeout),
			otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}))
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return exp, conn.Close, nil
	}
	tr := &http.Transport{
		DialContext:           func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConns:          2,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: exportTimeout,
	}
	exp, err := otlptracehttp.New(ctx,
		otlptracehttp.WithEndpoint(endpoint),
		otlptracehttp.WithInsecure(),
		otlptracehttp.WithHeaders(headers),
		otlptracehttp.WithTimeout(exportTimeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}),
		otlptracehttp.WithHTTPClient(&http.Client{Transport: tr, Timeout: exportTimeout}))
	return exp, func() error { tr.CloseIdleConnections(); return nil }, err
}

// policyStart adds the attributes of t's policy known when r arrives to
// attrs, the span's own.
func (t *Tracer) policyStart(r *http.Request, attrs []attribute.KeyValue) []attribute.KeyValue {
	attrs = append(attrs, t.literal...)
	for _, a := range t.headers {
		if v := r.Header.Get(a.Header); v != "" {
			// A client's header: bounded, whatever it sends.
			if len(v) > maxAttributeText {
				v = v[:maxAttributeText]
			}
			attrs = append(attrs, attribute.String(a.Name, v))
		}
	}
	for _, a := range t.atStart {
		if v, ok := find(attrs, a.From); ok {
			attrs = append(attrs, attribute.KeyValue{Key: attribute.Key(a.Name), Value: v})
		}
	}
	return attrs
}

// policyEnd adds the attributes of t's policy known once the request was
// answered to attrs, those End sets.
func (t *Tracer) policyEnd(attrs []attribute.KeyValue) []attribute.KeyValue {
	for _, a := range t.atEnd {
		if v, ok := find(attrs, a.From); ok {
			attrs = append(attrs, attribute.KeyValue{Key: attribute.Key(a.Name), Value: v})
		}
	}
	return attrs
}

func find(attrs []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}
