package validation

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	apiservercel "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// TestRulesMatchTheValidator: ruleTree gives the errors the apiextensions
// Validator gives, over the upstream examples, invalid examples and
// conformance manifests of every embedded kind and over random mutations
// of them (fields dropped, values swapped between objects, lists
// duplicated or emptied), which break rules the originals keep.
func TestRulesMatchTheValidator(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	objs := upstreamObjects(t, s)
	if len(objs) < 100 {
		t.Fatalf("only %d upstream objects of the embedded kinds", len(objs))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var compared, refused int
	references := map[string]*cel.Validator{}
	for i, o := range objs {
		compare := func(obj map[string]any) {
			t.Helper()
			v := s.versions[o.key]
			v.once.Do(v.compile)
			if v.err != nil {
				t.Fatal(v.err)
			}
			if v.rules == nil && v.cel != nil {
				t.Fatalf("%s: not walkable", o.key)
			}
			reference, ok := references[o.key]
			if !ok {
				reference = cel.NewValidator(v.structure, true, apiservercel.PerCallLimit)
				references[o.key] = reference
			}
			want, _ := reference.Validate(context.Background(), nil, v.structure, obj, nil, apiservercel.RuntimeCELCostBudget)
			// Twice: the second time, what passed is remembered
			// (rulememo.go).
			for range 2 {
				got, _ := v.rules.validate(context.Background(), nil, obj, apiservercel.RuntimeCELCostBudget)
				if g, w := errorStrings(got), errorStrings(want); !slices.Equal(g, w) {
					t.Errorf("%s (%s):\n got %q\nwant %q", o.key, o.source, g, w)
				}
			}
			// A small budget runs out in both or in neither,
			// remembered costs or not. (Where it runs out, and so
			// which errors come before, follows the order of a
			// map's keys, random in both.)
			small := int64(1 + rng.IntN(400))
			wantSmall, _ := reference.Validate(context.Background(), nil, v.structure, obj, nil, small)
			gotSmall, _ := v.rules.validate(context.Background(), nil, obj, small)
			if g, w := ranOut(gotSmall), ranOut(wantSmall); g != w {
				t.Errorf("%s (%s), budget %d: ran out %v, want %v:\n got %q\nwant %q", o.key, o.source, small, g, w, errorStrings(gotSmall), errorStrings(wantSmall))
			}
			compared++
			if len(want) > 0 {
				refused++
			}
		}
		compare(o.obj)
		for range 10 {
			m := deepCopy(o.obj).(map[string]any)
			for range 1 + rng.IntN(3) {
				mutate(rng, m, objs[rng.IntN(len(objs))].obj)
			}
			compare(m)
		}
		if t.Failed() && i > 10 {
			break
		}
	}
	var hits int64
	for _, v := range s.versions {
		if v.rules != nil {
			hits += v.rules.memoHits()
		}
	}
	t.Logf("%d objects compared, %d refused by the rules; %d subtrees passed from memory", compared, refused, hits)
	if hits == 0 {
		t.Error("no subtree was passed from memory: the comparison proves nothing of the memo")
	}
	if refused < compared/20 {
		t.Errorf("only %d of %d objects broke a rule: the comparison proves little", refused, compared)
	}
}

// ranOut reports whether errs say the cost budget ran out.
func ranOut(errs field.ErrorList) bool {
	for _, e := range errs {
		if strings.Contains(e.Error(), "running out of cost budget") {
			return true
		}
	}
	return false
}

type upstreamObject struct {
	key, source string
	obj         map[string]any
}

// upstreamObjects are the defaulted objects of the embedded kinds in the
// gateway-api modules' examples, invalid examples and conformance tests.
func upstreamObjects(t *testing.T, s *Schemas) []upstreamObject {
	t.Helper()
	var paths []string
	for _, mod := range []struct{ dir, path string }{{".", "sigs.k8s.io/gateway-api"}, {"../../../conformance", "sigs.k8s.io/gateway-api/conformance"}} {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod.path)
		cmd.Dir = mod.dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", mod.path, err)
		}
		root := strings.TrimSpace(string(out))
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".yaml") &&
				(strings.Contains(p, "/examples/") || strings.Contains(p, "/invalid-examples/") || strings.Contains(p, "/tests/") || strings.Contains(p, "/base/")) {
				paths = append(paths, p)
			}
			return nil
		})
	}
	var objs []upstreamObject
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				break // a template, not YAML
			}
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				continue
			}
			var obj map[string]any
			if utiljson.Unmarshal(js, &obj) != nil || obj == nil {
				continue
			}
			apiVersion, _ := obj["apiVersion"].(string)
			kind, _ := obj["kind"].(string)
			if _, ok := s.Knows(apiVersion, kind); !ok {
				continue
			}
			delete(obj, "status")
			if err := s.Default(apiVersion, kind, obj); err != nil {
				t.Fatal(err)
			}
			objs = append(objs, upstreamObject{key: apiVersion + "/" + kind, source: p, obj: obj})
		}
	}
	return objs
}

