package translate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
)

func TestGatewayAddresses(t *testing.T) {
	for value, want := range map[string]gwv1.AddressType{
		"192.0.2.1":       gwv1.IPAddressType,
		"2001:db8::1":     gwv1.IPAddressType,
		"lb.example.net":  gwv1.HostnameAddressType,
		"192.0.2.1.nip.x": gwv1.HostnameAddressType,
	} {
		if got := GatewayAddress(value); *got.Type != want || got.Value != value {
			t.Errorf("GatewayAddress(%q) = %s %s", value, *got.Type, got.Value)
		}
	}

	svc := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10", "fd00::10"}}}
	if got := serviceAddresses(svc); len(got) != 2 || got[0].Value != "198.19.0.10" || got[1].Value != "fd00::10" {
		t.Errorf("without a load balancer: %+v, want the cluster IPs", got)
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{Hostname: "lb.example.net"}, {IP: "192.0.2.5"}}
	if got := serviceAddresses(svc); len(got) != 2 || got[0].Value != "lb.example.net" || got[1].Value != "192.0.2.5" {
		t.Errorf("with a load balancer: %+v, want its ingress only", got)
	}
	headless := &corev1.Service{Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}
	if got := serviceAddresses(headless); len(got) != 0 {
		t.Errorf("headless Service: %+v", got)
	}

	shared := &SharedAddresses{
		Addresses: []gwv1.GatewayStatusAddress{GatewayAddress("192.0.2.1")},
		Service:   types.NamespacedName{Namespace: "portico-system", Name: "portico"},
	}
	res := &snapshot.Resources{Services: []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "portico"}, Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.99"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico"}, Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.10"}},
	}}
	if got := shared.own(res).def; len(got) != 2 || got[0].Value != "192.0.2.1" || got[1].Value != "198.19.0.10" {
		t.Errorf("flag and Service addresses: %+v", got)
	}
}
