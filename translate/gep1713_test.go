package translate

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
)

// The tests in this file translate the golden inputs of testdata/ and
// assert, condition by condition, what the matching Gateway API v1.7.0
// conformance test asserts, so that the spec's expectations are visible
// here and not only inside the golden snapshots. Where the conformance
// test sends requests, the same requests are looked up in the compiled
// data plane tables.

// gepFixture is one translated golden input.
type gepFixture struct {
	t   *testing.T
	res *snapshot.Resources
	cfg *config.Config
	st  *status.Computed
}

func gepTranslate(t *testing.T, name string) *gepFixture {
	t.Helper()
	res := loadFixture(t, filepath.Join("testdata", name+".in.yaml"))
	cfg, st := newTranslator().Translate(res)
	return &gepFixture{t: t, res: res, cfg: cfg, st: st}
}

// gepCond is an expected condition; an empty Reason matches any reason, as
// in the conformance suite.
type gepCond struct {
	Type   string
	Status metav1.ConditionStatus
	Reason string
}

func gepCondTrue(typ string) gepCond { return gepCond{typ, metav1.ConditionTrue, ""} }

func gepCondIs(typ string, status metav1.ConditionStatus, reason string) gepCond {
	return gepCond{typ, status, reason}
}

// gepAcceptedListener is what the conformance suite expects of every listener
// that routes can use (generateAcceptedListenerConditions upstream).
var gepAcceptedListener = []gepCond{
	gepCondTrue(string(gwv1.ListenerConditionResolvedRefs)),
	gepCondTrue(string(gwv1.ListenerConditionAccepted)),
	gepCondTrue(string(gwv1.ListenerConditionProgrammed)),
}

func gepConflictedListener(reason gwv1.ListenerConditionReason) []gepCond {
	return []gepCond{
		gepCondIs(string(gwv1.ListenerConditionAccepted), metav1.ConditionFalse, string(reason)),
		gepCondIs(string(gwv1.ListenerConditionProgrammed), metav1.ConditionFalse, string(reason)),
		gepCondIs(string(gwv1.ListenerConditionConflicted), metav1.ConditionTrue, string(reason)),
	}
}

func gepSetConds(accepted, programmed metav1.ConditionStatus, acceptedReason, programmedReason gwv1.ListenerSetConditionReason) []gepCond {
	return []gepCond{
		gepCondIs(string(gwv1.ListenerSetConditionAccepted), accepted, string(acceptedReason)),
		gepCondIs(string(gwv1.ListenerSetConditionProgrammed), programmed, string(programmedReason)),
	}
}

var gepGatewayAccepted = gepCondTrue(string(gwv1.GatewayConditionAccepted))

func gepSplitNN(s string) types.NamespacedName {
	ns, name, _ := strings.Cut(s, "/")
	return types.NamespacedName{Namespace: ns, Name: name}
}

// hasConds checks that every expected condition is present with the
// object's generation, like GatewayMustHaveCondition and friends, which also
// insist that conditions are not stale.
func (f *gepFixture) hasConds(what string, generation int64, got []metav1.Condition, want ...gepCond) {
	f.t.Helper()
	for _, w := range want {
		var found *metav1.Condition
		n := 0
		for i := range got {
			if got[i].Type == w.Type {
				found = &got[i]
				n++
			}
		}
		switch {
		case n > 1:
			f.t.Errorf("%s: %d %s conditions; conditions are a map by type", what, n, w.Type)
		case found == nil:
			f.t.Errorf("%s: no %s condition (have %v)", what, w.Type, got)
		case found.Status != w.Status || (w.Reason != "" && found.Reason != w.Reason):
			f.t.Errorf("%s: %s is %s/%s (%q), want %s/%s", what, w.Type, found.Status, found.Reason, found.Message, w.Status, gepOrAny(w.Reason))
		case found.ObservedGeneration != generation:
			f.t.Errorf("%s: %s has observedGeneration %d, want %d", what, w.Type, found.ObservedGeneration, generation)
		}
	}
}

func gepOrAny(reason string) string {
	if reason == "" {
		return "(any reason)"
	}
	return reason
}

func (f *gepFixture) gatewayGeneration(nn types.NamespacedName) int64 {
	for _, gw := range f.res.Gateways {
		if gw.Namespace == nn.Namespace && gw.Name == nn.Name {
			return gw.Generation
		}
	}
	f.t.Fatalf("no Gateway %s in the input", nn)
	return 0
}

func (f *gepFixture) listenerSetGeneration(nn types.NamespacedName) int64 {
	for _, ls := range f.res.ListenerSets {
		if ls.Namespace == nn.Namespace && ls.Name == nn.Name {
			return ls.Generation
		}
	}
	f.t.Fatalf("no ListenerSet %s in the input", nn)
	return 0
}

func (f *gepFixture) route(nn types.NamespacedName) *gwv1.HTTPRoute {
	for _, r := range f.res.HTTPRoutes {
		if r.Namespace == nn.Namespace && r.Name == nn.Name {
			return r
		}
	}
	f.t.Fatalf("no HTTPRoute %s in the input", nn)
	return nil
}

func (f *gepFixture) gateway(name string) (types.NamespacedName, gwv1.GatewayStatus) {
	f.t.Helper()
	nn := gepSplitNN(name)
	st, ok := f.st.Gateways.Get(nn)
	if !ok {
		f.t.Fatalf("no status for Gateway %s", nn)
	}
	return nn, st
}

func (f *gepFixture) listenerSet(name string) (types.NamespacedName, gwv1.ListenerSetStatus) {
	f.t.Helper()
	nn := gepSplitNN(name)
	st, ok := f.st.ListenerSets.Get(nn)
	if !ok {
		f.t.Fatalf("no status for ListenerSet %s", nn)
	}
	return nn, st
}

