package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/conformance/loadbalancer"
	"portico.dev/portico/internal/testkit/kubetest"
)

// perGatewayParameters names the PorticoParameters of the per-Gateway run.
const perGatewayParameters = "per-gateway"

// startPerGateway installs the PorticoParameters CRD and the class's
// parameters, and starts the stand-in load balancer on the Gateway pool.
func (c *Cluster) startPerGateway(ctx context.Context, client kubernetes.Interface) error {
	raw, err := os.ReadFile(c.opts.ParametersCRD)
	if err != nil {
		return fmt.Errorf("harness: PorticoParameters CRD: %w", err)
	}
	dir := filepath.Join(c.opts.Dir, "crds")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "porticoparameters.yaml"), raw, 0o644); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	if err := kubetest.ApplyManifests(ctx, c.Config, dir); err != nil {
		return fmt.Errorf("harness: PorticoParameters CRD: %w", err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("harness: dynamic client: %w", err)
	}
	params := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "portico.dev/v1alpha1",
		"kind":       "PorticoParameters",
		"metadata":   map[string]any{"name": perGatewayParameters, "namespace": porticoNamespace},
		// One replica: the suite checks traffic, not scale. drainTimeout 1s:
		// the suite deletes Gateways after every test.
		"spec": map[string]any{"mode": "PerGateway", "replicas": int64(1), "drainTimeout": "1s"},
	}}
	gvr := schema.GroupVersionResource{Group: "portico.dev", Version: "v1alpha1", Resource: "porticoparameters"}
	if err := c.ensureNamespace(ctx, client); err != nil {
		return err
	}
	if _, err := dyn.Resource(gvr).Namespace(porticoNamespace).Create(ctx, params, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("harness: PorticoParameters: %w", err)
	}
	lb := loadbalancer.New(loadbalancer.Config{Client: client, Pool: c.gatewayPool, Logf: c.opts.Logf})
	lbCtx, stop := context.WithCancel(context.Background())
	c.stopLB = stop
	c.lbDone.Go(func() {
		if err := lb.Run(lbCtx); err != nil {
			c.opts.Logf("harness: load balancer: %v", err)
		}
	})
	return nil
}
