package filesource

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// mixedYAML is a file of several kinds, in the namespace ns: a route, a
// Service, a Secret (in stringData, which a snapshot folds into data)
// and, when define, the Namespace itself with a label of its own.
func mixedYAML(base, ns string, step int, define bool) string {
	var b strings.Builder
	if define {
		fmt.Fprintf(&b, "apiVersion: v1\nkind: Namespace\nmetadata: {name: %s, labels: {team: t%d}}\n---\n", ns, step)
	}
	fmt.Fprintf(&b, `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  parentRefs: [{name: gw}]
  rules: [{matches: [{path: {type: PathPrefix, value: /%[3]d}}]}]
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  ports: [{port: %[4]d}]
---
apiVersion: v1
kind: Secret
metadata: {name: %[1]s, namespace: %[2]s}
stringData: {step: "%[3]d"}
`, base, ns, step, 80+step%5)
	return b.String()
}

// snapshotText describes every object of res, in order, kind by kind:
// its namespace, name and everything but the creation time and
// generation, which a fresh source gives anew.
func snapshotText(t *testing.T, res *snapshot.Resources) string {
	t.Helper()
	var b strings.Builder
	v := reflect.ValueOf(res).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Slice {
			continue
		}
		fmt.Fprintf(&b, "%s:\n", v.Type().Field(i).Name)
		for j := range f.Len() {
			raw, err := json.Marshal(f.Index(j).Interface())
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := json.Unmarshal(raw, &obj); err != nil {
				t.Fatal(err)
			}
			if meta, ok := obj["metadata"].(map[string]any); ok {
				delete(meta, "creationTimestamp")
				delete(meta, "generation")
			}
			raw, _ = json.Marshal(obj)
			fmt.Fprintf(&b, "  %s\n", raw)
		}
	}
	return b.String()
}

// TestAssembledMatchesFullRead: random adds, edits and removals of files
// of several kinds, Namespaces coming, going and defined by the files,
// each read alone as a watch names it: every snapshot lists what a fresh
// full read lists, kind by kind, in the same order.
func TestAssembledMatchesFullRead(t *testing.T) {
	d := fileDir{t, t.TempDir()}
	s := watched(d.dir)
	r := rand.New(rand.NewPCG(3, 14))
	names := []string{"a.yaml", "b.yaml", "c.yaml", "sub/d.yaml", "z.yaml"}
	namespaces := []string{"apps", "web", "db"}
	present := map[string]bool{}
	for step := range 40 {
		name := names[r.IntN(len(names))]
		if present[name] && r.IntN(3) == 0 {
			if err := os.Remove(filepath.Join(d.dir, name)); err != nil {
				t.Fatal(err)
			}
			delete(present, name)
		} else {
			base := strings.TrimSuffix(filepath.Base(name), ".yaml")
			// Only z.yaml defines Namespaces, so that no two files do.
			d.put(name, mixedYAML(base, namespaces[r.IntN(len(namespaces))], step, name == "z.yaml" && r.IntN(2) == 0))
			present[name] = true
		}
		s.saw(name)
		got, err := s.Snapshot()
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		want, err := New(d.dir, zap.NewNop()).Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if g, w := snapshotText(t, got), snapshotText(t, want); g != w {
			t.Fatalf("step %d (%s): the snapshot differs from a full read:\n%s\nwant\n%s", step, name, g, w)
		}
	}
}

// TestAssembleKeepsUntouchedKinds: a change lists again only the kinds
// the changed file holds, before or after; the other kinds' lists, and the
// Namespaces when none came or went, are the last snapshot's.
func TestAssembleKeepsUntouchedKinds(t *testing.T) {
	d := fileDir{t, t.TempDir()}
	d.put("a.yaml", mixedYAML("a", "apps", 0, false))
	d.put("r.yaml", routeYAML("r", "/r"))
	s := watched(d.dir)
	first, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	d.put("r.yaml", routeYAML("r", "/r2"))
	s.saw("r.yaml")
	second, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b any) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }
	if !same(first.Secrets, second.Secrets) || !same(first.Services, second.Services) || !same(first.Namespaces, second.Namespaces) {
		t.Error("a route's change listed the Secrets, Services or Namespaces again")
	}
	if same(first.HTTPRoutes, second.HTTPRoutes) || len(second.HTTPRoutes) != 2 || pathOf(second.HTTPRoutes[1]) != "/r2" {
		t.Errorf("the routes were not listed again: %v", second.HTTPRoutes)
	}
	if second.HTTPRoutes[0] != first.HTTPRoutes[0] {
		t.Error("the route of the file that did not change is another object")
	}
	d.put("w.yaml", strings.ReplaceAll(routeYAML("w", "/w"), "namespace: apps", "namespace: web"))
	s.saw("w.yaml")
	third, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Namespaces) != 2 || third.Namespaces[0] != second.Namespaces[0] || third.Namespaces[1].Name != "web" {
		t.Errorf("Namespaces %v after a file in a new one, want apps (the same object) and web", third.Namespaces)
	}
}
