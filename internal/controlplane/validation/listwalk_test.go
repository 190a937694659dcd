package validation

import (
	"math/rand/v2"
	"slices"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
)

// TestListWalkMatchesTheLibrary: the listWalk gives the errors
// listtype.ValidateListSetsAndMaps gives, over the upstream objects of
// every embedded kind and random mutations of them (entries of lists
// duplicated, values swapped between objects).
func TestListWalkMatchesTheLibrary(t *testing.T) {
	s, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	objs := upstreamObjects(t, s)
	rng := rand.New(rand.NewPCG(5, 6))
	var compared, refused int
	for _, o := range objs {
		v := s.versions[o.key]
		v.once.Do(v.compile)
		if v.err != nil {
			t.Fatal(v.err)
		}
		compare := func(obj map[string]any) {
			t.Helper()
			// The order of the errors follows map iterations, random
			// in both.
			want := errorStrings(listtype.ValidateListSetsAndMaps(nil, v.structure, obj))
			got := errorStrings(v.lists.check(nil, obj))
			slices.Sort(want)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("%s (%s):\n got %q\nwant %q", o.key, o.source, got, want)
			}
			compared++
			if len(want) > 0 {
				refused++
			}
		}
		compare(o.obj)
		for range 10 {
			m := deepCopy(o.obj).(map[string]any)
			for range 1 + rng.IntN(4) {
				mutate(rng, m, objs[rng.IntN(len(objs))].obj)
			}
			compare(m)
		}
	}
	t.Logf("%d objects compared, %d with duplicates", compared, refused)
	if refused < compared/50 {
		t.Errorf("only %d of %d objects had duplicates: the comparison proves little", refused, compared)
	}
}
