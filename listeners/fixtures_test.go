package listeners

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// fixture is the set of objects of one testdata file.
type fixture struct {
	gateways        []*gwv1.Gateway
	listenerSets    []*gwv1.ListenerSet
	referenceGrants []*gwv1.ReferenceGrant
	namespaces      map[string]map[string]string
	secrets         map[types.NamespacedName]*testSecret
}

// testSecret is the part of a core Secret the fixtures need; the test does
// not depend on the core API types.
type testSecret struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Type              string            `json:"type"`
	Data              map[string][]byte `json:"data"`
}

func loadFixture(t testing.TB, name string) *fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{namespaces: map[string]map[string]string{}, secrets: map[types.NamespacedName]*testSecret{}}
	for i, doc := range bytes.Split(raw, []byte("\n---\n")) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s document %d: %v", name, i, err)
		}
		var obj any
		switch tm.Kind {
		case "Gateway":
			gw := &gwv1.Gateway{}
			f.gateways, obj = append(f.gateways, gw), gw
		case "ListenerSet":
			ls := &gwv1.ListenerSet{}
			f.listenerSets, obj = append(f.listenerSets, ls), ls
		case "ReferenceGrant":
			rg := &gwv1.ReferenceGrant{}
			f.referenceGrants, obj = append(f.referenceGrants, rg), rg
		case "Namespace":
			obj = &metav1.PartialObjectMetadata{}
		case "Secret":
			obj = &testSecret{}
		default:
			t.Fatalf("%s document %d: unexpected kind %q", name, i, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			t.Fatalf("%s document %d (%s): %v", name, i, tm.Kind, err)
		}
		switch o := obj.(type) {
		case *metav1.PartialObjectMetadata:
			f.namespaces[o.Name] = o.Labels
		case *testSecret:
			f.secrets[types.NamespacedName{Namespace: o.Namespace, Name: o.Name}] = o
		}
	}
	// The API server labels every namespace with its own name.
	for _, ns := range f.allNamespaces() {
		labels := f.namespaces[ns]
		if labels == nil {
			labels = map[string]string{}
		}
		labels["kubernetes.io/metadata.name"] = ns
		f.namespaces[ns] = labels
	}
	return f
}

func (f *fixture) allNamespaces() []string {
	var out []string
	add := func(ns string) {
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	for ns := range f.namespaces {
		add(ns)
	}
	for _, gw := range f.gateways {
		add(gw.Namespace)
	}
	for _, ls := range f.listenerSets {
		add(ls.Namespace)
	}
	return out
}

// certificates stands in for the Secret check of the kube package: a Secret
// must exist, be of type kubernetes.io/tls and hold PEM data.
func (f *fixture) certificates(ns, name string) error {
	s, ok := f.secrets[types.NamespacedName{Namespace: ns, Name: name}]
	switch {
	case !ok:
		return errors.New("not found")
	case s.Type != "kubernetes.io/tls":
		return fmt.Errorf("type is %q, not kubernetes.io/tls", s.Type)
	case !bytes.HasPrefix(s.Data["tls.crt"], []byte("-----BEGIN ")) || !bytes.HasPrefix(s.Data["tls.key"], []byte("-----BEGIN ")):
		return errors.New("tls.crt or tls.key is not PEM")
	}
	return nil
}

// input is what the caller of Merge would pass for gw.
func (f *fixture) input(gw *gwv1.Gateway) Input {
	in := Input{
		Gateway:         gw,
		ClassAccepted:   true,
		NamespaceLabels: f.namespaces,
		ReferenceGrants: f.referenceGrants,
		Certificates:    f.certificates,
	}
	for _, ls := range f.listenerSets {
		ns := ls.Namespace
		if ls.Spec.ParentRef.Namespace != nil {
			ns = string(*ls.Spec.ParentRef.Namespace)
		}
		if ns == gw.Namespace && string(ls.Spec.ParentRef.Name) == gw.Name {
			in.ListenerSets = append(in.ListenerSets, ls)
		}
	}
	return in
}

// merged runs Merge for every Gateway of the fixture and checks the
// invariants every result must meet.
type merged struct {
	fixture  *fixture
	gateways map[types.NamespacedName]*Result
	sets     map[types.NamespacedName]gwv1.ListenerSetStatus
}

func mergeFixture(t *testing.T, f *fixture) *merged {
	t.Helper()
	m := &merged{fixture: f, gateways: map[types.NamespacedName]*Result{}, sets: map[types.NamespacedName]gwv1.ListenerSetStatus{}}
	for _, gw := range f.gateways {
		in := f.input(gw)
		res := Merge(in)
		checkInvariants(t, in, &res)
		m.gateways[types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}] = &res
		for nn, st := range res.ListenerSets {
			m.sets[nn] = st
		}
	}
	return m
}

