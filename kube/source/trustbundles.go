package source

import (
	"fmt"

	"go.uber.org/zap"
	certv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
)

// AddClusterTrustBundles watches ClusterTrustBundles (certificates.k8s.io/v1,
// served by default since Kubernetes 1.37) when the API server serves them:
// an informer of a kind the cluster does not serve would never sync.
// Without it snapshots hold none, and a reference to one is unresolved
// where it is made. Every change rebuilds, as for a ConfigMap's ca.crt:
// the bundles Portico reads are few and a rotation must reach the data
// plane. Call it before Start.
func (in *Informers) AddClusterTrustBundles(kube kubernetes.Interface, h Handlers, log *zap.Logger) error {
	list, err := kube.Discovery().ServerResourcesForGroupVersion(certv1.SchemeGroupVersion.String())
	switch {
	case apierrors.IsNotFound(err) || err == nil && !servesResource(list, "clustertrustbundles"):
		log.Info("the API server does not serve certificates.k8s.io/v1 ClusterTrustBundles: references to them are not resolved")
		return nil
	case err != nil:
		return fmt.Errorf("discover %s: %w", certv1.SchemeGroupVersion, err)
	}
	f := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithTransform(stripManagedFields))
	inf := f.Certificates().V1().ClusterTrustBundles().Informer()
	registration, err := inf.AddEventHandler(in.order.trustBundles.handler(anyHandler(h)))
	if err != nil {
		return fmt.Errorf("ClusterTrustBundle informer event handler: %w", err)
	}
	in.factories = append(in.factories, f)
	in.synced["ClusterTrustBundle"] = registration.HasSynced
	return nil
}
