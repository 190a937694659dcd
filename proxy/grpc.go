package proxy

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// gRPC status codes Portico reports or answers with
// (https://grpc.github.io/grpc/core/md_doc_statuscodes.html).
const (
	grpcCanceled         = 1
	grpcUnknown          = 2
	grpcDeadlineExceeded = 4
	grpcPermissionDenied = 7
	grpcUnimplemented    = 12
	grpcInternal         = 13
	grpcUnavailable      = 14
	grpcUnauthenticated  = 16
)

// isGRPC reports whether r is a gRPC call: its content type is
// application/grpc, alone or with a "+codec" or parameters.
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// writeErrorFor answers r with code, as writeError does, except that a
// gRPC call gets the gRPC form of it: HTTP 200 with only headers, carrying
// the gRPC status a client library would read into the HTTP code (a gRPC
// client turns an HTTP error into UNKNOWN or INTERNAL, losing that a
// missing backend is UNAVAILABLE, as GRPCRoute requires).
func writeErrorFor(w http.ResponseWriter, r *http.Request, code int) {
	if !isGRPC(r) {
		writeError(w, code)
		return
	}
	writeGRPCError(w, grpcFromHTTP(code), http.StatusText(code))
}

// writeGRPCError sends a Trailers-Only gRPC answer: the status in the
// response headers and no body.
func writeGRPCError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", strconv.Itoa(status))
	h.Set("Grpc-Message", url.PathEscape(msg))
	w.WriteHeader(http.StatusOK)
}

// grpcFromHTTP is the gRPC status of an HTTP answer to a gRPC call that
// carries none, as gRPC's HTTP mapping has it; the errors Portico itself
// answers with are UNAVAILABLE (no backend, invalid backend, failed
// backend request) or DEADLINE_EXCEEDED (timeout).
func grpcFromHTTP(code int) int {
	switch code {
	case http.StatusOK:
		return grpcUnknown // a gRPC answer without a status is broken
	case statusClientClosed:
		return grpcCanceled
	case http.StatusBadRequest, http.StatusRequestHeaderFieldsTooLarge:
		return grpcInternal
	case http.StatusUnauthorized:
		return grpcUnauthenticated
	case http.StatusForbidden:
		return grpcPermissionDenied
	case http.StatusNotFound:
		return grpcUnimplemented
	case http.StatusGatewayTimeout:
		return grpcDeadlineExceeded
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusMisdirectedRequest:
		return grpcUnavailable
	}
	return grpcUnknown
}

// grpcStatusOf is the gRPC status of the answer sw gave to the gRPC call
// r: the backend's grpc-status, from the trailers or, for a Trailers-Only
// answer, the headers; otherwise what its HTTP status maps to.
func grpcStatusOf(sw *statusWriter) int {
	h := sw.Header()
	v := h.Get("Grpc-Status")
	if v == "" {
		// A trailer the backend did not announce is set under this
		// prefix once the body is copied.
		v = h.Get(http.TrailerPrefix + "Grpc-Status")
	}
	if n, err := strconv.Atoi(v); err == nil && n >= 0 && n <= 16 {
		return n
	}
	return grpcFromHTTP(sw.code())
}
