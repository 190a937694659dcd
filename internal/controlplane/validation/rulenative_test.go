package validation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/cel-go/common/types"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	apiservercel "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/common"
)

// listenersTree is the rule subtree of kind's spec.listeners.
func listenersTree(t testing.TB, s *Schemas, kind string) *ruleTree {
	t.Helper()
	v := s.versions["gateway.networking.k8s.io/v1/"+kind]
	v.once.Do(v.compile)
	if v.err != nil || v.rules == nil {
		t.Fatalf("%s: %v", kind, v.err)
	}
	lt := v.rules.properties["spec"].properties["listeners"]
	if lt == nil || lt.natives == nil {
		t.Fatalf("%s: no native rule on spec.listeners", kind)
	}
	return lt
}

// randomListeners is a list of n listeners whose names, ports, protocols
// and hostnames collide often, with a field missing or of another type
// now and then.
func randomListeners(rng *rand.Rand, n int) []any {
	list := make([]any, n)
	for i := range list {
		l := map[string]any{"name": []string{"a", "b", "c", "d", "e", "f"}[rng.IntN(6)]}
		switch r := rng.IntN(20); {
		case r < 17:
			l["port"] = []int64{80, 443}[rng.IntN(2)]
		case r == 17:
			l["port"] = "80"
		}
		switch r := rng.IntN(30); {
		case r < 20:
			l["protocol"] = []string{"HTTP", "HTTPS"}[rng.IntN(2)]
		case r < 28:
			l["protocol"] = []string{"TLS", "TCP", "UDP", "HTTPS"}[rng.IntN(4)]
		case r == 28:
			l["protocol"] = 443
		}
		switch r := rng.IntN(12); {
		case r < 5:
		case r == 5:
			l["tls"] = nil
		case r == 6:
			l["tls"] = "Terminate"
		default:
			tls := map[string]any{"certificateRefs": []any{map[string]any{"name": "c"}}}
			switch m := rng.IntN(10); {
			case m < 2:
			case m == 2:
				tls["mode"] = nil
			case m == 3:
				tls["mode"] = 1
			default:
				tls["mode"] = []string{"", "Terminate", "Passthrough"}[rng.IntN(3)]
			}
			l["tls"] = tls
		}
		switch r := rng.IntN(10); {
		case r < 3:
		case r == 3:
			l["hostname"] = ""
		case r == 4 && rng.IntN(5) == 0:
			l["hostname"] = nil
		default:
			l["hostname"] = []string{"a.example.com", "b.example.com", "c.example.com"}[rng.IntN(3)]
		}
		if rng.IntN(40) == 0 {
			delete(l, "name")
		}
		list[i] = l
	}
	return list
}

// TestNativeRulesMatchTheirRules: where a native check vouches for a list,
// the rule's program holds on it; where every field the rule reads is
// there with its type, the native vouches exactly when the program holds.
func TestNativeRulesMatchTheirRules(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, kind := range []string{"Gateway", "ListenerSet"} {
		lt := listenersTree(t, s, kind)
		var vouched, refused int
		each := make([][2]int, len(lt.natives))
		for range 4000 {
			list := randomListeners(rng, rng.IntN(9))
			act := activation{self: common.UnstructuredToVal(list, lt.view)}
			for i, native := range lt.natives {
				if native == nil {
					continue
				}
				result, _, _ := lt.compiled[i].Program.ContextEval(context.Background(), act)
				holds := result == types.True
				got := native(list)
				if got && !holds {
					t.Fatalf("%s: native of %q vouched for %v; the rule gives %v", kind, lt.rules[i].Rule, list, result)
				}
				if wellTyped(list) && got != holds {
					t.Fatalf("%s: native of %q says %v for %v; the rule gives %v", kind, lt.rules[i].Rule, got, list, result)
				}
				if got {
					vouched++
					each[i][0]++
				} else {
					refused++
					each[i][1]++
				}
			}
		}
		for i, n := range each {
			if lt.natives[i] != nil && (n[0] < 100 || n[1] < 100) {
				t.Errorf("%s: the native of %q vouched for %d lists, not for %d: the comparison proves little", kind, lt.rules[i].Rule, n[0], n[1])
			}
		}
		t.Logf("%s: %d lists vouched for, %d left to the rules", kind, vouched, refused)
		if vouched < 1000 || refused < 1000 {
			t.Errorf("%s: %d vouched for, %d not: the comparison proves little", kind, vouched, refused)
		}
	}
}

