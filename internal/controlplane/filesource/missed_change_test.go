package filesource

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// drain waits until no change was reported for quiet, at most limit, and
// says how many changes were reported.
func drain(ch chan struct{}, quiet, limit time.Duration) int {
	n := 0
	end := time.After(limit)
	for {
		select {
		case <-ch:
			n++
		case <-time.After(quiet):
			return n
		case <-end:
			return n
		}
	}
}

func pathOfRoute(t *testing.T, s *Source, name string) string {
	t.Helper()
	r := routesByName(t, s)[name]
	if r == nil {
		return "<none>"
	}
	return pathOf(r)
}

func watchNotify(t *testing.T, s *Source) chan struct{} {
	ch := make(chan struct{}, 1024)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Watch(ctx, func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	return ch
}

// The configuration directory itself is replaced (renamed away, a new one
// made in its place): the watch on it is gone and nothing watches its
// parent, so no edit after that is ever seen until a resync.
func TestWatchRootDirectoryReplaced(t *testing.T) {
	base := t.TempDir()
	conf := filepath.Join(base, "conf")
	d := fileDir{t, conf}
	d.put("a.yaml", routeYAML("r1", "/v1"))
	s := New(conf, zap.NewNop())
	s.ResyncEvery = time.Hour
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Fatalf("first snapshot: %s", got)
	}
	ch := watchNotify(t, s)
	if err := os.Rename(conf, filepath.Join(base, "conf.old")); err != nil {
		t.Fatal(err)
	}
	d.put("a.yaml", routeYAML("r1", "/v2"))
	n := drain(ch, 500*time.Millisecond, 3*time.Second)
	t.Logf("changes reported for the replacement: %d; snapshot: %s", n, pathOfRoute(t, s, "r1"))
	d.put("a.yaml", routeYAML("r1", "/v3"))
	n = drain(ch, time.Second, 3*time.Second)
	got := pathOfRoute(t, s, "r1")
	t.Logf("changes reported for an edit after it: %d; snapshot: %s", n, got)
	if n == 0 || got != "/v3" {
		t.Errorf("an edit of the new directory: %d changes reported, snapshot serves %s, want /v3", n, got)
	}
}

// The configuration path is a symlink to a release directory, swapped
// atomically to the next release (ln -s + rename): no event.
func TestWatchSymlinkedRootSwapped(t *testing.T) {
	base := t.TempDir()
	fileDir{t, filepath.Join(base, "releases/v1")}.put("a.yaml", routeYAML("r1", "/v1"))
	fileDir{t, filepath.Join(base, "releases/v2")}.put("a.yaml", routeYAML("r1", "/v2"))
	conf := filepath.Join(base, "conf")
	if err := os.Symlink("releases/v1", conf); err != nil {
		t.Fatal(err)
	}
	s := New(conf, zap.NewNop())
	s.ResyncEvery = time.Hour
	files, _ := s.Files()
	t.Logf("files through the symlinked root: %v; snapshot: %s", files, pathOfRoute(t, s, "r1"))
	ch := watchNotify(t, s)
	tmp := filepath.Join(base, "conf.tmp")
	if err := os.Symlink("releases/v2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, conf); err != nil {
		t.Fatal(err)
	}
	n := drain(ch, time.Second, 3*time.Second)
	got := pathOfRoute(t, s, "r1")
	t.Logf("changes reported for the swap: %d; snapshot: %s", n, got)
	if n == 0 || got != "/v2" {
		t.Errorf("after the swap: %d changes reported, snapshot serves %s, want /v2", n, got)
	}
}

