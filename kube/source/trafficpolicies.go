package source

import (
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/controlplane/trafficpolicy"
)

// TrafficPolicyResource is the resource of BackendTrafficPolicies.
var TrafficPolicyResource = schema.GroupVersionResource{Group: trafficpolicy.Group, Version: trafficpolicy.Version, Resource: trafficpolicy.Resource}

// AddTrafficPolicies watches BackendTrafficPolicies, when dyn is set and
// their CRD is installed (addPolicyInformer).
func (in *Informers) AddTrafficPolicies(kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger) error {
	k := policyKind{kind: trafficpolicy.Kind, plural: "BackendTrafficPolicies", apiVersion: trafficpolicy.APIVersion, resource: TrafficPolicyResource, absent: "traffic policy"}
	var err error
	in.trafficPolicies, err = addPolicyInformer[trafficpolicy.BackendTrafficPolicy](in, k, kube, dyn, h, log, nil)
	return err
}