// mutate changes one random node of obj: drops it, replaces it with a node
// of other, empties or duplicates a list, or changes a string.
func mutate(rng *rand.Rand, obj, other map[string]any) {
	parent, key, idx := pick(rng, obj)
	if parent == nil {
		return
	}
	donors := nodes(other)
	set := func(v any) {
		switch p := parent.(type) {
		case map[string]any:
			p[key] = v
		case []any:
			p[idx] = v
		}
	}
	var cur any
	switch p := parent.(type) {
	case map[string]any:
		cur = p[key]
	case []any:
		cur = p[idx]
	}
	switch rng.IntN(5) {
	case 0:
		if p, ok := parent.(map[string]any); ok {
			delete(p, key)
		}
	case 1:
		if len(donors) > 0 {
			set(deepCopy(donors[rng.IntN(len(donors))]))
		}
	case 2:
		if l, ok := cur.([]any); ok && len(l) > 0 {
			set(append(l, deepCopy(l[rng.IntN(len(l))])))
		}
	case 3:
		if _, ok := cur.([]any); ok {
			set([]any{})
		}
	case 4:
		if s, ok := cur.(string); ok {
			set([]string{"", "/", "a b", "Exact", "HTTPS", "*.example.com", s + s, "9999"}[rng.IntN(8)])
		}
	}
}

// pick is a random node below obj's spec (metadata and kind stay), as its
// parent with its key or index.
func pick(rng *rand.Rand, obj map[string]any) (parent any, key string, idx int) {
	type slot struct {
		parent any
		key    string
		idx    int
	}
	var slots []slot
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				slots = append(slots, slot{v, k, 0})
				walk(c)
			}
		case []any:
			for i, c := range v {
				slots = append(slots, slot{v, "", i})
				walk(c)
			}
		}
	}
	walk(obj["spec"])
	if len(slots) == 0 {
		return nil, "", 0
	}
	slices.SortFunc(slots, func(a, b slot) int { return strings.Compare(a.key, b.key) })
	s := slots[rng.IntN(len(slots))]
	return s.parent, s.key, s.idx
}

// nodes are the values below obj's spec.
func nodes(obj map[string]any) []any {
	var out []any
	var walk func(v any)
	walk = func(v any) {
		out = append(out, v)
		switch v := v.(type) {
		case map[string]any:
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(obj["spec"])
	return out
}

func deepCopy(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, c := range v {
			m[k] = deepCopy(c)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, c := range v {
			l[i] = deepCopy(c)
		}
		return l
	}
	return v
}

// errorStrings are the errors' messages in order: both walks visit a map's
// keys in Go's random order.
func errorStrings[E interface{ Error() string }](errs []E) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = e.Error()
	}
	slices.Sort(out)
	return out
}
