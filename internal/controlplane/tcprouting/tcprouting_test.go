package tcprouting

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/routing"
)

func tcpRoute(name string, age time.Duration, section string) *gwv1.TCPRoute {
	return &gwv1.TCPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(-age))},
		Spec: gwv1.TCPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw", SectionName: ptr.To(gwv1.SectionName(section))}}},
			Rules:           []gwv1.TCPRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: ptr.To(gwv1.PortNumber(9000))}}}}},
		},
	}
}

// TestOldestRouteServes: of the routes on one listener, in any order of
// the input, the oldest is the one the listener serves; every one is
// Accepted and counted.
func TestOldestRouteServes(t *testing.T) {
	group := gwv1.Group(gwv1.GroupName)
	parent := routing.Parent{Kind: "Gateway", Namespace: "ns", Name: "gw"}
	listeners := []routing.Listener{{ID: 0, Parent: parent, Name: "db", Port: 5432, Protocol: gwv1.TCPProtocolType, Accepted: true,
		SupportedKinds: []gwv1.RouteGroupKind{{Group: &group, Kind: "TCPRoute"}}}}
	routes := []*gwv1.TCPRoute{tcpRoute("newer", time.Hour, "db"), tcpRoute("oldest", 3*time.Hour, "db"), tcpRoute("older", 2*time.Hour, "db")}
	services := map[types.NamespacedName]routing.Service{}
	for _, r := range routes {
		services[types.NamespacedName{Namespace: "ns", Name: r.Name}] = routing.Service{Ports: []routing.ServicePort{{Port: 9000}}}
	}
	for range 3 {
		out := Compile(Input{Listeners: listeners, Parents: map[routing.Parent]bool{parent: true}, Routes: routes, Services: services})
		if r := out.Routes[0]; r == nil || r.Name != "ns/oldest" {
			t.Fatalf("listener serves %+v, want ns/oldest", r)
		}
		if out.AttachedRoutes[0] != 3 {
			t.Fatalf("attachedRoutes %d, want 3", out.AttachedRoutes[0])
		}
		for key, parents := range out.RouteParents {
			if len(parents) != 1 || parents[0].Conditions[0].Status != metav1.ConditionTrue {
				t.Fatalf("%s: %+v, want Accepted", key, parents)
			}
		}
		slices.Reverse(routes)
		routes = append(routes[1:], routes[0])
	}
}
