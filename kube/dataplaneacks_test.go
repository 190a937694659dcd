package kube

import (
	"testing"

	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/dataplane"
	"portico.dev/portico/resources"
	"portico.dev/portico/status"
)

// TestDemoteUnacknowledged: a Gateway with a data plane of its own is
// Programmed only once its Deployment records that its data plane applied
// the configuration the controller would send now; a Gateway without a
// data plane of its own is left alone.
func TestDemoteUnacknowledged(t *testing.T) {
	web := types.NamespacedName{Namespace: "apps", Name: "web"}
	shared := types.NamespacedName{Namespace: "apps", Name: "shared"}
	hub := dataplane.NewHub(nil, zaptest.NewLogger(t))
	hub.Publish([]dataplane.Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: &resources.Resources{}}})
	current, _ := hub.Version(web)
	c := &Cluster{hub: hub}
	gateways := []*gwv1.Gateway{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web"}, Spec: gwv1.GatewaySpec{GatewayClassName: "dedicated"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "shared"}, Spec: gwv1.GatewaySpec{GatewayClassName: "portico"}},
	}
	programmed := func() *status.Computed {
		st := &status.Computed{Gateways: map[types.NamespacedName]gwv1.GatewayStatus{}}
		for _, k := range []types.NamespacedName{web, shared} {
			st.Gateways[k] = gwv1.GatewayStatus{Conditions: []metav1.Condition{{Type: "Programmed", Status: metav1.ConditionTrue, Reason: "Programmed"}}}
		}
		return st
	}
	for _, tc := range []struct {
		applied string
		want    metav1.ConditionStatus
	}{{"", metav1.ConditionFalse}, {"an-older-one", metav1.ConditionFalse}, {current, metav1.ConditionTrue}} {
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-dedicated",
			Annotations: map[string]string{AppliedVersionAnnotation: tc.applied}}}
		st := programmed()
		c.demoteUnacknowledged(st, &resources.Resources{Gateways: gateways, Deployments: []*appsv1.Deployment{dep}})
		if got := st.Gateways[web].Conditions[0]; got.Status != tc.want {
			t.Errorf("applied %q: Programmed %s (%s), want %s", tc.applied, got.Status, got.Message, tc.want)
		}
		if got := st.Gateways[shared].Conditions[0]; got.Status != metav1.ConditionTrue {
			t.Errorf("a shared Gateway was demoted: %s", got.Message)
		}
	}
}
