package kube

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/kube/source"
)

// TestXTrafficPolicyAgainstAPIServer: against a real API server with the
// experimental channel's XBackendTrafficPolicy CRD of the gateway-api
// module Portico is built with, the CRD refuses what it must (an
// interval of two hours, a percent past 100, a Permanent cookie without
// absoluteTimeout) with its messages, and the leader writes the status:
// accepted on the Gateway routing to Service web, Conflicted for the
// younger policy on the same Service, TargetNotFound on a Service that
// does not exist, Invalid for a cookie path no cookie can carry.
func TestXTrafficPolicyAgainstAPIServer(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatal(err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "experimental", "gateway.networking.x-k8s.io_xbackendtrafficpolicies.yaml")
	pc := startPolicyCluster(t, crd, source.XTrafficPolicyResource, xtrafficpolicy.APIVersion, xtrafficpolicy.Kind)
	create := pc.create

	for _, tc := range []struct{ spec, refusal string }{
		{`{targetRefs: [{group: "", kind: Service, name: web}], retryConstraint: {budget: {interval: 2h}}}`,
			"interval cannot be greater than one hour or less than one second"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], retryConstraint: {budget: {percent: 120}}}`,
			"should be less than or equal to 100"},
		{`{targetRefs: [{group: "", kind: Service, name: web}], sessionPersistence: {type: Cookie, cookie: {lifetimeType: Permanent}}}`,
			"AbsoluteTimeout must be specified when cookie lifetimeType is Permanent"},
		{`{targetRefs: []}`, "targetRefs"},
	} {
		err := create("refused", tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.refusal) {
			t.Errorf("spec %s: %v, want a refusal saying %q", tc.spec, err, tc.refusal)
		}
	}

	pc.startGateway(18090)
	pc.createWebRoute()
	for _, p := range []struct{ name, spec string }{
		{"budget", `{targetRefs: [{group: "", kind: Service, name: web}], retryConstraint: {budget: {percent: 25, interval: 5s}}, sessionPersistence: {type: Cookie, cookie: {name: web-affinity}}}`},
		{"orphan", `{targetRefs: [{group: "", kind: Service, name: gone}], retryConstraint: {}}`},
	} {
		if err := create(p.name, p.spec); err != nil {
			t.Fatal(err)
		}
	}
	// Created after budget, so younger by creation time.
	time.Sleep(1100 * time.Millisecond)
	if err := create("younger", `{targetRefs: [{group: "", kind: Service, name: web}], retryConstraint: {}}`); err != nil {
		t.Fatal(err)
	}
	if err := create("badpath", `{targetRefs: [{group: "", kind: Service, name: web}], sessionPersistence: {type: Cookie, cookie: {path: "/a;b"}}}`); err != nil {
		t.Fatal(err)
	}

	ancestor := func(name, kind, ancestorName string, status metav1.ConditionStatus, reason, message string) func() error {
		return func() error {
			p := &gwxv1a1.XBackendTrafficPolicy{}
			if err := pc.get(name, p); err != nil {
				return err
			}
			for _, a := range p.Status.Ancestors {
				if ptr.Deref(a.AncestorRef.Kind, "") == gwv1.Kind(kind) && string(a.AncestorRef.Name) == ancestorName {
					if err := conditionIs(a.Conditions, string(gwv1.PolicyConditionAccepted), status, reason, p.Generation); err != nil {
						return err
					}
					for _, c := range a.Conditions {
						if c.Type == string(gwv1.PolicyConditionAccepted) && !strings.Contains(c.Message, message) {
							return fmt.Errorf("Accepted says %q, want it to say %q", c.Message, message)
						}
					}
					return nil
				}
			}
			return fmt.Errorf("no ancestor %s %s in %+v", kind, ancestorName, p.Status.Ancestors)
		}
	}
	kubetest.WaitFor(t, 30*time.Second, "budget accepted on Gateway gw",
		ancestor("budget", "Gateway", "gw", metav1.ConditionTrue, string(gwv1.PolicyReasonAccepted), "accepted"))
	kubetest.WaitFor(t, 30*time.Second, "younger Conflicted on Gateway gw",
		ancestor("younger", "Gateway", "gw", metav1.ConditionFalse, string(gwv1.PolicyReasonConflicted), "older XBackendTrafficPolicy default/budget"))
	kubetest.WaitFor(t, 30*time.Second, "orphan TargetNotFound",
		ancestor("orphan", "Service", "gone", metav1.ConditionFalse, string(gwv1.PolicyReasonTargetNotFound), "does not exist"))
	kubetest.WaitFor(t, 30*time.Second, "badpath Invalid",
		ancestor("badpath", "Gateway", "gw", metav1.ConditionFalse, string(gwv1.PolicyReasonInvalid), "not a valid cookie path"))
}
