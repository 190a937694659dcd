package kube

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestHTTPRouteConformance runs the HTTPRoute tests of the Gateway API
// conformance suite (v1.7.0, GATEWAY-HTTP profile) against standalone
// Portico: each subtest loads the test's manifest, adapted to loopback
// ports, sends the same requests through real sockets to echo pods and
// asserts what the suite asserts. Route and Gateway conditions come from
// Translate on the same files.
func TestHTTPRouteConformance(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"HTTPRoute303Redirect", conf303Redirect},
		{"HTTPRoute307Redirect", conf307Redirect},
		{"HTTPRoute308Redirect", conf308Redirect},
		{"HTTPRouteBackendProtocolH2C", confBackendProtocolH2C},
		{"HTTPRouteBackendProtocolWebSocket", confBackendProtocolWebSocket},
		{"HTTPRouteCORS", confCORS},
		{"HTTPRouteCrossNamespace", confCrossNamespace},
		{"HTTPRouteDisallowedKind", confDisallowedKind},
		{"HTTPRouteExactPathMatching", confExactPathMatching},
		{"HTTPRouteHeaderMatching", confHeaderMatching},
		{"HTTPRouteHostnameIntersection", confHostnameIntersection},
		{"HTTPRouteHTTPSListener", confHTTPSListener},
		{"HTTPRouteHTTPSListenerDetectMisdirectedRequests", confHTTPSListenerDetectMisdirectedRequests},
		{"HTTPRouteInvalidBackendRefUnknownKind", confInvalidBackendRefUnknownKind},
		{"HTTPRouteInvalidCrossNamespaceBackendRef", confInvalidCrossNamespaceBackendRef},
		{"HTTPRouteInvalidCrossNamespaceParentRef", confInvalidCrossNamespaceParentRef},
		{"HTTPRouteInvalidNonExistentBackendRef", confInvalidNonExistentBackendRef},
		{"HTTPRouteInvalidParentRefNotMatchingListenerPort", confInvalidParentRefNotMatchingListenerPort},
		{"HTTPRouteInvalidParentRefNotMatchingSectionName", confInvalidParentRefNotMatchingSectionName},
		{"HTTPRouteInvalidParentRefSectionNameNotMatchingPort", confInvalidParentRefSectionNameNotMatchingPort},
		{"HTTPRouteInvalidReferenceGrant", confInvalidReferenceGrant},
		{"HTTPRouteListenerHostnameMatching", confListenerHostnameMatching},
		{"HTTPRouteListenerPortMatching", confListenerPortMatching},
		{"HTTPRouteMatchingAcrossRoutes", confMatchingAcrossRoutes},
		{"HTTPRouteMatching", confMatching},
		{"HTTPRouteMethodMatching", confMethodMatching},
		{"HTTPRouteMultipleGateways", confMultipleGateways},
		{"HTTPRouteNamedRule", confNamedRule},
		{"HTTPRouteObservedGenerationBump", confObservedGenerationBump},
		{"HTTPRouteNoBackendRefs", confNoBackendRefs},
		{"HTTPRoutePartiallyInvalidViaInvalidReferenceGrant", confPartiallyInvalidViaInvalidReferenceGrant},
		{"HTTPRoutePathMatchOrder", confPathMatchOrder},
		{"HTTPRouteQueryParamMatching", confQueryParamMatching},
		{"HTTPRouteRedirectHostAndStatus", confRedirectHostAndStatus},
		{"HTTPRouteRedirectPath", confRedirectPath},
		{"HTTPRouteRedirectPortAndScheme", confRedirectPortAndScheme},
		{"HTTPRouteRedirectPort", confRedirectPort},
		{"HTTPRouteRedirectScheme", confRedirectScheme},
		{"HTTPRouteReferenceGrant", confReferenceGrant},
		{"HTTPRouteRequestHeaderModifierBackendWeights", confRequestHeaderModifierBackendWeights},
		{"HTTPRouteBackendRequestHeaderModifier", confBackendRequestHeaderModifier},
		{"HTTPRouteRequestHeaderModifier", confRequestHeaderModifier},
		{"HTTPRouteRequestMirror", confRequestMirror},
		{"HTTPRouteRequestMultipleMirrors", confRequestMultipleMirrors},
		{"HTTPRouteRequestPercentageMirror", confRequestPercentageMirror},
		{"HTTPRouteResponseHeaderModifier", confResponseHeaderModifier},
		{"HTTPRouteRetry", confRetry},
		{"HTTPRouteRewriteHost", confRewriteHost},
		{"HTTPRouteRewritePath", confRewritePath},
		{"HTTPRouteServiceTypes", confServiceTypes},
		{"HTTPRouteSimpleSameNamespace", confSimpleSameNamespace},
		{"HTTPRouteTimeoutBackendRequest", confTimeoutBackendRequest},
		{"HTTPRouteTimeoutRequest", confTimeoutRequest},
		{"HTTPRouteWeight", confWeight},
	} {
		t.Run(tc.name, tc.run)
	}
}

const (
	v1 = "infra-backend-v1"
	v2 = "infra-backend-v2"
	v3 = "infra-backend-v3"
)

// to expects the request to reach a pod of backend in the infra namespace.
func to(path, backend string) expect {
	return expect{Req: request{Path: path}, Backend: backend, Namespace: infraNS}
}

// withHeaders expects a request with headers to reach backend.
func withHeaders(path string, headers map[string]string, backend string) expect {
	return expect{Req: request{Path: path, Headers: headers}, Backend: backend, Namespace: infraNS}
}

// answers expects the request to get status code without reaching a backend
// (as far as the checks for that code go).
func answers(path string, code int) expect {
	return expect{Req: request{Path: path}, Status: []int{code}}
}

func hostTo(host, path, backend string) expect {
	return expect{Req: request{Host: host, Path: path}, Backend: backend, Namespace: infraNS}
}

func hostAnswers(host, path string, code int) expect {
	return expect{Req: request{Host: host, Path: path}, Status: []int{code}}
}

