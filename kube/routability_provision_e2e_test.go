package kube

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/testkit/kubetest"
)

// TestProvisionAddressRoutability: per-Gateway data planes with the
// experimental CRDs. A Gateway asking only for routability Cluster gets a
// ClusterIP Service though its class asks for load balancers, and reports
// the cluster IP the API server allocated as Cluster; one asking for a
// default address and a Cluster one gets a LoadBalancer Service and, once
// the load balancer gave an address, reports both, each with its
// routability.
func TestProvisionAddressRoutability(t *testing.T) {
	env := kubetest.StartWith(t, kubetest.Options{Channel: "experimental"})
	f := &clusterFixture{&kubetest.ClusterFixture{T: t, Env: env}}
	f.Kube, f.Gateway = kubetest.Clients(t, env.Config)
	dir := t.TempDir()
	crd, err := os.ReadFile("../deploy/porticoparameters.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "crd.yaml"), crd, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := kubetest.ApplyManifests(context.Background(), env.Config, dir); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	pf := &provisionFixture{clusterFixture: f, dyn: dyn}
	ctx := t.Context()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)
	pf.parameters("portico-system", "dedicated", `{mode: PerGateway, replicas: 1, service: {type: LoadBalancer}}`)
	pf.class("dedicated", "portico-system", "dedicated")
	pf.startPortico("portico-0")

	ip, cluster := ptr.To(gwv1.IPAddressType), gwv1.GatewayAddressRoutabilityCluster
	pf.gateway(&gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "internal"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "dedicated", Addresses: []gwv1.GatewaySpecAddress{{Type: ip, Routability: cluster}}},
	})
	pf.gateway(&gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "mixed"},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "dedicated", Addresses: []gwv1.GatewaySpecAddress{{Type: ip}, {Type: ip, Routability: cluster}}},
	})
	service := func(name string) *corev1.Service {
		t.Helper()
		var svc *corev1.Service
		kubetest.WaitFor(t, 20*time.Second, "Service "+name, func() (err error) {
			svc, err = f.Kube.CoreV1().Services("apps").Get(ctx, name, metav1.GetOptions{})
			return err
		})
		return svc
	}
	internal, mixed := service("internal-dedicated"), service("mixed-dedicated")
	if internal.Spec.Type != corev1.ServiceTypeClusterIP || internal.Spec.ClusterIP == "" {
		t.Errorf("Service of a Cluster-only Gateway: %s %q, want ClusterIP with an address", internal.Spec.Type, internal.Spec.ClusterIP)
	}
	if mixed.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("Service of a Gateway asking for a default address too: %s, want LoadBalancer", mixed.Spec.Type)
	}
	addresses := func(name string, want ...string) func() error {
		return func() error {
			gw, err := f.Gateway.GatewayV1().Gateways("apps").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var got []string
			for _, a := range gw.Status.Addresses {
				got = append(got, a.Value+"="+string(ptr.Deref(a.Routability, "(unset)")))
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("%s addresses %v, want %v", name, got, want)
			}
			return conditionIs(gw.Status.Conditions, "AddressesAssigned", metav1.ConditionTrue, "AddressesAssigned", gw.Generation)
		}
	}
	kubetest.WaitFor(t, 20*time.Second, "internal's cluster IP", addresses("internal", internal.Spec.ClusterIP+"=Cluster"))

	// The load balancer gives the mixed Gateway's Service an address.
	kubetest.WaitFor(t, 10*time.Second, "load balancer address set", func() error {
		svc, err := f.Kube.CoreV1().Services("apps").Get(ctx, "mixed-dedicated", metav1.GetOptions{})
		if err != nil {
			return err
		}
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.20"}}
		_, err = f.Kube.CoreV1().Services("apps").UpdateStatus(ctx, svc, metav1.UpdateOptions{})
		return err // a conflict with the provisioner's apply is tried again
	})
	kubetest.WaitFor(t, 20*time.Second, "mixed's two addresses", addresses("mixed", "203.0.113.20=", mixed.Spec.ClusterIP+"=Cluster"))
}
