package translate

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
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
