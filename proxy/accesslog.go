package proxy

import (
	"net/http"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// logAccess writes the access log entry of one request, once it was
// answered: who asked (remote, and the SNI name on TLS ports), what
// (method, host, path without the query, which may carry secrets,
// protocol), the answer (status, body bytes, time from the request's headers
// to the end of the answer), where it went (the HTTPRoute and the endpoint
// of the last attempt, when there was one), its X-Request-Id when
// Options.RequestID is on, and the gRPC status of a gRPC call (grpcStatus,
// -1 for other requests). Every request has one, however it ended:
// outcome says how (see statusWriter.outcomeOf).
func logAccess(log *zap.Logger, r *http.Request, sw *statusWriter, outcome string, d time.Duration, grpcStatus int) {
	ce := log.Check(zapcore.InfoLevel, "request")
	if ce == nil {
		return
	}
	fields := make([]zap.Field, 0, 14)
	fields = append(fields,
		zap.String("remote", r.RemoteAddr),
		zap.String("method", r.Method),
		zap.String("host", r.Host),
		zap.String("path", r.URL.Path),
		zap.String("proto", r.Proto),
		zap.Int("status", sw.code()),
		zap.Int64("bytes", sw.bytes),
		zap.Duration("duration", d),
		zap.String("outcome", outcome),
	)
	if r.TLS != nil {
		fields = append(fields, zap.String("sni", r.TLS.ServerName))
	}
	if sw.route != "" {
		fields = append(fields, zap.String("route", sw.route))
	}
	if sw.upstream != "" {
		fields = append(fields, zap.String("upstream", sw.upstream))
	}
	if sw.requestID != "" {
		fields = append(fields, zap.String("request_id", sw.requestID))
	}
	if sw.auth != "" {
		fields = append(fields, zap.String("auth", sw.auth))
	}
	if grpcStatus >= 0 {
		fields = append(fields, zap.Int("grpc_status", grpcStatus))
	}
	ce.Write(fields...)
}
