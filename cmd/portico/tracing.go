package main

import (
	"context"
	"flag"

	"portico.dev/portico/internal/dataplane/tracing"
	"portico.dev/portico/internal/shared/buildinfo"
)

// tracingFlags are the flags of OpenTelemetry tracing (off unless
// --tracing-endpoint is set).
type tracingFlags struct {
	endpoint, protocol *string
	insecure           *bool
	ratio              *float64
	service            *string
}

func newTracingFlags(fs *flag.FlagSet) *tracingFlags {
	return &tracingFlags{
		endpoint: fs.String("tracing-endpoint", "", "export a span per request over OTLP to this host:port and pass W3C trace context to backends (default: off)"),
		protocol: fs.String("tracing-protocol", tracing.ProtocolGRPC, "OTLP transport: grpc (usually port 4317) or http (protobuf, usually port 4318)"),
		insecure: fs.Bool("tracing-insecure", false, "send spans in plain text instead of TLS"),
		ratio:    fs.Float64("tracing-sample-ratio", 0.01, "share (0 to 1) of the traces Portico starts that are recorded; requests with a traceparent follow its sampled flag"),
		service:  fs.String("tracing-service-name", "portico", "service.name of the spans"),
	}
}

func (f *tracingFlags) options() tracing.Options {
	return tracing.Options{
		Endpoint:    *f.endpoint,
		Protocol:    *f.protocol,
		Insecure:    *f.insecure,
		SampleRatio: *f.ratio,
		ServiceName: *f.service,
		Version:     buildinfo.Read().Version,
	}
}

// check reports a flag combination that cannot work, at parse time.
func (f *tracingFlags) check() error { return f.options().Check() }

// start starts the exporter; nil when tracing is off.
func (f *tracingFlags) start(ctx context.Context) (*tracing.Tracer, error) {
	return tracing.New(ctx, f.options())
}
