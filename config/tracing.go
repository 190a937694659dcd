package config

// Tracing is what an XTelemetryPolicy sets for the listeners of the
// Gateway it won: the spans of their requests go to the policy's own
// collector with its sampling, names and attributes, instead of the
// process's (the --tracing-* flags). A listener without one keeps the
// process's tracing.
type Tracing struct {
	// ID identifies the exporter and sampler these settings make: two
	// configurations with the same ID share one, a new ID starts another.
	ID string
	// Policy is "namespace/name" of the XTelemetryPolicy.
	Policy string
	// Disabled: the listeners' requests are not traced at all, whatever
	// the flags say; nothing below is set.
	Disabled bool
	// Collector is the Service port that receives OTLP (its endpoints in
	// the configuration's table, read at each connection the exporter
	// opens); GRPC picks OTLP over gRPC, else OTLP/HTTP with protobuf.
	Collector BackendKey
	GRPC      bool
	// Headers are sent with every export request.
	Headers []TracingHeader
	// SampleRatio is the share of new traces (no parent) recorded, 0 to
	// 1; nil: the process's --tracing-sample-ratio.
	SampleRatio *float64
	// Parent is what a request with a parent span does.
	Parent ParentSampling
	// ParentRatio is the share of sampled parents followed when Parent is
	// ParentRespect (1 unless the policy says otherwise).
	ParentRatio float64
	// ServiceName is the spans' service.name; "": the process's.
	ServiceName string
	// SpanName names every span; "": "{method} {route}".
	SpanName string
	// Attributes are added to every span.
	Attributes []TracingAttribute
}

// TracingHeader is a header of export requests.
type TracingHeader struct {
	Name, Value string
}

// ParentSampling says how a request that carries a parent's sampling
// decision (traceparent) is sampled.
type ParentSampling uint8

const (
	// ParentRespect follows the parent: an unsampled parent is not
	// recorded; a sampled one is, at ParentRatio. Portico's default.
	ParentRespect ParentSampling = iota
	// ParentIgnore samples every request at SampleRatio, parent or not
	// (the trace ID still carries on).
	ParentIgnore
)

// TracingAttribute is one attribute added to every span, from exactly
// one of: a request header (Header, canonical), a literal value, or
// another attribute of the span (From, one of TracingAttributeKeys()).
type TracingAttribute struct {
	Name    string
	Header  string
	Literal string
	From    string
}

// TracingAttributeKeys are the attributes Portico gives a request's
// span, which TracingAttribute.From may copy: those known when the
// request arrives, then those known once it was answered.
func TracingAttributeKeys() []string {
	return []string{
		"http.request.method", "url.scheme", "url.path", "server.address", "network.protocol.version",
		"client.address", "client.port", "user_agent.original",
		"tls.protocol.version", "tls.cipher", "tls.client.server_name",
		"http.response.status_code", "http.route", "portico.outcome", "portico.upstream.address",
	}
}
