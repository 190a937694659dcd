package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// HealthCheckType is what an active health check asks an endpoint.
type HealthCheckType string

const (
	// HealthCheckHTTP sends a request and expects one of some statuses.
	HealthCheckHTTP HealthCheckType = "HTTP"
	// HealthCheckTCP connects, and optionally sends bytes and expects
	// bytes back.
	HealthCheckTCP HealthCheckType = "TCP"
	// HealthCheckGRPC calls grpc.health.v1.Health/Check over HTTP/2
	// cleartext and expects SERVING.
	HealthCheckGRPC HealthCheckType = "GRPC"
)

// ActiveHealthCheck is a BackendTrafficPolicy's active health check: the
// data plane probes each endpoint of the backends it applies to every
// Interval (plus up to Jitter); an endpoint is out of the balancing after
// UnhealthyThreshold failed probes in a row, and back after
// HealthyThreshold passed ones. An endpoint the data plane has not yet
// probed is out until its first probe passes.
type ActiveHealthCheck struct {
	// ID is the same for the same settings in every Config: the data
	// plane keeps one prober per ID and endpoint address, whatever the
	// number of rules and policies that ask for it, and keeps its state
	// across Configs.
	ID   string
	Type HealthCheckType
	// Interval between the ends of two probes, Timeout of one probe,
	// Jitter the most that is added to each wait at random.
	Interval, Timeout, Jitter time.Duration
	// HealthyThreshold and UnhealthyThreshold are the probes in a row
	// that make an endpoint healthy or unhealthy.
	HealthyThreshold, UnhealthyThreshold int32
	// HTTP: the request's Path, Method and Host (the endpoint's address
	// when empty), and the statuses that pass.
	Path, Method, Host string
	ExpectedStatuses   []StatusRange
	// TCP: Send is written after the connection is made, and the probe
	// passes once Expect was read back (connecting is enough when both
	// are empty).
	Send, Expect []byte
	// GRPC: the service name asked about ("" is the whole server).
	GRPCService string
	// TLS, when set, makes the probes go over TLS with its SNI and
	// validation (gRPC over h2 by ALPN): the BackendTLSPolicy of the
	// backend probed (OverTLS), as its traffic, or the check's own tls.
	TLS *BackendTLS
	// Policy is the policy's "namespace/name", for logs and dumps.
	Policy string
}

// StatusRange is the HTTP statuses from Start to End, both included.
type StatusRange struct{ Start, End int32 }

// Expects reports whether status passes h's HTTP check.
func (h *ActiveHealthCheck) Expects(status int) bool {
	for _, r := range h.ExpectedStatuses {
		if int32(status) >= r.Start && int32(status) <= r.End {
			return true
		}
	}
	return false
}

// MakeID sets h.ID from every field that changes what a probe does, so
// that two policies asking for the same check share its probers.
func (h *ActiveHealthCheck) MakeID() {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|%s|%d|%d", h.Type, h.Interval, h.Timeout, h.Jitter, h.HealthyThreshold, h.UnhealthyThreshold)
	switch h.Type {
	case HealthCheckHTTP:
		fmt.Fprintf(&b, "|%s|%s|%s", h.Method, strconv.Quote(h.Path), strconv.Quote(h.Host))
		for _, r := range h.ExpectedStatuses {
			fmt.Fprintf(&b, "|%d-%d", r.Start, r.End)
		}
	case HealthCheckTCP:
		fmt.Fprintf(&b, "|%x|%x", h.Send, h.Expect)
	case HealthCheckGRPC:
		fmt.Fprintf(&b, "|%s", strconv.Quote(h.GRPCService))
	}
	if h.TLS != nil {
		fmt.Fprintf(&b, "|tls=%s", h.TLS.ID)
	}
	h.ID = b.String()
}

// HealthCheckTarget is a backend whose endpoints an active health check
// probes.
type HealthCheckTarget struct {
	Backend BackendKey
	Check   *ActiveHealthCheck
}

// OverTLS is h for a backend reached over TLS with b: a copy whose
// probes use b, with an ID of its own (probers of one endpoint over TLS
// and in clear are two).
func (h *ActiveHealthCheck) OverTLS(b *BackendTLS) *ActiveHealthCheck {
	c := *h
	c.TLS = b
	c.ID = h.ID + "|tls=" + b.ID
	return &c
}
