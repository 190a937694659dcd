package kube

import (
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const twoGateways = classYAML + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: first, namespace: ns}
spec:
  gatewayClassName: portico
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: second, namespace: ns}
spec:
  gatewayClassName: portico
  listeners: [{name: http, port: 80, protocol: HTTP}]
`

func gatewayAddress(st *Statuses, name string) string {
	gs := st.Gateways[types.NamespacedName{Namespace: "ns", Name: name}]
	if len(gs.Addresses) != 1 {
		return ""
	}
	return gs.Addresses[0].Value
}

// TestAddressPoolGivesGatewaysTheirOwnPorts: with a pool, two Gateways with
// the same catch-all listener on port 80 both serve, each on its own
// address, and a Gateway keeps the address its status already reports.
func TestAddressPoolGivesGatewaysTheirOwnPorts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(twoGateways), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)

	tr := NewTranslator("")
	tr.AddressPool = []string{"198.18.7.1", "198.18.7.2"}
	cfg, st := tr.Translate(res)
	if a, b := gatewayAddress(st, "first"), gatewayAddress(st, "second"); a != "198.18.7.1" || b != "198.18.7.2" {
		t.Fatalf("addresses first=%q second=%q", a, b)
	}
	if len(cfg.Ports) != 2 || cfg.Ports[0].Address == cfg.Ports[1].Address {
		t.Fatalf("want port 80 on two addresses, got %+v", cfg.Ports)
	}
	for _, name := range []string{"first", "second"} {
		gs := st.Gateways[types.NamespacedName{Namespace: "ns", Name: name}]
		if !meta.IsStatusConditionTrue(gs.Listeners[0].Conditions, "Programmed") {
			t.Errorf("%s: listener not programmed: %+v", name, gs.Listeners[0].Conditions)
		}
	}

	// The address a Gateway's status holds is kept, even against age order.
	addrType := gwv1.IPAddressType
	for _, gw := range res.Gateways {
		gw.Status.Addresses = []gwv1.GatewayStatusAddress{{Type: &addrType, Value: map[string]string{"first": "198.18.7.2", "second": "198.18.7.1"}[gw.Name]}}
	}
	_, st = translatorWithPool(tr.AddressPool).Translate(res)
	if a, b := gatewayAddress(st, "first"), gatewayAddress(st, "second"); a != "198.18.7.2" || b != "198.18.7.1" {
		t.Errorf("stored addresses not kept: first=%q second=%q", a, b)
	}

	// A pool too small: the newer Gateway is not programmed and not served.
	for _, gw := range res.Gateways {
		gw.Status.Addresses = nil
	}
	cfg, st = translatorWithPool([]string{"198.18.7.1"}).Translate(res)
	gs := st.Gateways[types.NamespacedName{Namespace: "ns", Name: "second"}]
	if c := meta.FindStatusCondition(gs.Conditions, "Programmed"); c == nil || c.Status != "False" || c.Reason != string(gwv1.GatewayReasonAddressNotAssigned) {
		t.Errorf("second Gateway without an address: Programmed = %+v", c)
	}
	if len(cfg.Ports) != 1 || cfg.Ports[0].Address != "198.18.7.1" {
		t.Errorf("ports with a one-address pool: %+v", cfg.Ports)
	}
}

func translatorWithPool(pool []string) *Translator {
	tr := NewTranslator("")
	tr.AddressPool = pool
	return tr
}
