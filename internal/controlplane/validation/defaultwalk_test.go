package validation

import (
	"math/rand/v2"
	"reflect"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
)

// TestDefaulterMatchesTheLibrary: the defaulter gives the objects
// defaulting.Default gives, over the upstream objects of every embedded
// kind and random mutations of them, with values dropped or made null
// where defaults go.
func TestDefaulterMatchesTheLibrary(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	objs := upstreamObjects(t, s)
	rng := rand.New(rand.NewPCG(3, 4))
	var compared, changed int
	for _, o := range objs {
		v := s.versions[o.key]
		v.once.Do(v.compile)
		if v.err != nil {
			t.Fatal(v.err)
		}
		compare := func(obj map[string]any) {
			t.Helper()
			want := deepCopy(obj).(map[string]any)
			defaulting.Default(want, v.structure)
			got := deepCopy(obj).(map[string]any)
			v.defaults.apply(got)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s (%s):\n got %v\nwant %v", o.key, o.source, got, want)
			}
			compared++
			if !reflect.DeepEqual(want, obj) {
				changed++
			}
		}
		compare(o.obj)
		for range 10 {
			m := deepCopy(o.obj).(map[string]any)
			for range 1 + rng.IntN(4) {
				if rng.IntN(2) == 0 {
					mutate(rng, m, objs[rng.IntN(len(objs))].obj)
					continue
				}
				// Drop or null a value: its default, if it has one,
				// comes back.
				parent, key, idx := pick(rng, m)
				switch p := parent.(type) {
				case map[string]any:
					if rng.IntN(2) == 0 {
						delete(p, key)
					} else {
						p[key] = nil
					}
				case []any:
					p[idx] = nil
				}
			}
			compare(m)
		}
	}
	t.Logf("%d objects compared, %d of them given defaults", compared, changed)
	if changed < compared/10 {
		t.Errorf("only %d of %d objects were given a default: the comparison proves little", changed, compared)
	}
}
