//go:build tools

// Package echobin pins the conformance suite's echo backend (echo-basic:
// HTTP, HTTPS, h2c, gRPC and TCP echo) that hack/conformance.sh builds. From
// v1.7 the backend lives in its own module, which is not available here; the
// v1.6.3 build speaks the same wire contract (see conformance/images).
package echobin

import _ "sigs.k8s.io/gateway-api/conformance/echo-basic"
