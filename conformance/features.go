// Package conformance runs the upstream Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance, the version in go.mod) against
// Portico in cluster mode; see hack/conformance.sh. This file is the one place
// that says what Portico claims.
package conformance

import (
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// Profiles are the conformance profiles Portico claims. A profile brings
// its core features (for GATEWAY-HTTP: Gateway, HTTPRoute, ReferenceGrant).
var Profiles = []suite.ConformanceProfileName{suite.GatewayHTTPConformanceProfileName}

// Claimed are the extended features Portico claims. Every test of a claimed
// feature runs, and a claimed feature has no failing test.
var Claimed = []features.FeatureName{
	features.SupportListenerSet,
	features.SupportGatewayHTTPListenerIsolation,
	features.SupportGatewayHTTPSListenerDetectMisdirectedRequests,
	features.SupportGatewayPort8080,
}

// NotClaimed gives, for every other extended feature of the claimed
// profiles, the reason Portico does not claim it. Its tests are reported as
// skipped.
var NotClaimed = map[features.FeatureName]string{
	features.SupportBackendTLSPolicy:              "Portico does not originate TLS to backends (no BackendTLSPolicy)",
	features.SupportBackendTLSPolicySANValidation: "Portico does not originate TLS to backends (no BackendTLSPolicy)",
	features.SupportGatewayBackendClientCertificate: "Portico does not originate TLS to backends, " +
		"so it presents no client certificate to them",
	features.SupportGatewayFrontendClientCertificateValidation:                 "Portico does not validate client certificates (no frontend TLS validation)",
	features.SupportGatewayFrontendClientCertificateValidationInsecureFallback: "Portico does not validate client certificates (no frontend TLS validation)",
	features.SupportGatewayInfrastructure: "Portico runs as one shared deployment; it provisions no per-Gateway " +
		"infrastructure to carry labels and annotations, and reads no parametersRef",
	features.SupportGatewayStaticAddresses: "Portico does not read spec.addresses: every Gateway reports the " +
		"addresses Portico is started with (--gateway-address, --gateway-service)",
	features.SupportGatewayAddressEmpty: "Portico does not read spec.addresses: every Gateway reports the " +
		"addresses Portico is started with (--gateway-address, --gateway-service)",

	features.SupportHTTPRoute303RedirectStatusCode:            sharedPorts,
	features.SupportHTTPRoute307RedirectStatusCode:            sharedPorts,
	features.SupportHTTPRoute308RedirectStatusCode:            sharedPorts,
	features.SupportHTTPRouteBackendProtocolH2C:               sharedPorts,
	features.SupportHTTPRouteBackendProtocolWebSocket:         sharedPorts,
	features.SupportHTTPRouteBackendRequestHeaderModification: sharedPorts,
	features.SupportHTTPRouteBackendTimeout:                   sharedPorts,
	features.SupportHTTPRouteCORS:                             sharedPorts,
	features.SupportHTTPRouteDestinationPortMatching:          sharedPorts,
	features.SupportHTTPRouteHostRewrite:                      sharedPorts,
	features.SupportHTTPRouteMethodMatching:                   sharedPorts,
	features.SupportHTTPRouteNamedRouteRule:                   sharedPorts,
	features.SupportHTTPRouteParentRefPort:                    sharedPorts,
	features.SupportHTTPRoutePathRedirect:                     sharedPorts,
	features.SupportHTTPRoutePathRewrite:                      sharedPorts,
	features.SupportHTTPRoutePortRedirect:                     sharedPorts,
	features.SupportHTTPRouteQueryParamMatching:               sharedPorts,
	features.SupportHTTPRouteRequestMirror:                    sharedPorts,
	features.SupportHTTPRouteRequestMultipleMirrors:           sharedPorts,
	features.SupportHTTPRouteRequestPercentageMirror:          sharedPorts,
	features.SupportHTTPRouteRequestTimeout:                   sharedPorts,
	features.SupportHTTPRouteResponseHeaderModification:       sharedPorts,
	features.SupportHTTPRouteSchemeRedirect:                   sharedPorts,
	features.SupportHTTPRouteRetry: "Portico does not retry: a backend's 5xx answer is returned as it is " +
		"(HTTPRouteRetry expects a retry on 500, 502, 503 and 504)",
	features.SupportHTTPRouteRetryBackendTimeout:  "Portico does not retry requests",
	features.SupportHTTPRouteRetryConnectionError: "Portico does not retry requests",
}

// sharedPorts is why HTTPRoute features that Portico implements are not
// claimed yet: their tests send traffic through the suite's base Gateways,
// several of which have a listener on the same port without a hostname.
// Portico serves every Gateway on one set of addresses, so only one of them
// gets that port (the others report HostnameConflict) until each Gateway has
// an address of its own.
const sharedPorts = "not claimed while Gateways share Portico's addresses: the tests use base Gateways " +
	"whose listeners clash on port 80 (HostnameConflict)"

// SkippedTests are tests of claimed features that do not run, by name, with
// the reason. Tests whose manifests need an image without a local binary
// are added to these at run time.
var SkippedTests = map[string]string{}