// wellTyped: every listener has a string name and protocol, an integer
// port, a string hostname if any and a tls object with a string mode, or
// none, if any.
func wellTyped(list []any) bool {
	for _, e := range list {
		m := e.(map[string]any)
		_, name := m["name"].(string)
		_, port := m["port"].(int64)
		_, protocol := m["protocol"].(string)
		h, has := m["hostname"]
		_, host := h.(string)
		if !name || !port || !protocol || has && !host {
			return false
		}
		if t, has := m["tls"]; has {
			tls, ok := t.(map[string]any)
			if !ok {
				return false
			}
			if mode, has := tls["mode"]; has {
				if _, ok := mode.(string); !ok {
					return false
				}
			}
		}
	}
	return true
}

// randomParentRefs is a list of n parentRefs that often point at the
// same parent, with and without a section or port, with a field absent
// or of another type now and then.
func randomParentRefs(rng *rand.Rand, n int) []any {
	list := make([]any, n)
	for i := range list {
		p := map[string]any{"group": "gateway.networking.k8s.io", "kind": []string{"Gateway", "ListenerSet"}[rng.IntN(2)], "name": []string{"a", "b"}[rng.IntN(2)]}
		if rng.IntN(40) == 0 {
			delete(p, []string{"group", "kind", "name"}[rng.IntN(3)])
		}
		if rng.IntN(40) == 0 {
			p["name"] = 7
		}
		for _, f := range []string{"namespace", "sectionName"} {
			switch r := rng.IntN(10); {
			case r < 4:
			case r == 4:
				p[f] = ""
			case r == 5 && rng.IntN(4) == 0:
				p[f] = 3
			default:
				p[f] = []string{"x", "y"}[rng.IntN(2)]
			}
		}
		switch r := rng.IntN(10); {
		case r < 5:
		case r == 5:
			p["port"] = int64(0)
		case r == 6 && rng.IntN(4) == 0:
			p["port"] = "80"
		default:
			p["port"] = []int64{80, 443}[rng.IntN(2)]
		}
		list[i] = p
	}
	return list
}

// TestParentRefNativesMatchTheirRules: as TestNativeRulesMatchTheirRules,
// for the rules of every kind of route's parentRefs.
func TestParentRefNativesMatchTheirRules(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, kind := range []string{"HTTPRoute", "GRPCRoute", "TLSRoute"} {
		v := s.versions["gateway.networking.k8s.io/v1/"+kind]
		v.once.Do(v.compile)
		if v.err != nil || v.rules == nil {
			t.Fatalf("%s: %v", kind, v.err)
		}
		pt := v.rules.properties["spec"].properties["parentRefs"]
		if pt == nil || pt.natives == nil {
			t.Fatalf("%s: no native rule on spec.parentRefs", kind)
		}
		var vouched, refused int
		lt := pt
		each := make([][2]int, len(lt.natives))
		for range 4000 {
			list := randomParentRefs(rng, rng.IntN(5))
			_, typed := parentKeys(list)
			act := activation{self: common.UnstructuredToVal(list, pt.view)}
			for i, native := range pt.natives {
				if native == nil {
					continue
				}
				result, _, _ := pt.compiled[i].Program.ContextEval(context.Background(), act)
				holds := result == types.True
				got := native(list)
				if got && !holds {
					t.Fatalf("%s: native of %q vouched for %v; the rule gives %v", kind, pt.rules[i].Rule, list, result)
				}
				if typed && got != holds {
					t.Fatalf("%s: native of %q says %v for %v; the rule gives %v", kind, pt.rules[i].Rule, got, list, result)
				}
				if got {
					vouched++
					each[i][0]++
				} else {
					refused++
					each[i][1]++
				}
			}
		}
		for i, n := range each {
			if lt.natives[i] != nil && (n[0] < 100 || n[1] < 100) {
				t.Errorf("%s: the native of %q vouched for %d lists, not for %d: the comparison proves little", kind, lt.rules[i].Rule, n[0], n[1])
			}
		}
		t.Logf("%s: %d lists vouched for, %d left to the rules", kind, vouched, refused)
		if vouched < 1000 || refused < 1000 {
			t.Errorf("%s: %d vouched for, %d not: the comparison proves little", kind, vouched, refused)
		}
	}
}

