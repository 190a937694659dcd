package routing

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// TestResolveByKind: one backendRef rule for every route kind, with the
// kind in ReferenceGrants and messages, and the application protocol
// checked for the kinds that speak HTTP only.
func TestResolveByKind(t *testing.T) {
	services := map[types.NamespacedName]Service{
		{Namespace: "b", Name: "svc"}: {Ports: []ServicePort{{Port: 80, AppProtocol: "kubernetes.io/h2c"}, {Port: 5432, AppProtocol: "postgres"}}},
	}
	grant := &gwv1.ReferenceGrant{}
	grant.Namespace = "b"
	grant.Spec.From = []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "TLSRoute", Namespace: "a"}}
	grant.Spec.To = []gwv1.ReferenceGrantTo{{Kind: "Service"}}
	refs := NewBackendRefs(services, []*gwv1.ReferenceGrant{nil, grant})
	ref := func(port gwv1.PortNumber) gwv1.BackendObjectReference {
		return gwv1.BackendObjectReference{Name: "svc", Namespace: ptr[gwv1.Namespace]("b"), Port: &port}
	}
	for _, tc := range []struct {
		kind         RouteKind
		port         gwv1.PortNumber
		reason       gwv1.RouteConditionReason
		msg, appProt string
	}{
		{KindTLSRoute, 80, "", "", "kubernetes.io/h2c"},
		{KindTLSRoute, 5432, "", "", "postgres"},
		{KindHTTPRoute, 80, gwv1.RouteReasonRefNotPermitted, "backend b/svc: no ReferenceGrant allows HTTPRoutes in a to use it", ""},
		{KindGRPCRoute, 80, gwv1.RouteReasonRefNotPermitted, "backend b/svc: no ReferenceGrant allows GRPCRoutes in a to use it", ""},
		{KindTLSRoute, 81, gwv1.RouteReasonBackendNotFound, "backend b/svc: Service has no port 81", ""},
	} {
		got := refs.Resolve(tc.kind, "a", ref(tc.port))
		want := ResolvedBackend{Key: config.BackendKey{Service: config.NamespacedName{Namespace: "b", Name: "svc"}, Port: int32(tc.port)},
			AppProtocol: tc.appProt, Reason: tc.reason, Message: tc.msg}
		if got != want {
			t.Errorf("%s port %d: %+v, want %+v", tc.kind, tc.port, got, want)
		}
	}
	// In the route's own namespace, no grant is needed; HTTP kinds check
	// the port's protocol and a GRPCRoute speaks HTTP/2.
	same := func(port gwv1.PortNumber) gwv1.BackendObjectReference {
		return gwv1.BackendObjectReference{Name: "svc", Port: &port}
	}
	if got := refs.Resolve(KindHTTPRoute, "b", same(5432)); got.Reason != gwv1.RouteReasonUnsupportedProtocol ||
		got.Message != `backend b/svc port 5432: appProtocol "postgres" is not supported for HTTPRoute` {
		t.Errorf("HTTPRoute to a postgres port: %+v", got)
	}
	if got := refs.Resolve(KindGRPCRoute, "b", same(80)); got.Reason != "" || got.AppProtocol != grpcAppProtocol {
		t.Errorf("GRPCRoute: %+v", got)
	}
}

// TestAdmission: the kinds a listener carries by protocol, and
// allowedRoutes.namespaces, a selector compiled once for the listeners
// that share it.
func TestAdmission(t *testing.T) {
	sel, from := &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}, gwv1.NamespacesFromSelector
	ar := gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &from, Selector: sel}}
	tls := []gwv1.RouteGroupKind{{Kind: "TLSRoute"}}
	ls := []Listener{
		{ID: 0, Protocol: gwv1.TLSProtocolType, AllowedRoutes: ar, SupportedKinds: tls, Accepted: true},
		{ID: 1, Protocol: gwv1.TLSProtocolType, AllowedRoutes: ar, SupportedKinds: tls, Accepted: true},
		{ID: 2, Protocol: gwv1.HTTPProtocolType, AllowedRoutes: ar, SupportedKinds: tls, Accepted: true},
	}
	a := NewAdmission(map[string]map[string]string{"x": {"team": "a"}, "y": {"team": "b"}})
	for _, tc := range []struct {
		l    int
		kind RouteKind
		ns   string
		want bool
	}{
		{0, KindTLSRoute, "x", true},
		{1, KindTLSRoute, "x", true},
		{1, KindTLSRoute, "y", false},
		{0, KindHTTPRoute, "x", false}, // not a kind of the listener
		{2, KindTLSRoute, "x", false},  // TLSRoutes need a TLS listener
	} {
		if got := a.Allows(&ls[tc.l], tc.kind, tc.ns); got != tc.want {
			t.Errorf("listener %d, %s from %s: %v, want %v", tc.l, tc.kind, tc.ns, got, tc.want)
		}
	}
	if len(a.selectors) != 1 {
		t.Errorf("%d selectors compiled, want 1 for one selector", len(a.selectors))
	}
}
