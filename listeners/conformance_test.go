package listeners

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The cases below mirror the ListenerSet and Gateway tests of the Gateway
// API conformance suite (v1.7.0): each testdata file holds the objects of
// one test, and each case asserts what that test asserts about Gateway,
// ListenerSet and listener status. Route status is not this package's.

const infra = "gateway-conformance-infra"

// httpRouteKind are the kinds an HTTP or HTTPS listener supports by
// default; onlyHTTPRoute those of a listener that allows HTTPRoutes only.
var (
	httpRouteKind = []string{"gateway.networking.k8s.io/HTTPRoute", "gateway.networking.k8s.io/GRPCRoute"}
	onlyHTTPRoute = []string{"gateway.networking.k8s.io/HTTPRoute"}
)

func gateway(name string, wants ...want) expect {
	return expect{kind: "Gateway", ns: infra, name: name, wants: wants}
}

func gatewayListener(name string, listener string, kinds []string, wants ...want) expect {
	return expect{kind: "Gateway", ns: infra, name: name, listener: listener, kinds: kinds, wants: wants}
}

func listenerSet(ns, name string, wants ...want) expect {
	return expect{kind: "ListenerSet", ns: ns, name: name, wants: wants}
}

func setListener(ns, name, listener string, kinds []string, wants ...want) expect {
	return expect{kind: "ListenerSet", ns: ns, name: name, listener: listener, kinds: kinds, wants: wants}
}

var gatewayAccepted = want{"Accepted", metav1.ConditionTrue, ""}

type conformanceCase struct {
	file     string
	attached map[string]int32 // Gateway name -> attachedListenerSets
	expects  []expect
}

func runConformance(t *testing.T, cases []conformanceCase) {
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			m := mergeFixture(t, loadFixture(t, tc.file+".yaml"))
			for gw, n := range tc.attached {
				m.attached(t, infra, gw, n)
			}
			for _, e := range tc.expects {
				m.check(t, e)
			}
		})
	}
}

