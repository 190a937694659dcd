package source

import (
	"fmt"
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

	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
)

// TrafficPolicyResource is the resource of BackendTrafficPolicies.
var TrafficPolicyResource = schema.GroupVersionResource{Group: trafficpolicy.Group, Version: trafficpolicy.Version, Resource: trafficpolicy.Resource}

// AddTrafficPolicies watches BackendTrafficPolicies, when dyn is set and
// their CRD is installed. Their status is Portico's to write, so an update
// of the status alone does not rebuild (specHandler).
func (in *Informers) AddTrafficPolicies(kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger) error {
	if dyn == nil {
		return nil
	}
	list, err := kube.Discovery().ServerResourcesForGroupVersion(trafficpolicy.APIVersion)
	switch {
	case apierrors.IsNotFound(err) || err == nil && !servesResource(list, trafficpolicy.Resource):
		// The group is also PorticoParameters': it may be served without
		// this CRD.
		log.Warn("the BackendTrafficPolicy CRD is not installed: no traffic policy applies")
		return nil
	case err != nil:
		return fmt.Errorf("discover %s: %w", trafficpolicy.APIVersion, err)
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := f.ForResource(TrafficPolicyResource).Informer()
	if err := inf.SetTransform(toTrafficPolicy(log)); err != nil {
		return fmt.Errorf("BackendTrafficPolicy transform: %w", err)
	}
	if _, err := inf.AddEventHandler(specHandler(h)); err != nil {
		return fmt.Errorf("BackendTrafficPolicy informer event handler: %w", err)
	}
	in.factories = append(in.factories, f)
	in.synced[trafficpolicy.Kind] = inf.HasSynced
	in.trafficPolicies = inf.GetStore()
	log.Debug("watching BackendTrafficPolicies")
	return nil
}

// servesResource reports whether a discovery list holds resource.
func servesResource(list *metav1.APIResourceList, resource string) bool {
	return list != nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource })
}

// toTrafficPolicy turns the dynamic informer's objects into typed ones as
// they enter the cache. One that does not decode (the CRD's schema makes
// that unlikely) keeps its name and targets nothing valid, so that its
// status says it is invalid.
func toTrafficPolicy(log *zap.Logger) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		p := &trafficpolicy.BackendTrafficPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			log.Warn("BackendTrafficPolicy does not decode", zap.String("namespace", u.GetNamespace()), zap.String("name", u.GetName()), zap.Error(err))
			p = &trafficpolicy.BackendTrafficPolicy{}
			p.Namespace, p.Name, p.UID, p.ResourceVersion, p.Generation = u.GetNamespace(), u.GetName(), u.GetUID(), u.GetResourceVersion(), u.GetGeneration()
			p.CreationTimestamp = u.GetCreationTimestamp()
		}
		p.ManagedFields = nil
		return p, nil
	}
}

// snapshotTrafficPolicies adds the cached BackendTrafficPolicies to res,
// in namespace/name order (listers list in a new order every time;
// translate compares snapshots position by position).
func (in *Informers) snapshotTrafficPolicies(res *snapshot.Resources) {
	if in.trafficPolicies == nil {
		return
	}
	for _, obj := range in.trafficPolicies.List() {
		if p, ok := obj.(*trafficpolicy.BackendTrafficPolicy); ok {
			res.TrafficPolicies = append(res.TrafficPolicies, p)
		}
	}
	slices.SortFunc(res.TrafficPolicies, compareKeys)
}