// mv a.yaml b.yaml arrives as two events, Rename(a) then Create(b); a
// snapshot between them (the debounce's MaxDelay cutting a burst) serves a
// configuration without the route, which was on disk all along (a full
// read sees the rename whole: before or after, never neither).
func TestWatchRenameSplitAcrossSnapshots(t *testing.T) {
	dir := t.TempDir()
	d := fileDir{t, dir}
	a := d.put("a.yaml", routeYAML("r1", "/v1"))
	s := watched(dir)
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Fatalf("first snapshot: %s", got)
	}
	b := filepath.Join(dir, "b.yaml")
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	dirs := watchedDirs{dir: true}
	s.note(fsnotify.Event{Name: a, Op: fsnotify.Rename}, dirs)
	mid := pathOfRoute(t, s, "r1")
	s.note(fsnotify.Event{Name: b, Op: fsnotify.Create}, dirs)
	after := pathOfRoute(t, s, "r1")
	t.Logf("between the two events: %s; after both: %s", mid, after)
	if mid != "/v1" {
		t.Errorf("a snapshot between the events of one rename serves r1 as %s; on disk it is /v1 throughout", mid)
	}
}

// A file of the directory is a symlink to one kept elsewhere (a shared
// file, a secret mounted next to it): editing the target makes no event
// in the watched directory. Reading everything on any event, as before,
// picked it up with the next edit of any file; reading only the files
// named does not, and the next edit of b.yaml applies while a.yaml's
// change waits for the resync.
func TestWatchSymlinkedFileTargetEdited(t *testing.T) {
	base := t.TempDir()
	shared := fileDir{t, filepath.Join(base, "shared")}
	target := shared.put("a.yaml", routeYAML("r1", "/v1"))
	conf := filepath.Join(base, "conf")
	d := fileDir{t, conf}
	d.put("b.yaml", routeYAML("r2", "/b1"))
	if err := os.Symlink(target, filepath.Join(conf, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	s := New(conf, zap.NewNop())
	s.ResyncEvery = time.Hour
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Fatalf("first snapshot: %s", got)
	}
	ch := watchNotify(t, s)
	shared.put("a.yaml", routeYAML("r1", "/v2"))
	d.put("b.yaml", routeYAML("r2", "/b2"))
	n := drain(ch, time.Second, 3*time.Second)
	m := routesByName(t, s)
	t.Logf("changes reported: %d; r1 %s, r2 %s", n, pathOf(m["r1"]), pathOf(m["r2"]))
	if pathOf(m["r1"]) != "/v2" || pathOf(m["r2"]) != "/b2" {
		t.Errorf("after editing a.yaml's target and b.yaml: r1 %s, r2 %s; want /v2 and /b2", pathOf(m["r1"]), pathOf(m["r2"]))
	}
}

// The kernel's event queue overflows while the watch is busy: the
// snapshot after it must read everything, including a file edited in the
// burst whose event was lost.
func TestWatchQueueOverflow(t *testing.T) {
	dir := t.TempDir()
	d := fileDir{t, dir}
	d.put("a.yaml", routeYAML("r1", "/v1"))
	s := New(dir, zap.NewNop())
	s.ResyncEvery = time.Hour
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Fatalf("first snapshot: %s", got)
	}
	block := make(chan struct{})
	ch := make(chan struct{}, 1<<20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := true
	if err := s.Watch(ctx, func() {
		if first {
			first = false
			<-block
		}
		ch <- struct{}{}
	}); err != nil {
		t.Fatal(err)
	}
	d.put("x.yaml", "") // the watch blocks on its change
	time.Sleep(200 * time.Millisecond)
	for i := range 20000 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("n%05d.txt", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.put("a.yaml", routeYAML("r1", "/v2"))
	close(block)
	drain(ch, 3*time.Second, 30*time.Second)
	got := pathOfRoute(t, s, "r1")
	t.Logf("after the overflow: %s", got)
	if got != "/v2" {
		t.Errorf("after an overflow: r1 %s, want /v2", got)
	}
}

// A file deleted and written again in one burst, then a file replaced by
// a directory of the same name holding the object: each is picked up.
func TestWatchRecreatedAndFileToDirectory(t *testing.T) {
	dir := t.TempDir()
	d := fileDir{t, dir}
	a := d.put("a.yaml", routeYAML("r1", "/v1"))
	s := New(dir, zap.NewNop())
	s.ResyncEvery = time.Hour
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Fatalf("first snapshot: %s", got)
	}
	ch := watchNotify(t, s)
	os.Remove(a)
	d.put("a.yaml", routeYAML("r1", "/v2"))
	drain(ch, 500*time.Millisecond, 3*time.Second)
	if got := pathOfRoute(t, s, "r1"); got != "/v2" {
		t.Errorf("deleted and re-created: %s, want /v2", got)
	}
	os.Remove(a)
	d.put("a.yaml/b.yaml", routeYAML("r1", "/v3"))
	drain(ch, 500*time.Millisecond, 3*time.Second)
	if got := pathOfRoute(t, s, "r1"); got != "/v3" {
		t.Errorf("file replaced by a directory: %s, want /v3", got)
	}
	d.put("a.yaml/b.yaml", routeYAML("r1", "/v4"))
	drain(ch, 500*time.Millisecond, 3*time.Second)
	if got := pathOfRoute(t, s, "r1"); got != "/v4" {
		t.Errorf("an edit in that directory: %s, want /v4", got)
	}
}

// A ConfigMap mount swaps its files by renaming the "..data" symlink to a
// new timestamped directory, then removes the old one; twice in a row.
func TestWatchConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	d := fileDir{t, dir}
	d.put("..2026_01/a.yaml", routeYAML("r1", "/v1"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("..2026_01", filepath.Join(dir, "..data")))
	must(os.Symlink("..data/a.yaml", filepath.Join(dir, "a.yaml")))
	s := New(dir, zap.NewNop())
	s.ResyncEvery = time.Hour
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Fatalf("first snapshot: %s", got)
	}
	ch := watchNotify(t, s)
	prev := "..2026_01"
	for i, v := range []string{"/v2", "/v3"} {
		ts := fmt.Sprintf("..2026_0%d", i+2)
		d.put(ts+"/a.yaml", routeYAML("r1", v))
		must(os.Symlink(ts, filepath.Join(dir, "..data_tmp")))
		must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
		must(os.RemoveAll(filepath.Join(dir, prev)))
		prev = ts
		drain(ch, 500*time.Millisecond, 3*time.Second)
		if got := pathOfRoute(t, s, "r1"); got != v {
			t.Errorf("swap %d: %s, want %s", i+1, got, v)
		}
	}
}

