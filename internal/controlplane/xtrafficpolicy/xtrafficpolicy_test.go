package xtrafficpolicy

import (
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/config"
)

var web = []gwv1.LocalPolicyTargetReference{{Kind: "Service", Name: "web"}}

// TestBudgetDefaults: a retryConstraint with fields left unset (an object
// not admitted with the CRD's defaults) takes the CRD's defaults, field by
// field; none, no budget.
func TestBudgetDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		rc   *gwxv1a1.RetryConstraint
		want *config.RetryBudget
	}{
		{"none", nil, nil},
		{"empty", &gwxv1a1.RetryConstraint{}, &config.RetryBudget{Policy: "p", Percent: 20, Interval: 10 * time.Second, MinRetries: 10, MinInterval: time.Second}},
		{"percent only", &gwxv1a1.RetryConstraint{Budget: &gwxv1a1.BudgetDetails{Percent: ptr.To(0)}},
			&config.RetryBudget{Policy: "p", Percent: 0, Interval: 10 * time.Second, MinRetries: 10, MinInterval: time.Second}},
		{"every field", &gwxv1a1.RetryConstraint{
			Budget:       &gwxv1a1.BudgetDetails{Percent: ptr.To(35), Interval: ptr.To(gwv1.Duration("1m"))},
			MinRetryRate: &gwxv1a1.RequestRate{Count: ptr.To(2), Interval: ptr.To(gwv1.Duration("500ms"))}},
			&config.RetryBudget{Policy: "p", Percent: 35, Interval: time.Minute, MinRetries: 2, MinInterval: 500 * time.Millisecond}},
	} {
		got, err := Budget(&gwxv1a1.BackendTrafficPolicySpec{TargetRefs: web, RetryConstraint: tc.rc}, "p")
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestValidateRefuses: values past the CRD's ranges, which an object not
// admitted by it may hold, are refused with what is wrong.
func TestValidateRefuses(t *testing.T) {
	for _, tc := range []struct {
		rc   gwxv1a1.RetryConstraint
		want string
	}{
		{gwxv1a1.RetryConstraint{Budget: &gwxv1a1.BudgetDetails{Percent: ptr.To(101)}}, "percent 101 is not between 0 and 100"},
		{gwxv1a1.RetryConstraint{Budget: &gwxv1a1.BudgetDetails{Interval: ptr.To(gwv1.Duration("500ms"))}}, "less than one second"},
		{gwxv1a1.RetryConstraint{Budget: &gwxv1a1.BudgetDetails{Interval: ptr.To(gwv1.Duration("2h"))}}, "greater than one hour"},
		{gwxv1a1.RetryConstraint{MinRetryRate: &gwxv1a1.RequestRate{Count: ptr.To(0)}}, "count 0 is not between 1 and 1000000"},
		{gwxv1a1.RetryConstraint{MinRetryRate: &gwxv1a1.RequestRate{Interval: ptr.To(gwv1.Duration("0s"))}}, "minRetryRate.interval"},
		{gwxv1a1.RetryConstraint{MinRetryRate: &gwxv1a1.RequestRate{Interval: ptr.To(gwv1.Duration("soon"))}}, "minRetryRate.interval"},
	} {
		err := Validate(&gwxv1a1.BackendTrafficPolicySpec{TargetRefs: web, RetryConstraint: &tc.rc})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %q", tc.rc, err, tc.want)
		}
	}
	if err := Validate(&gwxv1a1.BackendTrafficPolicySpec{}); err == nil {
		t.Error("a policy without targetRefs is valid")
	}
}

// TestIsService: only a Service of the core group is one.
func TestIsService(t *testing.T) {
	for ref, want := range map[gwv1.LocalPolicyTargetReference]bool{
		{Kind: "Service", Name: "a"}:                                       true,
		{Group: "gateway.networking.k8s.io", Kind: "Service", Name: "a"}:   false,
		{Group: "multicluster.x-k8s.io", Kind: "ServiceImport", Name: "a"}: false,
	} {
		if IsService(ref) != want {
			t.Errorf("IsService(%+v) = %v", ref, !want)
		}
	}
}
