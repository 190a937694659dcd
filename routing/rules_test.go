package routing

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

func TestRules(t *testing.T) {
	f := loadFixture(t, "rules.yaml")
	out := Compile(f.in)
	const sameNS = "same-ns "
	checkStatuses(t, out, map[string][]string{
		"infra/unknown-kind":      {sameNS + "Accepted=True/Accepted ResolvedRefs=False/InvalidKind"},
		"infra/nonexistent":       {sameNS + "Accepted=True/Accepted ResolvedRefs=False/BackendNotFound"},
		"infra/cross-namespace":   {sameNS + "Accepted=True/Accepted ResolvedRefs=False/RefNotPermitted"},
		"infra/partial-grant":     {sameNS + "Accepted=True/Accepted ResolvedRefs=False/RefNotPermitted"},
		"infra/omitted-backends":  {sameNS + ok},
		"infra/weights":           {sameNS + "Accepted=True/Accepted ResolvedRefs=False/BackendNotFound"},
		"infra/ports":             {sameNS + "Accepted=True/Accepted ResolvedRefs=False/BackendNotFound"},
		"infra/extension-ref":     {sameNS + "Accepted=True/Accepted ResolvedRefs=False/InvalidKind"},
		"infra/partially-invalid": {sameNS + ok + " PartiallyInvalid=True/UnsupportedValue"},
		"infra/all-invalid":       {sameNS + "Accepted=False/IncompatibleFilters" + refsOK},
		"infra/prefix-rewrite-needs-prefix": {
			sameNS + "Accepted=False/IncompatibleFilters" + refsOK,
		},
		"infra/redirect-with-backends": {
			sameNS + "Accepted=False/IncompatibleFilters" + refsOK,
		},
		"infra/timeouts": {sameNS + ok + " PartiallyInvalid=True/UnsupportedValue"},
		"infra/mirrors":  {sameNS + "Accepted=True/Accepted ResolvedRefs=False/BackendNotFound"},
	})
	// Unaccepted routes are not counted.
	if got := out.AttachedRoutes[f.listener(t, "Gateway/infra/same-ns", "http")]; got != 11 {
		t.Errorf("AttachedRoutes = %d, want 11", got)
	}
	parents := func(name string) string {
		s := out.RouteParents[types.NamespacedName{Namespace: "infra", Name: name}]
		var msgs []string
		for _, c := range s[0].Conditions {
			msgs = append(msgs, c.Message)
		}
		return strings.Join(msgs, " | ")
	}
	if m := parents("partially-invalid"); !strings.Contains(m, "Dropped Rule(s): rule 0 (unknown-filter): unsupported filter type \"Teleport\"; rule 1 (bad-regex)") {
		t.Errorf("partially-invalid messages: %s", m)
	}

	tb := out.Tables[f.listener(t, "Gateway/infra/same-ns", "http")]
	get := func(host, target string) *config.Rule {
		r, _ := tb.Match(request("GET", host, target))
		return r
	}
	type backend struct {
		name   string
		weight int32
		bad    bool
		proto  string
	}
	backends := func(r *config.Rule) []backend {
		var out []backend
		for _, b := range r.Backends {
			out = append(out, backend{b.Key.Service.Name, b.Weight, b.Invalid != "", b.AppProtocol})
		}
		return out
	}
	cases := []struct {
		host, target string
		invalid      bool
		total        int32
		backends     []backend
	}{
		{"unknown-kind.test", "/", false, 1, []backend{{"v1", 1, true, ""}}},
		{"nonexistent.test", "/", false, 1, []backend{{"nonexistent", 1, true, ""}}},
		{"cross-namespace.test", "/", false, 1, []backend{{"web", 1, true, ""}}},
		{"partial-grant.test", "/v2", false, 1, []backend{{"app-v2", 1, true, ""}}},
		{"partial-grant.test", "/", false, 1, []backend{{"app-v1", 1, false, ""}}},
		{"omitted.test", "/omitted", false, 0, nil},
		{"omitted.test", "/empty", false, 0, nil},
		{"omitted.test", "/", false, 1, []backend{{"v1", 1, false, ""}}},
		{"weights.test", "/mixed", false, 6, []backend{{"v1", 3, false, ""}, {"v2", 0, false, ""}, {"v3", 1, false, ""}, {"nonexistent", 2, true, ""}}},
		{"weights.test", "/zero", false, 0, []backend{{"v1", 0, false, ""}}},
		{"ports.test", "/no-port", false, 1, []backend{{"v1", 1, true, ""}}},
		{"ports.test", "/wrong-port", false, 1, []backend{{"v1", 1, true, ""}}},
		{"ports.test", "/h2c", false, 1, []backend{{"v1", 1, false, "kubernetes.io/h2c"}}},
		{"ports.test", "/ws", false, 1, []backend{{"v1", 1, false, "kubernetes.io/ws"}}},
		{"ports.test", "/tls", false, 1, []backend{{"v1", 1, true, "https"}}},
		{"extension-ref.test", "/ext", true, 1, []backend{{"v1", 1, false, ""}}},
		{"extension-ref.test", "/other", false, 1, []backend{{"v2", 1, false, ""}}},
		{"partially-invalid.test", "/unknown-filter", true, 1, []backend{{"v1", 1, false, ""}}},
		{"partially-invalid.test", "/bad", false, 1, []backend{{"v2", 1, false, ""}}},
		{"timeouts.test", "/bad-duration", true, 1, []backend{{"v1", 1, false, ""}}},
		{"timeouts.test", "/backend-longer", true, 1, []backend{{"v1", 1, false, ""}}},
	}
	for _, c := range cases {
		r := get(c.host, c.target)
		if r == nil {
			t.Errorf("%s%s: no rule", c.host, c.target)
			continue
		}
		if (r.Invalid != "") != c.invalid || r.TotalWeight != c.total || !reflect.DeepEqual(backends(r), c.backends) {
			t.Errorf("%s%s: invalid %q, total %d, backends %+v; want invalid=%v total %d backends %+v",
				c.host, c.target, r.Invalid, r.TotalWeight, backends(r), c.invalid, c.total, c.backends)
		}
	}
	for _, host := range []string{"all-invalid.test", "prefix-rewrite.test"} {
		if r := get(host, "/a"); r != nil {
			t.Errorf("%s: served by %v, want nothing (route not accepted)", host, r.Route)
		}
	}

	set := get("timeouts.test", "/set")
	if set.RequestTimeout != 10*time.Second || set.BackendRequestTimeout != time.Minute+500*time.Millisecond {
		t.Errorf("timeouts %v %v", set.RequestTimeout, set.BackendRequestTimeout)
	}
	if want := (&config.Retry{Codes: []int{500, 502}, Attempts: 3, Backoff: 100 * time.Millisecond}); !reflect.DeepEqual(set.Retry, want) {
		t.Errorf("retry %+v, want %+v", set.Retry, want)
	}
	if d := get("timeouts.test", "/disabled"); d.RequestTimeout != NoTimeout || d.BackendRequestTimeout != NoTimeout || d.Retry != nil {
		t.Errorf("disabled timeouts %v %v, retry %v", d.RequestTimeout, d.BackendRequestTimeout, d.Retry)
	}
	if o := get("omitted.test", "/"); o.RequestTimeout != 0 || o.BackendRequestTimeout != 0 {
		t.Errorf("unset timeouts %v %v", o.RequestTimeout, o.BackendRequestTimeout)
	}

	m := get("mirrors.test", "/")
	var mirrors []config.Mirror
	for _, fl := range m.Filters {
		if fl.Mirror != nil {
			mirrors = append(mirrors, *fl.Mirror)
		}
	}
	wantMirrors := []config.Mirror{
		{Backend: config.BackendKey{Service: config.NamespacedName{Namespace: "infra", Name: "v2"}, Port: 8080}, Numerator: 20, Denominator: 100},
		{Backend: config.BackendKey{Service: config.NamespacedName{Namespace: "infra", Name: "v3"}, Port: 8080}, Numerator: 25, Denominator: 50},
	}
	if !reflect.DeepEqual(mirrors, wantMirrors) {
		t.Errorf("mirrors %+v, want %+v", mirrors, wantMirrors)
	}
	if len(m.Filters) != 3 || m.Filters[2].RequestHeaders == nil || m.Filters[2].RequestHeaders.Set[0].Name != "X-Mirrored" {
		t.Errorf("filters %+v", m.Filters)
	}
	if bf := m.Backends[0].Filters; len(bf) != 1 || bf[0].ResponseHeaders == nil || bf[0].ResponseHeaders.Add[0] != (config.Header{Name: "X-Backend", Value: "v1"}) {
		t.Errorf("backend filters %+v", bf)
	}
}

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"0s": 0, "1h": time.Hour, "500ms": 500 * time.Millisecond, "1h2m3s4ms": time.Hour + 2*time.Minute + 3*time.Second + 4*time.Millisecond,
		"99999s": 99999 * time.Second,
	}
	for s, want := range good {
		if got, err := parseDuration(s); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "1", "1d", "100000s", "1.5s", "-1s", "1h1m1s1ms1s", "1us", "s", " 1s"} {
		if _, err := parseDuration(s); err == nil {
			t.Errorf("parseDuration(%q): want an error", s)
		}
	}
}

