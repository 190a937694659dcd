//go:build tools

package conformance

// The backends of the conformance tests are built from this module, so their
// version is the suite's own.
import _ "sigs.k8s.io/gateway-api/conformance/echo-basic"
