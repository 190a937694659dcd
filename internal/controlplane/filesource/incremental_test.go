package filesource

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/snapshot"
)

func routeYAML(name, path string) string {
	return `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: ` + name + `, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  rules: [{matches: [{path: {type: PathPrefix, value: ` + path + `}}]}]
`
}

type fileDir struct {
	t   *testing.T
	dir string
}

func (d fileDir) put(name, content string) string {
	d.t.Helper()
	p := filepath.Join(d.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		d.t.Fatal(err)
	}
	return p
}

// watched returns a source over dir that behaves as a watching one whose
// events the test names itself (see saw).
func watched(dir string) *Source {
	s := New(dir, zap.NewNop())
	s.changes.watching = true
	return s
}

// saw records that the watch named files (paths relative to the source's
// directory).
func (s *Source) saw(names ...string) {
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	for _, n := range names {
		s.changes.files[filepath.Join(s.path, n)] = true
	}
}

func routesByName(t *testing.T, s *Source) map[string]*gwv1.HTTPRoute {
	t.Helper()
	res, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*gwv1.HTTPRoute{}
	for _, r := range res.HTTPRoutes {
		m[r.Name] = r
	}
	return m
}

func pathOf(r *gwv1.HTTPRoute) string {
	if r == nil {
		return "(none)"
	}
	return *r.Spec.Rules[0].Matches[0].Path.Value
}

