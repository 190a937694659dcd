package source

import (
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/controlplane/securitypolicy"
)

// SecurityPolicyResource is the resource of SecurityPolicies.
var SecurityPolicyResource = schema.GroupVersionResource{Group: securitypolicy.Group, Version: securitypolicy.Version, Resource: securitypolicy.Resource}

// AddSecurityPolicies watches SecurityPolicies, when dyn is set and
// their CRD is installed (addPolicyInformer), and the Secrets they read.
func (in *Informers) AddSecurityPolicies(kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger) error {
	k := policyKind{kind: securitypolicy.Kind, plural: "SecurityPolicies", apiVersion: securitypolicy.APIVersion, resource: SecurityPolicyResource, absent: "security policy"}
	var err error
	in.securityPolicies, err = addPolicyInformer[securitypolicy.SecurityPolicy](in, k, kube, dyn, h, log, func() error { return in.addCredentialSecrets(kube, h) })
	return err
}

// addCredentialSecrets watches the Secrets SecurityPolicies read
// (htpasswd files, API keys): those labelled securitypolicy.SecretLabel
// that are not of type kubernetes.io/tls (New watches those already), so
// that the two watches never hold one Secret twice. The label keeps the
// cache to what is meant for Portico: a cluster holds many other Secrets,
// some large.
func (in *Informers) addCredentialSecrets(kube kubernetes.Interface, h Handlers) error {
	f := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0,
		kubeinformers.WithTransform(stripManagedFields),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = securitypolicy.SecretLabel
			o.FieldSelector = fields.OneTermNotEqualSelector("type", string(corev1.SecretTypeTLS)).String()
		}))
	inf := f.Core().V1().Secrets().Informer()
	registration, err := inf.AddEventHandler(in.order.secrets.handler(anyHandler(h)))
	if err != nil {
		return fmt.Errorf("credential Secret informer event handler: %w", err)
	}
	in.factories = append(in.factories, f)
	in.synced["Secret "+securitypolicy.SecretLabel] = registration.HasSynced
	return nil
}
