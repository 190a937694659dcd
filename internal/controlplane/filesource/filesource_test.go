package filesource

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/validation"
)

// TestFileSourceReusesUnchangedFiles: a reload decodes only the files whose
// bytes changed. The objects of the others are the same objects as before,
// which is what lets translate skip work on them; the objects of a changed
// file are new, with their generation moved when their spec changed, and
// those of a removed file are gone.
func TestFileSourceReusesUnchangedFiles(t *testing.T) {
	dir := t.TempDir()
	put := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	route := func(name, path string) string {
		return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ` + name + `, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules: [{matches: [{path: {type: PathPrefix, value: ` + path + `}}]}]
`
	}
	put("a.yaml", route("a", "/a"))
	put("b.yaml", route("b", "/b"))
	put("c.yaml", route("c", "/c"))
	src := New(dir, zap.NewNop())
	byName := func() map[string]*gwv1.HTTPRoute {
		t.Helper()
		res, err := src.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*gwv1.HTTPRoute{}
		for _, r := range res.HTTPRoutes {
			m[r.Name] = r
		}
		return m
	}
	first := byName()

	put("b.yaml", route("b", "/b2"))
	if err := os.Remove(filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	second := byName()
	if second["a"] != first["a"] {
		t.Error("the object of the unchanged file was decoded again")
	}
	if second["a"].Generation != 1 || second["a"].Namespace != "apps" || second["a"].CreationTimestamp.IsZero() {
		t.Errorf("the reused object lost what the source gave it: generation %d, namespace %q, created %v",
			second["a"].Generation, second["a"].Namespace, second["a"].CreationTimestamp)
	}
	if second["b"] == first["b"] {
		t.Fatal("the object of the changed file was reused")
	}
	if second["b"].Generation != 2 {
		t.Errorf("changed spec: generation %d, want 2", second["b"].Generation)
	}
	if !second["b"].CreationTimestamp.Equal(&first["b"].CreationTimestamp) {
		t.Errorf("an edited object was created anew: %v, then %v", first["b"].CreationTimestamp, second["b"].CreationTimestamp)
	}
	if _, ok := second["c"]; ok {
		t.Error("the object of the removed file is still there")
	}

	// The same bytes again, as when an editor rewrites a file unchanged:
	// nothing new, nothing bumped.
	put("b.yaml", route("b", "/b2"))
	third := byName()
	if third["b"] != second["b"] || third["b"].Generation != 2 {
		t.Errorf("rewriting the same bytes: reused %v, generation %d", third["b"] == second["b"], third["b"].Generation)
	}

	// A removed file's cache entry goes with it: put back, its object is
	// new again.
	put("c.yaml", route("c", "/c"))
	if c := byName()["c"]; c == nil || c == first["c"] {
		t.Error("a file put back after its removal was served from the old decode")
	}
}

// TestFileSourceSizeLimit: files holding more than MaxBytes together are
// refused before they are decoded, naming the file that crossed the limit;
// a configuration at the limit loads.
func TestFileSourceSizeLimit(t *testing.T) {
	dir := t.TempDir()
	class := "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: %s}\nspec: {controllerName: portico.dev/gateway-controller}\n"
	padding := "# " + strings.Repeat("x", 4096) + "\n"
	for _, f := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, f+".yaml"), []byte(fmt.Sprintf(class, f)+padding), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src := New(dir, zap.NewNop())
	one := int64(len(fmt.Sprintf(class, "a") + padding))
	src.MaxBytes = 2 * one
	if _, err := src.Snapshot(); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	src.MaxBytes = 2*one - 1
	_, err := src.Snapshot()
	if err == nil || !strings.Contains(err.Error(), "b.yaml") || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("over the limit: got %v, want an error naming b.yaml and the limit", err)
	}
}

// TestDecodeAdmitsWhatTheTypedDecodingRead: admission sees what the typed
// decoding read (a YAML 1.1 boolean in a string field is that field's
// string, as before admission, not a refused type), and a Gateway written
// without defaults gets them.
func TestDecodeAdmitsWhatTheTypedDecodingRead(t *testing.T) {
	doc := "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw}\n" +
		"spec:\n  gatewayClassName: portico\n  listeners: [{name: on, port: 80, protocol: HTTP}]\n"
	docs, err := Decode("gw.yaml", strings.NewReader(doc), mustAdmission(t))
	if err != nil {
		t.Fatal(err)
	}
	gw := docs[0].Object.(*gwv1.Gateway)
	l := gw.Spec.Listeners[0]
	if l.Name != "true" {
		t.Errorf("listener name %q, want the typed decoding's \"true\"", l.Name)
	}
	if l.AllowedRoutes == nil || l.AllowedRoutes.Namespaces == nil || l.AllowedRoutes.Namespaces.From == nil ||
		*l.AllowedRoutes.Namespaces.From != gwv1.NamespacesFromSame {
		t.Errorf("allowedRoutes %+v, want the schema default (namespaces from Same)", l.AllowedRoutes)
	}
}

func mustAdmission(t *testing.T) *validation.Checker {
	t.Helper()
	c, err := validation.New()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
