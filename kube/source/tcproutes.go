package source

import (
	"fmt"
	"slices"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
)

// AddTCPRoutes watches TCPRoutes when their CRD serves version v1 (both
// channels since Gateway API v1.7): a cluster whose CRDs are of an older
// release has none to list, and an informer of a missing kind would never
// sync.
// Without it snapshots hold no TCPRoute. Call it before Start.
func (in *Informers) AddTCPRoutes(kube kubernetes.Interface, gw gatewayclient.Interface, h Handlers, log *zap.Logger) error {
	if ok, err := servedInV1(kube, "tcproutes", "TCPRoute", log); !ok || err != nil {
		return err
	}
	f := gwinformers.NewSharedInformerFactoryWithOptions(gw, 0, gwinformers.WithTransform(stripManagedFields))
	inf := f.Gateway().V1().TCPRoutes().Informer()
	registration, err := inf.AddEventHandler(in.order.tcpRoutes.handler(specHandler(h)))
	if err != nil {
		return fmt.Errorf("TCPRoute informer event handler: %w", err)
	}
	in.factories = append(in.factories, f)
	in.synced["TCPRoute"] = registration.HasSynced
	in.tcpRoutes = f.Gateway().V1().TCPRoutes().Lister()
	return nil
}

// servedInV1 reports whether the API server serves resource (of kind) in
// gateway.networking.k8s.io/v1, and logs it when it does not.
func servedInV1(kube kubernetes.Interface, resource, kind string, log *zap.Logger) (bool, error) {
	list, err := kube.Discovery().ServerResourcesForGroupVersion(gwv1.GroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		list = &metav1.APIResourceList{}
	case err != nil:
		return false, fmt.Errorf("discover %s: %w", gwv1.GroupVersion, err)
	}
	if !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource }) {
		log.Info("the " + kind + " CRD does not serve gateway.networking.k8s.io/v1: " + kind + "s are not served")
		return false, nil
	}
	return true, nil
}
