package source

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/translate"
)

func names[T interface{ GetName() string }](list []T) []string {
	out := make([]string, len(list))
	for i, o := range list {
		out[i] = o.GetName()
	}
	return out
}

// TestArrivalsKeepOrder: an update stays in its place, a deletion leaves
// the others in theirs, an addition goes last, also across the closing of
// gaps.
func TestArrivalsKeepOrder(t *testing.T) {
	svc := func(name, rv string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	a := newArrivals[*corev1.Service]()
	var want []string
	for i := range 200 {
		name := fmt.Sprintf("s%03d", (i*37)%200) // not sorted
		a.set(svc(name, "1"))
		want = append(want, name)
	}
	a.set(svc(want[5], "2"))
	if got := a.list(); got[5].ResourceVersion != "2" || !slices.Equal(names(got), want) {
		t.Fatalf("after an update: %v", names(got)[:8])
	}
	// Deleting past the compaction point keeps the order of the rest.
	for i := 0; i < 120; i += 1 {
		victim := want[len(want)-1-2*(i%50)-i/50]
		if i%2 == 0 {
			a.remove(cache.DeletedFinalStateUnknown{Key: "ns/" + victim})
		} else {
			a.remove(svc(victim, "1"))
		}
		want = slices.DeleteFunc(want, func(n string) bool { return n == victim })
		if got := names(a.list()); !slices.Equal(got, want) {
			t.Fatalf("after deleting %s: order changed", victim)
		}
	}
	if a.holes >= 64 {
		t.Fatalf("%d gaps after %d deletions of %d: never closed", a.holes, 120, 200)
	}
	a.set(svc("new", "1"))
	a.set(svc(want[0], "3"))
	want = append(want, "new")
	got := a.list()
	if !slices.Equal(names(got), want) || got[0].ResourceVersion != "3" {
		t.Fatalf("after compaction, an addition and an update: %v", names(got)[:4])
	}
	// Snapshots with no change of the kind in between share one list (at
	// 100,000 objects a copy each is 800 KB); an update the kind keeps
	// (status only) is no change.
	if again := a.list(); &again[0] != &got[0] {
		t.Fatal("a list made again with nothing changed in between")
	}
	a.keep = func(_, _ *corev1.Service) bool { return true }
	a.handler(cache.ResourceEventHandlerFuncs{}).OnUpdate(got[2], svc(want[2], "5"))
	if again := a.list(); &again[0] != &got[0] {
		t.Fatal("a list made again after an update that changed nothing listed")
	}
	// A change makes a new list and leaves the one listed before, which an
	// earlier snapshot holds, as it was; appending to one copies it.
	a.set(svc(want[1], "4"))
	after := a.list()
	if &after[0] == &got[0] || after[1].ResourceVersion != "4" || got[1].ResourceVersion == "4" {
		t.Fatalf("after an update: new list %v, earlier list changed %v", &after[0] != &got[0], got[1].ResourceVersion == "4")
	}
	if cap(after) != len(after) {
		t.Fatalf("a shared list has room to append in place: len %d, cap %d", len(after), cap(after))
	}
	a.remove(svc(want[3], "1"))
	if gone := a.list(); len(gone) != len(after)-1 || len(after) != len(want) {
		t.Fatalf("after a deletion: %d listed, the list before now %d, want %d and %d", len(gone), len(after), len(want)-1, len(want))
	}
}

// TestClusterSnapshotsTranslateIncrementally: consecutive snapshots of the
// informers list objects in the same order, so that adding one
// ListenerSet and its route to a cluster is translated as a change, not in
// full. Listers list a map: with them, every snapshot came in a new order
// and every rebuild was a full one.
func TestClusterSnapshotsTranslateIncrementally(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kc, gc := fake.NewClientset(), gwfake.NewSimpleClientset() //nolint:staticcheck // NewClientset's tracker lacks the schema of v1 Gateways
	in, err := New(kc, gc, 0, Handlers{Changed: func() {}, StatusChanged: func(metav1.Object) {}})
	if err != nil {
		t.Fatal(err)
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps",
		Labels: map[string]string{"kubernetes.io/metadata.name": "apps"}}}, metav1.CreateOptions{})
	must(err)
	_, err = gc.GatewayV1().GatewayClasses().Create(ctx, &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: "portico"},
		Spec: gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName}}, metav1.CreateOptions{})
	must(err)
	from := gwv1.NamespacesFromAll
	_, err = gc.GatewayV1().Gateways("apps").Create(ctx, &gwv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "gw"},
		Spec: gwv1.GatewaySpec{GatewayClassName: "portico",
			AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &from}},
			Listeners:        []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}, metav1.CreateOptions{})
	must(err)
	addSite := func(i int) {
		t.Helper()
		host := gwv1.Hostname(fmt.Sprintf("site-%d.example.com", i))
		name := fmt.Sprintf("site-%d", i)
		_, err := gc.GatewayV1().ListenerSets("apps").Create(ctx, &gwv1.ListenerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: gwv1.ListenerSetSpec{ParentRef: gwv1.ParentGatewayReference{Name: "gw"},
				Listeners: []gwv1.ListenerEntry{{Name: "http", Port: 8080, Protocol: gwv1.HTTPProtocolType, Hostname: &host}}}}, metav1.CreateOptions{})
		must(err)
		kind := gwv1.Kind("ListenerSet")
		_, err = gc.GatewayV1().HTTPRoutes("apps").Create(ctx, &gwv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: name},
			Spec: gwv1.HTTPRouteSpec{CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Kind: &kind, Name: gwv1.ObjectName(name)}}}}},
			metav1.CreateOptions{})
		must(err)
	}
	// More than a delta takes when positions say nothing (the objects
	// left once the same start and end are skipped, old and new, past
	// 1,024): in a new order, the whole list is left.
	const sites = 600
	for i := range sites {
		addSite(i)
	}
	// Started once the first objects are there, which the informers then
	// list: the fake's watches hold 100 events, fewer than these.
	in.Start(ctx)
	defer func() {
		cancel() // the informers end with ctx; shutdown waits for them
		in.Shutdown()
	}()
	waitFor := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			res, err := in.Snapshot()
			must(err)
			if len(res.ListenerSets) == n && len(res.HTTPRoutes) == n && len(res.Gateways) == 1 && len(res.GatewayClasses) == 1 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the caches never held %d ListenerSets and routes", n)
			}
		}
	}
	waitFor(sites)
	res, err := in.Snapshot()
	must(err)
	_, mem := translate.Translate(translate.Settings{}, res, translate.Memory{})
	if mem.Incremental() {
		t.Fatal("the first translation cannot be incremental")
	}
	for i := sites; i < sites+3; i++ {
		addSite(i)
		waitFor(i + 1)
		res, err := in.Snapshot()
		must(err)
		_, mem = translate.Translate(translate.Settings{}, res, mem)
		if !mem.Incremental() {
			t.Fatalf("adding site %d among %d was translated in full", i, i)
		}
	}
}
