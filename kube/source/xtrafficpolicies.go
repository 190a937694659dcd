package source

import (
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
)

// XTrafficPolicyResource is the resource of XBackendTrafficPolicies.
var XTrafficPolicyResource = schema.GroupVersionResource{Group: xtrafficpolicy.Group, Version: xtrafficpolicy.Version, Resource: xtrafficpolicy.Resource}

// AddXTrafficPolicies watches XBackendTrafficPolicies, when dyn is set
// and their CRD (of the Gateway API's experimental channel) is installed
// (addPolicyInformer): a cluster with the standard channel only has none.
func (in *Informers) AddXTrafficPolicies(kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger) error {
	k := policyKind{kind: xtrafficpolicy.Kind, plural: "XBackendTrafficPolicies", apiVersion: xtrafficpolicy.APIVersion, resource: XTrafficPolicyResource,
		absent: "XBackendTrafficPolicy (experimental channel)"}
	var err error
	in.xTrafficPolicies, err = addPolicyInformer[xtrafficpolicy.Policy](in, k, kube, dyn, h, log, nil)
	return err
}