// TestGrantNamesService: a ReferenceGrant's to.name names one Service; an
// empty name (which the API's validation refuses) is no Service at all,
// not every Service of the namespace.
func TestGrantNamesService(t *testing.T) {
	for _, tc := range []struct {
		name string
		to   *gwv1.ObjectName
		want metav1.ConditionStatus
	}{
		{"omitted", nil, metav1.ConditionTrue},
		{"the Service", ptr[gwv1.ObjectName]("svc"), metav1.ConditionTrue},
		{"another Service", ptr[gwv1.ObjectName]("other"), metav1.ConditionFalse},
		{"empty", ptr[gwv1.ObjectName](""), metav1.ConditionFalse},
	} {
		in := grpcListenerInput()
		in.Services[types.NamespacedName{Namespace: "backends", Name: "svc"}] = Service{Ports: []ServicePort{{Port: 80}}}
		g := &gwv1.ReferenceGrant{}
		g.Namespace, g.Name = "backends", "grant"
		g.Spec.From = []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: "HTTPRoute", Namespace: "ns"}}
		g.Spec.To = []gwv1.ReferenceGrantTo{{Kind: "Service", Name: tc.to}}
		in.ReferenceGrants = []*gwv1.ReferenceGrant{g}
		r := &gwv1.HTTPRoute{}
		r.Namespace, r.Name = "ns", "web"
		r.Spec.ParentRefs = []gwv1.ParentReference{{Name: "gw"}}
		r.Spec.Rules = []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
			BackendObjectReference: gwv1.BackendObjectReference{Name: "svc", Namespace: ptr[gwv1.Namespace]("backends"), Port: ptr[gwv1.PortNumber](80)},
		}}}}}
		in.Routes = []*gwv1.HTTPRoute{r}
		st := Compile(in).RouteParents[types.NamespacedName{Namespace: "ns", Name: "web"}]
		if len(st) != 1 || len(st[0].Conditions) < 2 {
			t.Fatalf("%s: statuses %v", tc.name, st)
		}
		if got := st[0].Conditions[1]; got.Status != tc.want {
			t.Errorf("%s: ResolvedRefs %s (%s), want %s", tc.name, got.Status, got.Message, tc.want)
		}
	}
}
