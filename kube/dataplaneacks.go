package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/conditions"
	"portico.dev/portico/dataplane"
	"portico.dev/portico/provision"
	"portico.dev/portico/resources"
	"portico.dev/portico/status"
)

// AppliedVersionAnnotation is set on a data plane's Deployment to the
// version of the configuration its pods acknowledged. Acknowledgements reach
// whichever controller replica a data plane dialled; the annotation brings
// them to the leader, which writes status. It is metadata of the
// Deployment, not of its pod template: it rolls nothing.
const AppliedVersionAnnotation = "portico.dev/applied-version"

// recordAck writes an acknowledgement of a complete apply onto the data
// plane's Deployment, off the acknowledging request.
func (c *Cluster) recordAck(gw types.NamespacedName, deployment string, a dataplane.Ack) {
	if a.Error != "" {
		return // the Gateway stays waiting; the hub logged what failed
	}
	go func() {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{AppliedVersionAnnotation: a.Version}}})
		if err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Kube.AppsV1().Deployments(gw.Namespace).Patch(ctx, deployment, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager + "-acks"}); err != nil {
			c.Log.Info("acknowledgement not recorded", zap.Stringer("gateway", gw), zap.String("version", a.Version), zap.Error(err))
		}
	}()
}

// demoteUnacknowledged keeps a Gateway with a data plane of its own from
// being Programmed until its data plane acknowledged the configuration
// this replica would send it now.
func (c *Cluster) demoteUnacknowledged(st *status.Computed, res *resources.Resources) {
	if c.hub == nil {
		return
	}
	deployments := deploymentsByName(res.Deployments)
	for _, gw := range res.Gateways {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		gs, ok := st.Gateways[key]
		if !ok {
			continue
		}
		current, _ := c.hub.Version(key)
		if current == "" {
			continue // no data plane of its own
		}
		name := provision.Name(gw.Name, string(gw.Spec.GatewayClassName))
		d := deployments[[2]string{gw.Namespace, name}]
		if d != nil && d.Annotations[AppliedVersionAnnotation] == current {
			continue
		}
		gs.Conditions = conditions.Demote(gs.Conditions, gwv1.GatewayConditionProgrammed, gwv1.GatewayReasonPending,
			fmt.Sprintf("waiting for the data plane (Deployment %s/%s) to apply configuration %s", gw.Namespace, name, current))
		st.Gateways[key] = gs
	}
}
