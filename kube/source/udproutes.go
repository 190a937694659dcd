package source

import (
	"fmt"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
)

// AddUDPRoutes watches UDPRoutes when their CRD serves version v1 (both
// channels since Gateway API v1.7), as AddTCPRoutes does TCPRoutes.
// Without it snapshots hold no UDPRoute. Call it before Start.
func (in *Informers) AddUDPRoutes(kube kubernetes.Interface, gw gatewayclient.Interface, h Handlers, log *zap.Logger) error {
	if ok, err := servedInV1(kube, "udproutes", "UDPRoute", log); !ok || err != nil {
		return err
	}
	f := gwinformers.NewSharedInformerFactoryWithOptions(gw, 0, gwinformers.WithTransform(stripManagedFields))
	inf := f.Gateway().V1().UDPRoutes().Informer()
	registration, err := inf.AddEventHandler(in.order.udpRoutes.handler(specHandler(h)))
	if err != nil {
		return fmt.Errorf("UDPRoute informer event handler: %w", err)
	}
	in.factories = append(in.factories, f)
	in.synced["UDPRoute"] = registration.HasSynced
	in.udpRoutes = f.Gateway().V1().UDPRoutes().Lister()
	return nil
}
