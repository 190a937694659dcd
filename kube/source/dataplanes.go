package source

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
)

// ParametersResource is the resource of PorticoParameters.
var ParametersResource = schema.GroupVersionResource{Group: parameters.Group, Version: parameters.Version, Resource: "porticoparameters"}

// dataPlaneInformers are the caches provisioning adds to a snapshot.
type dataPlaneInformers struct {
	parameters  cache.Store // nil when the CRD is not installed
	deployments appslisters.DeploymentLister
}

// dataPlaneSelector selects the Deployments Portico provisioned.
var dataPlaneSelector = labels.SelectorFromSet(labels.Set{
	wellknown.ManagedByLabel: wellknown.ManagedByValue, "app.kubernetes.io/component": "data-plane",
}).String()

// AddDataPlanes watches PorticoParameters (when dyn is set and
// their CRD is installed) and, when provisioning, the Deployments Portico
// provisioned (their status says whether a data plane is available).
func (in *Informers) AddDataPlanes(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, provisioning bool, h Handlers, log *zap.Logger) error {
	if dyn != nil {
		list, err := kube.Discovery().ServerResourcesForGroupVersion(parameters.APIVersion)
		switch {
		// The group is also BackendTrafficPolicy's: it may be served
		// without this CRD.
		case apierrors.IsNotFound(err) || err == nil && !servesResource(list, ParametersResource.Resource):
			log.Warn("the PorticoParameters CRD is not installed: every parametersRef to PorticoParameters is InvalidParameters")
		case err != nil:
			return fmt.Errorf("discover %s: %w", parameters.APIVersion, err)
		default:
			f := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
			inf := f.ForResource(ParametersResource).Informer()
			if err := inf.SetTransform(toParameters(log)); err != nil {
				return fmt.Errorf("PorticoParameters transform: %w", err)
			}
			if _, err := inf.AddEventHandler(anyHandler(h)); err != nil {
				return fmt.Errorf("PorticoParameters informer event handler: %w", err)
			}
			in.factories = append(in.factories, f)
			in.synced[parameters.Kind] = inf.HasSynced
			in.dataPlanes.parameters = inf.GetStore()
		}
	}
	if provisioning {
		f := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithTransform(stripManagedFields),
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = dataPlaneSelector }))
		inf := f.Apps().V1().Deployments().Informer()
		if _, err := inf.AddEventHandler(anyHandler(h)); err != nil {
			return fmt.Errorf("Deployment informer event handler: %w", err)
		}
		in.factories = append(in.factories, f)
		in.synced["Deployment"] = inf.HasSynced
		in.dataPlanes.deployments = f.Apps().V1().Deployments().Lister()
	}
	return nil
}

// toParameters turns the dynamic informer's objects into typed ones as
// they enter the cache, so that a snapshot hands translate the same
// pointer until the object changes. An object that does not decode (the
// CRD's schema makes that unlikely) keeps its name with a mode that fails
// validation, so that whoever names it is told InvalidParameters.
func toParameters(log *zap.Logger) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		p := &parameters.PorticoParameters{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			log.Warn("PorticoParameters does not decode", zap.String("namespace", u.GetNamespace()), zap.String("name", u.GetName()), zap.Error(err))
			p = &parameters.PorticoParameters{Spec: parameters.Spec{Mode: "Undecodable"}}
			p.Namespace, p.Name, p.UID, p.ResourceVersion = u.GetNamespace(), u.GetName(), u.GetUID(), u.GetResourceVersion()
		}
		p.ManagedFields = nil
		return p, nil
	}
}

// snapshotDataPlanes adds the PorticoParameters and provisioned
// Deployments to res.
func (in *Informers) snapshotDataPlanes(res *snapshot.Resources) error {
	if in.dataPlanes.parameters != nil {
		for _, obj := range in.dataPlanes.parameters.List() {
			if p, ok := obj.(*parameters.PorticoParameters); ok {
				res.Parameters = append(res.Parameters, p)
			}
		}
	}
	if in.dataPlanes.deployments != nil {
		var err error
		if res.Deployments, err = in.dataPlanes.deployments.List(labels.Everything()); err != nil {
			return fmt.Errorf("list Deployments: %w", err)
		}
	}
	// Listers list in a new order every time; translate compares
	// snapshots position by position (see arrivals). There are as many of
	// these as per-Gateway Gateways and classes: sorting is cheap.
	slices.SortFunc(res.Parameters, compareKeys)
	slices.SortFunc(res.Deployments, compareKeys)
	return nil
}

func compareKeys[T metav1.Object](a, b T) int {
	return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
}
