package kube

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

// TestClientPolicyAgainstAPIServer: against a real API server with the
// ClientTrafficPolicy CRD of deploy/, the CRD's rules refuse what
// translate would call invalid (both or neither of numTrustedHops and
// trustedCIDRs, a CIDR that is not one, a Service target, no section at
// all, an HTTPRoute with more than a rate limit, rate limits out of
// bounds) with their messages, and the leader writes the status of an
// accepted policy (its Gateway as ancestor) and of one whose listener
// does not exist (TargetNotFound).
func TestClientPolicyAgainstAPIServer(t *testing.T) {
	pc := startPolicyCluster(t, "clienttrafficpolicy.yaml", source.ClientPolicyResource, clientpolicy.APIVersion, clientpolicy.Kind)
	create := pc.create
	const gwRef = `{group: gateway.networking.k8s.io, kind: Gateway, name: gw}`
	for _, tc := range []struct{ spec, refusal string }{
		{`{targetRefs: [` + gwRef + `], clientIPDetection: {xForwardedFor: {numTrustedHops: 1, trustedCIDRs: [10.0.0.0/8]}}}`,
			"exactly one of numTrustedHops, trustedCIDRs is needed"},
		{`{targetRefs: [` + gwRef + `], clientIPDetection: {xForwardedFor: {}}}`,
			"exactly one of numTrustedHops, trustedCIDRs is needed"},
		{`{targetRefs: [` + gwRef + `], clientIPDetection: {}}`,
			"exactly one of xForwardedFor, customHeader is needed"},
		{`{targetRefs: [` + gwRef + `], proxyProtocol: {trustedCIDRs: [10.0.0.300/8]}}`,
			"not a CIDR"},
		{`{targetRefs: [` + gwRef + `]}`,
			"at least one of clientIPDetection, proxyProtocol, rateLimit, tls, http is needed"},
		{`{targetRefs: [` + gwRef + `], http: {maxHeaderBytes: 10}}`,
			"should be greater than or equal to 64"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], http: {maxHeaderCount: 10}}`,
			"an HTTPRoute may be targeted for rateLimit only"},
		{`{targetRefs: [` + gwRef + `], tls: {minVersion: "1.3", maxVersion: "1.2"}}`,
			"minVersion is above maxVersion"},
		{`{targetRefs: [` + gwRef + `], tls: {minVersion: "1.3", ciphers: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]}}`,
			"TLS 1.3's suites are not configurable"},
		{`{targetRefs: [` + gwRef + `], tls: {ciphers: [TLS_RSA_WITH_RC4_128_SHA]}}`,
			"Unsupported value"},
		{`{targetRefs: [` + gwRef + `], tls: {alpnProtocols: [h2, h2]}}`,
			"Duplicate value"},
		{`{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web}], proxyProtocol: {}}`,
			"an HTTPRoute may be targeted for rateLimit only"},
		{`{targetRefs: [` + gwRef + `], rateLimit: {requests: 0, unit: Second}}`,
			"should be greater than or equal to 1"},
		{`{targetRefs: [` + gwRef + `], rateLimit: {requests: 10, unit: Day}}`,
			"Unsupported value"},
		{`{targetRefs: [` + gwRef + `], rateLimit: {requests: 10, unit: Second, key: {type: Header}}}`,
			"type Header needs header"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], proxyProtocol: {}}`,
			"Unsupported value"},
		{`{targetRefs: [` + gwRef + `], clientIPDetection: {xForwardedFor: {numTrustedHops: 0}}}`,
			"should be greater than or equal to 1"},
		{`{targetRefs: [` + gwRef + `], http: {http1: {}}}`,
			"should have at least 1 properties"},
		{`{targetRefs: [` + gwRef + `], http: {http1: {idleTimeout: 500ms}}}`,
			"is not a duration between 1s and 24h"},
		{`{targetRefs: [` + gwRef + `], http: {http1: {headerTimeout: 2h}}}`,
			"is not a duration between 100ms and 1h"},
	} {
		err := create("refused", tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("spec %s: %v, want a refusal saying %q", tc.spec, err, tc.refusal)
		}
	}

	if err := create("h1-timeouts", `{targetRefs: [`+gwRef+`], http: {http1: {idleTimeout: 30s, headerTimeout: 500ms}}}`); err != nil {
		t.Fatalf("http1 timeouts refused: %v", err)
	}
	pc.startGateway(18081)
	if err := create("behind-balancer", `{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: http}], clientIPDetection: {xForwardedFor: {trustedCIDRs: [10.0.0.0/8]}}, proxyProtocol: {optional: true}}`); err != nil {
		t.Fatal(err)
	}
	if err := create("route-limit", `{targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: gone}], rateLimit: {requests: 10, unit: Second, key: {type: Header, header: {name: X-Api-Key}}}}`); err != nil {
		t.Fatal(err)
	}
	if err := create("no-listener", `{targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: https}], proxyProtocol: {}}`); err != nil {
		t.Fatal(err)
	}
	ancestor := func(name, section string, status metav1.ConditionStatus, reason string) func() error {
		return func() error {
			p := &clientpolicy.ClientTrafficPolicy{}
			if err := pc.get(name, p); err != nil {
				return err
			}
			for _, a := range p.Status.Ancestors {
				if string(a.AncestorRef.Name) == "gw" && string(ptr.Deref(a.AncestorRef.SectionName, "")) == section {
					return conditionIs(a.Conditions, string(gwv1.PolicyConditionAccepted), status, reason, p.Generation)
				}
			}
			return fmt.Errorf("no ancestor gw %q in %+v", section, p.Status.Ancestors)
		}
	}
	kubetest.WaitFor(t, 30*time.Second, "behind-balancer accepted on Gateway gw", ancestor("behind-balancer", "", metav1.ConditionTrue, string(gwv1.PolicyReasonAccepted)))
	kubetest.WaitFor(t, 30*time.Second, "no-listener TargetNotFound", ancestor("no-listener", "https", metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound)))
}
