package routing

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/shared/hostname"
)

const testController = gwv1.GatewayController("portico.dev/gateway-controller")

// fixture is a set of manifests turned into a Compile input the way the
// translate step would: Gateway listeners first, then ListenerSet
// listeners, every listener accepted unless its Gateway or ListenerSet
// carries the annotation "test/listeners-accepted: false".
type fixture struct {
	in Input
}

// loadFixture reads testdata/base.yaml and the named files (multi-document
// YAML, parsed strictly).
func loadFixture(t testing.TB, files ...string) *fixture {
	t.Helper()
	f := &fixture{in: Input{
		ControllerName:  testController,
		Parents:         map[Parent]bool{},
		NamespaceLabels: map[string]map[string]string{},
		Services:        map[types.NamespacedName]Service{},
	}}
	var listenerSets []*gwv1.ListenerSet
	for _, name := range append([]string{"base.yaml"}, files...) {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(data), "\n---\n") {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s document %d: %v", name, i, err)
			}
			strict := func(into any) {
				t.Helper()
				if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
					t.Fatalf("%s document %d (%s): %v", name, i, meta.Kind, err)
				}
			}
			switch meta.Kind {
			case "Gateway":
				var gw gwv1.Gateway
				strict(&gw)
				f.addGateway(&gw)
			case "ListenerSet":
				var ls gwv1.ListenerSet
				strict(&ls)
				listenerSets = append(listenerSets, &ls)
			case "HTTPRoute":
				var r gwv1.HTTPRoute
				strict(&r)
				f.in.Routes = append(f.in.Routes, &r)
			case "ReferenceGrant":
				var g gwv1.ReferenceGrant
				strict(&g)
				f.in.ReferenceGrants = append(f.in.ReferenceGrants, &g)
			case "Namespace":
				var ns corev1.Namespace
				strict(&ns)
				labels := map[string]string{"kubernetes.io/metadata.name": ns.Name}
				for k, v := range ns.Labels {
					labels[k] = v
				}
				f.in.NamespaceLabels[ns.Name] = labels
			case "Service":
				var svc corev1.Service
				strict(&svc)
				var s Service
				for _, p := range svc.Spec.Ports {
					var ap string
					if p.AppProtocol != nil {
						ap = *p.AppProtocol
					}
					s.Ports = append(s.Ports, ServicePort{Name: p.Name, Port: p.Port, AppProtocol: ap})
				}
				f.in.Services[types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}] = s
			default:
				t.Fatalf("%s document %d: unexpected kind %q", name, i, meta.Kind)
			}
		}
	}
	for _, ls := range listenerSets {
		f.addListenerSet(ls)
	}
	return f
}

func (f *fixture) addGateway(gw *gwv1.Gateway) {
	p := Parent{Kind: "Gateway", Namespace: gw.Namespace, Name: gw.Name}
	f.in.Parents[p] = gw.Annotations["test/parent-accepted"] != "false"
	for _, l := range gw.Spec.Listeners {
		var h string
		if l.Hostname != nil {
			h = string(*l.Hostname)
		}
		f.addListener(gw.Annotations, types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}, p, l.Name, l.Port, l.Protocol, h, l.AllowedRoutes)
	}
}

func (f *fixture) addListenerSet(ls *gwv1.ListenerSet) {
	p := Parent{Kind: "ListenerSet", Namespace: ls.Namespace, Name: ls.Name}
	gwNS := ls.Namespace
	if ls.Spec.ParentRef.Namespace != nil {
		gwNS = string(*ls.Spec.ParentRef.Namespace)
	}
	f.in.Parents[p] = ls.Annotations["test/parent-accepted"] != "false"
	for _, l := range ls.Spec.Listeners {
		var h string
		if l.Hostname != nil {
			h = string(*l.Hostname)
		}
		f.addListener(ls.Annotations, types.NamespacedName{Namespace: gwNS, Name: string(ls.Spec.ParentRef.Name)}, p, l.Name, l.Port, l.Protocol, h, l.AllowedRoutes)
	}
}

func (f *fixture) addListener(ann map[string]string, gw types.NamespacedName, p Parent, name gwv1.SectionName, port gwv1.PortNumber, proto gwv1.ProtocolType, host string, ar *gwv1.AllowedRoutes) {
	l := Listener{
		ID:       len(f.in.Listeners),
		Gateway:  gw,
		Parent:   p,
		Name:     name,
		Port:     port,
		Protocol: proto,
		Hostname: host,
		Accepted: ann["test/listeners-accepted"] != "false",
	}
	if ar != nil {
		l.AllowedRoutes = *ar
	}
	l.SupportedKinds = supportedKinds(proto, ar)
	f.in.Listeners = append(f.in.Listeners, l)
}

// supportedKinds is what the listeners package gives a listener of
// protocol proto: the route kinds the protocol carries, narrowed by
// allowedRoutes.kinds when it lists any.
func supportedKinds(proto gwv1.ProtocolType, ar *gwv1.AllowedRoutes) []gwv1.RouteGroupKind {
	if proto != gwv1.HTTPProtocolType && proto != gwv1.HTTPSProtocolType {
		return nil
	}
	own := []gwv1.RouteGroupKind{{Kind: "HTTPRoute"}, {Kind: "GRPCRoute"}}
	if ar == nil || len(ar.Kinds) == 0 {
		return own
	}
	var out []gwv1.RouteGroupKind
	for _, k := range own {
		if hasKind(ar.Kinds, kindOf(k.Kind)) {
			out = append(out, k)
		}
	}
	return out
}

func kindOf(name gwv1.Kind) RouteKind {
	if name == "GRPCRoute" {
		return KindGRPCRoute
	}
	return KindHTTPRoute
}

// listener returns the ID of the listener name of parent "Kind/ns/name".
func (f *fixture) listener(t testing.TB, parent string, name gwv1.SectionName) int {
	t.Helper()
	for _, l := range f.in.Listeners {
		if l.Parent.Kind+"/"+l.Parent.Namespace+"/"+l.Parent.Name == parent && l.Name == name {
			return l.ID
		}
	}
	t.Fatalf("no listener %s of %s", name, parent)
	return -1
}

// route serves requests the way the data plane does: it picks the listener
// of a Gateway (with its ListenerSets) on a port by Host, most specific
// hostname first, and asks that listener's table.
func route(out Output, in Input, gateway types.NamespacedName, port gwv1.PortNumber, r *http.Request) (*config.Rule, *config.Match) {
	var patterns []string
	var ids []int
	for _, l := range in.Listeners {
		if l.Gateway == gateway && l.Port == port {
			patterns = append(patterns, l.Hostname)
			ids = append(ids, l.ID)
		}
	}
	id, ok := hostname.NewTable(patterns, ids).Lookup(hostname.WithoutPort(r.Host))
	if !ok {
		return nil, nil
	}
	return out.Tables[id].Match(r)
}

// request builds a request to host and target ("/path?query").
func request(method, host, target string, headers ...string) *http.Request {
	r := httptest.NewRequest(method, "http://"+host+target, nil)
	r.Host = host
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

// backendOf names the single backend Service of a rule, "" for none.
func backendOf(r *config.Rule) string {
	if r == nil || len(r.Backends) == 0 {
		return ""
	}
	return r.Backends[0].Key.Service.Name
}
