package routing

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// summary renders a route's parent statuses as "parent[/section]
// Type=Status/Reason ..." lines, in order.
func summary(statuses []gwv1.RouteParentStatus) []string {
	var out []string
	for _, s := range statuses {
		line := string(s.ParentRef.Name)
		if s.ParentRef.SectionName != nil {
			line += "/" + string(*s.ParentRef.SectionName)
		}
		for _, c := range s.Conditions {
			line += fmt.Sprintf(" %s=%s/%s", c.Type, c.Status, c.Reason)
		}
		out = append(out, line)
	}
	return out
}

func checkStatuses(t *testing.T, out Output, want map[string][]string) {
	t.Helper()
	for name, w := range want {
		ns, n, _ := strings.Cut(name, "/")
		got := summary(out.RouteParents[types.NamespacedName{Namespace: ns, Name: n}])
		if !reflect.DeepEqual(got, w) {
			t.Errorf("route %s statuses:\n got %q\nwant %q", name, got, w)
		}
	}
}

const (
	ok      = "Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs"
	refsOK  = " ResolvedRefs=True/ResolvedRefs"
	noMatch = "Accepted=False/NoMatchingParent" + refsOK
)

func TestAttachParentRefs(t *testing.T) {
	f := loadFixture(t, "parentrefs.yaml")
	out := Compile(f.in)

	checkStatuses(t, out, map[string][]string{
		"infra/port-mismatch":         {"same-ns " + noMatch},
		"infra/section-mismatch":      {"same-ns/nope " + noMatch},
		"infra/section-port-mismatch": {"two-listeners/http " + noMatch},
		"infra/by-port":               {"two-listeners " + ok},
		"infra/whole-gateway":         {"two-listeners " + ok, "two-listeners/alt " + ok},
		"web/cross-namespace": {
			"same-ns Accepted=False/NotAllowedByListeners" + refsOK,
			"backend-ns " + ok,
			"all-ns " + ok,
		},
		"other/other-ns": {"backend-ns Accepted=False/NotAllowedByListeners ResolvedRefs=False/RefNotPermitted"},
		"infra/wrong-kind": {
			"tls-only Accepted=False/NotAllowedByListeners" + refsOK,
			"tcp-kinds Accepted=False/NotAllowedByListeners" + refsOK,
		},
		// Only the parentRef to our own, unaccepted Gateway gets an entry.
		"infra/not-ours": {"pending " + noMatch},
		// A Gateway that is not accepted, and whose listeners could not take
		// an HTTPRoute anyway, says the latter.
		"infra/wrong-kind-pending": {"tls-only-pending Accepted=False/NotAllowedByListeners" + refsOK},
		"infra/host-a":             {"host-only " + ok},
		"infra/host-b":             {"host-only " + ok},
		"infra/host-mismatch":      {"host-only Accepted=False/NoMatchingListenerHostname" + refsOK},
	})

	attached := map[string]int32{
		"Gateway/infra/same-ns:http":       0,
		"Gateway/infra/two-listeners:http": 1, // whole-gateway
		"Gateway/infra/two-listeners:alt":  2, // by-port and whole-gateway, which counts once
		"Gateway/infra/backend-ns:http":    1,
		"Gateway/infra/all-ns:http":        1,
		"Gateway/infra/tls-only:tls":       0,
		"Gateway/infra/pending:http":       0,
		"Gateway/infra/host-only:http":     2,
	}
	for key, want := range attached {
		parent, section, _ := strings.Cut(key, ":")
		id := f.listener(t, parent, gwv1.SectionName(section))
		if got := out.AttachedRoutes[id]; got != want {
			t.Errorf("%s: AttachedRoutes = %d, want %d", key, got, want)
		}
		if _, has := out.Tables[id]; has != (want > 0) {
			t.Errorf("%s: table present = %v, want %v", key, has, want > 0)
		}
	}

	// The status carries what was asked, as written, and nothing of ours.
	st := out.RouteParents[types.NamespacedName{Namespace: "infra", Name: "port-mismatch"}][0]
	if st.ControllerName != testController {
		t.Errorf("ControllerName = %q", st.ControllerName)
	}
	if st.ParentRef.Namespace != nil || st.ParentRef.Kind != nil || st.ParentRef.Group != nil || *st.ParentRef.Port != 81 {
		t.Errorf("ParentRef not copied as written: %+v", st.ParentRef)
	}
	for _, c := range st.Conditions {
		if c.ObservedGeneration != 3 || !c.LastTransitionTime.IsZero() {
			t.Errorf("condition %s: generation %d, transition %v", c.Type, c.ObservedGeneration, c.LastTransitionTime)
		}
	}
	for _, r := range f.in.Routes {
		if r.Name == "port-mismatch" && r.Spec.ParentRefs[0].Port == st.ParentRef.Port {
			t.Error("status ParentRef shares memory with the route")
		}
	}

	// host-only serves foo.example.com only. Both routes serve it there;
	// host-b's own hostname (*.example.com) is more specific than host-a's
	// (none), which wins over host-a being the older
	// (GatewayRouteHostnameIntersectionPrecedence).
	gw := types.NamespacedName{Namespace: "infra", Name: "host-only"}
	if r, _ := route(out, f.in, gw, 80, request("GET", "foo.example.com", "/")); r == nil || r.Route.Name != "host-b" {
		t.Errorf("foo.example.com routed to %v, want host-b (the more specific hostname of its own)", r)
	}
	if r, _ := route(out, f.in, gw, 80, request("GET", "bar.example.com", "/")); r != nil {
		t.Errorf("bar.example.com routed to %v, want none", r.Route)
	}
}

