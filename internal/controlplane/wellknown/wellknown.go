// Package wellknown holds the names Portico's stages agree on: its controller
// name, the annotations and labels it reads and writes on objects of the
// cluster, and its field manager. It imports nothing of Portico, so that a
// source or an output can name them without importing translate.
package wellknown

import "strings"

// ControllerName is the controllerName of GatewayClasses Portico serves
// unless told otherwise. It is untyped so that it converts to
// gwv1.GatewayController without this package importing gateway-api.
const ControllerName = "portico.dev/gateway-controller"

// FieldManager is the field manager of every write Portico makes (status
// updates, server-side applies, Secrets).
const FieldManager = "portico"

// ACME opt-in and ownership markers (translate's acme.go says what
// qualifies a listener).
const (
	// ACMEAnnotation set to ACMEHTTP01 on a Gateway or ListenerSet asks for
	// certificates over ACME HTTP-01 for its own HTTPS listeners.
	ACMEAnnotation = "portico.dev/acme"
	ACMEHTTP01     = "http-01"
	// ACMEHostnameAnnotation on a managed Secret names the hostname its
	// certificate was ordered for.
	ACMEHostnameAnnotation = "portico.dev/acme-hostname"
)

// ManagedByLabel marks the objects Portico writes (ACME Secrets, storage
// Secrets and Leases, provisioned data planes): only those are ever
// overwritten or removed.
const (
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedByValue = "portico"
)

// CACertificateKey is the ConfigMap key of a CA bundle: translate reads it,
// and the cluster source keeps only that key of a ConfigMap in its cache.
const CACertificateKey = "ca.crt"

// MinorVersion turns "v1.6.3" into "v1.6": Gateway API CRDs of any patch
// release of the minor version Portico was built for are supported, which
// the cluster source checks and translate's SupportedVersion message says.
func MinorVersion(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1]
}
