package validation

import (
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	apiservercel "k8s.io/apiserver/pkg/apis/cel"
)

// TestSchemaWalkVouchesOnlyForValidObjects: the schema walk vouches for
// no object the library's schema validator refuses, and Validate gives
// the errors the library's validators give (schema, list keys, then the
// CEL rules of the apiextensions Validator), over the upstream objects of
// every embedded kind and random mutations of them: those of
// TestRulesMatchTheValidator and values of other types, out of range,
// too long, or null.
func TestSchemaWalkVouchesOnlyForValidObjects(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	objs := upstreamObjects(t, s)
	rng := rand.New(rand.NewPCG(3, 4))
	references := map[string]*cel.Validator{}
	var compared, valid, vouched, refused int
	for _, o := range objs {
		v := s.versions[o.key]
		v.once.Do(v.compile)
		if v.err != nil {
			t.Fatal(v.err)
		}
		reference, ok := references[o.key]
		if !ok {
			reference = cel.NewValidator(v.structure, true, apiservercel.PerCallLimit)
			references[o.key] = reference
		}
		compare := func(obj map[string]any) {
			t.Helper()
			want := apiextensionsvalidation.ValidateCustomResource(nil, obj, v.openapi)
			if v.walk.vouches(obj) {
				vouched++
				if len(want) > 0 {
					t.Errorf("%s (%s): the walk vouched for an object the schema refuses: %q", o.key, o.source, errorStrings(want))
				}
			}
			if len(want) == 0 {
				valid++
			} else {
				refused++
			}
			want = append(want, listtype.ValidateListSetsAndMaps(nil, v.structure, obj)...)
			if len(want) == 0 {
				celErrs, _ := reference.Validate(context.Background(), nil, v.structure, obj, nil, apiservercel.RuntimeCELCostBudget)
				want = append(want, celErrs...)
			}
			if g, w := errorStrings(s.Validate(o.key[:strings.LastIndex(o.key, "/")], o.key[strings.LastIndex(o.key, "/")+1:], obj)), errorStrings(want); !slices.Equal(g, w) {
				t.Errorf("%s (%s):\n got %q\nwant %q", o.key, o.source, g, w)
			}
			compared++
		}
		compare(o.obj)
		for range 20 {
			m := deepCopy(o.obj).(map[string]any)
			for range 1 + rng.IntN(3) {
				if rng.IntN(3) > 0 {
					mutate(rng, m, objs[rng.IntN(len(objs))].obj)
				} else {
					retype(rng, m)
				}
			}
			compare(m)
		}
		if t.Failed() {
			break
		}
	}
	t.Logf("%d objects compared: %d valid by the schema, %d vouched for by the walk; %d refused", compared, valid, vouched, refused)
	// The walk leaves string formats, Gateway addresses (oneOf) and the
	// like to the library; it must still spare it most valid objects.
	if vouched < valid*3/4 {
		t.Errorf("the walk vouched for %d of %d valid objects", vouched, valid)
	}
	if refused < compared/5 {
		t.Errorf("only %d of %d objects broke the schema: the comparison proves little", refused, compared)
	}
}

// retype replaces a random node below obj's spec with a value of another
// type, out of the usual ranges, too long, or null.
func retype(rng *rand.Rand, obj map[string]any) {
	parent, key, idx := pick(rng, obj)
	values := []any{nil, int64(0), int64(-1), int64(65536), int64(1) << 60, 1.5, true, "", "x", strings.Repeat("a", 254),
		strings.Repeat("é", 64), "UPPER", "a.b", []any{}, []any{"x"}, map[string]any{}, map[string]any{"name": "x"}}
	v := values[rng.IntN(len(values))]
	switch p := parent.(type) {
	case map[string]any:
		p[key] = v
	case []any:
		p[idx] = v
	}
}

