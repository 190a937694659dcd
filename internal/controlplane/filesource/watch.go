package filesource

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
)

// Watch starts watching the path and calls onChange, from another
// goroutine, after anything under it changes, until ctx ends. The watch is
// in place when Watch returns, so a Snapshot after it misses no change.
func (s *Source) Watch(ctx context.Context, onChange func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	wt := &watch{s: s, w: w, dirs: watchedDirs{}, parents: map[string]bool{}}
	wt.addAll()
	s.changesMu.Lock()
	s.changes.watching = true
	s.changesMu.Unlock()
	resync := time.NewTicker(max(s.ResyncEvery, time.Second))
	go func() {
		defer w.Close()
		defer resync.Stop()
		defer s.stopWatching()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if wt.handle(ev) {
					onChange()
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				// An overflow lost events: only a full read knows what
				// they were, and a directory made meanwhile has no watch.
				s.log.Warn("config watch error; reading every file again", zap.Error(err))
				wt.addAll()
				s.readAllNext()
				onChange()
			case <-resync.C:
				wt.addAll()
				s.readAllNext()
				onChange()
			}
		}
	}()
	return nil
}

// watch is a running watch. It is on directories, not files: editors and
// ConfigMap mounts replace files by rename, which ends a watch on the file
// itself. It runs on one goroutine.
type watch struct {
	s *Source
	w *fsnotify.Watcher
	// dirs are those of the configuration, parents those holding it (the
	// path's and, behind a symlink, the resolved directory's): the
	// configuration renamed away, replaced or its symlink swapped shows
	// there only.
	dirs    watchedDirs
	parents map[string]bool
}

// handle notes what a relevant event changed and says whether it was
// one. A directory the event made is watched before the change is noted,
// so the snapshot that reads it misses nothing written in it since.
func (wt *watch) handle(ev fsnotify.Event) bool {
	s := wt.s
	if !s.relevant(ev, wt.dirs) {
		return false
	}
	name := filepath.Clean(ev.Name)
	switch {
	case name == filepath.Clean(s.path) || name == wt.root():
		wt.addAll()
	case ev.Has(fsnotify.Create):
		wt.addTree(name)
	}
	s.note(ev, wt.dirs)
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		delete(wt.dirs, ev.Name)
	}
	return true
}

// addAll watches the configuration as it is now: every directory under its
// resolved root and the directories holding it, and stops watching those
// no longer in it.
func (wt *watch) addAll() {
	s := wt.s
	old := wt.dirs
	wt.dirs = watchedDirs{}
	parents := []string{filepath.Dir(filepath.Clean(s.path))}
	root, info, err := s.resolveRoot()
	if err == nil {
		s.setRoot(root, info)
		parents = append(parents, filepath.Dir(root))
	}
	for _, p := range parents {
		if wt.parents[p] {
			continue
		}
		if addErr := wt.w.Add(p); addErr != nil {
			s.log.Warn("cannot watch directory", zap.String("dir", p), zap.Error(addErr))
			continue
		}
		wt.parents[p] = true
	}
	if err == nil && info.IsDir() {
		wt.addTree(root)
	}
	for p := range old {
		if !wt.dirs[p] && !wt.parents[p] {
			_ = wt.w.Remove(p)
		}
	}
}

func (wt *watch) root() string {
	root, _ := wt.s.currentRoot()
	return root
}

// addTree watches dir and every directory under it (nothing when it is
// not a directory).
func (wt *watch) addTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			if addErr := wt.w.Add(p); addErr != nil {
				wt.s.log.Warn("cannot watch directory", zap.String("dir", p), zap.Error(addErr))
				return nil
			}
			wt.dirs[p] = true
		}
		return nil
	})
}

// note records what a relevant event changed: the file it names, or
// everything for a directory, the configuration's own path, a ConfigMap's
// "..data" swap (which changes every file through it without an event of
// their own) and a rename. A rename arrives as two events, Rename of the
// old name then Create of the new: reading only the old name would serve,
// in between, a configuration without what was on disk all along.
func (s *Source) note(ev fsnotify.Event, dirs watchedDirs) {
	name := filepath.Clean(ev.Name)
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	whole := strings.HasPrefix(filepath.Base(name), "..") || dirs[ev.Name] || ev.Has(fsnotify.Rename) ||
		name == filepath.Clean(s.path) || name == s.root
	if !whole && ev.Has(fsnotify.Create) {
		info, err := os.Stat(name)
		whole = err == nil && info.IsDir()
	}
	switch {
	case whole:
		s.changes.fullRead = true
	case s.readsFile(s.root, name):
		s.changes.files[name] = true
	}
	// Anything else (a YAML file in a directory Files skips) is not read.
}

func (s *Source) readAllNext() {
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	s.changes.fullRead = true
}

// stopWatching makes every snapshot read everything again: without a
// watch, nothing says what changed.
func (s *Source) stopWatching() {
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	s.changes.watching, s.changes.fullRead = false, true
}

// watchedDirs are the directories a watch is on, so that the removal or
// rename of one (which leaves nothing to stat) is still known for one.
type watchedDirs map[string]bool

// relevant says whether a change under the watched path can change what
// Snapshot reads. Editors write swap, backup and probe files next to the
// one being edited, and each would otherwise cost a reload of everything.
// What counts: the configuration's own path (replaced, or its symlink
// swapped), a YAML file, a directory (created, removed or renamed), and
// the "..data"-style entries through which a ConfigMap mount swaps all of
// its files at once by one symlink rename. Nothing else in the directories
// holding the configuration counts.
func (s *Source) relevant(ev fsnotify.Event, dirs watchedDirs) bool {
	name := filepath.Clean(ev.Name)
	root, kind := s.currentRoot()
	if name == filepath.Clean(s.path) || name == root {
		return true
	}
	base := filepath.Base(name)
	if kind == rootUnknown {
		if info, err := os.Stat(s.path); err == nil {
			kind = rootDir
			if !info.IsDir() {
				kind = rootFile
			}
		}
	}
	if kind == rootFile {
		// One file: only that name is read (whatever its extension), and
		// the "..data" swap of a ConfigMap beside it.
		return strings.HasPrefix(base, "..")
	}
	if rel, err := filepath.Rel(root, name); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return false
	}
	if strings.HasPrefix(base, "..") {
		return true
	}
	if ext := filepath.Ext(base); ext == ".yaml" || ext == ".yml" {
		return true
	}
	if dirs[ev.Name] {
		return true
	}
	if ev.Has(fsnotify.Create) {
		info, err := os.Stat(ev.Name)
		return err == nil && info.IsDir()
	}
	return false
}
