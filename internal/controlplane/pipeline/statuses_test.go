package pipeline

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/testkit/testyaml"
)

// TestStatusesHandOnWhatChanged: after a change translated as a delta,
// the status output is told which statuses it changed (the ListenerSet
// added, its route, its Gateway's count), not the others; after a full
// translation, that any may have. The statuses handed on hold every one.
func TestStatusesHandOnWhatChanged(t *testing.T) {
	free := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	gwPort, lsPort := free(), free()
	dir := t.TempDir()
	put := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	site := func(name string) string {
		return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: %[1]s, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners: [{name: http, hostname: %[1]s.example.com, port: %[2]d, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %[1]s, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: %[1]s}]
  rules: [{matches: [{path: {type: PathPrefix, value: /}}]}]
`, name, lsPort)
	}
	put("gateway.yaml", testyaml.Gateway+fmt.Sprintf("  - {name: http, port: %d, protocol: HTTP}\n", gwPort))
	put("a.yaml", site("a"))
	put("b.yaml", site("b"))

	type told struct {
		changed *status.Changed
		all     int
	}
	var got []told
	src := filesource.New(dir, zap.NewNop())
	l := New(Options{}, src, newRuntime(t), nil, Outputs{Statuses: func(st *status.Computed, changed *status.Changed, _ *snapshot.Resources) {
		got = append(got, told{changed, st.ListenerSets.Len() + st.HTTPRoutes.Len()})
	}}, zaptest.NewLogger(t))
	if err := l.Rebuild(); err != nil {
		t.Fatal(err)
	}
	put("c.yaml", site("c"))
	if err := l.Rebuild(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("told %d times, want 2", len(got))
	}
	if got[0].changed != nil {
		t.Errorf("first translation: changed %+v, want nil (any)", got[0].changed)
	}
	c := got[1].changed
	if c == nil {
		t.Fatal("a ListenerSet and route added: told that any status may have changed, want a delta")
	}
	key := types.NamespacedName{Namespace: "apps", Name: "c"}
	gw := types.NamespacedName{Namespace: "apps", Name: "gw"}
	if !slices.Equal(c.ListenerSets, []types.NamespacedName{key}) || !slices.Equal(c.HTTPRoutes, []types.NamespacedName{key}) ||
		!slices.Equal(c.Gateways, []types.NamespacedName{gw}) {
		t.Errorf("changed %+v, want apps/c's ListenerSet and route and apps/gw", c)
	}
	if got[1].all != 6 {
		t.Errorf("the statuses handed on hold %d ListenerSets and routes, want all 6", got[1].all)
	}
	if st := l.Statuses(); st == nil || st.ListenerSets.Len() != 3 {
		t.Errorf("Statuses() = %+v, want the 3 ListenerSets", st)
	}
}
