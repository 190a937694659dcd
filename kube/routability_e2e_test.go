package kube

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/translate"
)

// TestClusterAddressRoutability drives spec.addresses[].routability
// through a real API server with the experimental CRDs: the API server
// refuses a reserved prefix; Gateways are served on the Service in front
// of Portico, whose cluster IP (allocated by the API server from its
// ServiceCIDR) meets a request for Cluster and whose load balancer address
// meets the others; a Cluster request for an address outside the
// ServiceCIDR is left unmet (NotAssigned, or PartiallyAssigned beside a
// default entry), never met with the load balancer's address; every
// status address says its routability.
func TestClusterAddressRoutability(t *testing.T) {
	env := kubetest.StartWith(t, kubetest.Options{Channel: "experimental"})
	kc, gc := kubetest.Clients(t, env.Config)
	f := &clusterFixture{&kubetest.ClusterFixture{T: t, Env: env, Kube: kc, Gateway: gc}}
	ctx := t.Context()
	gws := gc.GatewayV1()
	f.Namespace("portico-system", nil)
	f.Namespace("apps", nil)

	front, err := kc.CoreV1().Services("portico-system").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	front.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.5"}}
	if front, err = kc.CoreV1().Services("portico-system").UpdateStatus(ctx, front, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterIP := netip.MustParseAddr(front.Spec.ClusterIP)
	// The cluster IP is of the API server's ServiceCIDR: what Cluster
	// promises.
	cidr, err := kc.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inCIDR := func(a netip.Addr) bool {
		for _, c := range cidr.Spec.CIDRs {
			if p, err := netip.ParsePrefix(c); err == nil && p.Contains(a) {
				return true
			}
		}
		return false
	}
	if !inCIDR(clusterIP) {
		t.Fatalf("cluster IP %s not in the ServiceCIDR %v", clusterIP, cidr.Spec.CIDRs)
	}
	outside := "192.0.2.99"
	if inCIDR(netip.MustParseAddr(outside)) {
		t.Fatalf("%s is in the ServiceCIDR %v", outside, cidr.Spec.CIDRs)
	}

	mustCreate(t)(gws.GatewayClasses().Create(ctx, &gwv1.GatewayClass{
		ObjectMeta: metav1.ObjectMeta{Name: "portico"},
		Spec:       gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName},
	}, metav1.CreateOptions{}))
	ip := ptr.To(gwv1.IPAddressType)
	port := gwv1.PortNumber(freeport.Port(t))
	gateway := func(name string, addrs ...gwv1.GatewaySpecAddress) *gwv1.Gateway {
		return &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: gwv1.GatewaySpec{
				GatewayClassName: "portico", Addresses: addrs,
				Listeners: []gwv1.Listener{{Name: "http", Port: port, Protocol: gwv1.HTTPProtocolType,
					Hostname: ptr.To(gwv1.Hostname(name + ".example.com"))}},
			},
		}
	}
	// Admission: the k8s.io domain is reserved, and bare values other
	// than Cluster are refused.
	for _, bad := range []gwv1.GatewayAddressRoutabilityType{"k8s.io/internal", "gateway.networking.k8s.io/x", "Public"} {
		_, err := gws.Gateways("apps").Create(ctx, gateway("refused", gwv1.GatewaySpecAddress{Type: ip, Routability: bad}), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "Routability must be empty, Cluster, or an implementation-specific prefixed path") {
			t.Errorf("routability %q: %v, want refused", bad, err)
		}
	}
	cluster := gwv1.GatewayAddressRoutabilityCluster
	for _, gw := range []*gwv1.Gateway{
		gateway("internal", gwv1.GatewaySpecAddress{Type: ip, Routability: cluster}),
		gateway("both", gwv1.GatewaySpecAddress{Type: ip}, gwv1.GatewaySpecAddress{Type: ip, Routability: cluster}),
		gateway("sentinel", gwv1.GatewaySpecAddress{Type: ip, Routability: "testing.x-k8s.io/sentinel"}),
		gateway("outside", gwv1.GatewaySpecAddress{Type: ip, Value: outside, Routability: cluster}),
		gateway("partial", gwv1.GatewaySpecAddress{Type: ip, Value: outside, Routability: cluster}, gwv1.GatewaySpecAddress{Type: ip}),
		gateway("plain"),
	} {
		mustCreate(t)(gws.Gateways("apps").Create(ctx, gw, metav1.CreateOptions{}))
	}

	f.startPortico(env.Config, "127.0.0.1", "portico-a", func(s *replicaSetup) {
		s.opts.Translate.Shared = &translate.SharedAddresses{Service: types.NamespacedName{Namespace: "portico-system", Name: "portico"}}
	})

	type addr struct{ value, routability string }
	expect := func(name string, want []addr, assigned metav1.ConditionStatus, reason string, programmed metav1.ConditionStatus, programmedReason string) {
		t.Helper()
		kubetest.WaitFor(t, 15*time.Second, name+" status", func() error {
			gw, err := gws.Gateways("apps").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var got []addr
			for _, a := range gw.Status.Addresses {
				if a.Routability == nil {
					return fmt.Errorf("address %s has no routability", a.Value)
				}
				got = append(got, addr{a.Value, string(*a.Routability)})
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				return fmt.Errorf("addresses %v, want %v", got, want)
			}
			if err := conditionIs(gw.Status.Conditions, "AddressesAssigned", assigned, reason, gw.Generation); err != nil {
				return err
			}
			c := meta.FindStatusCondition(gw.Status.Conditions, "Programmed")
			if c == nil || c.Status != programmed || (programmedReason != "" && c.Reason != programmedReason) {
				return fmt.Errorf("Programmed %+v, want %s %s", c, programmed, programmedReason)
			}
			return nil
		})
	}
	lb, cip := addr{"203.0.113.5", ""}, addr{clusterIP.String(), "Cluster"}
	expect("internal", []addr{cip}, metav1.ConditionTrue, "AddressesAssigned", metav1.ConditionTrue, "")
	expect("both", []addr{lb, cip}, metav1.ConditionTrue, "AddressesAssigned", metav1.ConditionTrue, "")
	expect("sentinel", []addr{{"203.0.113.5", "testing.x-k8s.io/sentinel"}}, metav1.ConditionTrue, "AddressesAssigned", metav1.ConditionTrue, "")
	expect("outside", nil, metav1.ConditionFalse, "NotAssigned", metav1.ConditionFalse, "AddressNotAssigned")
	expect("partial", []addr{lb}, metav1.ConditionFalse, "PartiallyAssigned", metav1.ConditionTrue, "")
	expect("plain", []addr{lb}, metav1.ConditionTrue, "AddressesAssigned", metav1.ConditionTrue, "")

	// Without its load balancer address, the Service offers its cluster
	// IP: reported as Cluster to a Gateway asking for nothing, and the
	// sentinel request is met by it.
	front, err = kc.CoreV1().Services("portico-system").Get(ctx, "portico", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	front.Status.LoadBalancer.Ingress = nil
	if _, err := kc.CoreV1().Services("portico-system").UpdateStatus(ctx, front, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("plain", []addr{cip}, metav1.ConditionTrue, "AddressesAssigned", metav1.ConditionTrue, "")
	expect("sentinel", []addr{{clusterIP.String(), "testing.x-k8s.io/sentinel"}}, metav1.ConditionTrue, "AddressesAssigned", metav1.ConditionTrue, "")
}