// A file of the directory with another hard link, edited in place
// through that other name: no event names it, so it is read again with
// every snapshot, as a symlink is; a plain file beside it is not.
func TestWatchHardLinkedFileEdited(t *testing.T) {
	base := t.TempDir()
	shared := fileDir{t, filepath.Join(base, "shared")}
	other := shared.put("a.yaml", routeYAML("r1", "/v1"))
	conf := filepath.Join(base, "conf")
	d := fileDir{t, conf}
	d.put("b.yaml", routeYAML("r2", "/b1"))
	d.put("c.yaml", routeYAML("r3", "/c1"))
	if err := os.Link(other, filepath.Join(conf, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	s := watched(conf)
	if got := pathOfRoute(t, s, "r1"); got != "/v1" {
		t.Fatalf("first snapshot: %s", got)
	}
	if want := map[string]bool{filepath.Join(conf, "a.yaml"): true}; !maps.Equal(s.indirect, want) {
		t.Errorf("files read again every time: %v, want %v", s.indirect, want)
	}
	shared.put("a.yaml", routeYAML("r1", "/v2")) // in place: the same inode
	d.put("c.yaml", routeYAML("r3", "/c2"))      // not named: not read
	d.put("b.yaml", routeYAML("r2", "/b2"))
	s.saw("b.yaml")
	m := routesByName(t, s)
	if pathOf(m["r1"]) != "/v2" || pathOf(m["r2"]) != "/b2" || pathOf(m["r3"]) != "/c1" {
		t.Errorf("r1 %s, r2 %s, r3 %s; want /v2 (other link edited), /b2 (named), /c1 (plain, not named)",
			pathOf(m["r1"]), pathOf(m["r2"]), pathOf(m["r3"]))
	}

	// Its other name gone, it is a plain file: named alone again.
	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	s.saw("a.yaml")
	routesByName(t, s)
	if len(s.indirect) != 0 {
		t.Errorf("files read again every time: %v, want none", s.indirect)
	}
}
