//go:build tools

// Package h2specbin pins the version of h2spec, the HTTP/2 conformance
// tester that the tests of Portico run against its HTTP/2 server:
// hack/h2spec.sh builds it from this module, so its version and those of
// its dependencies come from go.mod and go.sum alone. h2spec's later
// releases are not served as Go modules (their go.mod names a path without
// the /v2 suffix), so v2.2.1+incompatible is the newest one to pin.
package h2specbin

import (
	_ "github.com/summerwind/h2spec/cmd/h2spec"
)