// BenchmarkListenerRules64 is the CEL rules of a ListenerSet of 64
// listeners (the most a list may hold), with the native checks of the
// uniqueness rules and without.
func BenchmarkListenerRules64(b *testing.B) {
	s, err := Load()
	if err != nil {
		b.Fatal(err)
	}
	v := s.versions["gateway.networking.k8s.io/v1/ListenerSet"]
	v.once.Do(v.compile)
	listeners := make([]any, 64)
	for i := range listeners {
		listeners[i] = map[string]any{"name": fmt.Sprintf("l-%d", i), "hostname": fmt.Sprintf("site-%d.example.com", i), "port": int64(443), "protocol": "HTTPS",
			"tls": map[string]any{"mode": "Terminate", "certificateRefs": []any{map[string]any{"name": fmt.Sprintf("cert-%d", i), "kind": "Secret", "group": ""}}}}
	}
	obj := map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
		"metadata": map[string]any{"name": "ls", "namespace": "apps"},
		"spec":     map[string]any{"parentRef": map[string]any{"name": "gw"}, "listeners": listeners}}
	for _, natives := range []bool{true, false} {
		b.Run(fmt.Sprintf("natives=%v", natives), func(b *testing.B) {
			for k := 0; b.Loop(); k++ {
				// A new list each time: nothing passes from memory.
				obj["spec"].(map[string]any)["listeners"] = append([]any(nil), listeners...)
				listeners[0].(map[string]any)["name"] = fmt.Sprintf("l-0-%d", k)
				st := walkState{natives: natives}
				if errs, _ := v.rules.run(context.Background(), &st, nil, obj, apiservercel.RuntimeCELCostBudget); len(errs) > 0 {
					b.Fatal(errs)
				}
			}
		})
	}
}

// With a budget the natives' bounds exhaust and the evaluation does not,
// the walk is made again without them: the verdicts are the rules'.
func TestNativeBoundsDoNotRunTheBudgetOut(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	v := s.versions["gateway.networking.k8s.io/v1/ListenerSet"]
	v.once.Do(v.compile)
	lt := listenersTree(t, s, "ListenerSet")
	var bound int64
	for i, native := range lt.natives {
		if native != nil {
			bound += int64(lt.compiled[i].MaxCost)
		}
	}
	reference := cel.NewValidator(v.structure, true, apiservercel.PerCallLimit)
	reruns := 0
	budgets := []int64{bound / 2, bound - 1, 2 * bound}
	for extra := range int64(300) {
		budgets = append(budgets, bound+extra)
	}
	for _, budget := range budgets {
		obj := map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
			"metadata": map[string]any{"name": "ls", "namespace": "apps"},
			"spec": map[string]any{"parentRef": map[string]any{"name": "gw"}, "listeners": []any{
				// Rules below the list (tls) are evaluated after the
				// list's own.
				map[string]any{"name": "a", "port": int64(443), "protocol": "HTTPS", "hostname": fmt.Sprintf("a%d.example.com", budget),
					"tls": map[string]any{"mode": "Terminate", "certificateRefs": []any{map[string]any{"name": "a"}}}},
				map[string]any{"name": "b", "port": int64(443), "protocol": "HTTPS", "hostname": fmt.Sprintf("b%d.example.com", budget),
					"tls": map[string]any{"mode": "Terminate", "certificateRefs": []any{map[string]any{"name": "b"}}}},
			}}}
		// Before anything of obj is remembered: the first walk, with
		// natives.
		st := walkState{natives: true}
		_, left := v.rules.run(context.Background(), &st, nil, deepCopy(obj), budget)
		if left < 0 && st.nativesUsed > 0 {
			reruns++
		}
		want, _ := reference.Validate(context.Background(), nil, v.structure, obj, nil, budget)
		got, _ := v.rules.validate(context.Background(), nil, obj, budget)
		if g, w := errorStrings(got), errorStrings(want); !slices.Equal(g, w) {
			t.Errorf("budget %d (natives' bounds %d):\n got %q\nwant %q", budget, bound, g, w)
		}
	}
	if reruns == 0 {
		t.Error("no budget made the walk run out on the natives' bounds: the test proves nothing of the walk made again")
	}
}
