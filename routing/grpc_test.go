package routing

import (
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// grpcListenerInput is one HTTP listener of Gateway ns/gw taking both
// route kinds, with the Service svc (port 80).
func grpcListenerInput() Input {
	same := gwv1.NamespacesFromSame
	return Input{
		ControllerName: testController,
		Listeners: []Listener{{
			Gateway: types.NamespacedName{Namespace: "ns", Name: "gw"},
			Parent:  Parent{Kind: "Gateway", Namespace: "ns", Name: "gw"},
			Name:    "http", Port: 80, Protocol: gwv1.HTTPProtocolType,
			AllowedRoutes:  gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &same}},
			SupportedKinds: []gwv1.RouteGroupKind{{Kind: "HTTPRoute"}, {Kind: "GRPCRoute"}},
			Accepted:       true,
		}},
		Parents:  map[Parent]bool{{Kind: "Gateway", Namespace: "ns", Name: "gw"}: true},
		Services: map[types.NamespacedName]Service{{Namespace: "ns", Name: "svc"}: {Ports: []ServicePort{{Name: "grpc", Port: 80}}}},
	}
}

func newGRPCRoute(name string, age int, hostnames []gwv1.Hostname, rules ...gwv1.GRPCRouteRule) *gwv1.GRPCRoute {
	port := gwv1.PortNumber(80)
	for i := range rules {
		rules[i].BackendRefs = []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: "svc", Port: &port}}}}
	}
	return &gwv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 1,
			CreationTimestamp: metav1.NewTime(time.Date(2025, 1, age, 0, 0, 0, 0, time.UTC))},
		Spec: gwv1.GRPCRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
			Hostnames:       hostnames,
			Rules:           rules,
		},
	}
}

func methodMatch(typ gwv1.GRPCMethodMatchType, service, method string, headers ...gwv1.GRPCHeaderMatch) gwv1.GRPCRouteMatch {
	mm := &gwv1.GRPCMethodMatch{Type: &typ}
	if service != "" {
		mm.Service = &service
	}
	if method != "" {
		mm.Method = &method
	}
	return gwv1.GRPCRouteMatch{Method: mm, Headers: headers}
}

// TestGRPCPrecedence: GRPCRoute's order (characters of service, then of
// method, then header matches, then the older route, then rule order),
// whatever the rules' order in their routes.
func TestGRPCPrecedence(t *testing.T) {
	exact, regex := gwv1.GRPCMethodMatchExact, gwv1.GRPCMethodMatchRegularExpression
	rule := func(ms ...gwv1.GRPCRouteMatch) gwv1.GRPCRouteRule { return gwv1.GRPCRouteRule{Matches: ms} }
	in := grpcListenerInput()
	in.GRPCRoutes = []*gwv1.GRPCRoute{
		newGRPCRoute("new", 2, nil,
			rule(),                                   // 0: every call
			rule(methodMatch(exact, "", "Get")),      // 1: method only
			rule(methodMatch(exact, "a.Svc", "")),    // 2: service only
			rule(methodMatch(exact, "a.Svc", "Get")), // 3: service and method
			rule(methodMatch(regex, `b\..*`, "")),    // 4: service expression
			rule(methodMatch(exact, "a.Svc", "Get", // 5: and a header
				gwv1.GRPCHeaderMatch{Name: "x-tenant", Value: "t"})),
		),
		newGRPCRoute("old", 1, nil,
			rule(methodMatch(exact, "a.Svc", "")), // 0: service only, older
		),
	}
	out := Compile(in)
	if out.GRPCRouteParents[types.NamespacedName{Namespace: "ns", Name: "new"}] == nil || len(out.RouteParents) != 0 {
		t.Fatalf("statuses: GRPCRoutes %v, HTTPRoutes %v", out.GRPCRouteParents, out.RouteParents)
	}
	table := out.Tables[0]
	for _, c := range []struct {
		path, tenant, want string
	}{
		{"/a.Svc/Get", "t", "ns/new #5"},
		{"/a.Svc/Get", "", "ns/new #3"},
		{"/a.Svc/Put", "", "ns/old #0"}, // service beats method only and every call; older route first
		{"/c.Svc/Get", "", "ns/new #1"},
		{"/b.Svc/Get", "", "ns/new #4"}, // a longer expression than the method-only one
		{"/c.Svc/Put", "", "ns/new #0"},
	} {
		r := httptest.NewRequest("POST", "http://grpc.example.com"+c.path, nil)
		r.Header.Set("Content-Type", "application/grpc")
		if c.tenant != "" {
			r.Header.Set("X-Tenant", c.tenant)
		}
		rule, _ := table.Match(r)
		got := "none"
		if rule != nil {
			got = rule.RouteName + " #" + string(rune('0'+rule.Index))
		}
		if got != c.want {
			t.Errorf("%s (tenant %q): rule %s, want %s", c.path, c.tenant, got, c.want)
		}
		if rule != nil && (len(rule.Backends) != 1 || rule.Backends[0].AppProtocol != grpcAppProtocol) {
			t.Errorf("%s: backends %+v, want one spoken to in HTTP/2", c.path, rule.Backends)
		}
	}
}

