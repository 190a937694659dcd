package translate

import (
	"reflect"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"

	"portico.dev/portico/config"
)

// TestEndpointChangeReusesRouteTables: an EndpointSlice update changes the
// endpoints the data plane uses without recompiling routes or certificate
// tables; any other change translates everything again.
func TestEndpointChangeReusesRouteTables(t *testing.T) {
	res := loadFixture(t, "../examples/standalone")
	tr := newTranslator()
	cfg1, st1 := tr.Translate(res)
	key := config.BackendKey{Service: config.NamespacedName{Namespace: "demo", Name: "echo"}, Port: 80}
	if got := cfg1.Endpoints.Lookup(key).Addrs; len(got) != 1 || got[0] != "127.0.0.1:9180" {
		t.Fatalf("endpoints before: %v", got)
	}

	// Same objects, one EndpointSlice replaced (as an informer does on update).
	next := *res
	next.EndpointSlices = nil
	for _, es := range res.EndpointSlices {
		es = es.DeepCopy()
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"127.0.0.2"}})
		next.EndpointSlices = append(next.EndpointSlices, es)
	}
	cfg2, st2 := tr.Translate(&next)
	if got := cfg2.Endpoints.Lookup(key).Addrs; len(got) != 2 || got[1] != "127.0.0.2:9180" {
		t.Errorf("endpoints after the slice changed: %v", got)
	}
	if cfg2 == cfg1 || !reflect.DeepEqual(st2, st1) {
		t.Errorf("endpoint-only change: want a new config and unchanged statuses")
	}
	for i, p := range cfg2.Ports {
		if p.SNI != cfg1.Ports[i].SNI || p.Listeners != cfg1.Ports[i].Listeners {
			t.Errorf("port %d: tables were rebuilt for an endpoint-only change", p.Number)
		}
		for j, l := range p.All.Slice() {
			if l.Routes != cfg1.Ports[i].All.At(j).Routes {
				t.Errorf("listener %s: routes recompiled for an endpoint-only change", l.Key)
			}
		}
	}

	// A route change is a full translation.
	again := next
	again.HTTPRoutes = append(again.HTTPRoutes[:0:0], next.HTTPRoutes...)
	again.HTTPRoutes[0] = next.HTTPRoutes[0].DeepCopy()
	cfg3, _ := tr.Translate(&again)
	if cfg3.Ports[0].All.At(0).Routes == cfg2.Ports[0].All.At(0).Routes {
		t.Errorf("a route change reused the old route tables")
	}
}
