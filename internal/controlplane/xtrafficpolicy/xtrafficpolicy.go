// Package xtrafficpolicy is what Portico reads of the Gateway API's
// experimental XBackendTrafficPolicy (apisx/v1alpha1): its names, the
// rules of its spec beyond what its CRD checks, and the retry budget it
// gives a Service. The type itself is the Gateway API module's.
package xtrafficpolicy

import (
	"errors"
	"fmt"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/config"
)

// Names of the kind.
const (
	Group      = gwxv1a1.GroupName
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "XBackendTrafficPolicy"
	Resource   = "xbackendtrafficpolicies"
)

// Policy is the kind's type.
type Policy = gwxv1a1.XBackendTrafficPolicy

// The defaults of the CRD, for objects that were not admitted with them.
const (
	DefaultPercent     = 20
	DefaultInterval    = 10 * time.Second
	DefaultMinRetries  = 10
	DefaultMinInterval = time.Second
)

// IsService tells whether ref names a Service, the one kind of backend
// Portico serves that a policy of the kind can target.
func IsService(ref gwv1.LocalPolicyTargetReference) bool {
	return ref.Group == "" && ref.Kind == "Service"
}

// Validate checks what the CRD's schema leaves to the implementation, or
// what an object admitted without it may break: every value of
// retryConstraint in its range. sessionPersistence is checked where it is
// compiled (routing.SessionPersistence).
func Validate(spec *gwxv1a1.BackendTrafficPolicySpec) error {
	if len(spec.TargetRefs) == 0 {
		return errors.New("targetRefs is empty")
	}
	if spec.RetryConstraint == nil && spec.SessionPersistence == nil {
		return nil
	}
	_, err := Budget(spec, "")
	return err
}

// Budget is the retry budget of spec, of the policy named policy, nil
// when it has no retryConstraint. Fields left unset take the CRD's
// defaults.
func Budget(spec *gwxv1a1.BackendTrafficPolicySpec, policy string) (*config.RetryBudget, error) {
	rc := spec.RetryConstraint
	if rc == nil {
		return nil, nil
	}
	b := &config.RetryBudget{Policy: policy, Percent: DefaultPercent, Interval: DefaultInterval,
		MinRetries: DefaultMinRetries, MinInterval: DefaultMinInterval}
	if bd := rc.Budget; bd != nil {
		if bd.Percent != nil {
			if *bd.Percent < 0 || *bd.Percent > 100 {
				return nil, fmt.Errorf("retryConstraint.budget.percent %d is not between 0 and 100", *bd.Percent)
			}
			b.Percent = *bd.Percent
		}
		if bd.Interval != nil {
			d, err := duration(*bd.Interval)
			if err != nil || d < time.Second || d > time.Hour {
				return nil, fmt.Errorf("retryConstraint.budget.interval %q: interval cannot be greater than one hour or less than one second", *bd.Interval)
			}
			b.Interval = d
		}
	}
	if mr := rc.MinRetryRate; mr != nil {
		if mr.Count != nil {
			if *mr.Count < 1 || *mr.Count > 1000000 {
				return nil, fmt.Errorf("retryConstraint.minRetryRate.count %d is not between 1 and 1000000", *mr.Count)
			}
			b.MinRetries = *mr.Count
		}
		if mr.Interval != nil {
			d, err := duration(*mr.Interval)
			if err != nil || d <= 0 || d > time.Hour {
				return nil, fmt.Errorf("retryConstraint.minRetryRate.interval %q: interval cannot be greater than one hour", *mr.Interval)
			}
			b.MinInterval = d
		}
	}
	return b, nil
}

// duration parses a Gateway API Duration (GEP-2257, a subset of Go's).
func duration(d gwv1.Duration) (time.Duration, error) {
	v, err := time.ParseDuration(string(d))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %w", d, err)
	}
	return v, nil
}