func TestHostnameIntersection(t *testing.T) {
	f := loadFixture(t, "intersection.yaml")
	out := Compile(f.in)
	checkStatuses(t, out, map[string][]string{
		"infra/specific-specific": {"intersect " + ok},
		"infra/specific-wildcard": {"intersect " + ok},
		"infra/wildcard-specific": {"intersect " + ok},
		"infra/wildcard-wildcard": {"intersect " + ok},
		"infra/no-intersection":   {"intersect Accepted=False/NoMatchingListenerHostname" + refsOK},
		"infra/any-listener":      {"any " + ok},
	})
	for section, want := range map[gwv1.SectionName]int32{"specific": 2, "wildcard": 1, "other-wildcard": 1} {
		if got := out.AttachedRoutes[f.listener(t, "Gateway/infra/intersect", section)]; got != want {
			t.Errorf("listener %s: AttachedRoutes = %d, want %d", section, got, want)
		}
	}

	gw := types.NamespacedName{Namespace: "infra", Name: "intersect"}
	cases := []struct {
		host, path, want string // want: backend Service, "" for 404
	}{
		{"very.specific.com", "/s1", "v1"},
		{"very.specific.com:1234", "/s1", "v1"},
		{"VERY.Specific.com.", "/s1", "v1"},
		{"non.matching.com", "/s1", ""},
		{"foo.nonmatchingwildcard.io", "/s1", ""},
		{"foo.wildcard.io", "/s1", ""},
		{"very.specific.com", "/non-matching-prefix", ""},
		{"foo.wildcard.io", "/s2", "v2"},
		{"bar.wildcard.io", "/s2", "v2"},
		{"foo.bar.wildcard.io", "/s2", "v2"},
		{"baz.wildcard.io", "/s2", ""},
		{"wildcard.io", "/s2", ""},
		{"very.specific.com", "/s2", ""},
		{"very.specific.com", "/s3", "v3"},
		{"foo.specific.com", "/s3", ""},
		{"foo.anotherwildcard.io", "/s4", "v1"},
		{"foo.bar.anotherwildcard.io", "/s4", "v1"},
		{"anotherwildcard.io", "/s4", ""},
		{"foo.wildcard.io", "/s4", ""},
		{"wildcard.io", "/s5", ""},
	}
	for _, c := range cases {
		r, _ := route(out, f.in, gw, 80, request("GET", c.host, c.path))
		if got := backendOf(r); got != c.want {
			t.Errorf("%s%s: backend %q, want %q", c.host, c.path, got, c.want)
		}
	}

	any := types.NamespacedName{Namespace: "infra", Name: "any"}
	for host, want := range map[string]string{
		"first.com": "v2", "sub.first.com": "v2", "second.com": "v2", "sub.second.com": "v2",
		"third.com": "", "sub.third.com": "",
	} {
		r, _ := route(out, f.in, any, 80, request("GET", host, "/"))
		if got := backendOf(r); got != want {
			t.Errorf("%s: backend %q, want %q", host, got, want)
		}
	}
}