// checkInvariants asserts what holds for any input: one status per
// ListenerSet, conditions stamped with the object's generation and no
// transition time, four conditions per listener, and Result.Listeners made
// of the Gateway's listeners followed by those of accepted ListenerSets.
func checkInvariants(t *testing.T, in Input, res *Result) {
	t.Helper()
	gens := map[Source]int64{}
	checkConds := func(what string, gen int64, conds []metav1.Condition, order ...string) {
		t.Helper()
		var got []string
		for _, c := range conds {
			got = append(got, c.Type)
			if c.ObservedGeneration != gen {
				t.Errorf("%s: condition %s has observedGeneration %d, want %d", what, c.Type, c.ObservedGeneration, gen)
			}
			if !c.LastTransitionTime.IsZero() {
				t.Errorf("%s: condition %s has a transition time", what, c.Type)
			}
			if c.Reason == "" || c.Message == "" {
				t.Errorf("%s: condition %s lacks a reason or message: %+v", what, c.Type, c)
			}
		}
		if !slices.Equal(got, order) {
			t.Errorf("%s: condition types %v, want %v", what, got, order)
		}
	}
	listenerTypes := []string{"Accepted", "Programmed", "ResolvedRefs", "Conflicted"}
	if gw := in.Gateway; gw != nil {
		gens[Source{Kind: "Gateway", Namespace: gw.Namespace, Name: gw.Name}] = gw.Generation
		gwTypes := []string{"Accepted", "Programmed", "ResolvedRefs"}
		if _, insecure := insecureFrontendCondition(gw); insecure {
			gwTypes = append(gwTypes, "InsecureFrontendValidationMode")
		}
		checkConds("Gateway "+gw.Name, gw.Generation, res.Gateway.Conditions, gwTypes...)
		for _, l := range res.Gateway.Listeners {
			checkConds("Gateway "+gw.Name+" listener "+string(l.Name), gw.Generation, l.Conditions, listenerTypes...)
		}
		if res.Gateway.AttachedListenerSets == nil {
			t.Errorf("Gateway %s: attachedListenerSets unset", gw.Name)
		}
	}
	accepted := map[Source]bool{}
	attached := int32(0)
	for _, ls := range in.ListenerSets {
		nn := types.NamespacedName{Namespace: ls.Namespace, Name: ls.Name}
		st, ok := res.ListenerSets[nn]
		if !ok {
			t.Errorf("ListenerSet %s has no status", nn)
			continue
		}
		src := Source{Kind: "ListenerSet", Namespace: ls.Namespace, Name: ls.Name}
		gens[src] = ls.Generation
		checkConds("ListenerSet "+nn.String(), ls.Generation, st.Conditions, "Accepted", "Programmed")
		for _, l := range st.Listeners {
			checkConds("ListenerSet "+nn.String()+" listener "+string(l.Name), ls.Generation, l.Conditions, listenerTypes...)
		}
		if findCond(st.Conditions, "Accepted").Status == metav1.ConditionTrue {
			accepted[src] = true
			attached++
		}
	}
	if len(res.ListenerSets) != len(in.ListenerSets) {
		t.Errorf("%d ListenerSet statuses for %d ListenerSets", len(res.ListenerSets), len(in.ListenerSets))
	}
	if in.Gateway != nil && *res.Gateway.AttachedListenerSets != attached {
		t.Errorf("attachedListenerSets = %d, but %d ListenerSets are accepted", *res.Gateway.AttachedListenerSets, attached)
	}
	seenSet := false
	for _, l := range res.Listeners {
		if l.Source.Kind == "Gateway" {
			if seenSet {
				t.Errorf("Gateway listener %s after ListenerSet listeners", l.Name)
			}
			continue
		}
		seenSet = true
		if !accepted[l.Source] {
			t.Errorf("listener %s of %v is merged but its ListenerSet is not accepted", l.Name, l.Source)
		}
	}
}