func h(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// cond asserts one condition of a route (in infra unless "ns/name") for a
// Gateway in infra.
func (e *confEnv) cond(t *testing.T, route, gateway, typ string, status metav1.ConditionStatus, reason gwv1.RouteConditionReason) {
	t.Helper()
	ns, name, ok := strings.Cut(route, "/")
	if !ok {
		ns, name = infraNS, route
	}
	res, st := e.statuses(t)
	mustHaveCondition(t, res, st, types.NamespacedName{Namespace: ns, Name: name}, infra(gateway), typ, status, string(reason))
}

// mustNotAttach asserts what the suite checks for a route that cannot
// attach: one parent status, not accepted for reason, references resolved,
// and no route counted on the Gateway.
func (e *confEnv) mustNotAttach(t *testing.T, route, gateway string, reason gwv1.RouteConditionReason) {
	t.Helper()
	e.cond(t, route, gateway, string(gwv1.RouteConditionResolvedRefs), metav1.ConditionTrue, gwv1.RouteReasonResolvedRefs)
	e.cond(t, route, gateway, string(gwv1.RouteConditionAccepted), metav1.ConditionFalse, reason)
	_, st := e.statuses(t)
	ns, name, ok := strings.Cut(route, "/")
	if !ok {
		ns, name = infraNS, route
	}
	if n := len(st.HTTPRoutes.At(types.NamespacedName{Namespace: ns, Name: name})); n != 1 {
		t.Errorf("HTTPRoute %s has %d parent statuses, want 1", route, n)
	}
	for l, n := range attachedRoutes(st, gateway) {
		if n != 0 {
			t.Errorf("Gateway %s listener %s counts %d attached routes, want 0", gateway, l, n)
		}
	}
}

func confSimpleSameNamespace(t *testing.T) {
	e := startConformance(t, "httproute-simple-same-namespace")
	e.mustBeAccepted(t, "same-namespace", "gateway-conformance-infra-test")
	e.client("same-namespace").check(t, to("/", v1))
}

func confCrossNamespace(t *testing.T) {
	e := startConformance(t, "httproute-cross-namespace")
	e.mustBeAccepted(t, "backend-namespaces", webNS+"/cross-namespace")
	e.client("backend-namespaces").check(t, expect{Req: request{Path: "/"}, Backend: "web-backend", Namespace: webNS})
}

func confExactPathMatching(t *testing.T) {
	e := startConformance(t, "httproute-exact-path-matching")
	e.mustBeAccepted(t, "same-namespace", "exact-matching")
	runCases(t, e.client("same-namespace"), []expect{
		to("/one", v1),
		to("/two", v2),
		answers("/", 404),
		answers("/one/example", 404),
		answers("/two/", 404),
		answers("/Two", 404),
	})
}

func confHeaderMatching(t *testing.T) {
	e := startConformance(t, "httproute-header-matching")
	e.mustBeAccepted(t, "same-namespace", "header-matching")
	runCases(t, e.client("same-namespace"), []expect{
		withHeaders("/", h("Version", "one"), v1),
		withHeaders("/", h("Version", "two"), v2),
		withHeaders("/", h("Version", "two", "Color", "orange"), v1),
		withHeaders("/", h("Version", "two", "Color", "blue"), v2),
		{Req: request{Path: "/", Headers: h("Color", "orange")}, Status: []int{404}},
		{Req: request{Path: "/", Headers: h("Some-Other-Header", "one")}, Status: []int{404}},
		withHeaders("/", h("Color", "blue"), v1),
		withHeaders("/", h("Color", "green"), v1),
		withHeaders("/", h("Color", "red"), v2),
		withHeaders("/", h("Color", "yellow"), v2),
		{Req: request{Path: "/", Headers: h("Color", "purple")}, Status: []int{404}},
	})
}

func confHostnameIntersection(t *testing.T) {
	e := startConformance(t, "httproute-hostname-intersection")
	const gw = "httproute-hostname-intersection"
	t.Run("HTTPRoutes that do intersect with listener hostnames", func(t *testing.T) {
		e.mustBeAccepted(t, gw,
			"specific-host-matches-listener-specific-host",
			"specific-host-matches-listener-wildcard-host",
			"wildcard-host-matches-listener-specific-host",
			"wildcard-host-matches-listener-wildcard-host")
		runCases(t, e.client(gw), []expect{
			hostTo("very.specific.com", "/s1", v1),
			// The port in the Host header plays no part in matching.
			hostTo("very.specific.com:1234", "/s1", v1),
			hostAnswers("non.matching.com", "/s1", 404),
			hostAnswers("foo.nonmatchingwildcard.io", "/s1", 404),
			hostAnswers("foo.wildcard.io", "/s1", 404),
			hostAnswers("very.specific.com", "/non-matching-prefix", 404),

			hostTo("foo.wildcard.io", "/s2", v2),
			hostTo("bar.wildcard.io", "/s2", v2),
			hostTo("foo.bar.wildcard.io", "/s2", v2),
			hostAnswers("non.matching.com", "/s2", 404),
			hostAnswers("wildcard.io", "/s2", 404),
			hostAnswers("very.specific.com", "/s2", 404),
			hostAnswers("foo.wildcard.io", "/non-matching-prefix", 404),

			hostTo("very.specific.com", "/s3", v3),
			hostAnswers("non.matching.com", "/s3", 404),
			hostAnswers("foo.specific.com", "/s3", 404),
			hostAnswers("foo.wildcard.io", "/s3", 404),
			hostAnswers("very.specific.com", "/non-matching-prefix", 404),

			hostTo("foo.anotherwildcard.io", "/s4", v1),
			hostTo("bar.anotherwildcard.io", "/s4", v1),
			hostTo("foo.bar.anotherwildcard.io", "/s4", v1),
			hostAnswers("anotherwildcard.io", "/s4", 404),
			hostAnswers("foo.wildcard.io", "/s4", 404),
			hostAnswers("very.specific.com", "/s4", 404),
			hostAnswers("foo.anotherwildcard.io", "/non-matching-prefix", 404),
		})
	})
	t.Run("HTTPRoutes that do not intersect with listener hostnames", func(t *testing.T) {
		e.cond(t, "no-intersecting-hosts", gw, string(gwv1.RouteConditionAccepted), metav1.ConditionFalse, gwv1.RouteReasonNoMatchingListenerHostname)
		runCases(t, e.client(gw), []expect{
			hostAnswers("specific.but.wrong.com", "/s5", 404),
			hostAnswers("wildcard.io", "/s5", 404),
		})
	})
	t.Run("HTTPRoutes have to be counted in AttachedRoutes only if they are Accepted", func(t *testing.T) {
		_, st := e.statuses(t)
		got := attachedRoutes(st, gw)
		want := map[string]int32{"listener-1": 2, "listener-2": 1, "listener-3": 1}
		for l, n := range want {
			if got[l] != n {
				t.Errorf("listener %s: %d attached routes, want %d", l, got[l], n)
			}
		}
	})
	t.Run("HTTPRoutes intersects with an unspecified hostname listener", func(t *testing.T) {
		const all = "httproute-hostname-intersection-all"
		e.mustBeAccepted(t, all, all)
		runCases(t, e.client(all), []expect{
			hostTo("first.com", "/", v2),
			hostTo("sub.first.com", "/", v2),
			hostTo("second.com", "/", v2),
			hostTo("sub.second.com", "/", v2),
			hostAnswers("third.com", "/", 404),
			hostAnswers("sub.third.com", "/", 404),
		})
	})
}

func confListenerHostnameMatching(t *testing.T) {
	e := startConformance(t, "httproute-listener-hostname-matching")
	const gw = "httproute-listener-hostname-matching"
	e.mustBeAccepted(t, gw, "backend-v1", "backend-v2", "backend-v3")
	runCases(t, e.client(gw), []expect{
		hostTo("bar.com", "/", v1),
		hostTo("foo.bar.com", "/", v2),
		hostTo("baz.bar.com", "/", v3),
		hostTo("boo.bar.com", "/", v3),
		hostTo("multiple.prefixes.bar.com", "/", v3),
		hostTo("multiple.prefixes.foo.com", "/", v3),
		hostAnswers("foo.com", "/", 404),
		hostAnswers("no.matching.host", "/", 404),
	})
}

func confListenerPortMatching(t *testing.T) {
	e := startConformance(t, "httproute-listener-port-matching")
	e.mustBeAccepted(t, "httproute-listener-port-matching", "backend-v1", "backend-v2", "backend-v3")
	// The Gateway's ports 80, 8080 and 8090 are stand-ins; a request goes
	// to the one its Host header names.
	for i, x := range []expect{
		hostTo("foo.com", "/", v1),
		hostTo("foo.com:8080", "/", v2),
		hostTo("bar.com:8080", "/", v2),
		hostTo("foo.com:8090", "/", v3),
		hostAnswers("bar.com:8090", "/", 404),
	} {
		port := "80"
		if _, p, err := net.SplitHostPort(x.Req.Host); err == nil {
			port = p
		}
		c := e.client("port-" + port)
		t.Run(x.name(i), func(t *testing.T) { c.check(t, x) })
	}
}

func confHTTPSListener(t *testing.T) {
	e := startConformance(t, "httproute-https-listener")
	const gw = "same-namespace-with-https-listener"
	e.mustBeAccepted(t, gw, "httproute-https-test", "httproute-https-test-no-hostname")
	for i, x := range []expect{
		hostTo("example.org", "/", v1),
		hostAnswers("unknown-example.org", "/", 404),
		hostTo("second-example.org", "/", v2),
	} {
		t.Run(x.name(i), func(t *testing.T) { e.tlsClient(gw, x.Req.Host, false).check(t, x) })
	}
}

func confHTTPSListenerDetectMisdirectedRequests(t *testing.T) {
	e := startConformance(t, "httproute-https-listener-detect-misdirected-requests")
	const gw = "same-namespace-with-https-listener"
	e.mustBeAccepted(t, gw,
		"https-listener-detect-misdirected-requests-test-1",
		"https-listener-detect-misdirected-requests-test-2",
		"https-listener-detect-misdirected-requests-test-3",
		"https-listener-detect-misdirected-requests-test-4")
	for i, tc := range []struct {
		serverName, host string
		status           int
		backend          string
	}{
		{"example.org", "example.org", 200, v1},
		{"example.org", "second-example.org", 421, ""},
		{"example.org", "unknown-example.org", 404, ""},

		{"second-example.org", "second-example.org", 200, v2},
		{"second-example.org", "example.org", 421, ""},
		{"second-example.org", "unknown-example.org", 421, ""},

		{"third-example.wildcard.org", "third-example.wildcard.org", 200, v3},
		{"third-example.wildcard.org", "fith-example.wildcard.org", 200, v3},
		{"third-example.wildcard.org", "fourth-example.wildcard.org", 421, ""},
		{"third-example.wildcard.org", "second-example.org", 421, ""},
		{"third-example.wildcard.org", "unknown-example.org", 421, ""},

		{"fourth-example.wildcard.org", "fourth-example.wildcard.org", 200, v1},
		{"fourth-example.wildcard.org", "fith-example.wildcard.org", 421, ""},

		{"unknown-example.org", "example.org", 200, v1},
		{"unknown-example.org", "unknown-example.org", 404, ""},
	} {
		x := expect{
			Req:       request{Host: tc.host, Path: "/detect-misdirected-requests"},
			Status:    []int{tc.status},
			Backend:   tc.backend,
			Namespace: infraNS,
		}
		t.Run(fmt.Sprintf("%d SNI %s Host %s answers %d", i, tc.serverName, tc.host, tc.status), func(t *testing.T) {
			e.tlsClient(gw, tc.serverName, true).check(t, x)
		})
	}
}

func confInvalidBackendRefUnknownKind(t *testing.T) {
	e := startConformance(t, "httproute-invalid-backendref-unknown-kind")
	const route = "invalid-backend-ref-unknown-kind"
	e.cond(t, route, "same-namespace", string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, gwv1.RouteReasonAccepted)
	e.cond(t, route, "same-namespace", string(gwv1.RouteConditionResolvedRefs), metav1.ConditionFalse, gwv1.RouteReasonInvalidKind)
	e.client("same-namespace").check(t, answers("/v2", 500))
}

func confInvalidCrossNamespaceBackendRef(t *testing.T) {
	e := startConformance(t, "httproute-invalid-cross-namespace-backend-ref")
	const route = "invalid-cross-namespace-backend-ref"
	e.cond(t, route, "same-namespace", string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, gwv1.RouteReasonAccepted)
	e.cond(t, route, "same-namespace", string(gwv1.RouteConditionResolvedRefs), metav1.ConditionFalse, gwv1.RouteReasonRefNotPermitted)
	e.client("same-namespace").check(t, answers("/", 500))
}

func confInvalidCrossNamespaceParentRef(t *testing.T) {
	e := startConformance(t, "httproute-invalid-cross-namespace-parent-ref")
	e.mustNotAttach(t, webNS+"/invalid-cross-namespace-parent-ref", "same-namespace", gwv1.RouteReasonNotAllowedByListeners)
}

func confInvalidNonExistentBackendRef(t *testing.T) {
	e := startConformance(t, "httproute-invalid-nonexistent-backendref")
	const route = "invalid-nonexistent-backend-ref"
	e.cond(t, route, "same-namespace", string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, gwv1.RouteReasonAccepted)
	e.cond(t, route, "same-namespace", string(gwv1.RouteConditionResolvedRefs), metav1.ConditionFalse, gwv1.RouteReasonBackendNotFound)
	e.client("same-namespace").check(t, answers("/", 500))
}

func confInvalidParentRefNotMatchingListenerPort(t *testing.T) {
	e := startConformance(t, "httproute-invalid-parentref-not-matching-listener-port")
	e.mustNotAttach(t, "httproute-listener-not-matching-route-port", "same-namespace", gwv1.RouteReasonNoMatchingParent)
}

func confInvalidParentRefNotMatchingSectionName(t *testing.T) {
	e := startConformance(t, "httproute-invalid-parentref-not-matching-section-name")
	e.mustNotAttach(t, "httproute-listener-not-matching-section-name", "same-namespace", gwv1.RouteReasonNoMatchingParent)
}

func confInvalidParentRefSectionNameNotMatchingPort(t *testing.T) {
	e := startConformance(t, "httproute-invalid-parentref-section-name-not-matching-port")
	e.mustNotAttach(t, "httproute-listener-section-name-not-matching-port", "gateway-with-one-not-matching-port-and-section-name-route", gwv1.RouteReasonNoMatchingParent)
}

func confInvalidReferenceGrant(t *testing.T) {
	e := startConformance(t, "httproute-invalid-reference-grant")
	e.cond(t, "reference-grant", "same-namespace", string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, gwv1.RouteReasonAccepted)
	e.cond(t, "reference-grant", "same-namespace", string(gwv1.RouteConditionResolvedRefs), metav1.ConditionFalse, gwv1.RouteReasonRefNotPermitted)
	e.client("same-namespace").check(t, answers("/", 500))
}

func confDisallowedKind(t *testing.T) {
	// The suite runs this with TLSRoute support; Portico has none, but the
	// HTTPRoute side of it, which is what the test asserts, is the same.
	e := startConformance(t, "httproute-disallowed-kind")
	e.mustNotAttach(t, "disallowed-kind", "tlsroutes-only", gwv1.RouteReasonNotAllowedByListeners)
}

func confMatchingAcrossRoutes(t *testing.T) {
	e := startConformance(t, "httproute-matching-across-routes")
	e.mustBeAccepted(t, "same-namespace", "matching-part1", "matching-part2")
	runCases(t, e.client("same-namespace"), []expect{
		hostTo("example.com", "/", v1),
		hostTo("example.com", "/example", v1),
		hostTo("example.net", "/example", v1),
		{Req: request{Host: "example.com", Path: "/example", Headers: h("Version", "one")}, Backend: v1, Namespace: infraNS},
		hostTo("example.com", "/v2", v2),
		// The /v2 matches are for example.com only.
		hostTo("example.net", "/v2", v1),
		hostTo("example.com", "/v2/example", v2),
		{Req: request{Host: "example.com", Path: "/", Headers: h("Version", "two")}, Backend: v2, Namespace: infraNS},
	})
}

func confMatching(t *testing.T) {
	e := startConformance(t, "httproute-matching")
	e.mustBeAccepted(t, "same-namespace", "matching")
	runCases(t, e.client("same-namespace"), []expect{
		to("/", v1),
		to("/example", v1),
		withHeaders("/", h("Version", "one"), v1),
		to("/v2", v2),
		to("/v2/example", v2),
		withHeaders("/", h("Version", "two"), v2),
		to("/v2/", v2),
		// Not a path-segment prefix, so not /v2.
		to("/v2example", v1),
		to("/foo/v2/example", v1),
	})
}

func methodTo(method, path string, headers map[string]string, backend string) expect {
	return expect{Req: request{Method: method, Path: path, Headers: headers}, Backend: backend, Namespace: infraNS}
}

func confMethodMatching(t *testing.T) {
	e := startConformance(t, "httproute-method-matching")
	e.mustBeAccepted(t, "same-namespace", "method-matching")
	runCases(t, e.client("same-namespace"), []expect{
		methodTo("POST", "/", nil, v1),
		methodTo("GET", "/", nil, v2),
		{Req: request{Method: "HEAD", Path: "/"}, Status: []int{404}},
		// Combined with other matches.
		methodTo("GET", "/path1", nil, v1),
		methodTo("PUT", "/", h("version", "one"), v2),
		methodTo("POST", "/path2", h("version", "two"), v3),
		// Matches are ORed.
		methodTo("PATCH", "/path3", nil, v1),
		methodTo("DELETE", "/path4", h("version", "three"), v1),
		// Conditions within a match are ANDed.
		{Req: request{Method: "PUT", Path: "/"}, Status: []int{404}},
		{Req: request{Method: "DELETE", Path: "/path4"}, Status: []int{404}},
		// Precedence: path, then method, then headers.
		methodTo("PATCH", "/path5", nil, v1),
		methodTo("PATCH", "/", h("version", "four"), v2),
	})
}

func confMultipleGateways(t *testing.T) {
	e := startConformance(t, "httproute-multiple-gateways")
	t.Run("Gateway same-namespace", func(t *testing.T) {
		e.mustBeAccepted(t, "same-namespace", "multiple-gateways-shared-route", "same-namespace-dedicated-route")
		runCases(t, e.client("same-namespace"), []expect{to("/shared", v1), to("/", v2)})
	})
	t.Run("Gateway all-namespaces", func(t *testing.T) {
		e.mustBeAccepted(t, "all-namespaces", "multiple-gateways-shared-route", "all-namespaces-dedicated-route")
		runCases(t, e.client("all-namespaces"), []expect{to("/shared", v1), to("/", v3)})
	})
}

func confNamedRule(t *testing.T) {
	e := startConformance(t, "httproute-named-rule")
	e.mustBeAccepted(t, "same-namespace", "http-named-rules")
	runCases(t, e.client("same-namespace"), []expect{
		{Req: request{Path: "/named"}, Namespace: infraNS},
		{Req: request{Path: "/unnamed"}, Namespace: infraNS},
	})
}

func confObservedGenerationBump(t *testing.T) {
	e := startConformance(t, "httproute-observed-generation-bump")
	const route = "observed-generation-bump"
	e.mustBeAccepted(t, "same-namespace", route)
	res, _ := e.statuses(t)
	before := routeGeneration(t, res, infra(route))
	e.client("same-namespace").check(t, to("/", v1))

	e.update(t, "10-case.yaml", strings.Replace(e.files["10-case.yaml"], "name: "+v1, "name: "+v2, 1))
	// mustBeAccepted also checks every condition observed the new generation.
	e.mustBeAccepted(t, "same-namespace", route)
	res, _ = e.statuses(t)
	if after := routeGeneration(t, res, infra(route)); after == before {
		t.Errorf("generation stayed %d after a spec change", after)
	}
	e.client("same-namespace").check(t, to("/", v2))
}

func confNoBackendRefs(t *testing.T) {
	e := startConformance(t, "httproute-omitted-backendrefs")
	e.mustBeAccepted(t, "same-namespace", "omitted-backendrefs")
	runCases(t, e.client("same-namespace"), []expect{
		to("/forward", v1),
		answers("/omitted-no-forward", 500),
		answers("/empty-no-forward", 500),
	})
}

func confPartiallyInvalidViaInvalidReferenceGrant(t *testing.T) {
	e := startConformance(t, "httproute-partially-invalid-via-invalid-reference-grant")
	const route = "invalid-reference-grant"
	e.cond(t, route, "same-namespace", string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, gwv1.RouteReasonAccepted)
	e.cond(t, route, "same-namespace", string(gwv1.RouteConditionResolvedRefs), metav1.ConditionFalse, gwv1.RouteReasonRefNotPermitted)
	runCases(t, e.client("same-namespace"), []expect{
		answers("/v2", 500),
		{Req: request{Path: "/"}, Backend: "app-backend-v1", Namespace: appNS},
	})
}

func confPathMatchOrder(t *testing.T) {
	e := startConformance(t, "httproute-path-match-order")
	e.mustBeAccepted(t, "same-namespace", "path-matching-order")
	runCases(t, e.client("same-namespace"), []expect{
		to("/match/exact/one", v3),
		to("/match/exact", v2),
		to("/match", v1),
		to("/match/prefix/one/any", v2),
		to("/match/prefix/any", v1),
		to("/match/any", v3),
	})
}

func confQueryParamMatching(t *testing.T) {
	e := startConformance(t, "httproute-query-param-matching")
	e.mustBeAccepted(t, "same-namespace", "query-param-matching")
	runCases(t, e.client("same-namespace"), []expect{
		to("/?animal=whale", v1),
		to("/?animal=dolphin", v2),
		to("/?animal=dolphin&color=blue", v3),
		to("/?ANIMAL=Whale", v3),
		to("/?animal=whale&otherparam=irrelevant", v1),
		to("/?animal=dolphin&color=yellow", v2),
		answers("/?color=blue", 404),
		answers("/?animal=dog", 404),
		answers("/?animal=whaledolphin", 404),
		answers("/", 404),
		// Combined with other matches.
		to("/path1?animal=whale", v1),
		withHeaders("/?animal=whale", h("version", "one"), v2),
		withHeaders("/path2?animal=whale", h("version", "two"), v3),
		// Matches are ORed.
		to("/path3?animal=shark", v1),
		withHeaders("/path4?animal=kraken", h("version", "three"), v1),
		// Conditions within a match are ANDed.
		answers("/?animal=shark", 404),
		answers("/path4?animal=kraken", 404),
		// Precedence: path, then headers, then query parameters.
		to("/path5?animal=hydra", v1),
		withHeaders("/?animal=hydra", h("version", "four"), v3),
	})
}

// redirectTo expects a redirect with code and the given Location parts.
func redirectTo(method, path string, code int, rd redirect) expect {
	return expect{Req: request{Method: method, Path: path}, Status: []int{code}, Redirect: &rd, Namespace: infraNS}
}

func conf303Redirect(t *testing.T) {
	e := startConformance(t, "httproute-303-redirect")
	e.mustBeAccepted(t, "same-namespace", "303-redirect")
	e.client("same-namespace").check(t, redirectTo("POST", "/see-other", 303, redirect{Path: "/see-other", Port: e.listenerPort("same-namespace")}))
}

func conf307Redirect(t *testing.T) {
	e := startConformance(t, "httproute-307-redirect")
	e.mustBeAccepted(t, "same-namespace", "307-redirect")
	e.client("same-namespace").check(t, redirectTo("", "/temporary", 307, redirect{Path: "/temporary", Port: e.listenerPort("same-namespace")}))
}

func conf308Redirect(t *testing.T) {
	e := startConformance(t, "httproute-308-redirect")
	e.mustBeAccepted(t, "same-namespace", "308-redirect")
	e.client("same-namespace").check(t, redirectTo("", "/permanent", 308, redirect{Path: "/permanent", Port: e.listenerPort("same-namespace")}))
}

// listenerPort is the port a redirect keeps when it changes neither scheme
// nor port: the listener's. The suite's Gateways listen on 80 and 443,
// which a Location leaves out; the stand-in ports here show up.
func (e *confEnv) listenerPort(label string) string {
	return strconv.Itoa(e.port(label))
}

func confRedirectHostAndStatus(t *testing.T) {
	e := startConformance(t, "httproute-redirect-host-and-status")
	e.mustBeAccepted(t, "same-namespace", "redirect-host-and-status")
	p := e.listenerPort("same-namespace")
	runCases(t, e.client("same-namespace"), []expect{
		redirectTo("", "/hostname-redirect", 302, redirect{Host: "example.org", Port: p}),
		redirectTo("", "/host-and-status", 301, redirect{Host: "example.org", Port: p}),
	})
}

func confRedirectPath(t *testing.T) {
	e := startConformance(t, "httproute-redirect-path")
	e.mustBeAccepted(t, "same-namespace", "redirect-path")
	p := e.listenerPort("same-namespace")
	runCases(t, e.client("same-namespace"), []expect{
		redirectTo("", "/original-prefix/lemon", 302, redirect{Path: "/replacement-prefix/lemon", Port: p}),
		redirectTo("", "/full/path/original", 302, redirect{Path: "/full-path-replacement", Port: p}),
		redirectTo("", "/path-and-host", 302, redirect{Host: "example.org", Path: "/replacement-prefix", Port: p}),
		redirectTo("", "/path-and-status", 301, redirect{Path: "/replacement-prefix", Port: p}),
		redirectTo("", "/full-path-and-host", 302, redirect{Host: "example.org", Path: "/replacement-full", Port: p}),
		redirectTo("", "/full-path-and-status", 301, redirect{Path: "/replacement-full", Port: p}),
	})
}

func confRedirectPort(t *testing.T) {
	e := startConformance(t, "httproute-redirect-port")
	e.mustBeAccepted(t, "same-namespace", "redirect-port")
	runCases(t, e.client("same-namespace"), []expect{
		redirectTo("", "/port", 302, redirect{Port: "8083"}),
		redirectTo("", "/port-and-host", 302, redirect{Host: "example.org", Port: "8083"}),
		redirectTo("", "/port-and-status", 301, redirect{Port: "8083"}),
		redirectTo("", "/port-and-host-and-status", 302, redirect{Port: "8083", Host: "example.org"}),
	})
}

func confRedirectScheme(t *testing.T) {
	e := startConformance(t, "httproute-redirect-scheme")
	e.mustBeAccepted(t, "same-namespace", "redirect-scheme")
	runCases(t, e.client("same-namespace"), []expect{
		redirectTo("", "/scheme", 302, redirect{Scheme: "https"}),
		redirectTo("", "/scheme-and-host", 302, redirect{Host: "example.org", Scheme: "https"}),
		redirectTo("", "/scheme-and-status", 301, redirect{Scheme: "https"}),
		redirectTo("", "/scheme-and-host-and-status", 302, redirect{Scheme: "https", Host: "example.org"}),
	})
}

func confRedirectPortAndScheme(t *testing.T) {
	e := startConformance(t, "httproute-redirect-port-and-scheme")
	const (
		gw80   = "same-namespace"
		gw8080 = "same-namespace-with-http-listener-on-8080"
		gw443  = "same-namespace-with-https-listener"
	)
	e.mustBeAccepted(t, gw80, "http-route-for-listener-on-port-80")
	e.mustBeAccepted(t, gw8080, "http-route-for-listener-on-port-8080")
	e.mustBeAccepted(t, gw443, "http-route-for-listener-on-port-443")
	rd := func(path, scheme, port string) expect {
		return redirectTo("", path, 302, redirect{Scheme: scheme, Host: "example.org", Port: port})
	}
	t.Run("http-listener-on-80", func(t *testing.T) {
		runCases(t, e.client(gw80), []expect{
			rd("/scheme-nil-and-port-nil", "http", e.listenerPort(gw80)),
			rd("/scheme-nil-and-port-80", "http", ""),
			rd("/scheme-nil-and-port-8080", "http", "8080"),
			rd("/scheme-https-and-port-nil", "https", ""),
			rd("/scheme-https-and-port-443", "https", ""),
			rd("/scheme-https-and-port-8443", "https", "8443"),
		})
	})
	t.Run("http-listener-on-8080", func(t *testing.T) {
		runCases(t, e.client(gw8080), []expect{
			rd("/scheme-nil-and-port-nil", "http", e.listenerPort(gw8080)),
			rd("/scheme-nil-and-port-80", "http", ""),
			rd("/scheme-https-and-port-nil", "https", ""),
		})
	})
	t.Run("https-listener-on-443", func(t *testing.T) {
		c := e.tlsClient(gw443, "example.org", false)
		var cases []expect
		for _, x := range []expect{
			rd("/scheme-nil-and-port-nil", "https", e.listenerPort(gw443)),
			rd("/scheme-nil-and-port-443", "https", ""),
			rd("/scheme-nil-and-port-8443", "https", "8443"),
			rd("/scheme-http-and-port-nil", "http", ""),
			rd("/scheme-http-and-port-80", "http", ""),
			rd("/scheme-http-and-port-8080", "http", "8080"),
		} {
			x.Req.Host = "example.org"
			cases = append(cases, x)
		}
		runCases(t, c, cases)
	})
}

func confReferenceGrant(t *testing.T) {
	e := startConformance(t, "httproute-reference-grant")
	e.mustBeAccepted(t, "same-namespace", "reference-grant")
	c := e.client("same-namespace")
	c.check(t, expect{Req: request{Path: "/"}, Backend: "web-backend", Namespace: webNS})

	e.update(t, "10-case.yaml", withoutObject(e.files["10-case.yaml"], "ReferenceGrant", "reference-grant"))
	e.cond(t, "reference-grant", "same-namespace", string(gwv1.RouteConditionResolvedRefs), metav1.ConditionFalse, gwv1.RouteReasonRefNotPermitted)
	c.check(t, answers("/", 500))
}

// headerModifierCases are the cases of HTTPRouteRequestHeaderModifier,
// shared with the backendRef variant.
func headerModifierCases() []expect {
	modified := func(path string, sent, want map[string]string, absent ...string) expect {
		return expect{
			Req:       request{Path: path, Headers: sent},
			Seen:      &seen{Path: path, Headers: want, Absent: absent},
			Backend:   v1,
			Namespace: infraNS,
		}
	}
	return []expect{
		modified("/set", h("Some-Other-Header", "val"), h("Some-Other-Header", "val", "X-Header-Set", "set-overwrites-values")),
		modified("/set", h("Some-Other-Header", "val", "X-Header-Set", "some-other-value"), h("Some-Other-Header", "val", "X-Header-Set", "set-overwrites-values")),
		modified("/add", h("Some-Other-Header", "val"), h("Some-Other-Header", "val", "X-Header-Add", "add-appends-values")),
		modified("/add", h("Some-Other-Header", "val", "X-Header-Add", "some-other-value"), h("Some-Other-Header", "val", "X-Header-Add", "some-other-value,add-appends-values")),
		modified("/remove", h("X-Header-Remove", "val"), nil, "X-Header-Remove"),
		modified("/multiple",
			h("X-Header-Set-2", "set-val-2", "X-Header-Add-2", "add-val-2", "X-Header-Remove-2", "remove-val-2", "Another-Header", "another-header-val"),
			h("X-Header-Set-1", "header-set-1", "X-Header-Set-2", "header-set-2", "X-Header-Add-1", "header-add-1",
				"X-Header-Add-2", "add-val-2,header-add-2", "X-Header-Add-3", "header-add-3", "Another-Header", "another-header-val"),
			"X-Header-Remove-1", "X-Header-Remove-2"),
		modified("/case-insensitivity",
			h("x-header-set", "original-val-set", "x-header-add", "original-val-add", "x-header-remove", "original-val-remove", "Another-Header", "another-header-val"),
			h("X-Header-Set", "header-set", "X-Header-Add", "original-val-add,header-add", "Another-Header", "another-header-val"),
			"x-header-remove", "X-Header-Remove"),
	}
}

func confRequestHeaderModifier(t *testing.T) {
	e := startConformance(t, "httproute-request-header-modifier")
	e.mustBeAccepted(t, "same-namespace", "request-header-modifier")
	runCases(t, e.client("same-namespace"), headerModifierCases())
}

func confBackendRequestHeaderModifier(t *testing.T) {
	e := startConformance(t, "httproute-request-header-modifier-backend")
	e.mustBeAccepted(t, "same-namespace", "request-header-modifier")
	runCases(t, e.client("same-namespace"), headerModifierCases())
}

func confRequestHeaderModifierBackendWeights(t *testing.T) {
	e := startConformance(t, "httproute-request-header-modifier-backend-weights")
	e.mustBeAccepted(t, "same-namespace", "request-header-modifier-backend-weights")
	c := e.client("same-namespace")
	c.check(t, expect{Req: request{Path: "/"}, Namespace: infraNS})
	reached := map[string]int{}
	for range 100 {
		reply := c.check(t, expect{Req: request{Path: "/"}, Seen: &seen{Path: "/"}, Namespace: infraNS})
		set := http.Header(reply.Headers).Values("Backend")
		if len(set) != 1 {
			t.Fatalf("backend saw Backend headers %q, want one", set)
		}
		if !strings.HasPrefix(reply.Pod, set[0]) {
			t.Fatalf("pod %s got the header of backendRef %s", reply.Pod, set[0])
		}
		reached[set[0]]++
	}
	if reached[v1] == 0 || reached[v2] == 0 {
		t.Errorf("100 requests reached %v, want both backendRefs", reached)
	}
}

// mirrorCase is a case of the mirror tests: the request, and the Services
// that must receive a copy of it.
type mirrorCase struct {
	expect
	mirroredTo []string
}

// waitMirrored waits until a pod of each Service served target.
func (e *confEnv) waitMirrored(t *testing.T, target string, services []string) {
	t.Helper()
	for _, svc := range services {
		deadline := time.Now().Add(5 * time.Second)
		for !e.served(svc, target) {
			if time.Now().After(deadline) {
				t.Fatalf("no pod of %s received the mirrored request %s", svc, target)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func (e *confEnv) served(service, target string) bool {
	for _, p := range e.podsOf(service) {
		for _, r := range p.requests() {
			if r.Path == target {
				return true
			}
		}
	}
	return false
}

func mirrorHeaderCase(path string, mirroredTo ...string) mirrorCase {
	return mirrorCase{
		expect: expect{
			Req: request{Path: path, Headers: h("X-Header-Remove", "remove-val", "X-Header-Add-Append", "append-val-1")},
			Seen: &seen{Path: path, Headers: h("X-Header-Add", "header-val-1", "X-Header-Add-Append", "append-val-1,header-val-2", "X-Header-Set", "set-overwrites-values"),
				Absent: []string{"X-Header-Remove"}},
			Backend:   v1,
			Namespace: infraNS,
		},
		mirroredTo: mirroredTo,
	}
}

func (e *confEnv) runMirrorCases(t *testing.T, cases []mirrorCase) {
	c := e.client("same-namespace")
	for i, mc := range cases {
		t.Run(mc.name(i), func(t *testing.T) {
			// A request id tells this request's copies from others.
			id := fmt.Sprintf("?request-id=%d-%d", i, time.Now().UnixNano())
			x := mc.expect
			x.Req.Path += id
			seen := *x.Seen
			seen.Path += id
			x.Seen = &seen
			c.check(t, x)
			e.waitMirrored(t, seen.Path, mc.mirroredTo)
		})
	}
}

func confRequestMirror(t *testing.T) {
	e := startConformance(t, "httproute-request-mirror")
	e.mustBeAccepted(t, "same-namespace", "request-mirror")
	e.runMirrorCases(t, []mirrorCase{
		{expect: expect{Req: request{Path: "/mirror"}, Seen: &seen{Path: "/mirror"}, Backend: v1, Namespace: infraNS}, mirroredTo: []string{infraNS + "/" + v2}},
		mirrorHeaderCase("/mirror-and-modify-headers", infraNS+"/"+v2),
	})
}

func confRequestMultipleMirrors(t *testing.T) {
	e := startConformance(t, "httproute-request-multiple-mirrors")
	e.mustBeAccepted(t, "same-namespace", "request-multiple-mirrors")
	e.runMirrorCases(t, []mirrorCase{
		{expect: expect{Req: request{Path: "/multi-mirror"}, Seen: &seen{Path: "/multi-mirror"}, Backend: v1, Namespace: infraNS}, mirroredTo: []string{infraNS + "/" + v2, infraNS + "/" + v3}},
		mirrorHeaderCase("/multi-mirror-and-modify-request-headers", infraNS+"/"+v2, infraNS+"/"+v3),
	})
}

func confRequestPercentageMirror(t *testing.T) {
	e := startConformance(t, "httproute-request-percentage-mirror")
	e.mustBeAccepted(t, "same-namespace", "request-percentage-mirror")
	c := e.client("same-namespace")
	for i, tc := range []struct {
		x       expect
		percent float64
	}{
		{expect{Req: request{Path: "/percent-mirror"}, Backend: v1, Namespace: infraNS}, 20},
		{expect{Req: request{Path: "/percent-mirror-fraction"}, Backend: v1, Namespace: infraNS}, 50},
		{mirrorHeaderCase("/percent-mirror-and-modify-headers").expect, 35},
	} {
		t.Run(tc.x.name(i), func(t *testing.T) {
			c.check(t, tc.x)
			const total = 500
			p := tc.percent / 100
			margin := 3 * math.Sqrt(total*p*(1-p)) // three standard deviations
			var last int
			for try := 1; try <= 3; try++ {
				id := fmt.Sprintf("?request-id=%d-%d", try, time.Now().UnixNano())
				x := tc.x
				x.Req.Path += id
				if x.Seen != nil {
					s := *x.Seen
					s.Path += id
					x.Seen = &s
				}
				sendConcurrently(t, c, x, total, 10)
				last = e.settledCount(infraNS+"/"+v2, x.Req.Path)
				if math.Abs(float64(last)-total*p) <= margin {
					return
				}
				t.Logf("try %d: %d of %d requests mirrored, want %.0f±%.0f", try, last, total, total*p, margin)
			}
			t.Fatalf("%d of %d requests mirrored, want %.0f±%.0f", last, total, total*p, margin)
		})
	}
}

// sendConcurrently sends n copies of x, at most par at a time, checking
// each answer; it returns the backends' replies.
func sendConcurrently(t *testing.T, c *gwClient, x expect, n, par int) []*echoReply {
	t.Helper()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		replies []*echoReply
		errs    []error
	)
	sem := make(chan struct{}, par)
	for range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			reply, err := c.verify(x)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			replies = append(replies, reply)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d of %d requests failed; first: %v", len(errs), n, errs[0])
	}
	return replies
}

// settledCount counts the requests for target the pods of a Service
// served, once mirrored copies stop arriving.
func (e *confEnv) settledCount(service, target string) int {
	count := func() int { return e.servedCount(service, target) }
	last := count()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		n := count()
		if n == last {
			break
		}
		last = n
	}
	return last
}

func confResponseHeaderModifier(t *testing.T) {
	e := startConformance(t, "httproute-response-header-modifier")
	e.mustBeAccepted(t, "same-namespace", "response-header-modifier")
	resp := func(path string, echoSet, want map[string]string, absent ...string) expect {
		return expect{Req: request{Path: path}, EchoSet: echoSet, Headers: want, Absent: absent, Backend: v1, Namespace: infraNS}
	}
	both := resp("/response-and-request-header-modifiers",
		h("X-Header-Set-2", "set-val-2", "X-Header-Add-2", "add-val-2", "X-Header-Remove-2", "remove-val-2", "Another-Header", "another-header-val", "X-Header-Remove-1", "remove-val-1", "X-Header-Echo", "echo"),
		h("X-Header-Set-1", "header-set-1", "X-Header-Set-2", "header-set-2", "X-Header-Add-1", "header-add-1", "X-Header-Add-2", "add-val-2,header-add-2", "Another-Header", "another-header-val", "X-Header-Echo", "echo"),
		"X-Header-Remove-1", "X-Header-Remove-2")
	both.Req.Headers = h("X-Header-Remove", "remove-val", "X-Header-Add-Append", "append-val-1", "X-Header-Echo", "echo")
	both.Seen = &seen{
		Path:    "/response-and-request-header-modifiers",
		Headers: h("X-Header-Add", "header-val-1", "X-Header-Set", "set-overwrites-values", "X-Header-Add-Append", "append-val-1,header-val-2", "X-Header-Echo", "echo"),
		Absent:  []string{"X-Header-Remove"},
	}
	runCases(t, e.client("same-namespace"), []expect{
		resp("/set", h("Some-Other-Header", "val"), h("Some-Other-Header", "val", "X-Header-Set", "set-overwrites-values")),
		resp("/set", h("Some-Other-Header", "val", "X-Header-Set", "some-other-value"), h("Some-Other-Header", "val", "X-Header-Set", "set-overwrites-values")),
		resp("/add", h("Some-Other-Header", "val"), h("Some-Other-Header", "val", "X-Header-Add", "add-appends-values")),
		resp("/add", h("Some-Other-Header", "val", "X-Header-Add", "some-other-value"), h("Some-Other-Header", "val", "X-Header-Add", "some-other-value,add-appends-values")),
		resp("/remove", h("X-Header-Remove", "val"), nil, "X-Header-Remove"),
		resp("/multiple",
			h("X-Header-Set-2", "set-val-2", "X-Header-Add-2", "add-val-2", "X-Header-Remove-2", "remove-val-2", "Another-Header", "another-header-val", "X-Header-Remove-1", "val"),
			h("X-Header-Set-1", "header-set-1", "X-Header-Set-2", "header-set-2", "X-Header-Add-1", "header-add-1", "X-Header-Add-2", "add-val-2,header-add-2", "X-Header-Add-3", "header-add-3", "Another-Header", "another-header-val"),
			"X-Header-Remove-1", "X-Header-Remove-2"),
		resp("/case-insensitivity",
			h("x-header-set", "original-val-set", "x-header-add", "original-val-add", "x-header-remove", "original-val-remove", "Another-Header", "another-header-val"),
			h("X-Header-Set", "header-set", "X-Header-Add", "original-val-add,header-add", "X-Lowercase-Add", "lowercase-add", "X-Mixedcase-Add-1", "mixedcase-add-1",
				"X-Mixedcase-Add-2", "mixedcase-add-2", "X-Uppercase-Add", "uppercase-add", "Another-Header", "another-header-val"),
			"x-header-remove", "X-Header-Remove"),
		both,
	})
}

func confRetry(t *testing.T) {
	e := startConformance(t, "httproute-retry")
	e.mustBeAccepted(t, "same-namespace", "retries")
	c := e.client("same-namespace")
	for i, tc := range []struct {
		path         string
		code         int
		succeedAfter int
		want         int
	}{
		{"/retry/code-500-attempts-3", 500, 2, 200},
		{"/retry/code-500-attempts-3", 500, 4, 500},
		{"/retry/code-500-attempts-3", 503, 2, 503},
		{"/retry/code-all-attempts-2", 500, 1, 200},
		{"/retry/code-all-attempts-2", 500, 3, 500},
		{"/retry/code-all-attempts-2", 502, 1, 200},
		{"/retry/code-all-attempts-2", 502, 3, 502},
		{"/retry/code-all-attempts-2", 503, 1, 200},
		{"/retry/code-all-attempts-2", 503, 3, 503},
		{"/retry/code-all-attempts-2", 504, 1, 200},
		{"/retry/code-all-attempts-2", 504, 3, 504},
	} {
		t.Run(fmt.Sprintf("%d %s %d until %d answers %d", i, tc.path, tc.code, tc.succeedAfter, tc.want), func(t *testing.T) {
			// Each request has its own id: the backend counts attempts by it.
			target := fmt.Sprintf("%s?responseCode=%d&succeedAfter=%d&uuid=%d-%d", tc.path, tc.code, tc.succeedAfter, i, time.Now().UnixNano())
			c.check(t, expect{Req: request{Path: target}, Status: []int{tc.want}, Backend: v3, Namespace: infraNS})
		})
	}
}

func confRewriteHost(t *testing.T) {
	e := startConformance(t, "httproute-rewrite-host")
	e.mustBeAccepted(t, "same-namespace", "rewrite-host")
	rewritten := hostTo("rewrite.example", "/rewrite-host-and-modify-headers", v2)
	rewritten.Req.Headers = h("X-Header-Remove", "remove-val", "X-Header-Add-Append", "append-val-1")
	rewritten.Seen = &seen{
		Host:    "test.example.org",
		Path:    "/rewrite-host-and-modify-headers",
		Headers: h("X-Header-Add", "header-val-1", "X-Header-Add-Append", "append-val-1,header-val-2", "X-Header-Set", "set-overwrites-values"),
		Absent:  []string{"X-Header-Remove"},
	}
	one := hostTo("rewrite.example", "/one", v1)
	one.Seen = &seen{Host: "one.example.org", Path: "/one"}
	two := hostTo("rewrite.example", "/two", v2)
	two.Seen = &seen{Host: "example.org", Path: "/two"}
	runCases(t, e.client("same-namespace"), []expect{one, two, rewritten})
}

func confRewritePath(t *testing.T) {
	e := startConformance(t, "httproute-rewrite-path")
	e.mustBeAccepted(t, "same-namespace", "rewrite-path")
	rewrite := func(path, want string) expect {
		x := to(path, v1)
		x.Seen = &seen{Path: want}
		return x
	}
	withModifiers := func(path, want string) expect {
		x := to(path, v1)
		x.Req.Headers = h("X-Header-Remove", "remove-val", "X-Header-Add-Append", "append-val-1", "X-Header-Set", "set-val")
		x.Seen = &seen{
			Path:    want,
			Headers: h("X-Header-Add", "header-val-1", "X-Header-Add-Append", "append-val-1,header-val-2", "X-Header-Set", "set-overwrites-values"),
			Absent:  []string{"X-Header-Remove"},
		}
		return x
	}
	runCases(t, e.client("same-namespace"), []expect{
		rewrite("/prefix/one/two", "/one/two"),
		rewrite("/strip-prefix/three", "/three"),
		rewrite("/strip-prefix", "/"),
		rewrite("/full/one/two", "/one"),
		withModifiers("/full/rewrite-path-and-modify-headers/test", "/test"),
		withModifiers("/prefix/rewrite-path-and-modify-headers/one", "/prefix/one"),
	})
}

func confServiceTypes(t *testing.T) {
	e := startConformance(t, "httproute-service-types")
	e.mustBeAccepted(t, "same-namespace", "service-types")
	runCases(t, e.client("same-namespace"), []expect{
		to("/manual-endpointslices", v1),
		to("/headless-manual-endpointslices", v1),
		to("/headless", v1),
	})
}

func confTimeoutBackendRequest(t *testing.T) {
	e := startConformance(t, "httproute-timeout-backend-request")
	e.mustBeAccepted(t, "same-namespace", "backend-request-timeout")
	runCases(t, e.client("same-namespace"), []expect{
		{Req: request{Path: "/backend-timeout"}, Namespace: infraNS},
		answers("/backend-timeout?delay=1s", 504),
		{Req: request{Path: "/disable-backend-timeout?delay=1s"}, Namespace: infraNS},
	})
}

func confTimeoutRequest(t *testing.T) {
	e := startConformance(t, "httproute-timeout-request")
	e.mustBeAccepted(t, "same-namespace", "request-timeout")
	runCases(t, e.client("same-namespace"), []expect{
		{Req: request{Path: "/request-timeout"}, Namespace: infraNS},
		answers("/request-timeout?delay=1s", 504),
		{Req: request{Path: "/disable-request-timeout?delay=1s"}, Namespace: infraNS},
	})
}

func confWeight(t *testing.T) {
	e := startConformance(t, "httproute-weight")
	e.mustBeAccepted(t, "same-namespace", "weighted-backends")
	c := e.client("same-namespace")
	want := map[string]float64{v1: 0.7, v2: 0.3, v3: 0}
	var got map[string]float64
	for try := 1; try <= 3; try++ {
		got = distribution(t, c, expect{Req: request{Path: "/"}, Namespace: infraNS}, 500)
		if withinShares(got, want, 0.05) {
			return
		}
		t.Logf("try %d: shares %v, want %v±0.05", try, got, want)
	}
	t.Fatalf("shares %v, want %v±0.05", got, want)
}

// distribution sends n requests, 10 at a time, and returns the share each
// backend Service answered.
func distribution(t *testing.T, c *gwClient, x expect, n int) map[string]float64 {
	t.Helper()
	shares := map[string]float64{}
	for _, reply := range sendConcurrently(t, c, x, n, 10) {
		if reply != nil {
			shares[reply.Service] += 1 / float64(n)
		}
	}
	return shares
}

func withinShares(got, want map[string]float64, tolerance float64) bool {
	for svc, share := range got {
		if _, ok := want[svc]; !ok || share > 0 && want[svc] == 0 {
			return false
		}
	}
	for svc, share := range want {
		if math.Abs(got[svc]-share) > tolerance {
			return false
		}
	}
	return true
}

func confBackendProtocolH2C(t *testing.T) {
	e := startConformance(t, "httproute-backend-protocol-h2c")
	e.mustBeAccepted(t, "same-namespace", "backend-protocol-h2c")
	reply := e.h2cClient("same-namespace").check(t, to("/", v1))
	// The pod's h2c port turns anything but HTTP/2 away; the proto it saw
	// says the same.
	if reply.Proto != "HTTP/2.0" {
		t.Errorf("backend saw %s, want HTTP/2.0", reply.Proto)
	}
}

func confBackendProtocolWebSocket(t *testing.T) {
	e := startConformance(t, "httproute-backend-protocol-websocket")
	e.mustBeAccepted(t, "same-namespace", "backend-protocol-ws")
	addr := fmt.Sprintf("127.0.0.1:%d", e.port("same-namespace"))
	wsEcho(t, addr, addr)
}

func confCORS(t *testing.T) {
	e := startConformance(t, "httproute-cors")
	e.mustBeAccepted(t, "same-namespace", "cors-multiple-origins-methods-headers", "cors-wildcard-methods", "cors-wildcard-origin", "cors-wildcard-methods-headers")
	// A preflight answered by the gateway itself carries no echo, so the
	// backend checks see an empty request of the preflight's method.
	preflight := func(path string, headers map[string]string) expect {
		return expect{
			Req:    request{Method: "OPTIONS", Path: path, Headers: headers},
			Seen:   &seen{Method: "OPTIONS"},
			Status: []int{200, 204},
		}
	}
	simple := func(method, path string, headers map[string]string) expect {
		return expect{Req: request{Method: method, Path: path, Headers: headers}, Namespace: infraNS}
	}
	requestHeaders := h("access-control-request-method", "GET", "access-control-request-headers", "x-header-1, x-header-2")
	withOrigin := func(origin string, m map[string]string) map[string]string {
		out := h("Origin", origin)
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	allowed := func(origin string) expect {
		x := preflight("/cors-1", withOrigin(origin, requestHeaders))
		x.OneOf = map[string][]string{
			"access-control-allow-origin":      {origin},
			"access-control-allow-methods":     {"GET, OPTIONS", "OPTIONS, GET"},
			"access-control-allow-headers":     {"x-header-1, x-header-2", "x-header-2, x-header-1"},
			"access-control-expose-headers":    {"x-header-3, x-header-4", "x-header-4, x-header-3"},
			"access-control-max-age":           {"3600"},
			"access-control-allow-credentials": {"true"},
		}
		x.IgnoreWS = true
		return x
	}
	notAllowed := preflight("/cors-1", h("Origin", "https://foobar.com", "access-control-request-method", "GET"))
	notAllowed.Status = []int{200, 204, 403}
	notAllowed.Absent = []string{"access-control-allow-origin"}

	simpleExact := simple("GET", "/cors-1", withOrigin("https://www.foo.com", requestHeaders))
	simpleExact.Headers = h("access-control-allow-origin", "https://www.foo.com")
	simpleWildcard := simple("GET", "/cors-1", withOrigin("https://www.bar.com", requestHeaders))
	simpleWildcard.Headers = h("access-control-allow-origin", "https://www.bar.com")
	simpleNotAllowed := simple("GET", "/cors-1", h("Origin", "https://foobar.com", "access-control-request-method", "GET"))
	simpleNotAllowed.Absent = []string{"access-control-allow-origin"}

	wildcardMethods := preflight("/cors-2", h("Origin", "https://www.foo.com", "access-control-request-method", "POST"))
	wildcardMethods.OneOf = map[string][]string{"access-control-allow-methods": {"POST", "*"}}
	wildcardMethods.Headers = h("access-control-allow-origin", "https://www.foo.com")
	wildcardMethods.Absent = []string{"access-control-allow-credentials"}
	noCredentials := preflight("/cors-2", h("Origin", "https://www.foo.com", "access-control-request-method", "POST"))
	noCredentials.Absent = []string{"Access-Control-Allow-Credentials"}

	anyOrigin := func(origin string) expect {
		x := preflight("/cors-wildcard-origin", h("Origin", origin, "access-control-request-method", "PUT"))
		x.OneOf = map[string][]string{"access-control-allow-origin": {origin, "*"}, "access-control-allow-methods": {"PUT"}}
		x.Absent = []string{"Access-Control-Allow-Credentials"}
		return x
	}
	anyOriginSimple := func(origin string) expect {
		x := simple("PUT", "/cors-wildcard-origin", h("Origin", origin))
		x.OneOf = map[string][]string{"access-control-allow-origin": {origin, "*"}}
		x.Absent = []string{"Access-Control-Allow-Credentials"}
		return x
	}

	credentialed := preflight("/cors-wildcard-methods-headers", withOrigin("https://other.foo.com", h("access-control-request-method", "PUT", "access-control-request-headers", "x-header-1, x-header-2")))
	credentialed.OneOf = map[string][]string{
		"access-control-allow-origin":      {"https://other.foo.com"},
		"access-control-allow-methods":     {"PUT"},
		"access-control-allow-headers":     {"x-header-1, x-header-2", "x-header-2, x-header-1"},
		"access-control-allow-credentials": {"true"},
	}
	credentialed.IgnoreWS = true
	uncredentialed := preflight("/cors-wildcard-methods-headers-unauth", withOrigin("https://other.foo.com", h("access-control-request-method", "PUT", "access-control-request-headers", "x-header-1, x-header-2")))
	uncredentialed.OneOf = map[string][]string{
		"access-control-allow-origin":  {"https://other.foo.com", "*"},
		"access-control-allow-methods": {"PUT", "*"},
		"access-control-allow-headers": {"x-header-1, x-header-2", "x-header-2, x-header-1", "*"},
	}
	uncredentialed.Absent = []string{"access-control-allow-credentials"}
	uncredentialed.IgnoreWS = true
	credentialedSimple := simple("GET", "/cors-wildcard-methods-headers", h("Origin", "https://other.foo.com"))
	credentialedSimple.OneOf = map[string][]string{"access-control-allow-origin": {"https://other.foo.com"}, "access-control-allow-credentials": {"true"}}
	uncredentialedSimple := simple("GET", "/cors-wildcard-methods-headers-unauth", h("Origin", "https://other.foo.com"))
	uncredentialedSimple.OneOf = map[string][]string{"access-control-allow-origin": {"https://other.foo.com", "*"}}
	uncredentialedSimple.Absent = []string{"access-control-allow-credentials"}

	runCases(t, e.client("same-namespace"), []expect{
		allowed("https://www.foo.com"),
		allowed("https://www.bar.com"),
		allowed("https://xpto.www.bar.com"),
		notAllowed,
		simpleExact,
		simpleWildcard,
		simpleNotAllowed,
		wildcardMethods,
		noCredentials,
		anyOrigin("https://foobar.com"),
		anyOrigin("https://foobar.com:12345"),
		anyOriginSimple("https://foobar.com:12345"),
		anyOriginSimple("https://foobar.com"),
		credentialed,
		uncredentialed,
		credentialedSimple,
		uncredentialedSimple,
	})
}