// TestWatchedSourceReadsOnlyNamedFiles: while watching, a snapshot reads
// again only the files the watch named; a file it did not name keeps what
// was read of it, even if its bytes changed, until a full read (here, the
// periodic resync) reads everything.
func TestWatchedSourceReadsOnlyNamedFiles(t *testing.T) {
	d := fileDir{t, t.TempDir()}
	d.put("a.yaml", routeYAML("a", "/a"))
	d.put("b.yaml", routeYAML("b", "/b"))
	d.put("c.yaml", routeYAML("c", "/c"))
	s := watched(d.dir)
	first := routesByName(t, s)

	d.put("a.yaml", routeYAML("a", "/a2")) // not named: not read
	d.put("b.yaml", routeYAML("b", "/b2"))
	if err := os.Remove(filepath.Join(d.dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	d.put("sub/d.yaml", routeYAML("d", "/d"))
	s.saw("b.yaml", "c.yaml", "sub/d.yaml")
	second := routesByName(t, s)
	if second["a"] != first["a"] || pathOf(second["a"]) != "/a" {
		t.Errorf("a file the watch did not name was read again: %s", pathOf(second["a"]))
	}
	if pathOf(second["b"]) != "/b2" || second["b"].Generation != 2 {
		t.Errorf("the named file: %s generation %d, want /b2 generation 2", pathOf(second["b"]), second["b"].Generation)
	}
	if second["c"] != nil {
		t.Error("the removed file's object is still there")
	}
	if pathOf(second["d"]) != "/d" {
		t.Errorf("the new file in a subdirectory: %s", pathOf(second["d"]))
	}
	// a.yaml counts with the bytes read of it, before its edit.
	if len(s.order) != 3 || s.total != int64(len(routeYAML("a", "/a")))+fileSizes(t, d.dir, "b.yaml", "sub/d.yaml") {
		t.Errorf("files %v, %d bytes; want the three there", s.order, s.total)
	}

	// Nothing named: nothing read, the same objects.
	third := routesByName(t, s)
	if third["b"] != second["b"] || third["d"] != second["d"] {
		t.Error("a snapshot with nothing named decoded again")
	}

	s.ResyncEvery = 0
	if got := pathOf(routesByName(t, s)["a"]); got != "/a2" {
		t.Errorf("after a resync, a is %s, want /a2", got)
	}
}

func fileSizes(t *testing.T, dir string, names ...string) int64 {
	var n int64
	for _, name := range names {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		n += info.Size()
	}
	return n
}

// TestWatchedSourceKeepsGuarantees: the guarantees of a full read hold
// for a change read alone. A change that fails (bad YAML, an object
// another file defines, the size limit crossed) leaves the last
// configuration as it was and is named; the next snapshot reads every file
// again, so that a fix the watch did not report (or a file edited in
// between) is still seen; files Snapshot does not read (hidden, editor
// leftovers, other extensions) are not read when named.
func TestWatchedSourceKeepsGuarantees(t *testing.T) {
	d := fileDir{t, t.TempDir()}
	d.put("a.yaml", routeYAML("a", "/a"))
	d.put("b.yaml", routeYAML("b", "/b"))
	s := watched(d.dir)
	first := routesByName(t, s)

	for _, c := range []struct {
		name, content, want string
	}{
		{"bad YAML", "apiVersion: v1\nkind: Service\nmetadata: {name: x\n", "b.yaml"},
		{"an object of a.yaml", routeYAML("a", "/again"), "a.yaml"},
		{"over the size limit", routeYAML("b", "/"+strings.Repeat("x", 4096)), "limit"},
	} {
		s.MaxBytes = fileSizes(t, d.dir, "a.yaml", "b.yaml") + 100
		d.put("b.yaml", c.content)
		s.saw("b.yaml")
		_, err := s.Snapshot()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: snapshot error %v, want one naming %q", c.name, err, c.want)
		}
		if s.files[filepath.Join(d.dir, "b.yaml")].docs[0].Object != first["b"] {
			t.Fatalf("%s: the failed change replaced the last good configuration", c.name)
		}
		if !s.changes.fullRead {
			t.Fatalf("%s: after a failure, the next snapshot does not read everything", c.name)
		}
		// Fixed, with no event for it: the full read finds it.
		d.put("b.yaml", routeYAML("b", "/b"))
		if got := routesByName(t, s); got["b"] != first["b"] || got["a"] != first["a"] {
			t.Fatalf("%s: after the fix, objects were decoded again", c.name)
		}
	}

	for _, leftover := range []string{".b.yaml.swp", "b.yaml~", "notes.txt", ".hidden/e.yaml"} {
		d.put(leftover, "not: [yaml")
		s.saw(leftover)
	}
	if got := routesByName(t, s); len(got) != 2 {
		t.Errorf("after editor leftovers: %d routes", len(got))
	}
}

// TestWatchedSourceNotesEvents: a watch event naming a file marks that
// file; one naming a directory (created, removed, renamed) or a
// ConfigMap's "..data" entry, or an error of the watch (an overflow), asks
// for a full read.
func TestWatchedSourceNotesEvents(t *testing.T) {
	d := fileDir{t, t.TempDir()}
	d.put("sub/x.yaml", "")
	for _, c := range []struct {
		name string
		op   fsnotify.Op
		full bool
		file string
	}{
		{"a.yaml", fsnotify.Write, false, "a.yaml"},
		{"sub/b.yml", fsnotify.Remove, false, "sub/b.yml"},
		{"sub", fsnotify.Create, true, ""},
		{"gone", fsnotify.Remove, true, ""},
		{"..data", fsnotify.Create, true, ""},
		{".hidden/c.yaml", fsnotify.Write, false, ""},
	} {
		s := watched(d.dir)
		s.changes.fullRead = false
		s.note(fsnotify.Event{Name: filepath.Join(d.dir, c.name), Op: c.op}, watchedDirs{filepath.Join(d.dir, "gone"): true})
		if s.changes.fullRead != c.full {
			t.Errorf("%s %s: full read %v, want %v", c.op, c.name, s.changes.fullRead, c.full)
		}
		want := map[string]bool{}
		if c.file != "" {
			want[filepath.Join(d.dir, c.file)] = true
		}
		if !reflect.DeepEqual(s.changes.files, want) {
			t.Errorf("%s %s: files %v, want %v", c.op, c.name, s.changes.files, want)
		}
	}
}

// TestWatchedSourceMatchesFullRead: random adds, edits, moves and removals
// of files, each snapshot read from what a real watch reported, give the
// objects a fresh source reads from the same files.
func TestWatchedSourceMatchesFullRead(t *testing.T) {
	d := fileDir{t, t.TempDir()}
	s := New(d.dir, zap.NewNop())
	changed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Watch(ctx, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 22))
	names := []string{"a.yaml", "b.yaml", "c.yml", "sub/d.yaml", "sub/deeper/e.yaml"}
	present := map[string]bool{}
	for step := range 40 {
		name := names[r.IntN(len(names))]
		p := filepath.Join(d.dir, name)
		switch {
		case present[name] && r.IntN(3) == 0:
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			delete(present, name)
		default:
			// Two routes a file, named after the file, with a path that
			// changes: edits, and objects moving between files as files
			// come and go.
			base := strings.TrimSuffix(filepath.Base(name), filepath.Ext(name))
			d.put(name, routeYAML(base, fmt.Sprintf("/%d", step))+"---\n"+routeYAML(base+"-2", "/two"))
			present[name] = true
		}
		var got *snapshot.Resources
		deadline := time.Now().Add(10 * time.Second)
		for {
			select {
			case <-changed:
			case <-time.After(50 * time.Millisecond):
			}
			var err error
			if got, err = s.Snapshot(); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			want, err := New(d.dir, zap.NewNop()).Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			diff := routesDiff(t, got, want)
			if diff == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %d (%s): the watched source differs from a full read: %s", step, name, diff)
			}
		}
	}
}