// gatewayHas is GatewayMustHaveCondition.
func (f *gepFixture) gatewayHas(name string, want ...gepCond) {
	f.t.Helper()
	nn, st := f.gateway(name)
	f.hasConds("Gateway "+name, f.gatewayGeneration(nn), st.Conditions, want...)
}

// attachedListenerSets is GatewayMustHaveAttachedListeners.
func (f *gepFixture) attachedListenerSets(name string, want int32) {
	f.t.Helper()
	_, st := f.gateway(name)
	if got := ptr.Deref(st.AttachedListenerSets, 0); got != want {
		f.t.Errorf("Gateway %s: attachedListenerSets %d, want %d", name, got, want)
	}
}

// gatewayListenerHas is GatewayListenersMustHaveConditions for one listener.
func (f *gepFixture) gatewayListenerHas(name, listener string, want ...gepCond) {
	f.t.Helper()
	nn, st := f.gateway(name)
	for _, l := range st.Listeners {
		if string(l.Name) == listener {
			f.hasConds("Gateway "+name+" listener "+listener, f.gatewayGeneration(nn), l.Conditions, want...)
			return
		}
	}
	f.t.Errorf("Gateway %s: no status for listener %s", name, listener)
}

// listenerSetHas is ListenerSetMustHaveCondition.
func (f *gepFixture) listenerSetHas(name string, want ...gepCond) {
	f.t.Helper()
	nn, st := f.listenerSet(name)
	f.hasConds("ListenerSet "+name, f.listenerSetGeneration(nn), st.Conditions, want...)
}

// listenerSetListenerHas is ListenerSetListenersMustHaveConditions for one
// listener.
func (f *gepFixture) listenerSetListenerHas(name, listener string, want ...gepCond) {
	f.t.Helper()
	nn, st := f.listenerSet(name)
	for _, l := range st.Listeners {
		if string(l.Name) == listener {
			f.hasConds("ListenerSet "+name+" listener "+listener, f.listenerSetGeneration(nn), l.Conditions, want...)
			return
		}
	}
	f.t.Errorf("ListenerSet %s: no status for listener %s", name, listener)
}

// gepEntry is one expected ListenerEntryStatus of an accepted listener.
type gepEntry struct {
	name     string
	attached int32
}

// listenerSetListeners is ListenerSetStatusMustHaveListeners with the
// expectations every ListenerSet test uses: exactly these listeners, each
// supporting HTTPRoute, with its attachedRoutes count and the accepted
// conditions.
func (f *gepFixture) listenerSetListeners(name string, want ...gepEntry) {
	f.t.Helper()
	nn, st := f.listenerSet(name)
	if len(st.Listeners) != len(want) {
		f.t.Errorf("ListenerSet %s: %d listener statuses, want %d", name, len(st.Listeners), len(want))
	}
	for _, w := range want {
		var got *gwv1.ListenerEntryStatus
		for i := range st.Listeners {
			if string(st.Listeners[i].Name) == w.name {
				got = &st.Listeners[i]
			}
		}
		if got == nil {
			f.t.Errorf("ListenerSet %s: no status for listener %s", name, w.name)
			continue
		}
		if !gepSupportsHTTPRoute(got.SupportedKinds) {
			f.t.Errorf("ListenerSet %s listener %s: supportedKinds %v lack HTTPRoute", name, w.name, got.SupportedKinds)
		}
		if got.AttachedRoutes != w.attached {
			f.t.Errorf("ListenerSet %s listener %s: attachedRoutes %d, want %d", name, w.name, got.AttachedRoutes, w.attached)
		}
		f.hasConds("ListenerSet "+name+" listener "+w.name, f.listenerSetGeneration(nn), got.Conditions, gepAcceptedListener...)
	}
}

func gepSupportsHTTPRoute(kinds []gwv1.RouteGroupKind) bool {
	for _, k := range kinds {
		if k.Kind == "HTTPRoute" && (k.Group == nil || *k.Group == gwv1.GroupName) {
			return true
		}
	}
	return false
}

// gepParentRefNames reports whether a route's status entry is for the parent
// kind/namespace/name. A missing group or kind is read as its API default:
// in a cluster the API server stores the default in the route's spec, which
// the status echoes; the YAML files here are written without them.
func gepParentRefNames(ref gwv1.ParentReference, routeNS, kind string, parent types.NamespacedName) bool {
	group, k, ns := gwv1.Group(gwv1.GroupName), gwv1.Kind("Gateway"), routeNS
	if ref.Group != nil {
		group = *ref.Group
	}
	if ref.Kind != nil {
		k = *ref.Kind
	}
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return group == gwv1.GroupName && string(k) == kind && ns == parent.Namespace && string(ref.Name) == parent.Name
}

// routeParentHas is HTTPRouteMustHaveCondition, restricted to the parent's
// kind as well as its name.
func (f *gepFixture) routeParentHas(route, kind, parent string, want gepCond) {
	f.t.Helper()
	rnn, pnn := gepSplitNN(route), gepSplitNN(parent)
	r := f.route(rnn)
	found := false
	for _, p := range f.st.HTTPRoutes.At(rnn) {
		if gepParentRefNames(p.ParentRef, r.Namespace, kind, pnn) {
			found = true
			f.hasConds("HTTPRoute "+route+" parent "+kind+" "+parent, r.Generation, p.Conditions, want)
		}
	}
	if !found {
		f.t.Errorf("HTTPRoute %s: no status entry for %s %s (have %v)", route, kind, parent, f.st.HTTPRoutes.At(rnn))
	}
}

