package source

import (
	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/controlplane/clientpolicy"
)

// ClientPolicyResource is the resource of ClientTrafficPolicies.
var ClientPolicyResource = schema.GroupVersionResource{Group: clientpolicy.Group, Version: clientpolicy.Version, Resource: clientpolicy.Resource}

// AddClientPolicies watches ClientTrafficPolicies, when dyn is set and
// their CRD is installed (addPolicyInformer).
func (in *Informers) AddClientPolicies(kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger) error {
	k := policyKind{kind: clientpolicy.Kind, plural: "ClientTrafficPolicies", apiVersion: clientpolicy.APIVersion, resource: ClientPolicyResource, absent: "client policy"}
	var err error
	in.clientPolicies, err = addPolicyInformer[clientpolicy.ClientTrafficPolicy](in, k, kube, dyn, h, log, nil)
	return err
}