func TestListenerSetConformance(t *testing.T) {
	runConformance(t, []conformanceCase{
		{
			file:     "listenerset-allowed-namespace-none",
			attached: map[string]int32{"gateway-does-not-allow-listenerset": 0},
			expects: []expect{
				gateway("gateway-does-not-allow-listenerset", gatewayAccepted),
				listenerSet(infra, "listenerset-not-allowed", setWants("NotAllowed")...),
			},
		},
		{
			file:     "listenerset-default-not-allowed",
			attached: map[string]int32{"gateway-default-does-not-allow-listenerset": 0},
			expects: []expect{
				gateway("gateway-default-does-not-allow-listenerset", gatewayAccepted),
				listenerSet(infra, "listenerset-default-not-allowed", setWants("NotAllowed")...),
			},
		},
		{
			file:     "listenerset-allowed-namespace-same",
			attached: map[string]int32{"gateway-allows-listenerset-in-same-namespace": 1},
			expects: []expect{
				gateway("gateway-allows-listenerset-in-same-namespace", gatewayAccepted),
				listenerSet(infra, "listenerset-in-same-namespace",
					want{"Accepted", metav1.ConditionTrue, "Accepted"}, want{"Programmed", metav1.ConditionTrue, "Programmed"}),
				setListener(infra, "listenerset-in-same-namespace", "listenerset-in-same-namespace-listener", httpRouteKind, acceptedListener...),
				listenerSet("gateway-api-listenerset-not-allowed-ns", "listenerset-in-different-namespace", setWants("NotAllowed")...),
			},
		},
		{
			file:     "listenerset-allowed-namespace-selector",
			attached: map[string]int32{"gateway-allows-listenerset-in-selected-namespace": 1},
			expects: []expect{
				gateway("gateway-allows-listenerset-in-selected-namespace", gatewayAccepted),
				listenerSet("gateway-api-listenerset-selector-allowed-ns", "listenerset-in-selected-namespace",
					want{"Accepted", metav1.ConditionTrue, "Accepted"}, want{"Programmed", metav1.ConditionTrue, "Programmed"}),
				setListener("gateway-api-listenerset-selector-allowed-ns", "listenerset-in-selected-namespace",
					"listenerset-in-selected-namespace-listener", httpRouteKind, acceptedListener...),
				listenerSet("gateway-api-listenerset-selector-not-allowed-ns", "listenerset-not-in-selected-namespace", setWants("NotAllowed")...),
			},
		},
		{
			file:     "listenerset-allowed-routes-namespaces",
			attached: map[string]int32{"gateway-with-listener-sets-test-allowed-routes": 2},
			expects: []expect{
				gateway("gateway-with-listener-sets-test-allowed-routes", gatewayAccepted),
				gatewayListener("gateway-with-listener-sets-test-allowed-routes", "gateway-listener", httpRouteKind, acceptedListener...),
				listenerSet(infra, "listenerset-test-allowed-routes-namespaces", acceptedSet...),
				setListener(infra, "listenerset-test-allowed-routes-namespaces", "listener-set-listener-allowed-routes-all", httpRouteKind, acceptedListener...),
				setListener(infra, "listenerset-test-allowed-routes-namespaces", "listener-set-listener-allowed-routes-same", httpRouteKind, acceptedListener...),
				setListener(infra, "listenerset-test-allowed-routes-namespaces", "listener-set-listener-allowed-routes-selector", httpRouteKind, acceptedListener...),
				listenerSet("gateway-api-ls-cross-ns", "listenerset-test-allowed-routes-cross-ns", acceptedSet...),
				setListener("gateway-api-ls-cross-ns", "listenerset-test-allowed-routes-cross-ns",
					"listener-set-listener-allowed-routes-cross-ns-same", httpRouteKind, acceptedListener...),
			},
		},
		{
			file: "listenerset-allowed-routes-supported-kinds",
			expects: []expect{
				gateway("gateway-with-listener-sets-test-supported-route-kinds", gatewayAccepted),
				setListener(infra, "listenerset-test-allowed-routes-supported-kinds", "listener-set-listener-allowed-routes-tls-only", []string{},
					want{"ResolvedRefs", metav1.ConditionFalse, "InvalidRouteKinds"},
					want{"Accepted", metav1.ConditionTrue, "Accepted"}),
			},
		},
		{
			file:     "listenerset-dual-parentref-independence",
			attached: map[string]int32{"gateway-dual-parentref": 1},
			expects: []expect{
				gateway("gateway-dual-parentref", gatewayAccepted),
				setListener(infra, "ls-dual-parentref", "ls-dual-parentref-listener", httpRouteKind, acceptedListener...),
			},
		},
		{
			file:     "listenerset-gateway-parent-section-name-not-found",
			attached: map[string]int32{"gateway-section-name": 1},
			expects: []expect{
				gateway("gateway-section-name", gatewayAccepted),
				setListener(infra, "listenerset-section-name", "ls-only-listener", httpRouteKind, acceptedListener...),
			},
		},
		{
			file:     "listenerset-hostname-conflict",
			attached: map[string]int32{"gateway-with-listenerset-hostname-conflict": 2},
			expects: []expect{
				gateway("gateway-with-listenerset-hostname-conflict", gatewayAccepted),
				gatewayListener("gateway-with-listenerset-hostname-conflict", "gateway-listener", nil, acceptedListener...),
				gatewayListener("gateway-with-listenerset-hostname-conflict", "hostname-conflict-with-gateway-listener", nil, acceptedListener...),

				listenerSet(infra, "listenerset-with-hostname-conflict-with-gateway-1", acceptedSet...),
				setListener(infra, "listenerset-with-hostname-conflict-with-gateway-1", "listener-set-1-listener", nil, acceptedListener...),
				setListener(infra, "listenerset-with-hostname-conflict-with-gateway-1", "hostname-conflict-with-gateway-listener", nil, hostnameConflicted...),
				setListener(infra, "listenerset-with-hostname-conflict-with-gateway-1", "hostname-conflict-with-listener-set-listener", nil, acceptedListener...),

				listenerSet(infra, "listenerset-with-hostname-conflict-with-gateway-2", setWants("ListenersNotValid")...),
				setListener(infra, "listenerset-with-hostname-conflict-with-gateway-2", "hostname-conflict-with-gateway-listener", nil, hostnameConflicted...),

				listenerSet(infra, "listenerset-with-hostname-conflict-with-listener-set-1", acceptedSet...),
				setListener(infra, "listenerset-with-hostname-conflict-with-listener-set-1", "listener-set-2-listener", nil, acceptedListener...),
				setListener(infra, "listenerset-with-hostname-conflict-with-listener-set-1", "hostname-conflict-with-listener-set-listener", nil, hostnameConflicted...),

				listenerSet(infra, "listenerset-with-hostname-conflict-with-listener-set-2", setWants("ListenersNotValid")...),
				setListener(infra, "listenerset-with-hostname-conflict-with-listener-set-2", "hostname-conflict-with-listener-set-listener", nil, hostnameConflicted...),
			},
		},
		{
			file:     "listenerset-http-routing",
			attached: map[string]int32{"gateway-with-listener-sets-http-routing": 2},
			expects: []expect{
				gateway("gateway-with-listener-sets-http-routing", gatewayAccepted),
				gatewayListener("gateway-with-listener-sets-http-routing", "gateway-listener-1", httpRouteKind, acceptedListener...),
				gatewayListener("gateway-with-listener-sets-http-routing", "gateway-listener-2", httpRouteKind, acceptedListener...),
				setListener(infra, "listener-set-http-routing-1", "listener-set-http-routing-1-listener-1", httpRouteKind, acceptedListener...),
				setListener(infra, "listener-set-http-routing-1", "listener-set-http-routing-1-listener-2", httpRouteKind, acceptedListener...),
				setListener(infra, "listener-set-http-routing-2", "listener-set-http-routing-2-listener-1", httpRouteKind, acceptedListener...),
				setListener(infra, "listener-set-http-routing-2", "listener-set-http-routing-2-listener-2", httpRouteKind, acceptedListener...),
			},
		},
		{
			file:     "listenerset-protocol-conflict",
			attached: map[string]int32{"gateway-with-listenerset-protocol-conflict": 2},
			expects: []expect{
				gateway("gateway-with-listenerset-protocol-conflict", gatewayAccepted),
				gatewayListener("gateway-with-listenerset-protocol-conflict", "gateway-listener", nil, acceptedListener...),
				gatewayListener("gateway-with-listenerset-protocol-conflict", "protocol-conflict-with-gateway-listener", nil, acceptedListener...),

				listenerSet(infra, "listenerset-with-protocol-conflict-with-gateway-1", acceptedSet...),
				setListener(infra, "listenerset-with-protocol-conflict-with-gateway-1", "listener-set-1-listener", nil, acceptedListener...),
				setListener(infra, "listenerset-with-protocol-conflict-with-gateway-1", "protocol-conflict-with-gateway-listener", nil, protocolConflicted...),
				setListener(infra, "listenerset-with-protocol-conflict-with-gateway-1", "protocol-conflict-with-listener-set-listener", nil, acceptedListener...),

				listenerSet(infra, "listenerset-with-protocol-conflict-with-gateway-2", setWants("ListenersNotValid")...),
				setListener(infra, "listenerset-with-protocol-conflict-with-gateway-2", "protocol-conflict-with-gateway-listener", nil, protocolConflicted...),

				listenerSet(infra, "listenerset-with-protocol-conflict-with-listener-set-1", acceptedSet...),
				setListener(infra, "listenerset-with-protocol-conflict-with-listener-set-1", "listener-set-2-listener", nil, acceptedListener...),
				setListener(infra, "listenerset-with-protocol-conflict-with-listener-set-1", "protocol-conflict-with-listener-set-listener", nil, protocolConflicted...),

				listenerSet(infra, "listenerset-with-protocol-conflict-with-listener-set-2", setWants("ListenersNotValid")...),
				setListener(infra, "listenerset-with-protocol-conflict-with-listener-set-2", "protocol-conflict-with-listener-set-listener", nil, protocolConflicted...),
			},
		},
		{
			file: "listenerset-reference-grant",
			// The upstream test leaves the count open; with one of the two
			// ListenerSets lacking its grant, Portico attaches one.
			attached: map[string]int32{"gateway-with-listener-sets-test-reference-grant": 1},
			expects: []expect{
				gateway("gateway-with-listener-sets-test-reference-grant", gatewayAccepted),
				gatewayListener("gateway-with-listener-sets-test-reference-grant", "gateway-listener", httpRouteKind, acceptedListener...),
				listenerSet(infra, "listenerset-with-reference-grant", want{"Accepted", metav1.ConditionTrue, ""}, want{"Programmed", metav1.ConditionTrue, ""}),
				setListener(infra, "listenerset-with-reference-grant", "listenerset-with-reference-grant-listener", httpRouteKind,
					want{"ResolvedRefs", metav1.ConditionTrue, ""}),
				listenerSet("gateway-api-listener-sets-test-reference-grant-ns", "listenerset-without-reference-grant", setWants("ListenersNotValid")...),
				setListener("gateway-api-listener-sets-test-reference-grant-ns", "listenerset-without-reference-grant",
					"listenerset-without-reference-grant-listener", httpRouteKind, want{"ResolvedRefs", metav1.ConditionFalse, "RefNotPermitted"}),
			},
		},
		{
			file:     "listenerset-route-status-scoped-to-parentref",
			attached: map[string]int32{"gateway-parentref": 1},
			expects: []expect{
				gateway("gateway-parentref", gatewayAccepted),
				setListener(infra, "listenerset-parentref", "listenerset-parentref-listener", httpRouteKind, acceptedListener...),
			},
		},
	})
}