func TestListenerIsolation(t *testing.T) {
	f := loadFixture(t, "isolation.yaml")
	out := Compile(f.in)
	for _, gwName := range []string{"isolation", "isolation-hostnames"} {
		gw := types.NamespacedName{Namespace: "infra", Name: gwName}
		hosts := []string{"bar.com", "bar.example.com", "bar.foo.example.com", "abc.foo.example.com"}
		paths := []string{"/empty", "/wildcard-example", "/wildcard-foo-example", "/abc-foo-example"}
		for hi, host := range hosts {
			for pi, path := range paths {
				r, _ := route(out, f.in, gw, 80, request("GET", host, path))
				if served := r != nil; served != (hi == pi) {
					t.Errorf("%s: %s%s served=%v, want %v", gwName, host, path, served, hi == pi)
				}
			}
		}
	}
}

func TestListenerSets(t *testing.T) {
	f := loadFixture(t, "listenersets.yaml")
	out := Compile(f.in)
	checkStatuses(t, out, map[string][]string{
		"infra/gw-only": {"gw " + ok},
		"infra/ls-only": {"ls-a " + ok},
		"infra/both":    {"gw " + ok, "ls-a " + ok, "ls-b " + ok},
		"infra/one-of-two": {
			"gw/ls-a-one Accepted=False/NoMatchingParent" + refsOK,
			"ls-a/ls-a-one " + ok,
		},
		"infra/gw-section":        {"gw/gw-one " + ok},
		"infra/same-ns":           {"ls-ns " + ok},
		"web/selected-ns":         {"ls-ns " + ok},
		"other/unselected-ns":     {"ls-ns " + ok},
		"other/in-ls-namespace":   {"ls-cross " + ok},
		"infra/in-gw-namespace":   {"ls-cross Accepted=False/NotAllowedByListeners" + refsOK},
		"infra/to-rejected-set":   {"ls-rejected " + noMatch},
		"infra/ls-section-on-gw":  {"gw/ls-b-one " + noMatch},
		"infra/ls-port-mismatch":  {"ls-a Accepted=False/NoMatchingParent" + refsOK},
		"infra/set-not-our-group": nil,
	})
	attached := map[string]int32{
		"Gateway/infra/gw:gw-one":          3, // gw-only, both, gw-section
		"Gateway/infra/gw:gw-two":          2, // gw-only, both
		"ListenerSet/infra/ls-a:ls-a-one":  3, // ls-only, both, one-of-two
		"ListenerSet/infra/ls-a:ls-a-two":  2, // ls-only, both
		"ListenerSet/infra/ls-b:ls-b-one":  1, // both
		"ListenerSet/infra/ls-ns:all":      3,
		"ListenerSet/infra/ls-ns:same":     1,
		"ListenerSet/infra/ls-ns:selector": 1,
		"ListenerSet/other/ls-cross:same":  1,
	}
	for key, want := range attached {
		parent, section, _ := strings.Cut(key, ":")
		if got := out.AttachedRoutes[f.listener(t, parent, gwv1.SectionName(section))]; got != want {
			t.Errorf("%s: AttachedRoutes = %d, want %d", key, got, want)
		}
	}

	gw := types.NamespacedName{Namespace: "infra", Name: "gw"}
	cases := []struct {
		host, path, want string
	}{
		{"gw-one.com", "/both", "v1"},
		{"ls-a-one.com", "/both", "v1"},
		{"ls-b-one.com", "/both", "v1"},
		{"gw-one.com", "/gw-only", "v2"},
		{"gw-two.com", "/gw-only", "v2"},
		{"ls-a-one.com", "/gw-only", ""}, // a Gateway parentRef does not reach ListenerSet listeners
		{"ls-a-two.com", "/gw-only", ""},
		{"ls-a-one.com", "/ls-only", "v3"},
		{"ls-a-two.com", "/ls-only", "v3"},
		{"gw-one.com", "/ls-only", ""},
		{"ls-b-one.com", "/ls-only", ""},
		{"gw-one.com", "/gw-section", "v3"},
		{"gw-two.com", "/gw-section", ""},
		{"ls-a-one.com", "/one-of-two", "v2"},
		{"gw-one.com", "/one-of-two", ""},
		{"all.com", "/same", "v1"},
		{"all.com", "/selected", "web"},
		{"all.com", "/unselected", "web"},
		{"same.com", "/same", "v1"},
		{"same.com", "/selected", ""},
		{"selector.com", "/selected", "web"},
		{"selector.com", "/unselected", ""},
		{"cross.com", "/in-ls-namespace", "v1"},
		{"cross.com", "/in-gw-namespace", ""},
	}
	for _, c := range cases {
		r, _ := route(out, f.in, gw, 80, request("GET", c.host, c.path))
		if got := backendOf(r); got != c.want {
			t.Errorf("%s%s: backend %q, want %q", c.host, c.path, got, c.want)
		}
	}
}

