package source

import (
	"fmt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	kubeinformers "k8s.io/client-go/informers"
	"slices"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
)

// SecurityPolicyResource is the resource of SecurityPolicies.
var SecurityPolicyResource = schema.GroupVersionResource{Group: securitypolicy.Group, Version: securitypolicy.Version, Resource: securitypolicy.Resource}

// AddSecurityPolicies watches SecurityPolicies, when dyn is set and
// their CRD is installed. Their status is Portico's to write, so an update
// of the status alone does not rebuild (specHandler).
func (in *Informers) AddSecurityPolicies(kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger) error {
	if dyn == nil {
		return nil
	}
	list, err := kube.Discovery().ServerResourcesForGroupVersion(securitypolicy.APIVersion)
	switch {
	case apierrors.IsNotFound(err) || err == nil && !servesResource(list, securitypolicy.Resource):
		// The group is also PorticoParameters' and
		// BackendTrafficPolicy's: it may be served without this CRD.
		log.Warn("the SecurityPolicy CRD is not installed: no security policy applies")
		return nil
	case err != nil:
		return fmt.Errorf("discover %s: %w", securitypolicy.APIVersion, err)
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := f.ForResource(SecurityPolicyResource).Informer()
	if err := inf.SetTransform(toSecurityPolicy(log)); err != nil {
		return fmt.Errorf("SecurityPolicy transform: %w", err)
	}
	if _, err := inf.AddEventHandler(specHandler(h)); err != nil {
		return fmt.Errorf("SecurityPolicy informer event handler: %w", err)
	}
	in.factories = append(in.factories, f)
	if err := in.addCredentialSecrets(kube, h); err != nil {
		return err
	}
	in.synced[securitypolicy.Kind] = inf.HasSynced
	in.securityPolicies = inf.GetStore()
	log.Debug("watching SecurityPolicies")
	return nil
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

// toSecurityPolicy turns the dynamic informer's objects into typed ones as
// they enter the cache. One that does not decode (the CRD's schema makes
// that unlikely) keeps its name and targets nothing valid, so that its
// status says it is invalid.
func toSecurityPolicy(log *zap.Logger) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		p := &securitypolicy.SecurityPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			log.Warn("SecurityPolicy does not decode", zap.String("namespace", u.GetNamespace()), zap.String("name", u.GetName()), zap.Error(err))
			p = &securitypolicy.SecurityPolicy{}
			p.Namespace, p.Name, p.UID, p.ResourceVersion, p.Generation = u.GetNamespace(), u.GetName(), u.GetUID(), u.GetResourceVersion(), u.GetGeneration()
			p.CreationTimestamp = u.GetCreationTimestamp()
		}
		p.ManagedFields = nil
		return p, nil
	}
}

// snapshotSecurityPolicies adds the cached SecurityPolicies to res,
// in namespace/name order (listers list in a new order every time;
// translate compares snapshots position by position).
func (in *Informers) snapshotSecurityPolicies(res *snapshot.Resources) {
	if in.securityPolicies == nil {
		return
	}
	for _, obj := range in.securityPolicies.List() {
		if p, ok := obj.(*securitypolicy.SecurityPolicy); ok {
			res.SecurityPolicies = append(res.SecurityPolicies, p)
		}
	}
	slices.SortFunc(res.SecurityPolicies, compareKeys)
}
