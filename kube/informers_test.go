package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestEventHandlersSeparateStatusFromSpec(t *testing.T) {
	gw := func(rv string, gen int64, labels map[string]string) *gwv1.Gateway {
		return &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "g", ResourceVersion: rv, Generation: gen, Labels: labels}}
	}
	cases := []struct {
		name             string
		old, new         any
		spec             bool // through specHandler, else anyHandler
		changed, onlySts int
	}{
		{"Gateway status write", gw("1", 3, nil), gw("2", 3, nil), true, 0, 1},
		{"Gateway spec change", gw("1", 3, nil), gw("2", 4, nil), true, 1, 0},
		{"Gateway label change", gw("1", 3, nil), gw("2", 3, map[string]string{"a": "b"}), true, 1, 0},
		{"Gateway resync", gw("1", 3, nil), gw("1", 3, nil), true, 0, 0},
		{"Secret update", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}}, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "2"}}, false, 1, 0},
		{"Secret resync", &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}}, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}}, false, 0, 0},
	}
	for _, tc := range cases {
		var changed, onlyStatus int
		h := eventHandlers{changed: func() { changed++ }, statusChanged: func() { onlyStatus++ }}
		handler := anyHandler(h)
		if tc.spec {
			handler = specHandler(h)
		}
		handler.OnUpdate(tc.old, tc.new)
		if changed != tc.changed || onlyStatus != tc.onlySts {
			t.Errorf("%s: %d rebuilds and %d status rechecks, want %d and %d", tc.name, changed, onlyStatus, tc.changed, tc.onlySts)
		}
	}
}

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
	res := &Resources{Services: []*corev1.Service{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "portico"}, Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.99"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico"}, Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.10"}},
	}}
	if got := shared.own(res); len(got) != 2 || got[0].Value != "192.0.2.1" || got[1].Value != "198.19.0.10" {
		t.Errorf("flag and Service addresses: %+v", got)
	}
}

func TestParseNamespacedName(t *testing.T) {
	if got, err := ParseNamespacedName("portico-system/portico"); err != nil || got.Namespace != "portico-system" || got.Name != "portico" {
		t.Errorf("valid: %v, %v", got, err)
	}
	for _, bad := range []string{"portico", "/portico", "ns/", "a/b/c", ""} {
		if _, err := ParseNamespacedName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
