package source

import (
	"fmt"
	"slices"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
)

// ClientPolicyResource is the resource of ClientTrafficPolicies.
var ClientPolicyResource = schema.GroupVersionResource{Group: clientpolicy.Group, Version: clientpolicy.Version, Resource: clientpolicy.Resource}

// AddClientPolicies watches ClientTrafficPolicies, when dyn is set and
// their CRD is installed. Their status is Portico's to write, so an update
// of the status alone does not rebuild (specHandler).
func (in *Informers) AddClientPolicies(kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger) error {
	if dyn == nil {
		return nil
	}
	list, err := kube.Discovery().ServerResourcesForGroupVersion(clientpolicy.APIVersion)
	switch {
	case apierrors.IsNotFound(err) || err == nil && !servesResource(list, clientpolicy.Resource):
		log.Warn("the ClientTrafficPolicy CRD is not installed: no client policy applies")
		return nil
	case err != nil:
		return fmt.Errorf("discover %s: %w", clientpolicy.APIVersion, err)
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := f.ForResource(ClientPolicyResource).Informer()
	if err := inf.SetTransform(toClientPolicy(log)); err != nil {
		return fmt.Errorf("ClientTrafficPolicy transform: %w", err)
	}
	if _, err := inf.AddEventHandler(specHandler(h)); err != nil {
		return fmt.Errorf("ClientTrafficPolicy informer event handler: %w", err)
	}
	in.factories = append(in.factories, f)
	in.synced[clientpolicy.Kind] = inf.HasSynced
	in.clientPolicies = inf.GetStore()
	log.Debug("watching ClientTrafficPolicies")
	return nil
}

// toClientPolicy turns the dynamic informer's objects into typed ones as
// they enter the cache; one that does not decode keeps its name and
// targets nothing valid, so that its status says it is invalid.
func toClientPolicy(log *zap.Logger) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		p := &clientpolicy.ClientTrafficPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			log.Warn("ClientTrafficPolicy does not decode", zap.String("namespace", u.GetNamespace()), zap.String("name", u.GetName()), zap.Error(err))
			p = &clientpolicy.ClientTrafficPolicy{}
			p.Namespace, p.Name, p.UID, p.ResourceVersion, p.Generation = u.GetNamespace(), u.GetName(), u.GetUID(), u.GetResourceVersion(), u.GetGeneration()
			p.CreationTimestamp = u.GetCreationTimestamp()
		}
		p.ManagedFields = nil
		return p, nil
	}
}

// snapshotClientPolicies adds the cached ClientTrafficPolicies to res, in
// namespace/name order.
func (in *Informers) snapshotClientPolicies(res *snapshot.Resources) {
	if in.clientPolicies == nil {
		return
	}
	for _, obj := range in.clientPolicies.List() {
		if p, ok := obj.(*clientpolicy.ClientTrafficPolicy); ok {
			res.ClientPolicies = append(res.ClientPolicies, p)
		}
	}
	slices.SortFunc(res.ClientPolicies, compareKeys)
}