// A listener that is not accepted takes no routes, whatever else matches.
func TestUnacceptedListener(t *testing.T) {
	f := loadFixture(t)
	for i := range f.in.Listeners {
		f.in.Listeners[i].Accepted = false
	}
	f.in.Routes = []*gwv1.HTTPRoute{{}}
	f.in.Routes[0].Namespace, f.in.Routes[0].Name = "infra", "r"
	f.in.Routes[0].Spec.ParentRefs = []gwv1.ParentReference{{Name: "same-ns"}}
	out := Compile(f.in)
	checkStatuses(t, out, map[string][]string{"infra/r": {"same-ns Accepted=False/NotAllowedByListeners" + refsOK}})
	if len(out.Tables) != 0 {
		t.Errorf("tables built for unaccepted listeners: %v", out.Tables)
	}
}

// TestTableHosts: a route's hostnames go into a listener's table as they
// are, when the listener admits them: narrower ones, and ones that cover
// the listener's too, so that precedence can follow them.
func TestTableHosts(t *testing.T) {
	cases := []struct {
		listener string
		route    []string
		want     []string
	}{
		{"", nil, []string{""}},
		{"a.example.com", nil, []string{""}},
		{"", []string{"x.com", "*.y.com"}, []string{"x.com", "*.y.com"}},
		{"very.specific.com", []string{"non.matching.com", "*.nonmatchingwildcard.io", "very.specific.com"}, []string{"very.specific.com"}},
		{"*.wildcard.io", []string{"wildcard.io", "foo.wildcard.io", "foo.bar.wildcard.io"}, []string{"foo.wildcard.io", "foo.bar.wildcard.io"}},
		{"very.specific.com", []string{"*.specific.com"}, []string{"*.specific.com"}},
		{"*.foo.example.com", []string{"bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com"}, []string{"*.example.com", "*.foo.example.com", "abc.foo.example.com"}},
		{"abc.foo.example.com", []string{"bar.com", "*.example.com", "*.foo.example.com", "abc.foo.example.com"}, []string{"*.example.com", "*.foo.example.com", "abc.foo.example.com"}},
		{"*.example.com", []string{"*.com"}, []string{"*.com"}},
		{"*.example.com", []string{"example.com", "*.example.net"}, nil},
	}
	for _, c := range cases {
		if got := tableHosts(c.listener, c.route, []string{""}); !reflect.DeepEqual(got, c.want) {
			t.Errorf("tableHosts(%q, %q) = %q, want %q", c.listener, c.route, got, c.want)
		}
	}
}

func TestManyListeners(t *testing.T) {
	in := manyListeners(t, 300)
	out := Compile(in)
	for _, l := range in.Listeners {
		if l.Parent.Name != "many" {
			continue
		}
		if out.AttachedRoutes[l.ID] != 1 {
			t.Fatalf("listener %s: AttachedRoutes %d, want 1", l.Name, out.AttachedRoutes[l.ID])
		}
		r, _ := out.Tables[l.ID].Match(request("GET", l.Hostname, "/"))
		if want := "r" + strings.TrimPrefix(string(l.Name), "l"); r == nil || r.Route.Name != want {
			t.Fatalf("listener %s: routed to %v, want %s", l.Name, r, want)
		}
	}
}