// The objects of a large standalone configuration (bench/, the sites
// shape) are vouched for by the walk: it is the fast path of the objects
// that matter.
func TestSchemaWalkVouchesForSites(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for key, obj := range map[string]map[string]any{
		"gateway.networking.k8s.io/v1/ListenerSet": {
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
			"metadata": map[string]any{"name": "site-1", "namespace": "apps", "creationTimestamp": nil},
			"spec": map[string]any{
				"parentRef": map[string]any{"name": "gw"},
				"listeners": []any{map[string]any{"name": "https", "hostname": "site-1.example.com", "port": int64(8443), "protocol": "HTTPS",
					"tls": map[string]any{"certificateRefs": []any{map[string]any{"name": "site-1-tls"}}}}},
			},
		},
		"gateway.networking.k8s.io/v1/HTTPRoute": {
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
			"metadata": map[string]any{"name": "site-1", "namespace": "apps", "creationTimestamp": nil},
			"spec": map[string]any{
				"parentRefs": []any{map[string]any{"kind": "ListenerSet", "name": "site-1"}},
				"hostnames":  []any{"site-1.example.com"},
				"rules":      []any{map[string]any{"backendRefs": []any{map[string]any{"name": "backend", "port": int64(80)}}}},
			},
		},
	} {
		apiVersion, kind := key[:strings.LastIndex(key, "/")], key[strings.LastIndex(key, "/")+1:]
		if err := s.Default(apiVersion, kind, obj); err != nil {
			t.Fatal(err)
		}
		v := s.versions[key]
		if errs := apiextensionsvalidation.ValidateCustomResource(nil, obj, v.openapi); len(errs) > 0 {
			t.Fatalf("%s: %v", kind, errs)
		}
		if !v.walk.vouches(obj) {
			t.Errorf("%s: the walk does not vouch for a valid site", kind)
		}
	}
}

// FuzzSchemaWalk: for any JSON object of an embedded kind, Validate gives
// the library's errors, and the walk vouches for nothing the library's
// schema validator refuses. The seeds are sites of the benchmarks' shape.
func FuzzSchemaWalk(f *testing.F) {
	s, err := Load()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(0), []byte(`{"spec":{"parentRef":{"name":"gw"},"listeners":[{"name":"https","hostname":"a.example.com","port":443,"protocol":"HTTPS","tls":{"certificateRefs":[{"name":"c"}]}},{"name":"http","port":80,"protocol":"HTTP"}]}}`))
	f.Add(uint8(1), []byte(`{"spec":{"parentRefs":[{"kind":"ListenerSet","name":"a"}],"hostnames":["a.example.com"],"rules":[{"matches":[{"path":{"type":"Exact","value":"/x"}}],"backendRefs":[{"name":"b","port":80}]}]}}`))
	f.Add(uint8(2), []byte(`{"spec":{"gatewayClassName":"x","listeners":[{"name":"h","port":80,"protocol":"HTTP","hostname":"*.example.com"}]}}`))
	kinds := []string{"ListenerSet", "HTTPRoute", "Gateway", "GRPCRoute", "TLSRoute", "ReferenceGrant", "BackendTLSPolicy", "GatewayClass"}
	f.Fuzz(func(t *testing.T, k uint8, js []byte) {
		kind := kinds[int(k)%len(kinds)]
		var obj map[string]any
		if utiljson.Unmarshal(js, &obj) != nil || obj == nil {
			return
		}
		obj["apiVersion"], obj["kind"] = "gateway.networking.k8s.io/v1", kind
		obj["metadata"] = map[string]any{"name": "x", "namespace": "apps"}
		delete(obj, "status")
		libraryDefaulted := deepCopy(obj).(map[string]any)
		if err := s.Default("gateway.networking.k8s.io/v1", kind, obj); err != nil {
			t.Fatal(err)
		}
		v := s.versions["gateway.networking.k8s.io/v1/"+kind]
		defaulting.Default(libraryDefaulted, v.structure)
		if !reflect.DeepEqual(obj, libraryDefaulted) {
			t.Fatalf("%s: defaulted\n%v\nthe library\n%v", kind, obj, libraryDefaulted)
		}
		schemaErrs := apiextensionsvalidation.ValidateCustomResource(nil, obj, v.openapi)
		if v.walk.vouches(obj) && len(schemaErrs) > 0 {
			t.Fatalf("%s: the walk vouched for an object the schema refuses: %q", kind, errorStrings(schemaErrs))
		}
		want := append(schemaErrs, listtype.ValidateListSetsAndMaps(nil, v.structure, obj)...)
		if len(want) == 0 {
			celErrs, _ := cel.NewValidator(v.structure, true, apiservercel.PerCallLimit).Validate(context.Background(), nil, v.structure, obj, nil, apiservercel.RuntimeCELCostBudget)
			want = append(want, celErrs...)
		}
		if g, w := errorStrings(s.Validate("gateway.networking.k8s.io/v1", kind, obj)), errorStrings(want); !slices.Equal(g, w) {
			t.Fatalf("%s:\n got %q\nwant %q", kind, g, w)
		}
	})
}