// routesDiff compares the routes and Namespaces of two snapshots by
// name, in order, and by spec.
func routesDiff(t *testing.T, got, want *snapshot.Resources) string {
	spec := func(rs []*gwv1.HTTPRoute) string {
		var b strings.Builder
		for _, r := range rs {
			raw, err := json.Marshal(r.Spec)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s/%s %s\n", r.Namespace, r.Name, raw)
		}
		return b.String()
	}
	if g, w := spec(got.HTTPRoutes), spec(want.HTTPRoutes); g != w {
		return fmt.Sprintf("routes\n%s\nwant\n%s", g, w)
	}
	if len(got.Namespaces) != len(want.Namespaces) {
		return fmt.Sprintf("%d Namespaces, want %d", len(got.Namespaces), len(want.Namespaces))
	}
	return ""
}

// TestImplicitNamespacesStay: a Namespace the files use without defining
// it is the same object from one snapshot to the next (translate tells
// changes by identity: a new one each time would make every change a full
// translation), until no file uses it.
func TestImplicitNamespacesStay(t *testing.T) {
	d := fileDir{t, t.TempDir()}
	d.put("a.yaml", routeYAML("a", "/a"))
	s := New(d.dir, zap.NewNop())
	snap := func() *snapshot.Resources {
		t.Helper()
		res, err := s.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := snap()
	d.put("b.yaml", routeYAML("b", "/b"))
	second := snap()
	if len(first.Namespaces) != 1 || len(second.Namespaces) != 1 || first.Namespaces[0] != second.Namespaces[0] {
		t.Fatalf("Namespaces %v then %v, want the same one object", first.Namespaces, second.Namespaces)
	}
	if ns := second.Namespaces[0]; ns.Name != "apps" || ns.Labels[namespaceNameLabel] != "apps" || ns.CreationTimestamp.IsZero() {
		t.Errorf("implicit Namespace %+v", ns.ObjectMeta)
	}
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if err := os.Remove(filepath.Join(d.dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	d.put("c.yaml", "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: x}\nspec: {controllerName: example.com/x}\n")
	if third := snap(); len(third.Namespaces) != 0 {
		t.Errorf("Namespaces %v with no object in any", third.Namespaces)
	}
	d.put("a.yaml", routeYAML("a", "/a"))
	if fourth := snap(); len(fourth.Namespaces) != 1 || fourth.Namespaces[0] == first.Namespaces[0] {
		t.Error("a Namespace used again after none used it is the old object")
	}
}
