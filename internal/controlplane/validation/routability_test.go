package validation

import (
	"strings"
	"testing"
)

// TestRoutabilityAdmission: the embedded Gateway CRD refuses a
// routability the experimental channel's rule refuses (the reserved
// k8s.io domain, a bare value other than Cluster, a prefix that is no DNS
// subdomain), so a file cannot ask for what a cluster would not admit.
func TestRoutabilityAdmission(t *testing.T) {
	c := newChecker(t)
	gateway := func(r string) string {
		return "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: ns}\nspec:\n" +
			"  gatewayClassName: portico\n  addresses: [{type: IPAddress, routability: " + r + "}]\n" +
			"  listeners: [{name: a, port: 80, protocol: HTTP}]\n"
	}
	for _, r := range []string{`""`, "Cluster", "testing.x-k8s.io/sentinel", "example.com/CorpWan"} {
		if err := check(t, c, gateway(r)); err != nil {
			t.Errorf("routability %s refused: %v", r, err)
		}
	}
	for _, r := range []string{"k8s.io/internal", "gateway.networking.k8s.io/x", "Public", "Not_A_Domain/x", "example.com/"} {
		if err := check(t, c, gateway(r)); err == nil || !strings.Contains(err.Error(), "Routability must be empty, Cluster") {
			t.Errorf("routability %s: %v, want refused", r, err)
		}
	}
}
