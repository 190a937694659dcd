package filesource

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/controlplane/validation"
	"portico.dev/portico/internal/testkit/testyaml"
)

// TestDefaultedMatchesJSONRoundTrip: defaulted gives the fields and the
// typed object that the JSON round trip it replaced gave (marshal the
// object, decode the fields with integers as int64, default them, decode
// them over the object), over the documents of the gateway-api module's
// examples and conformance manifests, Portico's examples and a few sites
// of the benchmarks.
func TestDefaultedMatchesJSONRoundTrip(t *testing.T) {
	admit, err := validation.New()
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range strings.Split(testyaml.Site("site-1", "site-1.example.com", 443, "cert", "key"), "\n---\n") {
		docs = append(docs, []byte(d))
	}
	var roots []string
	for _, mod := range []struct{ dir, path string }{{".", "sigs.k8s.io/gateway-api"}, {"../../../conformance", "sigs.k8s.io/gateway-api/conformance"}} {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod.path)
		cmd.Dir = mod.dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", mod.path, err)
		}
		roots = append(roots, strings.TrimSpace(string(out)))
	}
	roots = append(roots, "../../../examples")
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
				return nil
			}
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			split, _ := splitDocuments(raw)
			for _, d := range split {
				docs = append(docs, d.raw)
			}
			return nil
		})
	}
	compared := 0
	for _, raw := range docs {
		var tm metav1.TypeMeta
		if yaml.Unmarshal(raw, &tm) != nil || !admit.HasSchema(tm.APIVersion, tm.Kind) {
			continue
		}
		fresh := func() metav1.Object {
			obj, err := newObject(tm.APIVersion, tm.Kind)
			if err != nil {
				return nil
			}
			if yaml.UnmarshalStrict(raw, obj) != nil {
				return nil
			}
			return obj
		}
		got, want := fresh(), fresh()
		if got == nil {
			continue
		}
		fields, err := defaulted(got, &tm, admit)
		if err != nil {
			t.Fatal(err)
		}
		wantFields := jsonRoundTrip(t, want, &tm, admit)
		if !reflect.DeepEqual(fields, wantFields) {
			t.Errorf("%s %s: fields differ:\n got %v\nwant %v", tm.Kind, got.GetName(), fields, wantFields)
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%s %s: objects differ:\n got %+v\nwant %+v", tm.Kind, got.GetName(), got, want)
		}
		compared++
	}
	t.Logf("%d objects compared", compared)
	if compared < 100 {
		t.Errorf("only %d objects compared", compared)
	}
}

// jsonRoundTrip is what defaulted did before, through JSON.
func jsonRoundTrip(t *testing.T, obj metav1.Object, tm *metav1.TypeMeta, admit *validation.Checker) map[string]any {
	js, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := utiljson.Unmarshal(js, &fields); err != nil {
		t.Fatal(err)
	}
	delete(fields, "status")
	if err := admit.Default(tm.APIVersion, tm.Kind, fields); err != nil {
		t.Fatal(err)
	}
	if js, err = utiljson.Marshal(fields); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, obj); err != nil {
		t.Fatal(err)
	}
	return fields
}