// routesAcceptedBy is RoutesAndParentMustBeAccepted: each route has an
// entry for the parent, from Portico, Accepted with reason Accepted, and
// every listener of the parent is ResolvedRefs, Accepted and Programmed.
func (f *gepFixture) routesAcceptedBy(kind, parent string, routes ...string) {
	f.t.Helper()
	for _, route := range routes {
		rnn := gepSplitNN(route)
		r := f.route(rnn)
		ok := false
		for _, p := range f.st.HTTPRoutes.At(rnn) {
			if p.ControllerName == wellknown.ControllerName && gepParentRefNames(p.ParentRef, r.Namespace, kind, gepSplitNN(parent)) {
				ok = true
				f.hasConds("HTTPRoute "+route+" parent "+kind+" "+parent, r.Generation, p.Conditions,
					gepCondIs(string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, string(gwv1.RouteReasonAccepted)))
			}
		}
		if !ok {
			f.t.Errorf("HTTPRoute %s: no status entry for %s %s (have %v)", route, kind, parent, f.st.HTTPRoutes.At(rnn))
		}
	}
	switch kind {
	case "Gateway":
		_, st := f.gateway(parent)
		for _, l := range st.Listeners {
			f.gatewayListenerHas(parent, string(l.Name), gepAcceptedListener...)
		}
	case "ListenerSet":
		_, st := f.listenerSet(parent)
		for _, l := range st.Listeners {
			f.listenerSetListenerHas(parent, string(l.Name), gepAcceptedListener...)
		}
	}
}

// gepRequest is a request and the backend Service ("namespace/name") that
// must answer it; an empty backend means 404.
type gepRequest struct {
	host, path, backend string
}

// backendFor looks a request up the way the data plane does: the port's
// listener for the Host, then that listener's routes. It returns the
// Service of the first backend, "" when the answer is 404, or what makes
// the answer a 500.
func (f *gepFixture) backendFor(port int32, host, path string) string {
	var p *config.Port
	for _, cp := range f.cfg.Ports {
		if cp.Number == port {
			p = cp
		}
	}
	if p == nil {
		return ""
	}
	l, ok := p.Listeners.Lookup(host)
	if !ok || l.Routes == nil {
		return ""
	}
	rule, _ := l.Routes.Match(httptest.NewRequest("GET", "http://"+host+path, nil))
	switch {
	case rule == nil:
		return ""
	case rule.Invalid != "":
		return "500: " + rule.Invalid
	case len(rule.Backends) == 0:
		return "500: no backends"
	case rule.Backends[0].Invalid != "":
		return "500: " + rule.Backends[0].Invalid
	}
	return rule.Backends[0].Key.Service.String()
}

// requests is MakeRequestAndExpectEventuallyConsistentResponse for each
// request, against the data plane tables.
func (f *gepFixture) requests(port int32, reqs ...gepRequest) {
	f.t.Helper()
	for _, r := range reqs {
		if got := f.backendFor(port, r.host, r.path); got != r.backend {
			f.t.Errorf("request %s%s on port %d: backend %q, want %q (\"\" = 404)", r.host, r.path, port, got, r.backend)
		}
	}
}

const gepInfraNS = "gateway-conformance-infra"

func gepInfra(name string) string { return gepInfraNS + "/" + name }

var (
	gepInfraV1 = gepInfra("infra-backend-v1")
	gepInfraV2 = gepInfra("infra-backend-v2")
	gepInfraV3 = gepInfra("infra-backend-v3")
)

