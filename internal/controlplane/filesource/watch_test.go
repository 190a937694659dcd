package filesource

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// TestWatchIgnoresEditorLeftovers: swap, backup and probe files that editors
// write beside a configuration do not count as changes (each would cost a
// full reload), while YAML files, directories and a ConfigMap's symlink swap
// do.
func TestWatchIgnoresEditorLeftovers(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "more")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	probe := filepath.Join(dir, "4913")
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := New(dir, zap.NewNop())
	dirs := watchedDirs{dir: true, sub: true}
	cases := []struct {
		name string
		op   fsnotify.Op
		want bool
	}{
		{"gateway.yaml", fsnotify.Write, true},
		{"gateway.yml", fsnotify.Create, true},
		{"more/routes.yaml", fsnotify.Remove, true},
		{".gateway.yaml.swp", fsnotify.Write, false},
		{"gateway.yaml~", fsnotify.Create, false},
		{"4913", fsnotify.Create, false},
		{"notes.txt", fsnotify.Write, false},
		{"..data", fsnotify.Create, true},
		{"..2026_11_24_14_00_00.123", fsnotify.Create, true},
		{"more", fsnotify.Create, true},
		{"more", fsnotify.Rename, true},
		{"gone-but-never-watched", fsnotify.Remove, false},
	}
	for _, c := range cases {
		ev := fsnotify.Event{Name: filepath.Join(dir, c.name), Op: c.op}
		if got := s.relevant(ev, dirs); got != c.want {
			t.Errorf("%s %s: relevant = %v, want %v", c.op, c.name, got, c.want)
		}
	}

	// One file: only that file's name counts, whatever its extension.
	conf := filepath.Join(dir, "portico.conf")
	if err := os.WriteFile(conf, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	one := New(conf, zap.NewNop())
	for name, want := range map[string]bool{"portico.conf": true, "gateway.yaml": false, "..data": true, "more": false} {
		ev := fsnotify.Event{Name: filepath.Join(dir, name), Op: fsnotify.Write}
		if got := one.relevant(ev, dirs); got != want {
			t.Errorf("single file, %s: relevant = %v, want %v", name, got, want)
		}
	}
}

// TestWatchSeesConfigMapSwap: a ConfigMap volume replaces all of its files
// at once by renaming a new "..data" symlink over the old one; the files
// themselves are symlinks through it and see no event of their own. The
// swap must still reach the loop.
func TestWatchSeesConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	mustWrite := func(p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(filepath.Join(dir, "..v1", "config.yaml"), "# one\n")
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}

	changed := make(chan struct{}, 16)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(filepath.Join(dir, "config.yaml"), zap.NewNop())
	if err := s.Watch(ctx, func() { changed <- struct{}{} }); err != nil {
		t.Fatal(err)
	}

	mustWrite(filepath.Join(dir, "..v2", "config.yaml"), "# two\n")
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the ConfigMap swap was not reported")
	}
}
