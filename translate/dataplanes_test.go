package translate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestDataPlaneAddresses: a data plane's LoadBalancer Service gives the
// Gateway its load balancer's addresses, and none before it has one; other
// Services give their cluster IPs.
func TestDataPlaneAddresses(t *testing.T) {
	lb := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"}}}
	if got := dataPlaneAddresses(lb); len(got) != 0 {
		t.Errorf("LoadBalancer Service without ingress: %v, want no address", got)
	}
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7"}}
	if got := dataPlaneAddresses(lb); len(got) != 1 || got[0].Value != "198.51.100.7" {
		t.Errorf("LoadBalancer Service with ingress: %v, want 198.51.100.7", got)
	}
	cluster := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.11", ClusterIPs: []string{"10.96.0.11"}}}
	if got := dataPlaneAddresses(cluster); len(got) != 1 || got[0].Value != "10.96.0.11" {
		t.Errorf("ClusterIP Service: %v, want 10.96.0.11", got)
	}
}

// TestDataPlaneLoadBalancerStatus: a per-Gateway Gateway whose
// LoadBalancer Service has no load balancer address yet is not Programmed:
// AddressNotUsable when spec.addresses asks for addresses the load
// balancer did not give, AddressNotAssigned otherwise; it is Programmed
// with the load balancer's address once there is one.
func TestDataPlaneLoadBalancerStatus(t *testing.T) {
	const objects = `apiVersion: portico.dev/v1alpha1
kind: PorticoParameters
metadata: {name: own, namespace: portico-system}
spec: {mode: PerGateway, service: {type: LoadBalancer}}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: dedicated}
spec:
  controllerName: portico.dev/gateway-controller
  parametersRef: {group: portico.dev, kind: PorticoParameters, name: own, namespace: portico-system}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: apps}
spec:
  gatewayClassName: dedicated
  addresses: [{type: IPAddress, value: 198.51.100.9}]
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: v1
kind: Service
metadata: {name: web-dedicated, namespace: apps}
spec:
  type: LoadBalancer
  loadBalancerIP: 198.51.100.9
  clusterIP: 10.96.0.10
  ports: [{name: http-80, port: 80}]
`
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)
	res.Deployments = []*appsv1.Deployment{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-dedicated"},
		Status: appsv1.DeploymentStatus{AvailableReplicas: 1}}}
	web := types.NamespacedName{Namespace: "apps", Name: "web"}
	programmed := func() *metav1.Condition {
		_, st := newTranslator().Translate(res)
		return meta.FindStatusCondition(st.Gateways.At(web).Conditions, "Programmed")
	}

	if c := programmed(); c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.GatewayReasonAddressNotUsable) {
		t.Errorf("address asked for, none given: Programmed %+v, want False AddressNotUsable", c)
	}
	res.Gateways[0].Spec.Addresses = nil
	if c := programmed(); c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.GatewayReasonAddressNotAssigned) {
		t.Errorf("no address asked for, none given: Programmed %+v, want False AddressNotAssigned", c)
	}
	res.Services[0].Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.9"}}
	if c := programmed(); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("load balancer address given: Programmed %+v, want True", c)
	}
}

// TestDataPlaneNameCollision: Gateway "web" of class "public-portico" and
// Gateway "web-public" of class "portico" both map to data plane objects
// named "web-public-portico". The Service and Deployment of that name are
// the first created Gateway's; the other does not get their addresses and
// is not Programmed, with a reason that says why.
func TestDataPlaneNameCollision(t *testing.T) {
	const objects = `apiVersion: portico.dev/v1alpha1
kind: PorticoParameters
metadata: {name: own, namespace: portico-system}
spec: {mode: PerGateway}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: public-portico}
spec:
  controllerName: portico.dev/gateway-controller
  parametersRef: {group: portico.dev, kind: PorticoParameters, name: own, namespace: portico-system}
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: portico}
spec:
  controllerName: portico.dev/gateway-controller
  parametersRef: {group: portico.dev, kind: PorticoParameters, name: own, namespace: portico-system}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: apps}
spec:
  gatewayClassName: public-portico
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web-public, namespace: apps}
spec:
  gatewayClassName: portico
  listeners: [{name: http, port: 8080, protocol: HTTP}]
---
apiVersion: v1
kind: Service
metadata: {name: web-public-portico, namespace: apps}
spec:
  type: ClusterIP
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10]
  ports: [{name: http-80, port: 80}]
`
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)
	res.Deployments = []*appsv1.Deployment{{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-public-portico"},
		Status: appsv1.DeploymentStatus{AvailableReplicas: 1}}}
	for _, first := range []string{"web", "web-public"} {
		t.Run(first+" first", func(t *testing.T) {
			other := map[string]string{"web": "web-public", "web-public": "web"}[first]
			for _, gw := range res.Gateways {
				at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
				if gw.Name != first {
					at = at.Add(time.Minute)
				}
				gw.CreationTimestamp = metav1.NewTime(at)
			}
			_, st := newTranslator().Translate(res)
			holder, loser := st.Gateways.At(types.NamespacedName{Namespace: "apps", Name: first}), st.Gateways.At(types.NamespacedName{Namespace: "apps", Name: other})
			if c := meta.FindStatusCondition(holder.Conditions, "Programmed"); c == nil || c.Status != metav1.ConditionTrue || len(holder.Addresses) != 1 {
				t.Errorf("%s, created first: Programmed %+v, addresses %v, want True with the Service's address", first, c, holder.Addresses)
			}
			c := meta.FindStatusCondition(loser.Conditions, "Programmed")
			if c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.GatewayReasonInvalid) || !strings.Contains(c.Message, "web-public-portico") {
				t.Errorf("%s, created second: Programmed %+v, want False Invalid naming web-public-portico", other, c)
			}
			if len(loser.Addresses) != 0 {
				t.Errorf("%s, created second: addresses %v, want none (they are the other Gateway's)", other, loser.Addresses)
			}
		})
	}
}