func TestGEP1713Conformance(t *testing.T) {
	notAllowed := gepSetConds(metav1.ConditionFalse, metav1.ConditionFalse, gwv1.ListenerSetReasonNotAllowed, gwv1.ListenerSetReasonNotAllowed)
	notValid := gepSetConds(metav1.ConditionFalse, metav1.ConditionFalse, gwv1.ListenerSetReasonListenersNotValid, gwv1.ListenerSetReasonListenersNotValid)
	acceptedSet := gepSetConds(metav1.ConditionTrue, metav1.ConditionTrue, gwv1.ListenerSetReasonAccepted, gwv1.ListenerSetReasonProgrammed)
	acceptedAnyReason := gepSetConds(metav1.ConditionTrue, metav1.ConditionTrue, "", gwv1.ListenerSetReasonProgrammed)

	t.Run("listenerset-allowed-namespace-none", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-allowed-namespace-none")
		gw := gepInfra("gateway-does-not-allow-listenerset")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.attachedListenerSets(gw, 0)
		f.listenerSetHas(gepInfra("listenerset-not-allowed"), notAllowed...)
	})

	t.Run("listenerset-default-not-allowed", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-default-not-allowed")
		gw := gepInfra("gateway-default-does-not-allow-listenerset")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.attachedListenerSets(gw, 0)
		f.listenerSetHas(gepInfra("listenerset-default-not-allowed"), notAllowed...)
	})

	t.Run("listenerset-allowed-namespace-same", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-allowed-namespace-same")
		gw := gepInfra("gateway-allows-listenerset-in-same-namespace")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.attachedListenerSets(gw, 1)
		ls := gepInfra("listenerset-in-same-namespace")
		f.listenerSetHas(ls, acceptedSet...)
		f.listenerSetListenerHas(ls, "listenerset-in-same-namespace-listener", gepAcceptedListener...)
		f.listenerSetHas("gateway-api-listenerset-not-allowed-ns/listenerset-in-different-namespace", notAllowed...)
	})

	t.Run("listenerset-allowed-namespace-selector", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-allowed-namespace-selector")
		gw := gepInfra("gateway-allows-listenerset-in-selected-namespace")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.attachedListenerSets(gw, 1)
		ls := "gateway-api-listenerset-selector-allowed-ns/listenerset-in-selected-namespace"
		f.listenerSetHas(ls, acceptedSet...)
		f.listenerSetListenerHas(ls, "listenerset-in-selected-namespace-listener", gepAcceptedListener...)
		f.listenerSetHas("gateway-api-listenerset-selector-not-allowed-ns/listenerset-not-in-selected-namespace", notAllowed...)
	})

	t.Run("listenerset-allowed-routes-namespaces", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-allowed-routes-namespaces")
		gw := gepInfra("gateway-with-listener-sets-test-allowed-routes")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.attachedListenerSets(gw, 2)

		ls := gepInfra("listenerset-test-allowed-routes-namespaces")
		f.routesAcceptedBy("ListenerSet", ls,
			gepInfra("route-in-same-namespace"),
			"gateway-api-routes-allowed-ns/route-in-selected-namespace",
			"gateway-api-routes-not-allowed-ns/route-not-in-selected-namespace")
		f.listenerSetListeners(ls,
			gepEntry{"listener-set-listener-allowed-routes-all", 3},
			gepEntry{"listener-set-listener-allowed-routes-same", 1},
			gepEntry{"listener-set-listener-allowed-routes-selector", 1})
		f.requests(80,
			gepRequest{"listener-set-listener-allowed-routes-all.com", "/route-in-same-namespace", gepInfraV1},
			gepRequest{"listener-set-listener-allowed-routes-all.com", "/route-in-selected-namespace", gepInfraV2},
			gepRequest{"listener-set-listener-allowed-routes-all.com", "/route-not-in-selected-namespace", gepInfraV3},
			gepRequest{"listener-set-listener-allowed-routes-same.com", "/route-in-same-namespace", gepInfraV1},
			gepRequest{"listener-set-listener-allowed-routes-same.com", "/route-in-selected-namespace", ""},
			gepRequest{"listener-set-listener-allowed-routes-same.com", "/route-not-in-selected-namespace", ""},
			gepRequest{"listener-set-listener-allowed-routes-selector.com", "/route-in-same-namespace", ""},
			gepRequest{"listener-set-listener-allowed-routes-selector.com", "/route-in-selected-namespace", gepInfraV2},
			gepRequest{"listener-set-listener-allowed-routes-selector.com", "/route-not-in-selected-namespace", ""})

		crossNS := "gateway-api-ls-cross-ns/listenerset-test-allowed-routes-cross-ns"
		f.routesAcceptedBy("ListenerSet", crossNS, "gateway-api-ls-cross-ns/route-in-listenerset-namespace")
		f.routeParentHas(gepInfra("route-in-gateway-namespace"), "ListenerSet", crossNS,
			gepCondIs(string(gwv1.RouteConditionAccepted), metav1.ConditionFalse, string(gwv1.RouteReasonNotAllowedByListeners)))
		f.listenerSetListeners(crossNS, gepEntry{"listener-set-listener-allowed-routes-cross-ns-same", 1})
		f.requests(80,
			gepRequest{"listener-set-listener-allowed-routes-cross-ns-same.com", "/route-in-listenerset-namespace", gepInfraV1},
			gepRequest{"listener-set-listener-allowed-routes-cross-ns-same.com", "/route-in-gateway-namespace", ""})
	})

	t.Run("listenerset-allowed-routes-supported-kinds", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-allowed-routes-supported-kinds")
		f.gatewayHas(gepInfra("gateway-with-listener-sets-test-supported-route-kinds"), gepGatewayAccepted)
		f.listenerSetListenerHas(gepInfra("listenerset-test-allowed-routes-supported-kinds"), "listener-set-listener-allowed-routes-tls-only",
			gepCondIs(string(gwv1.ListenerConditionResolvedRefs), metav1.ConditionFalse, string(gwv1.ListenerReasonInvalidRouteKinds)))
	})

	t.Run("listenerset-dual-parentref-independence", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-dual-parentref-independence")
		gw, ls := gepInfra("gateway-dual-parentref"), gepInfra("ls-dual-parentref")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.attachedListenerSets(gw, 1)
		f.listenerSetListeners(ls, gepEntry{"ls-dual-parentref-listener", 2})

		both := gepInfra("route-dual-parentref-both")
		f.routeParentHas(both, "Gateway", gw, gepCondTrue(string(gwv1.RouteConditionAccepted)))
		f.routeParentHas(both, "ListenerSet", ls, gepCondTrue(string(gwv1.RouteConditionAccepted)))
		f.requests(80,
			gepRequest{"gw-dual.com", "/dualboth", gepInfraV1},
			gepRequest{"ls-dual.com", "/dualboth", gepInfraV1})

		one := gepInfra("route-dual-parentref-one")
		f.routeParentHas(one, "Gateway", gw,
			gepCondIs(string(gwv1.RouteConditionAccepted), metav1.ConditionFalse, string(gwv1.RouteReasonNoMatchingParent)))
		f.routeParentHas(one, "ListenerSet", ls, gepCondTrue(string(gwv1.RouteConditionAccepted)))
		f.routesAcceptedBy("ListenerSet", ls, one)
		f.requests(80,
			gepRequest{"ls-dual.com", "/dualone", gepInfraV2},
			gepRequest{"gw-dual.com", "/dualone", ""})
	})

	t.Run("listenerset-gateway-parent-section-name-not-found", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-gateway-parent-section-name-not-found")
		gw, ls := gepInfra("gateway-section-name"), gepInfra("listenerset-section-name")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.attachedListenerSets(gw, 1)
		f.routesAcceptedBy("ListenerSet", ls, gepInfra("route-via-listenerset"))
		f.routeParentHas(gepInfra("route-via-gateway"), "Gateway", gw,
			gepCondIs(string(gwv1.RouteConditionAccepted), metav1.ConditionFalse, string(gwv1.RouteReasonNoMatchingParent)))
		f.requests(80,
			gepRequest{"ls-section-name.com", "/goodsection", gepInfraV1},
			gepRequest{"gw-section.com", "/badsection", ""})
	})

	conflictCase := func(t *testing.T, kind string, reason gwv1.ListenerConditionReason) {
		f := gepTranslate(t, "listenerset-"+kind+"-conflict")
		gw := gepInfra("gateway-with-listenerset-" + kind + "-conflict")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.gatewayListenerHas(gw, "gateway-listener", gepAcceptedListener...)
		f.gatewayListenerHas(gw, kind+"-conflict-with-gateway-listener", gepAcceptedListener...)
		f.attachedListenerSets(gw, 2)

		ls := gepInfra("listenerset-with-" + kind + "-conflict-with-gateway-1")
		f.listenerSetHas(ls, acceptedAnyReason...)
		f.listenerSetListenerHas(ls, "listener-set-1-listener", gepAcceptedListener...)
		f.listenerSetListenerHas(ls, kind+"-conflict-with-gateway-listener", gepConflictedListener(reason)...)
		f.listenerSetListenerHas(ls, kind+"-conflict-with-listener-set-listener", gepAcceptedListener...)

		ls = gepInfra("listenerset-with-" + kind + "-conflict-with-gateway-2")
		f.listenerSetHas(ls, notValid...)
		f.listenerSetListenerHas(ls, kind+"-conflict-with-gateway-listener", gepConflictedListener(reason)...)

		ls = gepInfra("listenerset-with-" + kind + "-conflict-with-listener-set-1")
		f.listenerSetHas(ls, acceptedAnyReason...)
		f.listenerSetListenerHas(ls, "listener-set-2-listener", gepAcceptedListener...)
		f.listenerSetListenerHas(ls, kind+"-conflict-with-listener-set-listener", gepConflictedListener(reason)...)

		ls = gepInfra("listenerset-with-" + kind + "-conflict-with-listener-set-2")
		f.listenerSetHas(ls, notValid...)
		f.listenerSetListenerHas(ls, kind+"-conflict-with-listener-set-listener", gepConflictedListener(reason)...)
	}
	t.Run("listenerset-hostname-conflict", func(t *testing.T) { conflictCase(t, "hostname", gwv1.ListenerReasonHostnameConflict) })
	t.Run("listenerset-protocol-conflict", func(t *testing.T) { conflictCase(t, "protocol", gwv1.ListenerReasonProtocolConflict) })

	t.Run("listenerset-http-routing", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-http-routing")
		gw := gepInfra("gateway-with-listener-sets-http-routing")
		f.routesAcceptedBy("Gateway", gw, gepInfra("attaches-to-all-listeners"), gepInfra("gateway-route"), gepInfra("gateway-section-route"))
		f.attachedListenerSets(gw, 2)

		ls1, ls2 := gepInfra("listener-set-http-routing-1"), gepInfra("listener-set-http-routing-2")
		f.routesAcceptedBy("ListenerSet", ls1, gepInfra("attaches-to-all-listeners"), gepInfra("listener-set-http-routing-1-route"), gepInfra("listener-set-http-routing-1-section-route"))
		f.listenerSetListeners(ls1,
			gepEntry{"listener-set-http-routing-1-listener-1", 3},
			gepEntry{"listener-set-http-routing-1-listener-2", 2})
		f.routesAcceptedBy("ListenerSet", ls2, gepInfra("attaches-to-all-listeners"), gepInfra("listener-set-http-routing-2-route"))
		f.listenerSetListeners(ls2,
			gepEntry{"listener-set-http-routing-2-listener-1", 2},
			gepEntry{"listener-set-http-routing-2-listener-2", 2})

		hosts := []string{
			"gateway-listener-1.com", "gateway-listener-2.com",
			"listener-set-http-routing-1-listener-1.com", "listener-set-http-routing-1-listener-2.com",
			"listener-set-http-routing-2-listener-1.com", "listener-set-http-routing-2-listener-2.com",
		}
		// Which of the hosts above (by index) each path reaches, and where.
		for _, p := range []struct {
			path    string
			backend string
			hosts   []int
		}{
			{"/route", gepInfraV1, []int{0, 1, 2, 3, 4, 5}},
			{"/gateway-route", gepInfraV2, []int{0, 1}},
			{"/gateway-section-route", gepInfraV3, []int{0}},
			{"/listener-set-http-routing-1-route", gepInfraV2, []int{2, 3}},
			{"/listener-set-http-routing-1-section-route", gepInfraV3, []int{2}},
			{"/listener-set-http-routing-2-route", gepInfraV2, []int{4, 5}},
		} {
			for i, h := range hosts {
				want := ""
				for _, j := range p.hosts {
					if i == j {
						want = p.backend
					}
				}
				f.requests(80, gepRequest{h, p.path, want})
			}
		}
	})

	t.Run("listenerset-reference-grant", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-reference-grant")
		f.gatewayHas(gepInfra("gateway-with-listener-sets-test-reference-grant"), gepGatewayAccepted)
		// The conformance test leaves attachedListenerSets open here.
		ls := gepInfra("listenerset-with-reference-grant")
		f.listenerSetHas(ls, gepSetConds(metav1.ConditionTrue, metav1.ConditionTrue, "", "")...)
		f.listenerSetListenerHas(ls, "listenerset-with-reference-grant-listener", gepCondTrue(string(gwv1.ListenerConditionResolvedRefs)))
		ls = "gateway-api-listener-sets-test-reference-grant-ns/listenerset-without-reference-grant"
		f.listenerSetHas(ls, notValid...)
		f.listenerSetListenerHas(ls, "listenerset-without-reference-grant-listener",
			gepCondIs(string(gwv1.ListenerConditionResolvedRefs), metav1.ConditionFalse, string(gwv1.ListenerReasonRefNotPermitted)))
	})

	t.Run("listenerset-route-status-scoped-to-parentref", func(t *testing.T) {
		f := gepTranslate(t, "listenerset-route-status-scoped-to-parentref")
		gw, ls := gepInfra("gateway-parentref"), gepInfra("listenerset-parentref")
		f.gatewayHas(gw, gepGatewayAccepted)
		f.attachedListenerSets(gw, 1)
		f.listenerSetListeners(ls, gepEntry{"listenerset-parentref-listener", 1})

		gwOnly := gepInfra("route-parentref-gwonly")
		f.routeParentHas(gwOnly, "Gateway", gw, gepCondTrue(string(gwv1.RouteConditionAccepted)))
		f.onlyParent(gwOnly, "Gateway", gw)

		lsOnly := gepInfra("route-parentref-lsonly")
		f.routesAcceptedBy("ListenerSet", ls, lsOnly)
		f.onlyParent(lsOnly, "ListenerSet", ls)
	})
}

