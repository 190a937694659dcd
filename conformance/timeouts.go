package conformance

import (
	"time"

	"sigs.k8s.io/gateway-api/conformance/utils/config"
)

// conditionWait bounds every wait of the suite for a status condition.
// Portico on a control plane of this same machine settles within seconds;
// the suite's defaults (60 to 180 s) are sized for clusters that provision
// load balancers, and would let a run with failures outlast its time budget.
const conditionWait = 30 * time.Second

// Timeouts are the suite's defaults with the condition waits capped at
// conditionWait. The waits for traffic to settle, for requests and for the
// base Pods to become Ready keep their defaults.
func Timeouts() config.TimeoutConfig {
	tc := config.DefaultTimeoutConfig()
	for _, d := range []*time.Duration{
		&tc.GatewayMustHaveAddress,
		&tc.GatewayMustHaveCondition,
		&tc.GatewayStatusMustHaveListeners,
		&tc.GatewayListenersMustHaveConditions,
		&tc.ListenerSetMustHaveCondition,
		&tc.ListenerSetListenersMustHaveConditions,
		&tc.GWCMustBeAccepted,
		&tc.HTTPRouteMustNotHaveParents,
		&tc.HTTPRouteMustHaveCondition,
		&tc.RouteMustHaveParents,
		&tc.LatestObservedGenerationSet,
	} {
		*d = min(*d, conditionWait)
	}
	return tc
}