// TestGRPCMixedKinds: an HTTPRoute and a GRPCRoute sharing a hostname on
// one listener: the older is served, the newer refused, whichever its
// kind; hostnames that do not intersect coexist.
func TestGRPCMixedKinds(t *testing.T) {
	port := gwv1.PortNumber(80)
	httpRoute := func(name string, age int, hostnames ...gwv1.Hostname) *gwv1.HTTPRoute {
		return &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: 1,
				CreationTimestamp: metav1.NewTime(time.Date(2025, 1, age, 0, 0, 0, 0, time.UTC))},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}}},
				Hostnames:       hostnames,
				Rules: []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
					BackendObjectReference: gwv1.BackendObjectReference{Name: "svc", Port: &port}}}}}},
			},
		}
	}
	in := grpcListenerInput()
	in.Routes = []*gwv1.HTTPRoute{
		httpRoute("web", 1, "*.example.com"),
		httpRoute("late-web", 4, "rpc.example.net"),
		httpRoute("other", 5, "www.example.org"),
	}
	in.GRPCRoutes = []*gwv1.GRPCRoute{
		newGRPCRoute("clash", 2, []gwv1.Hostname{"api.example.com"}, gwv1.GRPCRouteRule{}),
		newGRPCRoute("rpc", 3, []gwv1.Hostname{"rpc.example.net"}, gwv1.GRPCRouteRule{}),
	}
	out := Compile(in)
	accepted := func(parents map[types.NamespacedName][]gwv1.RouteParentStatus, name string) string {
		ps := parents[types.NamespacedName{Namespace: "ns", Name: name}]
		if len(ps) != 1 {
			return "no status"
		}
		for _, c := range ps[0].Conditions {
			if c.Type == "Accepted" {
				return string(c.Status) + " " + c.Reason
			}
		}
		return "no Accepted"
	}
	for _, c := range []struct {
		kind, name, want string
	}{
		{"HTTPRoute", "web", "True Accepted"},
		{"GRPCRoute", "clash", "False NotAllowedByListeners"},
		{"GRPCRoute", "rpc", "True Accepted"},
		{"HTTPRoute", "late-web", "False NotAllowedByListeners"},
		{"HTTPRoute", "other", "True Accepted"},
	} {
		parents := out.RouteParents
		if c.kind == "GRPCRoute" {
			parents = out.GRPCRouteParents
		}
		if got := accepted(parents, c.name); got != c.want {
			t.Errorf("%s %s: Accepted %s, want %s", c.kind, c.name, got, c.want)
		}
	}
	if got := out.AttachedRoutes[0]; got != 3 {
		t.Errorf("attachedRoutes %d, want 3", got)
	}
}

// TestGRPCMethodMatchValidation: what a method match cannot say drops its
// rule, with the reason.
func TestGRPCMethodMatchValidation(t *testing.T) {
	exact, regex := gwv1.GRPCMethodMatchExact, gwv1.GRPCMethodMatchRegularExpression
	for _, c := range []struct {
		name string
		m    gwv1.GRPCRouteMatch
		ok   bool
	}{
		{"exact service and method", methodMatch(exact, "a.Svc", "Get"), true},
		{"neither", methodMatch(exact, "", ""), false},
		{"slash in service", methodMatch(exact, "a/Svc", "Get"), false},
		{"bad service expression", methodMatch(regex, "a(", ""), false},
		{"bad method expression", methodMatch(regex, "", "[x"), false},
		{"unknown type", methodMatch("Prefix", "a", ""), false},
		{"expressions", methodMatch(regex, `a\..*`, "Get|Put"), true},
	} {
		var h gwv1.HTTPRouteMatch
		if p := grpcMatch(&h, &c.m); (p == nil) != c.ok {
			t.Errorf("%s: problem %v, want ok=%v", c.name, p, c.ok)
		}
	}
}