// onlyParent checks that Portico wrote exactly one parent entry, the one the
// route declares: status.parents is scoped to the declared parentRefs.
func (f *gepFixture) onlyParent(route, kind, parent string) {
	f.t.Helper()
	rnn := gepSplitNN(route)
	parents := f.st.HTTPRoutes.At(rnn)
	if len(parents) != 1 || !gepParentRefNames(parents[0].ParentRef, rnn.Namespace, kind, gepSplitNN(parent)) {
		f.t.Errorf("HTTPRoute %s: parents %v, want exactly one for %s %s", route, parents, kind, parent)
	}
}

func TestGEP1713PrecedenceByCreationTime(t *testing.T) {
	f := gepTranslate(t, "listenerset-precedence-creation-time")
	hostnameConflict := gepConflictedListener(gwv1.ListenerReasonHostnameConflict)
	// The Gateway's own listener wins even over an older ListenerSet.
	f.gatewayListenerHas("apps/gw", "web", gepAcceptedListener...)
	f.listenerSetListenerHas("apps/ls-ancient", "web", hostnameConflict...)
	// Creation time decides, not file order (ls-newer comes first in the file).
	f.listenerSetListeners("apps/ls-older", gepEntry{"web", 1})
	f.listenerSetListenerHas("apps/ls-newer", "web", hostnameConflict...)
	// Equal times: namespace first, then name, whatever the file order.
	f.listenerSetListeners("team-a/ls-z", gepEntry{"web", 1})
	f.listenerSetListenerHas("team-b/ls-a", "web", hostnameConflict...)
	f.listenerSetListeners("apps/ls-tie-a", gepEntry{"web", 1})
	f.listenerSetListenerHas("apps/ls-tie-b", "web", hostnameConflict...)
	f.attachedListenerSets("apps/gw", 3)
	f.requests(80,
		gepRequest{"shared.example.com", "/", "apps/svc-older"},
		gepRequest{"tie-ns.example.com", "/", "team-a/svc-team-a"},
		gepRequest{"tie-name.example.com", "/", "apps/svc-tie-a"},
		gepRequest{"gw.example.com", "/", ""})
}

