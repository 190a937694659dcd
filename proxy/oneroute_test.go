package proxy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/routing"
)

// ruleRoute is HTTPRoute ns/r on Gateway gw, whose one rule is rule;
// with svc set, sending to port 80 of Service svc.
func ruleRoute(svc string, rule gwv1.HTTPRouteRule) *gwv1.HTTPRoute {
	if svc != "" {
		port := gwv1.PortNumber(80)
		rule.BackendRefs = []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
			BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(svc), Port: &port},
		}}}
	}
	return &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Name: "r", Namespace: "ns", Generation: 1},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Rules:           []gwv1.HTTPRouteRule{rule},
		},
	}
}

// httpService is Service ns/name with one port, http 80, and what svc
// sets besides.
func httpService(name string, svc routing.Service) map[types.NamespacedName]routing.Service {
	svc.Ports = []routing.ServicePort{{Name: "http", Port: 80}}
	return map[types.NamespacedName]routing.Service{{Namespace: "ns", Name: name}: svc}
}

// oneListener is the routing input of routes (namespace ns, parent
// Gateway ns/gw) on the one HTTP listener of ns/gw, port 80, with
// services.
func oneListener(routes []*gwv1.HTTPRoute, services map[types.NamespacedName]routing.Service) routing.Input {
	same := gwv1.NamespacesFromSame
	return routing.Input{
		ControllerName: "portico.dev/gateway-controller",
		Listeners: []routing.Listener{{
			ID: 0, Gateway: types.NamespacedName{Namespace: "ns", Name: "gw"},
			Parent: routing.Parent{Kind: "Gateway", Namespace: "ns", Name: "gw"},
			Name:   "http", Port: 80, Protocol: gwv1.HTTPProtocolType,
			AllowedRoutes:  gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &same}},
			SupportedKinds: []gwv1.RouteGroupKind{{Kind: "HTTPRoute"}},
			Accepted:       true,
		}},
		Parents:  map[routing.Parent]bool{{Kind: "Gateway", Namespace: "ns", Name: "gw"}: true},
		Routes:   routes,
		Services: services,
	}
}

// compileOne compiles in, whose routes must attach to its one listener.
func compileOne(t testing.TB, in routing.Input) routing.Output {
	t.Helper()
	out := routing.Compile(in)
	if out.Tables[0] == nil {
		t.Fatalf("route did not attach: %+v", out.RouteParents)
	}
	return out
}

// onePortConfig is HTTP port number, whose one listener (ns/gw's "http",
// client's as it says; nil: none) routes by routes, with the endpoints
// eps gives each Service of ns on port 80.
func onePortConfig(number int, routes *config.Table, client *config.ClientTraffic, eps map[string][]string) *config.Config {
	l := &config.Listener{Key: "Gateway/ns/gw/http", Routes: routes, Client: client}
	table := map[config.BackendKey]*config.Endpoints{}
	for name, addrs := range eps {
		table[config.BackendKey{Service: config.NamespacedName{Namespace: "ns", Name: name}, Port: 80}] = config.NewEndpoints(addrs...)
	}
	return &config.Config{
		Ports:     []*config.Port{{Number: int32(number), Protocol: config.HTTP, Listeners: hostname.NewTable([]string{""}, []*config.Listener{l}), All: chunked.Of([]*config.Listener{l})}},
		Endpoints: config.NewEndpointTable(table),
	}
}
