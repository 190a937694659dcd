package kingress

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"portico.dev/portico/internal/controlplane/knative"
)

// TestIngressListFollowsTheStore adds, changes and deletes KIngresses of a
// store at random, as the informer's events tell, and checks after each
// batch that the list snapshots get is the store's, sorted, and shares
// nothing with the lists handed out before; a status-only update keeps the
// object the list had.
func TestIngressListFollowsTheStore(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	l := newIngressList(store)
	var handed [][]*knative.Ingress
	var copies [][]*knative.Ingress
	last := map[string]*knative.Ingress{} // the objects of the last list
	for step := range 300 {
		// key -> the object the list keeps, unless it lists the store again
		statusOnly := map[string]*knative.Ingress{}
		touched := map[string]bool{} // an event told the list
		for range 1 + r.IntN(40) {
			ing := &knative.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("ns-%d", r.IntN(3)), Name: fmt.Sprintf("k-%d", r.IntN(100)),
				Generation: int64(step)}}
			key := ing.Namespace + "/" + ing.Name
			old, exists, _ := store.GetByKey(key)
			switch {
			case exists && r.IntN(3) == 0:
				if err := store.Delete(old); err != nil {
					t.Fatal(err)
				}
				l.changed(cache.DeletedFinalStateUnknown{Key: key, Obj: old})
				delete(statusOnly, key)
				touched[key] = true
			case exists && r.IntN(3) == 0:
				// A status written: no event for the list.
				if listed := last[key]; listed != nil && !touched[key] {
					statusOnly[key] = listed
				}
				st := *old.(*knative.Ingress)
				if err := store.Update(&st); err != nil {
					t.Fatal(err)
				}
			default:
				if err := store.Add(ing); err != nil {
					t.Fatal(err)
				}
				l.changed(ing)
				delete(statusOnly, key)
				touched[key] = true
			}
		}
		patches := !l.all && len(l.pending) <= len(l.sorted)/8
		got := l.list()
		var want []*knative.Ingress
		for _, obj := range store.List() {
			want = append(want, obj.(*knative.Ingress))
		}
		slices.SortFunc(want, compareIngresses)
		if !slices.EqualFunc(got, want, func(a, b *knative.Ingress) bool {
			return a.Namespace == b.Namespace && a.Name == b.Name && a.Generation == b.Generation
		}) {
			t.Fatalf("step %d: the list differs from the store's", step)
		}
		for _, ing := range got {
			if kept, ok := statusOnly[ing.Namespace+"/"+ing.Name]; ok && ing != kept && patches {
				t.Fatalf("step %d: a status-only update replaced the object the list had", step)
			}
		}
		if again := l.list(); !slices.Equal(again, got) || len(got) > 0 && &again[0] != &got[0] {
			t.Fatalf("step %d: a list with nothing changed since is not the same list", step)
		}
		for i, h := range handed {
			if !slices.Equal(h, copies[i]) {
				t.Fatalf("step %d: the list handed out at step %d changed", step, i)
			}
		}
		handed, copies = append(handed, got), append(copies, slices.Clone(got))
		clear(last)
		for _, ing := range got {
			last[ing.Namespace+"/"+ing.Name] = ing
		}
	}
}