func TestGEP1713ConflictWinnerDeleted(t *testing.T) {
	before := gepTranslate(t, "listenerset-conflict-winner-deleted-before")
	before.listenerSetListeners("apps/ls-winner", gepEntry{"https", 1})
	before.listenerSetListenerHas("apps/ls-loser", "https", gepConflictedListener(gwv1.ListenerReasonHostnameConflict)...)
	before.requests(443, gepRequest{"app.example.com", "/", "apps/svc-winner"})
	if got := gepServedBy(before.cfg, 443, "app.example.com"); got != "ListenerSet/apps/ls-winner/https winner-cert" {
		t.Errorf("before: app.example.com is served by %q, want the winner's listener and certificate", got)
	}

	after := gepTranslate(t, "listenerset-conflict-winner-deleted-after")
	after.listenerSetHas("apps/ls-loser", gepSetConds(metav1.ConditionTrue, metav1.ConditionTrue, gwv1.ListenerSetReasonAccepted, gwv1.ListenerSetReasonProgrammed)...)
	after.listenerSetListeners("apps/ls-loser", gepEntry{"https", 1})
	after.listenerSetListenerHas("apps/ls-loser", "https",
		gepCondIs(string(gwv1.ListenerConditionConflicted), metav1.ConditionFalse, string(gwv1.ListenerReasonNoConflicts)))
	after.requests(443, gepRequest{"app.example.com", "/", "apps/svc-loser"})
	if got := gepServedBy(after.cfg, 443, "app.example.com"); got != "ListenerSet/apps/ls-loser/https loser-cert" {
		t.Errorf("after: app.example.com is served by %q, want the former loser's listener and certificate", got)
	}
}

// gepServedBy names the listener and certificate the SNI table picks for a
// server name on an HTTPS port.
func gepServedBy(cfg *config.Config, port int32, serverName string) string {
	for _, p := range cfg.Ports {
		if p.Number != port || p.SNI == nil {
			continue
		}
		e := p.SNI.Lookup(serverName)
		if e == nil {
			return ""
		}
		l, _ := e.Value.(*config.Listener)
		out := ""
		if l != nil {
			out = l.Key
		}
		for _, c := range e.Certificates {
			out += " " + leafOf(c).Subject.CommonName
		}
		return out
	}
	return ""
}

func TestGEP1713ManyHostnames(t *testing.T) {
	f := gepTranslate(t, "listenerset-many-hostnames")
	const sets = 70
	f.attachedListenerSets("edge/gw", sets)
	for n := range sets {
		ls := fmt.Sprintf("tenant-%d/site-%02d", n/10, n)
		host := fmt.Sprintf("site-%02d.example.com", n)
		f.listenerSetListeners(ls, gepEntry{"https", 1})
		if got, want := gepServedBy(f.cfg, 443, host), "ListenerSet/"+ls+"/https "+host; got != want {
			t.Errorf("SNI %s: served by %q, want %q", host, got, want)
		}
		f.requests(443, gepRequest{host, "/", fmt.Sprintf("tenant-%d/web", n/10)})
	}
}

