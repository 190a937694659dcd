package source

import (
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/controlplane/telemetrypolicy"
)

// TelemetryPolicyResource is the resource of XTelemetryPolicies.
var TelemetryPolicyResource = schema.GroupVersionResource{Group: telemetrypolicy.Group, Version: telemetrypolicy.Version, Resource: telemetrypolicy.Resource}

// AddTelemetryPolicies watches XTelemetryPolicies, when dyn is set and
// their experimental CRD is installed (addPolicyInformer): read through
// the dynamic client like Portico's own kinds, so that a cluster with the
// standard channel only runs without them.
func (in *Informers) AddTelemetryPolicies(kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger) error {
	k := policyKind{kind: telemetrypolicy.Kind, plural: "XTelemetryPolicies", apiVersion: telemetrypolicy.APIVersion, resource: TelemetryPolicyResource, absent: "telemetry policy"}
	var err error
	in.telemetryPolicies, err = addPolicyInformer[telemetrypolicy.XTelemetryPolicy](in, k, kube, dyn, h, log, nil)
	return err
}