func findCond(conds []metav1.Condition, typ string) metav1.Condition {
	for _, c := range conds {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// want is one expected condition; an empty reason matches any reason, as in
// the conformance suite.
type want struct {
	typ    string
	status metav1.ConditionStatus
	reason string
}

func (w want) check(t *testing.T, what string, conds []metav1.Condition) {
	t.Helper()
	c := findCond(conds, w.typ)
	if c.Type == "" {
		t.Errorf("%s: no %s condition", what, w.typ)
		return
	}
	if c.Status != w.status || (w.reason != "" && c.Reason != w.reason) {
		t.Errorf("%s: %s = %s/%s (%q), want %s/%s", what, w.typ, c.Status, c.Reason, c.Message, w.status, w.reason)
	}
}

var (
	acceptedListener = []want{
		{"ResolvedRefs", metav1.ConditionTrue, ""},
		{"Accepted", metav1.ConditionTrue, ""},
		{"Programmed", metav1.ConditionTrue, ""},
	}
	hostnameConflicted = []want{
		{"Accepted", metav1.ConditionFalse, "HostnameConflict"},
		{"Programmed", metav1.ConditionFalse, "HostnameConflict"},
		{"Conflicted", metav1.ConditionTrue, "HostnameConflict"},
	}
	protocolConflicted = []want{
		{"Accepted", metav1.ConditionFalse, "ProtocolConflict"},
		{"Programmed", metav1.ConditionFalse, "ProtocolConflict"},
		{"Conflicted", metav1.ConditionTrue, "ProtocolConflict"},
	}
)

func setWants(reason string) []want {
	return []want{{"Accepted", metav1.ConditionFalse, reason}, {"Programmed", metav1.ConditionFalse, reason}}
}

var acceptedSet = []want{{"Accepted", metav1.ConditionTrue, ""}, {"Programmed", metav1.ConditionTrue, "Programmed"}}

// expect is what a test asserts about one object (listener == "") or one
// listener of it.
type expect struct {
	kind     string // "Gateway" or "ListenerSet"
	ns, name string
	listener string
	wants    []want
	// kinds, when not nil, is the exact list of supported route kinds
	// ("group/Kind"); use []string{} for none.
	kinds []string
}

func (m *merged) check(t *testing.T, e expect) {
	t.Helper()
	nn := types.NamespacedName{Namespace: e.ns, Name: e.name}
	what := e.kind + " " + nn.String()
	var conds []metav1.Condition
	var kinds []gwv1.RouteGroupKind
	switch e.kind {
	case "Gateway":
		res, ok := m.gateways[nn]
		if !ok {
			t.Fatalf("%s: no such Gateway", what)
		}
		conds = res.Gateway.Conditions
		if e.listener != "" {
			conds = nil
			for _, l := range res.Gateway.Listeners {
				if string(l.Name) == e.listener {
					conds, kinds = l.Conditions, l.SupportedKinds
				}
			}
		}
	case "ListenerSet":
		st, ok := m.sets[nn]
		if !ok {
			t.Fatalf("%s: no status", what)
		}
		conds = st.Conditions
		if e.listener != "" {
			conds = nil
			for _, l := range st.Listeners {
				if string(l.Name) == e.listener {
					conds, kinds = l.Conditions, l.SupportedKinds
				}
			}
		}
	}
	if e.listener != "" {
		what += " listener " + e.listener
		if conds == nil {
			t.Errorf("%s: no listener status", what)
			return
		}
	}
	for _, w := range e.wants {
		w.check(t, what, conds)
	}
	if e.kinds != nil {
		got := []string{}
		for _, k := range kinds {
			g := "<nil>"
			if k.Group != nil {
				g = string(*k.Group)
			}
			got = append(got, g+"/"+string(k.Kind))
		}
		if !slices.Equal(got, e.kinds) {
			t.Errorf("%s: supportedKinds %v, want %v", what, got, e.kinds)
		}
	}
}

func (m *merged) attached(t *testing.T, ns, name string, want int32) {
	t.Helper()
	res := m.gateways[types.NamespacedName{Namespace: ns, Name: name}]
	if got := *res.Gateway.AttachedListenerSets; got != want {
		t.Errorf("Gateway %s/%s: attachedListenerSets = %d, want %d", ns, name, got, want)
	}
}
