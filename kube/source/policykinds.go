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
)

// policyKind names one of Portico's own policy kinds (group portico.dev).
// There are no generated clients for them: the informers read them
// through the dynamic client and decode them as they enter the cache.
type policyKind struct {
	kind       string // BackendTrafficPolicy
	plural     string // BackendTrafficPolicies, for the log
	apiVersion string // portico.dev/v1alpha1, for discovery
	resource   schema.GroupVersionResource
	// absent ends the warning logged when the CRD is not installed: "no
	// <absent> applies".
	absent string
}

// policyObject is a pointer to a typed policy.
type policyObject[T any] interface {
	*T
	metav1.Object
}

// addPolicyInformer watches the policies of kind k, when dyn is set and
// their CRD is installed, and returns their store (nil when not watched).
// Their status is Portico's to write, so an update of the status alone
// does not rebuild (specHandler). also, when set, runs once the policies'
// factory is registered; its error aborts before the kind counts as
// watched.
func addPolicyInformer[T any, P policyObject[T]](in *Informers, k policyKind, kube kubernetes.Interface, dyn dynamic.Interface, h Handlers, log *zap.Logger, also func() error) (cache.Store, error) {
	if dyn == nil {
		return nil, nil
	}
	list, err := kube.Discovery().ServerResourcesForGroupVersion(k.apiVersion)
	switch {
	case apierrors.IsNotFound(err) || err == nil && !servesResource(list, k.resource.Resource):
		// The group serves PorticoParameters and the other policy kinds
		// too: it may be served without this CRD.
		log.Warn("the " + k.kind + " CRD is not installed: no " + k.absent + " applies")
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("discover %s: %w", k.apiVersion, err)
	}
	f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	inf := f.ForResource(k.resource).Informer()
	if err := inf.SetTransform(toPolicy[T, P](k.kind, log)); err != nil {
		return nil, fmt.Errorf("%s transform: %w", k.kind, err)
	}
	if _, err := inf.AddEventHandler(specHandler(h)); err != nil {
		return nil, fmt.Errorf("%s informer event handler: %w", k.kind, err)
	}
	in.factories = append(in.factories, f)
	if also != nil {
		if err := also(); err != nil {
			return nil, err
		}
	}
	in.synced[k.kind] = inf.HasSynced
	log.Debug("watching " + k.plural)
	return inf.GetStore(), nil
}

// servesResource reports whether a discovery list holds resource.
func servesResource(list *metav1.APIResourceList, resource string) bool {
	return list != nil && slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource })
}

// toPolicy turns the dynamic informer's objects into typed policies as
// they enter the cache. One that does not decode (the CRD's schema makes
// that unlikely) keeps its name and, when they decode, its targetRefs with
// an empty spec: translate then finds it invalid where it is attached, and
// a SecurityPolicy's targets answer 500 rather than go unguarded.
func toPolicy[T any, P policyObject[T]](kind string, log *zap.Logger) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		p := P(new(T))
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			log.Warn(kind+" does not decode", zap.String("namespace", u.GetNamespace()), zap.String("name", u.GetName()), zap.Error(err))
			p = P(new(T))
			refs, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "targetRefs")
			if found {
				// Only the targets: whatever failed to decode is left out.
				onlyTargets := map[string]any{"spec": map[string]any{"targetRefs": refs}}
				if runtime.DefaultUnstructuredConverter.FromUnstructured(onlyTargets, p) != nil {
					p = P(new(T))
				}
			}
			p.SetNamespace(u.GetNamespace())
			p.SetName(u.GetName())
			p.SetUID(u.GetUID())
			p.SetResourceVersion(u.GetResourceVersion())
			p.SetGeneration(u.GetGeneration())
			p.SetCreationTimestamp(u.GetCreationTimestamp())
		}
		p.SetManagedFields(nil)
		return p, nil
	}
}

// snapshotPolicies appends the policies cached in store (nil when not
// watched) to into, in namespace/name order (listers list in a new order
// every time; translate compares snapshots position by position).
func snapshotPolicies[T any, P policyObject[T]](store cache.Store, into *[]P) {
	if store == nil {
		return
	}
	for _, obj := range store.List() {
		if p, ok := obj.(P); ok {
			*into = append(*into, p)
		}
	}
	slices.SortFunc(*into, compareKeys)
}
