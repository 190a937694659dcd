package configstream

import (
	"reflect"
	"slices"
	"testing"

	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
)

// twoOfEach is a snapshot with two objects in every list of Resources
// (found by reflection, so that a list added later is covered too), in
// the order of names, reversed when reverse is set.
func twoOfEach(t *testing.T, reverse bool) *snapshot.Resources {
	t.Helper()
	res := &snapshot.Resources{}
	v := reflect.ValueOf(res).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Slice {
			continue
		}
		names := [][2]string{{"a", "x"}, {"b", "x"}}
		if reverse {
			slices.Reverse(names)
		}
		list := reflect.MakeSlice(f.Type(), 0, 2)
		for _, n := range names {
			obj := reflect.New(f.Type().Elem().Elem())
			m, ok := obj.Interface().(metav1.Object)
			if !ok {
				t.Fatalf("Resources.%s holds %s, which has no object metadata", v.Type().Field(i).Name, obj.Type())
			}
			m.SetNamespace(n[0])
			m.SetName(n[1])
			list = reflect.Append(list, obj)
		}
		f.Set(list)
	}
	return res
}

// TestVersionIgnoresOrder: a snapshot's version does not depend on the
// order its source listed the objects in (an informer's cache lists them
// in a new order every time), and ordering them leaves the source's lists
// as they were.
func TestVersionIgnoresOrder(t *testing.T) {
	h := NewHub(testAuth, zaptest.NewLogger(t))
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: twoOfEach(t, false)}})
	want, _ := h.Version(web)

	reversed := twoOfEach(t, true)
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: reversed}})
	if got, _ := h.Version(web); got != want {
		t.Errorf("the same objects listed in another order: version %s, want %s", got, want)
	}
	if reversed.Namespaces[0].Namespace != "b" || reversed.HTTPRoutes[0].Namespace != "b" {
		t.Error("Publish reordered the source's lists")
	}

	// A real change still makes a new version.
	changed := twoOfEach(t, true)
	changed.Namespaces[0].Labels = map[string]string{"team": "web"}
	h.Publish([]Plane{{Gateway: web, ServiceAccount: "web-dedicated", Resources: changed}})
	if got, _ := h.Version(web); got == want {
		t.Error("a changed Namespace kept the version")
	}
}

// TestObjectsOfSeesTrafficPolicies: a data plane is sent a new version
// when only a BackendTrafficPolicy of its scope changed.
func TestObjectsOfSeesTrafficPolicies(t *testing.T) {
	a := &snapshot.Resources{TrafficPolicies: []*trafficpolicy.BackendTrafficPolicy{{}}}
	b := &snapshot.Resources{TrafficPolicies: []*trafficpolicy.BackendTrafficPolicy{{}}}
	if slices.Equal(objectsOf(a), objectsOf(b)) {
		t.Error("two snapshots with different BackendTrafficPolicies list the same objects")
	}
	if !slices.Equal(objectsOf(a), objectsOf(&snapshot.Resources{TrafficPolicies: a.TrafficPolicies})) {
		t.Error("two snapshots with the same BackendTrafficPolicies list different objects")
	}
}
