package provision

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/parameters"
)

// TestServiceForRoutability: a Gateway asking only for routability Cluster
// gets a ClusterIP Service even where its class asks for a load balancer
// (an internal Gateway must not be exposed), with the value it names as
// cluster IP; one asking for a default address too keeps its load
// balancer, the default value asked of it and the Cluster value as its
// cluster IP.
func TestServiceForRoutability(t *testing.T) {
	ip := ptr.To(gwv1.IPAddressType)
	lb := parameters.Spec{Mode: parameters.ModePerGateway, Service: &parameters.Service{
		Type: ptr.To(corev1.ServiceTypeLoadBalancer), ExternalTrafficPolicy: ptr.To(corev1.ServiceExternalTrafficPolicyLocal),
	}}
	cluster := gwv1.GatewayAddressRoutabilityCluster
	cases := []struct {
		name                  string
		addrs                 []gwv1.GatewaySpecAddress
		typ                   corev1.ServiceType
		clusterIP, lbIP       string
		externalTrafficPolicy corev1.ServiceExternalTrafficPolicy
	}{
		{name: "cluster only", addrs: []gwv1.GatewaySpecAddress{{Type: ip, Routability: cluster}}, typ: corev1.ServiceTypeClusterIP},
		{name: "cluster value", addrs: []gwv1.GatewaySpecAddress{{Type: ip, Value: "10.96.0.40", Routability: cluster}},
			typ: corev1.ServiceTypeClusterIP, clusterIP: "10.96.0.40"},
		{name: "both", addrs: []gwv1.GatewaySpecAddress{{Type: ip, Value: "203.0.113.7"}, {Type: ip, Value: "10.96.0.41", Routability: cluster}},
			typ: corev1.ServiceTypeLoadBalancer, clusterIP: "10.96.0.41", lbIP: "203.0.113.7", externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal},
		{name: "sentinel is a default address", addrs: []gwv1.GatewaySpecAddress{{Type: ip, Value: "203.0.113.8", Routability: "testing.x-k8s.io/sentinel"}},
			typ: corev1.ServiceTypeLoadBalancer, lbIP: "203.0.113.8", externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal},
		{name: "none", typ: corev1.ServiceTypeLoadBalancer, externalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal},
	}
	for _, c := range cases {
		out := Render(settings, Input{Gateway: gateway("apps", "gw", nil, c.addrs...), ClassName: "dedicated", Parameters: lb,
			Ports: []Port{{Port: 80, Protocol: gwv1.HTTPProtocolType}}, Accepted: true})
		spec := out.Service.Spec
		if spec.Type != c.typ || spec.ClusterIP != c.clusterIP || spec.LoadBalancerIP != c.lbIP || spec.ExternalTrafficPolicy != c.externalTrafficPolicy {
			t.Errorf("%s: type %s clusterIP %q loadBalancerIP %q policy %q; want %s %q %q %q", c.name, spec.Type, spec.ClusterIP,
				spec.LoadBalancerIP, spec.ExternalTrafficPolicy, c.typ, c.clusterIP, c.lbIP, c.externalTrafficPolicy)
		}
	}
}
