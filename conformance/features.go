// Package conformance runs the upstream Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance, the version in go.mod) against
// Portico in cluster mode; see hack/conformance.sh. This file is the one place
// that says what Portico claims.
package conformance

import (
	"maps"
	"slices"

	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// Profiles are the conformance profiles Portico claims. A profile brings
// its core features (for GATEWAY-HTTP: Gateway, HTTPRoute, ReferenceGrant;
// for GATEWAY-GRPC: Gateway, GRPCRoute, ReferenceGrant; for GATEWAY-TLS:
// Gateway, TLSRoute, ReferenceGrant; for GATEWAY-TCP: Gateway, TCPRoute,
// ReferenceGrant, TCPRoute v1 being in the standard channel since v1.7;
// for GATEWAY-UDP: Gateway, UDPRoute, ReferenceGrant, UDPRoute v1 being
// standard since v1.7 too).
var Profiles = []suite.ConformanceProfileName{
	suite.GatewayHTTPConformanceProfileName,
	suite.GatewayGRPCConformanceProfileName,
	suite.GatewayTLSConformanceProfileName,
	suite.GatewayTCPConformanceProfileName,
	suite.GatewayUDPConformanceProfileName,
}

// Claimed are the extended features Portico claims. Every test of a claimed
// feature runs, and a claimed feature has no failing test.
var Claimed = []features.FeatureName{
	features.SupportListenerSet,
	features.SupportBackendTLSPolicy,
	features.SupportBackendTLSPolicySANValidation,
	features.SupportGatewayBackendClientCertificate,
	features.SupportGatewayFrontendClientCertificateValidation,
	features.SupportGatewayFrontendClientCertificateValidationInsecureFallback,
	features.SupportGatewayHTTPListenerIsolation,
	features.SupportGatewayHTTPSListenerDetectMisdirectedRequests,
	features.SupportGatewayPort8080,
	features.SupportGatewayStaticAddresses,
	features.SupportGatewayAddressEmpty,
	features.SupportGatewayRouteHostnameIntersectionPrecedence,
	// CA certificates of BackendTLSPolicies and client certificate
	// validation from certificates.k8s.io ClusterTrustBundles: the
	// standard channel's schemas admit the reference too.
	features.SupportClusterTrustBundle,

	features.SupportHTTPRoute303RedirectStatusCode,
	features.SupportHTTPRoute307RedirectStatusCode,
	features.SupportHTTPRoute308RedirectStatusCode,
	features.SupportHTTPRouteBackendProtocolH2C,
	features.SupportHTTPRouteBackendProtocolWebSocket,
	features.SupportHTTPRouteBackendRequestHeaderModification,
	features.SupportHTTPRouteBackendTimeout,
	features.SupportHTTPRouteBackendURLRewrite,
	features.SupportHTTPRouteCORS,
	features.SupportHTTPRouteDestinationPortMatching,
	features.SupportHTTPRouteHostRewrite,
	features.SupportHTTPRouteMethodMatching,
	features.SupportHTTPRouteNamedRouteRule,
	features.SupportHTTPRouteParentRefPort,
	features.SupportHTTPRoutePathRedirect,
	features.SupportHTTPRoutePathRewrite,
	features.SupportHTTPRoutePortRedirect,
	features.SupportHTTPRouteQueryParamMatching,
	features.SupportHTTPRouteRequestMirror,
	features.SupportHTTPRouteRequestMultipleMirrors,
	features.SupportHTTPRouteRequestPercentageMirror,
	features.SupportHTTPRouteRequestTimeout,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRouteRetryCodes,
	features.SupportHTTPRouteRetryConnectionError,
	features.SupportHTTPRouteSchemeRedirect,

	features.SupportGRPCRouteNamedRouteRule,
	features.SupportGRPCRouteRequestHeaderModifier,
	features.SupportTLSRouteModeTerminate,
	features.SupportTLSRouteModeMixed,
	// GATEWAY-TCP and GATEWAY-UDP list their core feature among their
	// extended ones too.
	features.SupportTCPRoute,
	features.SupportUDPRoute,
}

// NotClaimed gives, for every other extended feature of the claimed
// profiles, the reason Portico does not claim it. Its tests are reported as
// skipped.
var NotClaimed = map[features.FeatureName]string{
	features.SupportGatewayInfrastructure: "in shared mode Portico runs as one deployment and provisions no per-Gateway " +
		"infrastructure to carry labels and annotations; claimed in the per-Gateway run",
	features.SupportGatewayListenerFilters: "Listener.filters is a field of the experimental CRDs only; claimed in the " +
		"experimental run (ClaimedExperimental)",
	features.SupportGatewayAddressRoutability: "spec.addresses[].routability is a field of the experimental channel's " +
		"Gateway CRD only; claimed in the experimental run",
	features.SupportGatewayAddressRoutabilityCluster: "spec.addresses[].routability is a field of the experimental channel's " +
		"Gateway CRD only; claimed in the experimental run",
}

// ClaimedExperimental are claimed on top of Claimed in a run with the
// experimental-channel CRDs (hack/conformance.sh --channel experimental),
// the only ones that have their fields: Gateway address routability
// (GEP-5093), with Cluster, and Listener.filters (GatewayListenerFilters;
// v1.7.0's suite has no test of it yet: its contract is tested on real
// sockets in proxy and on statuses in the translate golden cases).
var ClaimedExperimental = []features.FeatureName{
	features.SupportGatewayAddressRoutability,
	features.SupportGatewayAddressRoutabilityCluster,
	features.SupportGatewayListenerFilters,
}

// claims returns what a run with the CRDs of channel ("standard" or
// "experimental") claims, and the reasons for the other extended features
// of the claimed profiles.
func claims(channel string, perGateway bool) ([]features.FeatureName, map[features.FeatureName]string) {
	claimed, notClaimed := slices.Clone(Claimed), maps.Clone(NotClaimed)
	var more []features.FeatureName
	if channel == "experimental" {
		more = append(more, ClaimedExperimental...)
	}
	if perGateway {
		more = append(more, ClaimedPerGateway...)
	}
	for _, f := range more {
		claimed = append(claimed, f)
		delete(notClaimed, f)
	}
	return claimed, notClaimed
}

// ClaimedPerGateway are claimed in the run where every Gateway gets a data
// plane of its own (a GatewayClass whose PorticoParameters say PerGateway).
var ClaimedPerGateway = []features.FeatureName{features.SupportGatewayInfrastructure}

// SkippedTests are tests of claimed features that do not run, by name, with
// the reason. Tests whose manifests need an image without a local binary
// are added to these at run time.
var SkippedTests = map[string]string{}