func TestGatewayConformance(t *testing.T) {
	invalidCert := want{"ResolvedRefs", metav1.ConditionFalse, "InvalidCertificateRef"}
	refNotPermitted := want{"ResolvedRefs", metav1.ConditionFalse, "RefNotPermitted"}
	runConformance(t, []conformanceCase{
		{
			file: "gateway-invalid-tls-configuration",
			expects: []expect{
				gatewayListener("gateway-certificate-nonexistent-secret", "https", httpRouteKind, invalidCert),
				gatewayListener("gateway-certificate-unsupported-group", "https", httpRouteKind, invalidCert),
				gatewayListener("gateway-certificate-unsupported-kind", "https", httpRouteKind, invalidCert),
				gatewayListener("gateway-certificate-malformed-secret", "https", httpRouteKind, invalidCert),
			},
		},
		{
			file: "gateway-invalid-route-kind",
			expects: []expect{
				gatewayListener("gateway-only-invalid-route-kind", "http", []string{},
					want{"ResolvedRefs", metav1.ConditionFalse, "InvalidRouteKinds"}),
				gatewayListener("gateway-supported-and-invalid-route-kind", "http", onlyHTTPRoute,
					want{"ResolvedRefs", metav1.ConditionFalse, "InvalidRouteKinds"}),
			},
		},
		{
			file: "gateway-invalid-listeners-unsupported-protocol",
			expects: []expect{
				gateway("gateway-only-unsupported-protocols", want{"Accepted", metav1.ConditionFalse, "ListenersNotValid"}),
				gatewayListener("gateway-only-unsupported-protocols", "invalid", []string{},
					want{"Accepted", metav1.ConditionFalse, "UnsupportedProtocol"}),
				// Not excluded from the suite's readiness checks: must be
				// Accepted and Programmed.
				gateway("gateway-supported-and-unsupported-protocols",
					want{"Accepted", metav1.ConditionTrue, "ListenersNotValid"}, want{"Programmed", metav1.ConditionTrue, ""}),
				gatewayListener("gateway-supported-and-unsupported-protocols", "http", httpRouteKind,
					want{"Accepted", metav1.ConditionTrue, "Accepted"}),
				gatewayListener("gateway-supported-and-unsupported-protocols", "invalid", []string{},
					want{"Accepted", metav1.ConditionFalse, "UnsupportedProtocol"}),
			},
		},
		{
			// gateway-secret-missing-reference-grant and
			// gateway-secret-invalid-reference-grant. Neither Gateway is
			// excluded from the readiness checks, so both stay Accepted and
			// Programmed.
			file: "gateway-secret-refs-not-permitted",
			expects: []expect{
				gateway("gateway-secret-missing-reference-grant", gatewayAccepted, want{"Programmed", metav1.ConditionTrue, ""}),
				gatewayListener("gateway-secret-missing-reference-grant", "https", httpRouteKind, refNotPermitted),
				gateway("gateway-secret-invalid-reference-grant", gatewayAccepted, want{"Programmed", metav1.ConditionTrue, ""}),
				gatewayListener("gateway-secret-invalid-reference-grant", "https", httpRouteKind, refNotPermitted),
			},
		},
		{
			file: "gateway-secret-reference-grant-all-in-namespace",
			expects: []expect{
				gatewayListener("gateway-secret-reference-grant-all-in-namespace", "https", httpRouteKind,
					want{"Programmed", metav1.ConditionTrue, "Programmed"}, want{"ResolvedRefs", metav1.ConditionTrue, ""}),
			},
		},
		{
			file: "gateway-secret-reference-grant-specific",
			expects: []expect{
				gatewayListener("gateway-secret-reference-grant-specific", "https", httpRouteKind,
					want{"Programmed", metav1.ConditionTrue, "Programmed"}, want{"ResolvedRefs", metav1.ConditionTrue, ""}),
			},
		},
		{
			file: "gateway-with-attached-routes",
			expects: []expect{
				gatewayListener("gateway-with-one-attached-route", "http", onlyHTTPRoute,
					want{"Accepted", metav1.ConditionTrue, ""}, want{"ResolvedRefs", metav1.ConditionTrue, ""}),
				gatewayListener("unresolved-gateway-with-one-attached-unresolved-route", "tls", onlyHTTPRoute,
					want{"Programmed", metav1.ConditionFalse, ""}, want{"ResolvedRefs", metav1.ConditionFalse, ""}),
			},
		},
		{
			file: "gateway-http-listener-isolation",
			expects: []expect{
				gateway("http-listener-isolation", want{"Accepted", metav1.ConditionTrue, "Accepted"}, want{"Programmed", metav1.ConditionTrue, ""}),
				gatewayListener("http-listener-isolation", "empty-hostname", httpRouteKind, acceptedListener...),
				gatewayListener("http-listener-isolation", "wildcard-example-com", httpRouteKind, acceptedListener...),
				gatewayListener("http-listener-isolation", "wildcard-foo-example-com", httpRouteKind, acceptedListener...),
				gatewayListener("http-listener-isolation", "abc-foo-example-com", httpRouteKind, acceptedListener...),
			},
		},
	})
}
