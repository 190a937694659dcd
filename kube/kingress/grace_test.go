package kingress

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"portico.dev/portico/internal/testkit/kubetest"
)

const knSlow = `apiVersion: networking.internal.knative.dev/v1alpha1
kind: Ingress
metadata:
  name: slow
  namespace: serving
  annotations: {networking.knative.dev/ingress.class: portico.ingress.networking.knative.dev}
spec:
  rules:
  - hosts: [slow.example.com]
    http:
      paths:
      - splits: [{serviceNamespace: serving, serviceName: slow, servicePort: 80}]
`

// TestKnativeSlowProbe lists, besides the one replica, a second ready
// endpoint of the cluster-local Service where nothing answers: the probes
// cannot pass, so once the grace has run out the KIngress says
// NetworkConfigured=True with LoadBalancerReady=Unknown, without load
// balancers; when the silent endpoint goes, it becomes Ready.
func TestKnativeSlowProbe(t *testing.T) {
	f := newKnFixture(t)
	f.grace = 300 * time.Millisecond
	live := kubetest.NewNetns(t, "knslow0").HostAddr.String()
	silent := kubetest.NewNetns(t, "knslow1").HostAddr.String()
	f.coreService("portico-system", "portico-internal", "http", f.settings.LocalHTTPPort, []string{live, silent})
	f.replicas = append(f.replicas, f.startReplica(live, "portico-0"))
	f.backend("slow", "http")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seq := f.watchReady(ctx, "slow")
	f.apply(knSlow)

	kubetest.WaitFor(t, 20*time.Second, "LoadBalancerReady=Unknown", func() error {
		if got := seq.get(); !slices.Contains(got, "gen1/1:Unknown") {
			return fmt.Errorf("Ready sequence %v", got)
		}
		return nil
	})
	_, ing := f.get("serving", "slow")
	if c := condition(ing, "NetworkConfigured"); c.Status != metav1.ConditionTrue {
		t.Errorf("NetworkConfigured %+v while probing", c)
	}
	if lb := condition(ing, "LoadBalancerReady"); lb.Status != metav1.ConditionUnknown && lb.Status != metav1.ConditionTrue {
		t.Errorf("LoadBalancerReady %+v while probing", lb)
	}

	es, err := f.Kube.DiscoveryV1().EndpointSlices("portico-system").Get(ctx, "portico-internal-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	es.Endpoints = slices.DeleteFunc(es.Endpoints, func(ep discoveryv1.Endpoint) bool { return ep.Addresses[0] == silent })
	if _, err := f.Kube.DiscoveryV1().EndpointSlices("portico-system").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitReady("serving", "slow")
	kubetest.WaitFor(t, 5*time.Second, "Ready sequence", func() error {
		if got := seq.get(); got[len(got)-1] != "gen1/1:True+lb" {
			return fmt.Errorf("Ready sequence %v, want it to end with gen1/1:True+lb", got)
		}
		return nil
	})
	for _, s := range seq.get() {
		if strings.Contains(s, "False") || strings.Contains(s, "Unknown+lb") {
			t.Errorf("Ready sequence %v has %s", seq.get(), s)
		}
	}
}
