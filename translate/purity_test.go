package translate

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestStageBoundaries holds the stages to the direction data flows in:
// only kube and cmd talk to an API server; translate and the data plane's
// configuration know nothing of the data plane's servers or logging; the
// data plane knows nothing of Kubernetes or Gateway API types. A package
// is refused when it depends, directly or through anything it imports, on
// a path of its list (a prefix ending in "/" names a tree).
func TestStageBoundaries(t *testing.T) {
	const mod = "portico.dev/portico/"
	server := []string{mod + "proxy", mod + "internal/dataplane/", "go.uber.org/zap", "k8s.io/client-go/"}
	kubernetes := []string{"k8s.io/", "sigs.k8s.io/gateway-api/", mod + "translate", mod + "routing", mod + "listeners", mod + "internal/controlplane/"}
	refused := map[string][]string{
		"translate": server,
		"config":    append(slices.Clone(server), kubernetes...),
		"proxy":     kubernetes,
		// The run loop applies configurations through its DataPlane seam.
		"internal/controlplane/pipeline": server[:2],
	}
	for _, pkg := range []string{"internal/controlplane/snapshot", "internal/controlplane/filesource", "internal/controlplane/validation", "internal/controlplane/status", "internal/controlplane/conditions", "internal/controlplane/pipeline", "listeners", "routing"} {
		refused[pkg] = []string{"k8s.io/client-go/"}
	}
	// Leaves: the names every stage shares import nothing of Portico's and
	// no Kubernetes package, so that importing them pulls in no stage.
	leaves := []string{"internal/controlplane/wellknown"}
	for _, pkg := range leaves {
		refused[pkg] = []string{mod, "k8s.io/", "sigs.k8s.io/"}
	}
	for pkg, bad := range refused {
		out, err := exec.Command("go", "list", "-deps", mod+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for dep := range strings.Lines(string(out)) {
			dep = strings.TrimSpace(dep)
			if dep == mod+pkg {
				continue
			}
			for _, b := range bad {
				if dep == strings.TrimSuffix(b, "/") || strings.HasSuffix(b, "/") && strings.HasPrefix(dep, b) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}

// TestDeterministic: Translate is a function of its snapshot and memory.
// The same snapshot gives an identical Output whatever the iteration order
// of the maps it builds on the way (Go picks a new one on every range),
// with a first translation's empty memory as with the memory of an earlier
// one, and passing the same Memory twice gives the same result twice.
func TestDeterministic(t *testing.T) {
	fixtures, err := filepath.Glob("testdata/*.in.yaml")
	if err != nil || len(fixtures) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	settings := []Settings{{}, {AddressPool: []string{"192.0.2.1", "192.0.2.2", "192.0.2.3"}}, {Shared: &SharedAddresses{
		Addresses: []gwv1.GatewayStatusAddress{GatewayAddress("198.51.100.1")}}}}
	for _, path := range fixtures {
		res := loadFixture(t, path)
		for _, s := range settings {
			want, warm := Translate(s, res, Memory{})
			for range 5 {
				if got, _ := Translate(s, res, Memory{}); outputDiff(got, want) != "" {
					t.Fatalf("%s: a second translation differs at %s", path, outputDiff(got, want))
				}
			}
			// A new copy of every route: a full translation, with the
			// memory of the first.
			changed := *res
			changed.HTTPRoutes = make([]*gwv1.HTTPRoute, len(res.HTTPRoutes))
			for i, r := range res.HTTPRoutes {
				changed.HTTPRoutes[i] = r.DeepCopy()
			}
			fresh, _ := Translate(s, &changed, Memory{})
			for range 3 {
				if got, _ := Translate(s, &changed, warm); outputDiff(got, fresh) != "" {
					t.Fatalf("%s: with an earlier translation's memory the output differs at %s", path, outputDiff(got, fresh))
				}
			}
		}
	}
}

// TestMemoryIsNotChanged: a Memory is a value; translating with it leaves it
// as it was, so it can be passed again.
func TestMemoryIsNotChanged(t *testing.T) {
	res := loadFixture(t, "../examples/standalone")
	_, mem := Translate(Settings{}, res, Memory{})
	certs := mem.Certificates()
	changed := *res
	changed.Secrets = slices.Clone(res.Secrets[:len(res.Secrets)-1])
	_, next := Translate(Settings{}, &changed, mem)
	if mem.Certificates() != certs || next.Certificates() != certs-1 {
		t.Errorf("certificates in memory: %d then %d (and the first memory now %d), want %d then %d", certs, next.Certificates(), mem.Certificates(), certs, certs-1)
	}
}

// outputDiff is "" when a and b are equal as reflect.DeepEqual would say,
// and else the path of a difference; except for hostname tables: their
// layout depends on hash seeds each table draws at random (so that clients
// cannot aim names at one probe run), so they are compared by what they
// hold, their size and their values (as multisets), and the tables of each
// port by looking up every listener's hostname.
func outputDiff(a, b Output) string {
	if !reflect.DeepEqual(a.Statuses.Maps(), b.Statuses.Maps()) {
		return "Statuses"
	}
	if !reflect.DeepEqual(a.ACME, b.ACME) {
		return "ACME"
	}
	if d := diff(reflect.ValueOf(a.Config), reflect.ValueOf(b.Config), "Config"); d != "" {
		return d
	}
	for i, p := range a.Config.Ports {
		q := b.Config.Ports[i]
		for j, l := range p.All.Slice() {
			x, _ := p.Listeners.Lookup(l.Hostname)
			y, _ := q.Listeners.Lookup(q.All.At(j).Hostname)
			if d := diff(reflect.ValueOf(x), reflect.ValueOf(y), fmt.Sprintf("Ports[%d].Listeners.Lookup(%q)", i, l.Hostname)); d != "" {
				return d
			}
			if p.SNI != nil {
				if d := diff(reflect.ValueOf(p.SNI.Lookup(l.Hostname)), reflect.ValueOf(q.SNI.Lookup(l.Hostname)), fmt.Sprintf("Ports[%d].SNI.Lookup(%q)", i, l.Hostname)); d != "" {
					return d
				}
			}
		}
	}
	return ""
}

func diff(a, b reflect.Value, path string) string {
	if a.IsValid() != b.IsValid() || (a.IsValid() && a.Type() != b.Type()) {
		return path
	}
	if !a.IsValid() {
		return ""
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() == b.IsNil() {
				return ""
			}
			return path
		}
		return diff(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		if t := a.Type(); t.PkgPath() == "portico.dev/portico/internal/shared/hostname" && strings.HasPrefix(t.Name(), "Table[") {
			return tableDiff(a, b, path)
		}
		for i := range a.NumField() {
			if d := diff(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return path + ".len"
		}
		for i := range a.Len() {
			if d := diff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		if a.Len() != b.Len() {
			return path + ".len"
		}
		for _, k := range a.MapKeys() {
			v := b.MapIndex(k)
			if !v.IsValid() {
				return fmt.Sprintf("%s[%v]", path, k)
			}
			if d := diff(a.MapIndex(k), v, fmt.Sprintf("%s[%v]", path, k)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		// The same function (a curve's methods, say), or none.
		if a.Pointer() == b.Pointer() {
			return ""
		}
	case reflect.String:
		if a.String() == b.String() {
			return ""
		}
	case reflect.Bool:
		if a.Bool() == b.Bool() {
			return ""
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if a.Int() == b.Int() {
			return ""
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if a.Uint() == b.Uint() {
			return ""
		}
	case reflect.Float32, reflect.Float64:
		if a.Float() == b.Float() {
			return ""
		}
	}
	return path
}

// setValues are the values of a table's slots that hold one (the number
// of slots depends on where the keys fell).
func setValues(v reflect.Value) []reflect.Value {
	var out []reflect.Value
	for i := range v.Len() {
		if !v.Index(i).IsZero() {
			out = append(out, v.Index(i))
		}
	}
	return out
}

// tableDiff compares two hostname.Table values by size, fallback and the
// multisets of their exact and wildcard values.
func tableDiff(a, b reflect.Value, path string) string {
	for _, f := range []string{"n", "hasFallback", "wildLens", "wildLong", "fallback"} {
		if d := diff(a.FieldByName(f), b.FieldByName(f), path+"."+f); d != "" {
			return d
		}
	}
	for _, f := range []string{"exactVals", "wildVals"} {
		x, y := setValues(a.FieldByName(f)), setValues(b.FieldByName(f))
		if len(x) != len(y) {
			return path + "." + f + ".len"
		}
		used := make([]bool, len(y))
	values:
		for i := range x {
			for j := range y {
				if !used[j] && diff(x[i], y[j], "") == "" {
					used[j] = true
					continue values
				}
			}
			return fmt.Sprintf("%s.%s: value %d has no equal", path, f, i)
		}
	}
	return ""
}