func TestGEP1713ReferenceGrantsNotInherited(t *testing.T) {
	f := gepTranslate(t, "listenerset-reference-grant-not-inherited")
	refNotPermitted := gepCondIs(string(gwv1.ListenerConditionResolvedRefs), metav1.ConditionFalse, string(gwv1.ListenerReasonRefNotPermitted))
	f.gatewayListenerHas("apps/gw", "https", gepAcceptedListener...)
	f.gatewayListenerHas("apps/gw", "https-ls-secret", refNotPermitted)
	f.listenerSetListenerHas("apps/ls", "https", gepAcceptedListener...)
	f.listenerSetListenerHas("apps/ls", "https-gw-secret", refNotPermitted)
	if got := gepServedBy(f.cfg, 443, "ls-only-gw-secret.example.com"); got != "" {
		t.Errorf("a ListenerSet listener is served with a Secret granted only to Gateways: %q", got)
	}
	if got := gepServedBy(f.cfg, 443, "gw-only-ls-secret.example.com"); got != "" {
		t.Errorf("a Gateway listener is served with a Secret granted only to ListenerSets: %q", got)
	}
}

func TestGEP1713ObservedGeneration(t *testing.T) {
	f := gepTranslate(t, "listenerset-observed-generation")
	// hasConds checks observedGeneration against each object's own
	// generation (Gateway 3, ListenerSets 5 and 9, route 4).
	f.gatewayHas("apps/gw", gepGatewayAccepted, gepCondTrue(string(gwv1.GatewayConditionProgrammed)))
	f.gatewayListenerHas("apps/gw", "http", gepAcceptedListener...)
	f.listenerSetListeners("apps/ls", gepEntry{"web", 1})
	f.listenerSetHas("apps/ls", gepSetConds(metav1.ConditionTrue, metav1.ConditionTrue, gwv1.ListenerSetReasonAccepted, gwv1.ListenerSetReasonProgrammed)...)
	f.listenerSetHas("other/ls-not-allowed", gepSetConds(metav1.ConditionFalse, metav1.ConditionFalse, gwv1.ListenerSetReasonNotAllowed, gwv1.ListenerSetReasonNotAllowed)...)
	f.routesAcceptedBy("ListenerSet", "apps/ls", "apps/to-ls")
}

// A listener that loses a conflict is still a listener routes attach to:
// listener status does not affect attachment, and attachedRoutes must be
// counted even when the listener is not Accepted (ListenerEntryStatus.
// AttachedRoutes). It serves nothing: its hostname stays with the winner.
func TestGEP1713ConflictedListenerAttachedRoutes(t *testing.T) {
	f := gepTranslate(t, "listenerset-conflicted-listener-attached-routes")
	f.listenerSetListenerHas("apps/ls-new", "dup", gepConflictedListener(gwv1.ListenerReasonHostnameConflict)...)
	_, st := f.listenerSet("apps/ls-new")
	for _, l := range st.Listeners {
		want := map[gwv1.SectionName]int32{"ok": 1, "dup": 2}[l.Name]
		if l.AttachedRoutes != want {
			t.Errorf("ListenerSet apps/ls-new listener %s: attachedRoutes %d, want %d", l.Name, l.AttachedRoutes, want)
		}
	}
	f.routeParentHas("apps/to-dup", "ListenerSet", "apps/ls-new",
		gepCondIs(string(gwv1.RouteConditionAccepted), metav1.ConditionTrue, string(gwv1.RouteReasonAccepted)))
	f.requests(80,
		gepRequest{"shared.example.com", "/", "apps/svc-old"},
		gepRequest{"own.example.com", "/", "apps/svc-new"})
}

// A ListenerSet none of whose listeners could be put on a port is not
// Programmed, and its status does not name the Gateway that holds the port.
func TestGEP1713PortClashAcrossGateways(t *testing.T) {
	f := gepTranslate(t, "listenerset-port-clash-across-gateways")
	f.listenerSetListenerHas("apps/ls", "https",
		gepCondIs(string(gwv1.ListenerConditionProgrammed), metav1.ConditionFalse, string(gwv1.ListenerReasonPortUnavailable)))
	f.listenerSetHas("apps/ls", gepCondIs(string(gwv1.ListenerSetConditionProgrammed), metav1.ConditionFalse, ""))
	text := gepStatusText(t, f.st.ListenerSets.At(gepSplitNN("apps/ls")))
	if gepMentions(text, "gw-other") {
		t.Errorf("ListenerSet apps/ls status names Gateway infra/gw-other:\n%s", text)
	}
	if got := gepServedBy(f.cfg, 8443, "app.example.com"); got != "" {
		t.Errorf("app.example.com on 8443 is served by %q; the port is HTTP", got)
	}
}

// TestTranslateLeavesTransitionTimesUnset: translate is a pure function of
// its input, and the status writer stamps lastTransitionTime only when a
// condition changes. A time set during translation breaks both.
func TestTranslateLeavesTransitionTimesUnset(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		res := loadFixture(t, in)
		_, st := newTranslator().Translate(res)
		check := func(what string, conds []metav1.Condition) {
			for _, c := range conds {
				if !c.LastTransitionTime.IsZero() {
					t.Errorf("%s: %s: condition %s has lastTransitionTime %s", filepath.Base(in), what, c.Type, c.LastTransitionTime)
				}
			}
		}
		for k, s := range st.Gateways.All() {
			check("Gateway "+k.String(), s.Conditions)
			for _, l := range s.Listeners {
				check("Gateway "+k.String()+" listener "+string(l.Name), l.Conditions)
			}
		}
		for k, s := range st.ListenerSets.All() {
			check("ListenerSet "+k.String(), s.Conditions)
			for _, l := range s.Listeners {
				check("ListenerSet "+k.String()+" listener "+string(l.Name), l.Conditions)
			}
		}
		for k, ps := range st.HTTPRoutes.All() {
			for _, p := range ps {
				check("HTTPRoute "+k.String(), p.Conditions)
			}
		}
	}
}

// TestGEP1713StatusDoesNotLeak: a ListenerSet's status must not tell its
// owner about the listeners or Secrets of the parent Gateway or of sibling
// ListenerSets, which may belong to other teams ("Implementations SHOULD be
// cautious about what information from the parent or siblings are
// reported", ListenerSetSpec.Listeners). Names the ListenerSet itself uses
// (the same listener name, the same Secret) are its own to see.
func TestGEP1713StatusDoesNotLeak(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, in := range inputs {
		res := loadFixture(t, in)
		_, st := newTranslator().Translate(res)
		siblings := map[types.NamespacedName][]*gwv1.ListenerSet{}
		for _, ls := range res.ListenerSets {
			if parent, ok := ListenerSetParent(ls); ok {
				siblings[parent] = append(siblings[parent], ls)
			}
		}
		for _, ls := range res.ListenerSets {
			status, ok := st.ListenerSets.Get(nn(ls.Namespace, ls.Name))
			if !ok {
				continue
			}
			parent, _ := ListenerSetParent(ls)
			own := map[string]bool{ls.Name: true, ls.Namespace: true}
			for _, l := range ls.Spec.Listeners {
				own[string(l.Name)] = true
				own[string(ptr.Deref(l.Hostname, ""))] = true
				for _, s := range gepSecretNames(l.TLS) {
					own[s] = true
				}
			}
			foreign := map[string]string{} // name -> whose it is
			for _, gw := range res.Gateways {
				if gw.Namespace != parent.Namespace || gw.Name != parent.Name {
					continue
				}
				for _, l := range gw.Spec.Listeners {
					foreign[string(l.Name)] = "listener of the parent Gateway"
					for _, s := range gepSecretNames(l.TLS) {
						foreign[s] = "Secret of the parent Gateway"
					}
				}
			}
			for _, sib := range siblings[parent] {
				if sib == ls {
					continue
				}
				for _, l := range sib.Spec.Listeners {
					foreign[string(l.Name)] = "listener of ListenerSet " + sib.Namespace + "/" + sib.Name
					for _, s := range gepSecretNames(l.TLS) {
						foreign[s] = "Secret of ListenerSet " + sib.Namespace + "/" + sib.Name
					}
				}
			}
			text := gepStatusText(t, status)
			for name, whose := range foreign {
				if !own[name] && gepMentions(text, name) {
					t.Errorf("%s: ListenerSet %s/%s status mentions %q, a %s:\n%s", filepath.Base(in), ls.Namespace, ls.Name, name, whose, text)
				}
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no ListenerSet status checked")
	}
}

// gepSecretNames lists the Secret names a listener's TLS config refers to.
func gepSecretNames(tls *gwv1.ListenerTLSConfig) []string {
	if tls == nil {
		return nil
	}
	var out []string
	for _, ref := range tls.CertificateRefs {
		out = append(out, string(ref.Name))
	}
	return out
}

func gepStatusText(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gepMentions reports whether name occurs in text as a whole word: not as part
// of a longer name (listener names and hostnames are made of letters,
// digits, '-' and '.').
func gepMentions(text, name string) bool {
	if name == "" {
		return false
	}
	isNameByte := func(c byte) bool {
		return c == '-' || c == '.' || c == '_' || ('0' <= c && c <= '9') || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
	}
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		// A trailing '.' ends a sentence, not a name.
		if (start == 0 || !isNameByte(text[start-1])) && (end == len(text) || !isNameByte(text[end]) || (text[end] == '.' && (end+1 == len(text) || !isNameByte(text[end+1])))) {
			return true
		}
		i = start + 1
	}
}

// TestGEP1713FileSourceLaterObjectsAreNewer: in standalone mode the file
// source stands in for the API server's creationTimestamp, and ListenerSet
// precedence rests on it. An object that appears in a later load must be
// newer than every object already seen, even when both loads fall in the
// same second; otherwise a ListenerSet added later can take a hostname away
// from one that has been serving it.
func TestGEP1713FileSourceLaterObjectsAreNewer(t *testing.T) {
	dir := t.TempDir()
	put := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	listenerSet := func(name string) string {
		return `apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ` + name + `, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - {name: web, port: 80, protocol: HTTP, hostname: app.example.com}
`
	}
	put("gateway.yaml", gatewayYAML+`  - {name: http, port: 80, protocol: HTTP, hostname: gw.example.com}
`)
	put("winner.yaml", listenerSet("ls-winner"))
	// Both loads within one second, as when a file is added right after a
	// reload.
	src := fixedSource(dir)
	if _, err := src.Snapshot(); err != nil {
		t.Fatal(err)
	}
	// "loser.yaml" sorts before "winner.yaml": file order must not matter
	// across loads.
	put("loser.yaml", listenerSet("ls-loser"))
	res, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]metav1.Time{}
	for _, ls := range res.ListenerSets {
		created[ls.Name] = ls.CreationTimestamp
	}
	winner, loser := created["ls-winner"], created["ls-loser"]
	if !winner.Before(&loser) {
		t.Errorf("ls-loser, first seen in a later load, has creationTimestamp %s, not after ls-winner's %s",
			loser.Format(time.RFC3339Nano), winner.Format(time.RFC3339Nano))
	}
	_, st := newTranslator().Translate(res)
	f := &gepFixture{t: t, res: res, st: st}
	f.listenerSetListenerHas("apps/ls-winner", "web", gepAcceptedListener...)
	f.listenerSetListenerHas("apps/ls-loser", "web", gepConflictedListener(gwv1.ListenerReasonHostnameConflict)...)
}
