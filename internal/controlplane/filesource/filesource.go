// Package filesource is the standalone source: it reads Gateway API and
// core objects from YAML files, gives them what the API server would
// (namespace, creation time, generation), hands them out as
// snapshot.Resources snapshots and tells when the files change.
package filesource

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/controlplane/validation"
	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
)

// namespaceNameLabel is set by the API server on every Namespace; selectors
// in allowedRoutes and allowedListeners commonly use it.
const namespaceNameLabel = "kubernetes.io/metadata.name"

type objectKey struct {
	kind, namespace, name string
}

// decodedFile is one file as the last snapshot read it.
type decodedFile struct {
	sum  [sha256.Size]byte
	size int64
	docs []Document
	// namespaces are those its namespaced objects are in, once each.
	namespaces []string
	// objects are its objects by kind, in file order, as a snapshot lists
	// them; Namespaces are those it defines.
	objects snapshot.Resources
	// indirect: its bytes can change without an event naming it (a
	// symlink, or a file with other hard links, edited through the other
	// name, possibly outside the watched tree).
	indirect bool
}

// generation is an object's generation and the hash of the spec it was
// given for. Half of specHash's SHA-256 is kept: it only tells a changed
// spec from the same one. With firstSeen in nanoseconds, the map of every
// object's state went from 69 to 53 MB at 100,000 hostnames.
type generation struct {
	specHash [16]byte
	value    int64
}

// objectState is what the source remembers of an object of the last
// snapshot, in one map entry per object: at 100,000 hostnames the source
// holds 300,000 objects, and a map per field held every key three times.
type objectState struct {
	// file, index and line are the document defining the object; file is
	// "" while an update moves the object between files.
	file        string
	index, line int32
	// firstSeen is its creation time when the source gave it one, in
	// nanoseconds since the epoch (zero otherwise: a time.Time is three
	// times the size); gen its generation when the source gave it one
	// (value zero otherwise).
	firstSeen int64
	gen       generation
}

// Source reads the objects of standalone mode from a YAML file or a
// directory of them. It gives objects what the API server would: a default
// namespace, a creation time (first seen, in file order) and a generation
// that moves when the spec changes, so translate sees the same thing in both
// modes.
type Source struct {
	path string
	log  *zap.Logger
	now  func() time.Time
	// MaxBytes bounds the bytes of all files together: decoding holds
	// every object in memory several times over, and a configuration that
	// grew by mistake (a generated file gone wild, a log written into the
	// directory) must be refused, not take the process's memory with it.
	MaxBytes int64

	// admit holds every object to the API server's rules; admitErr is set
	// when the rules themselves could not be read, which fails every load.
	admit    *validation.Checker
	admitErr error

	// ResyncEvery is how often a watching source reads every file again,
	// whatever the watch said: a change it missed is picked up then.
	ResyncEvery time.Duration

	mu sync.Mutex
	// files are the files of the last snapshot, order their paths sorted,
	// total their bytes. A file that has not changed is not decoded
	// again, and its objects stay the same pointers, which lets translate
	// reuse what it derived from them. With thousands of objects,
	// decoding is most of a reload.
	files map[string]*decodedFile
	order []string
	total int64
	// indirect are the files of the last snapshot whose bytes can change
	// without an event naming them: every snapshot reads them again. A
	// directory of plain files has none, so reading only what the watch
	// named stays cheap.
	indirect map[string]bool
	// objects are the objects of the last snapshot.
	objects map[objectKey]objectState
	// implicit are the Namespaces the files use without defining them,
	// the same objects from one snapshot to the next (translate compares
	// Namespaces by identity).
	implicit map[string]*corev1.Namespace
	// lastCreated is the newest creation time handed out: an object first
	// seen later must never look older than one seen before it.
	lastCreated time.Time
	// last is the last snapshot: the lists of the kinds no changed file
	// holds are its lists (assemble.go). nsUsers counts the files using
	// each Namespace, nsDefined are the Namespaces the files define.
	last      *snapshot.Resources
	nsUsers   map[string]int
	nsDefined map[string]*corev1.Namespace

	// changes is what the watch saw since the last snapshot.
	changesMu sync.Mutex
	changes   changeSet
	// root is the path with symlinks resolved when it is a directory (a
	// release directory behind a symlink), as the last full read or watch
	// found it: files are named under it. rootKind is what it was then:
	// unknown, a directory or a file.
	root     string
	rootKind rootKind
}

type rootKind int

const (
	rootUnknown rootKind = iota
	rootDir
	rootFile
)

// changeSet is what a watch saw: the files its events named, or that
// everything must be read again (fullRead: no watch, an overflow or error
// of the watch, a directory or a ConfigMap's "..data" swapped, a failed
// snapshot, a periodic resync).
type changeSet struct {
	watching bool
	fullRead bool
	files    map[string]bool
	lastFull time.Time
}

// DefaultMaxConfigBytes is Source.MaxBytes unless told otherwise. The
// limit is on all files together, not per file: it is there for memory,
// which follows the total however the files split it. Its default holds
// the 100,000 hostnames Portico is built for, a certificate's Secret, a
// ListenerSet and an HTTPRoute each (about 1.7 KB, 171 MB in all), with
// room for longer objects: such a configuration takes about 2.7 GiB once
// served, and anything much larger is a mistake (a generated file gone
// wild, a log written into the directory) to refuse, not to load.
const DefaultMaxConfigBytes = 256 << 20

// New reads path, a YAML file or a directory searched recursively for
// *.yaml and *.yml.
func New(path string, log *zap.Logger) *Source {
	return NewWithClock(path, log, time.Now)
}

// NewWithClock is New with the clock that gives creation times: a clock
// that stands still makes a snapshot the same on every run (tests).
func NewWithClock(path string, log *zap.Logger, now func() time.Time) *Source {
	admit, err := validation.New()
	return &Source{
		path:        path,
		log:         log,
		now:         now,
		MaxBytes:    DefaultMaxConfigBytes,
		ResyncEvery: DefaultResync,
		admit:       admit,
		admitErr:    err,
		files:       map[string]*decodedFile{},
		indirect:    map[string]bool{},
		root:        filepath.Clean(path),
		objects:     map[objectKey]objectState{},
		implicit:    map[string]*corev1.Namespace{},
		nsUsers:     map[string]int{},
		nsDefined:   map[string]*corev1.Namespace{},
		changes:     changeSet{fullRead: true, files: map[string]bool{}},
	}
}

// Admissions is the number of objects the source has held to the API
// server's rules so far: an object whose document did not change since the
// last snapshot keeps its admitted form and is not counted again.
func (s *Source) Admissions() int64 {
	if s.admit == nil {
		return 0
	}
	return s.admit.Checked()
}

// DefaultResync is Source.ResyncEvery unless told otherwise.
const DefaultResync = 10 * time.Minute

// Files lists the YAML files the source reads, in the order it reads them.
func (s *Source) Files() ([]string, error) {
	_, _, files, err := s.list()
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.path
	}
	return paths, nil
}

// listedFile is a file the source reads; symlink when its name is one.
type listedFile struct {
	path    string
	symlink bool
}

// resolveRoot returns what the source reads: the path with its symlinks
// resolved when it is a directory, since a walk does not follow a
// symlinked root. A single file keeps its name: a ConfigMap's file is a
// symlink through "..data", whose swap shows in the file's own directory.
func (s *Source) resolveRoot() (string, fs.FileInfo, error) {
	info, err := os.Stat(s.path)
	if err != nil {
		return "", nil, fmt.Errorf("config: %w", err)
	}
	root := filepath.Clean(s.path)
	if info.IsDir() {
		if resolved, err := filepath.EvalSymlinks(root); err == nil {
			root = resolved
		}
	}
	return root, info, nil
}

// list returns the resolved root, what it is, and the files under it,
// sorted.
func (s *Source) list() (string, fs.FileInfo, []listedFile, error) {
	root, info, err := s.resolveRoot()
	if err != nil {
		return "", nil, nil, err
	}
	if !info.IsDir() {
		l, err := os.Lstat(root)
		if err != nil {
			return "", nil, nil, fmt.Errorf("config: %w", err)
		}
		return root, info, []listedFile{{root, l.Mode()&fs.ModeSymlink != 0}}, nil
	}
	var files []listedFile
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(p); (ext == ".yaml" || ext == ".yml") && !strings.HasPrefix(d.Name(), ".") {
			files = append(files, listedFile{p, d.Type()&fs.ModeSymlink != 0})
		}
		return nil
	})
	if err != nil {
		return "", nil, nil, fmt.Errorf("config: %w", err)
	}
	slices.SortFunc(files, func(a, b listedFile) int { return strings.Compare(a.path, b.path) })
	return root, info, files, nil
}

func (s *Source) currentRoot() (string, rootKind) {
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	return s.root, s.rootKind
}

func (s *Source) setRoot(root string, info fs.FileInfo) {
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	s.root, s.rootKind = root, rootFile
	if info.IsDir() {
		s.rootKind = rootDir
	}
}

// Snapshot reads the files and returns one snapshot. Any error (unreadable
// file, bad YAML, unknown kind, duplicate object) fails the whole load, so a
// half-edited directory never replaces a good configuration.
//
// While the source watches (Watch, Run), a snapshot reads again only the
// files the watch's events named since the last one; everything is read
// after a failed snapshot, when the watch lost track (an overflow, a
// directory, a rename or a ConfigMap's "..data" swapped) and every
// ResyncEvery. Files whose bytes can change without an event naming them
// (symlinks, files with other hard links) are read again every time.
//
// Objects of files whose bytes did not change since the last Snapshot are the
// same objects as then; callers must treat them as read-only.
func (s *Source) Snapshot() (*snapshot.Resources, error) {
	if s.admitErr != nil {
		return nil, fmt.Errorf("config: the API server's rules are unusable: %w", s.admitErr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.takeChanges()
	full := seen.fullRead || !seen.watching || time.Since(seen.lastFull) >= s.ResyncEvery
	var changed map[string]*decodedFile
	var err error
	if !full {
		named := seen.files
		if len(s.indirect) > 0 {
			named = maps.Clone(named)
			for f := range s.indirect {
				named[f] = true
			}
		}
		changed, err = s.readChanged(named)
		if errors.Is(err, errReadAll) {
			full = true
		}
	}
	if full {
		changed, err = s.readAll()
	}
	var res *snapshot.Resources
	if err == nil {
		res, err = s.update(changed)
	}
	if err != nil {
		// The files stay to be read again, all of them: the next snapshot
		// must not build on a half-read change.
		s.giveBack(seen)
		return nil, err
	}
	if full {
		s.changesMu.Lock()
		s.changes.lastFull = time.Now()
		s.changesMu.Unlock()
	}
	return res, nil
}

// takeChanges returns what the watch saw, leaving an empty set for what it
// sees next.
func (s *Source) takeChanges() changeSet {
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	seen := s.changes
	s.changes.fullRead, s.changes.files = false, map[string]bool{}
	return seen
}

// giveBack marks everything to read again after a failed snapshot.
func (s *Source) giveBack(seen changeSet) {
	s.changesMu.Lock()
	defer s.changesMu.Unlock()
	s.changes.fullRead = true
	for f := range seen.files {
		s.changes.files[f] = true
	}
}

// errReadAll is readChanged's answer when what changed is not a file.
var errReadAll = errors.New("read every file")

// readAll reads every file, decoding those whose bytes changed. It returns
// the files that changed (nil for a file gone).
func (s *Source) readAll() (map[string]*decodedFile, error) {
	root, info, files, err := s.list()
	if err != nil {
		return nil, err
	}
	s.setRoot(root, info)
	changed := map[string]*decodedFile{}
	listed := make(map[string]bool, len(files))
	indirect := map[string]bool{}
	var total int64
	for _, lf := range files {
		f := lf.path
		listed[f] = true
		d, err := s.readFile(f, s.MaxBytes-total, lf.symlink)
		if err != nil {
			return nil, err
		}
		total += d.size
		if d.indirect {
			indirect[f] = true
		}
		if d.docs != nil || s.files[f] == nil {
			changed[f] = d
		}
	}
	for f := range s.files {
		if !listed[f] {
			changed[f] = nil
		}
	}
	s.indirect = indirect
	return changed, nil
}

// readChanged reads the files the watch named: those still there and
// read as configuration are read again (and decoded when their bytes
// changed), the others are gone from it.
func (s *Source) readChanged(named map[string]bool) (map[string]*decodedFile, error) {
	total := s.total
	for f := range named {
		if d := s.files[f]; d != nil {
			total -= d.size
		}
	}
	changed := map[string]*decodedFile{}
	root, _ := s.currentRoot()
	for _, f := range sortedKeys(named) {
		info, err := os.Lstat(f)
		symlink := err == nil && info.Mode()&fs.ModeSymlink != 0
		if symlink {
			info, err = os.Stat(f)
		}
		switch {
		case !s.readsFile(root, f) || errors.Is(err, fs.ErrNotExist):
			delete(s.indirect, f)
			if s.files[f] != nil {
				changed[f] = nil
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("config: %w", err)
		case !info.Mode().IsRegular():
			return nil, errReadAll
		}
		d, err := s.readFile(f, s.MaxBytes-total, symlink)
		if err != nil {
			return nil, err
		}
		total += d.size
		if d.indirect {
			s.indirect[f] = true
		} else {
			delete(s.indirect, f)
		}
		if d.docs != nil || s.files[f] == nil {
			changed[f] = d
		}
	}
	return changed, nil
}

// readFile reads f, at most limit bytes, and decodes it unless its bytes
// are those of the last snapshot: then docs is nil. symlink says f is one.
func (s *Source) readFile(f string, limit int64, symlink bool) (*decodedFile, error) {
	if prev := s.files[f]; prev != nil && prev.size <= limit {
		// A file read again for nothing (most of a full read, every
		// resync) is hashed as it streams: holding the 171 MB of 100,000
		// hostnames for a hash fed the collector for nothing.
		if info, same := unchanged(f, prev); same {
			return &decodedFile{sum: prev.sum, size: prev.size, indirect: symlink || otherLinks(info)}, nil
		}
	}
	chunks, sum, size, info, err := readAtMost(f, limit)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	d := &decodedFile{sum: sum, size: size, indirect: symlink || otherLinks(info)}
	if prev := s.files[f]; prev != nil && prev.sum == d.sum {
		return d, nil
	}
	var reuse map[[sha256.Size]byte]metav1.Object
	if prev := s.files[f]; prev != nil && len(prev.docs) > 0 {
		reuse = make(map[[sha256.Size]byte]metav1.Object, len(prev.docs))
		for _, doc := range prev.docs {
			reuse[doc.sum] = doc.Object
		}
	}
	docs, err := decode(f, chunks, s.admit, reuse)
	if err != nil {
		return nil, err
	}
	d.docs, d.namespaces = prepare(docs)
	d.objects = objectsOf(d.docs)
	if d.docs == nil {
		d.docs = []Document{} // an empty file is a change too
	}
	return d, nil
}

// readsFile reports whether f is one of the files Files lists, by its
// name: the path itself, or a YAML file under the directory, in no
// directory that Files skips.
func (s *Source) readsFile(root, f string) bool {
	if f == root {
		return true
	}
	rel, err := filepath.Rel(root, f)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return false
	}
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		if strings.HasPrefix(part, ".") {
			return false
		}
	}
	ext := filepath.Ext(f)
	return ext == ".yaml" || ext == ".yml"
}

// prepare gives the documents of one file the default namespace, as the
// API server would, and lists the namespaces they are in.
func prepare(docs []Document) ([]Document, []string) {
	var namespaces []string
	for _, d := range docs {
		switch d.Object.(type) {
		case *corev1.Namespace, *gwv1.GatewayClass, *certv1.ClusterTrustBundle:
			continue // cluster-scoped
		}
		if d.Object.GetNamespace() == "" {
			d.Object.SetNamespace(corev1.NamespaceDefault)
		}
		if ns := d.Object.GetNamespace(); !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	return docs, namespaces
}

// Assemble makes a snapshot of decoded documents, as Snapshot does with
// those of the files (fuzzing decodes input itself). It replaces what the
// source held.
func (s *Source) Assemble(docs []Document) (*snapshot.Resources, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byFile := map[string]*decodedFile{}
	for f := range s.files {
		byFile[f] = nil
	}
	for _, d := range docs {
		if byFile[d.File] == nil {
			byFile[d.File] = &decodedFile{docs: []Document{}}
		}
		byFile[d.File].docs = append(byFile[d.File].docs, d)
	}
	for _, f := range byFile {
		if f != nil {
			f.docs, f.namespaces = prepare(f.docs)
			f.objects = objectsOf(f.docs)
		}
	}
	return s.update(byFile)
}

// readAtMost reads file in chunks (readChunks), failing without reading it
// all when it holds more than limit bytes, and returns what it is, its
// hash and its size. Only a regular file is read (openRegular).
func readAtMost(file string, limit int64) ([][]byte, [sha256.Size]byte, int64, fs.FileInfo, error) {
	var sum [sha256.Size]byte
	f, info, err := openRegular(file)
	if err != nil {
		return nil, sum, 0, nil, err
	}
	defer f.Close()
	tooLarge := func() error {
		return fmt.Errorf("%s: the configuration is larger than its limit of %d bytes (--max-config-bytes)", file, limit)
	}
	// A file already over the limit is not read at all: reading up to
	// the limit would cost that much memory for nothing.
	if info.Size() > limit {
		return nil, sum, 0, nil, tooLarge()
	}
	// The file may grow while it is read: the limit holds for what is read.
	chunks, sum, size, err := readChunks(io.LimitReader(f, max(limit, 0)+1))
	if err != nil {
		return nil, sum, 0, nil, err
	}
	if size > limit {
		return nil, sum, 0, nil, tooLarge()
	}
	return chunks, sum, size, info, nil
}

// openRegular opens file for reading if it is a regular file. Opening a
// FIFO would wait for a writer, reading a device might not end; the open
// does not block (no effect on a regular file) so that the check can come
// first.
func openRegular(file string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(file, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file", file)
	}
	return f, info, nil
}

// unchanged reports whether file holds the bytes prev was read from, by
// their size and hash, reading it without holding it; false on any error,
// which reading the file again reports.
func unchanged(file string, prev *decodedFile) (fs.FileInfo, bool) {
	f, info, err := openRegular(file)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	if info.Size() != prev.size {
		return info, false
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, prev.size+1))
	if err != nil || n != prev.size {
		return info, false
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return info, sum == prev.sum
}

// update applies the files that changed (nil: gone) to those of the last
// snapshot and returns the new snapshot; on an error (an object defined
// twice) nothing changes. It runs with s.mu held. Objects reused from an
// earlier snapshot went through it before: every change it makes to them
// is already in place.
func (s *Source) update(changed map[string]*decodedFile) (*snapshot.Resources, error) {
	loadTime := s.now().Truncate(time.Second)
	paths := sortedKeys(changed)
	// defined points into the files' documents: a map of Document values
	// copied 88 bytes per object (300,000 at 100,000 hostnames) while the
	// start is at its peak, and again each time it grew.
	n := 0
	for _, d := range changed {
		if d != nil {
			n += len(d.docs)
		}
	}
	defined := make(map[objectKey]*Document, n)
	for _, f := range paths {
		d := changed[f]
		if d == nil {
			continue
		}
		for i := range d.docs {
			doc := &d.docs[i]
			key := keyOf(doc.Object)
			prev, dup := defined[key]
			if !dup {
				if o := s.objects[key]; o.file != "" {
					_, rewritten := changed[o.file]
					prev, dup = &Document{File: o.file, Index: int(o.index), Line: int(o.line)}, !rewritten
				}
			}
			if dup {
				where := prev.File
				if prev.Line > 0 {
					where = fmt.Sprintf("%s:%d", prev.File, prev.Line)
				}
				return nil, &DecodeError{File: doc.File, Index: doc.Index, Line: doc.Line, Err: fmt.Errorf("%s %s is also defined in %s document %d", key.kind, displayName(doc.Object), where, prev.Index)}
			}
			defined[key] = doc
		}
	}
	// New and changed objects get what the API server would give them, in
	// file order.
	for _, f := range paths {
		if d := changed[f]; d != nil {
			for i := range d.docs {
				s.stamp(keyOf(d.docs[i].Object), d.docs[i], loadTime)
				d.docs[i].spec = nil // held for every object otherwise
			}
		}
	}
	replaced := make(map[string]*decodedFile, len(paths))
	for _, f := range paths {
		replaced[f] = s.files[f]
		s.replaceFile(f, changed[f], defined)
	}
	for key, doc := range defined {
		o := s.objects[key]
		o.file, o.index, o.line = doc.File, int32(doc.Index), int32(doc.Line)
		s.objects[key] = o
	}
	return s.assemble(loadTime, replaced, changed), nil
}

// stamp gives obj a creation time and generation when it has none.
func (s *Source) stamp(key objectKey, doc Document, loadTime time.Time) {
	obj := doc.Object
	if ts := obj.GetCreationTimestamp(); ts.IsZero() {
		obj.SetCreationTimestamp(metav1.NewTime(s.createdAt(key, loadTime)))
	}
	if obj.GetGeneration() == 0 {
		var spec [sha256.Size]byte
		ok := doc.spec != nil
		if ok {
			spec = *doc.spec
		} else {
			spec, ok = specHash(obj)
		}
		obj.SetGeneration(s.generationOf(key, spec, ok))
	}
}

// replaceFile puts d (nil: nothing) in place of file f. The objects f
// defined that no changed file defines now are forgotten, so that a
// re-created object is new again.
func (s *Source) replaceFile(f string, d *decodedFile, defined map[objectKey]*Document) {
	if old := s.files[f]; old != nil {
		s.total -= old.size
		for _, doc := range old.docs {
			key := keyOf(doc.Object)
			o, ok := s.objects[key]
			if !ok || o.file != f {
				continue
			}
			if _, still := defined[key]; still {
				o.file = ""
				s.objects[key] = o
			} else {
				delete(s.objects, key)
			}
		}
	}
	at, listed := slices.BinarySearch(s.order, f)
	if d == nil {
		delete(s.files, f)
		if listed {
			s.order = slices.Delete(s.order, at, at+1)
		}
		return
	}
	s.files[f] = d
	s.total += d.size
	if !listed {
		s.order = slices.Insert(s.order, at, f)
	}
}

func keyOf(obj metav1.Object) objectKey {
	return objectKey{kindOf(obj), obj.GetNamespace(), obj.GetName()}
}

// createdAt is the creation time of an object without one: when it was
// first seen. New objects keep file order and come after every object seen
// before: one nanosecond apart is enough for ordering and invisible in the
// second-precision times the API shows.
func (s *Source) createdAt(key objectKey, loadTime time.Time) time.Time {
	o := s.objects[key]
	if o.firstSeen == 0 {
		first := loadTime
		if !first.After(s.lastCreated) {
			first = s.lastCreated.Add(1)
		}
		s.lastCreated = first
		o.firstSeen = first.UnixNano()
		s.objects[key] = o
	}
	return time.Unix(0, o.firstSeen)
}

// generationOf bumps an object's generation when its spec changes, like the
// API server does for objects with a status subresource. spec is the hash
// of the object's spec (specHash), ok false when it could not be made.
func (s *Source) generationOf(key objectKey, spec [sha256.Size]byte, ok bool) int64 {
	if !ok {
		return 1
	}
	o := s.objects[key]
	hash := [16]byte(spec[:16])
	switch {
	case o.gen.value == 0:
		o.gen = generation{specHash: hash, value: 1}
	case o.gen.specHash != hash:
		o.gen = generation{specHash: hash, value: o.gen.value + 1}
	}
	s.objects[key] = o
	return o.gen.value
}

// specHash is the hash of obj without its metadata and status: what a
// generation follows. It is made as objects are decoded, on every core,
// from the JSON of a shallow copy with those two fields zero, streamed
// into the hash; only its equality with an earlier hash of the same
// process matters.
func specHash(obj metav1.Object) ([sha256.Size]byte, bool) {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return [sha256.Size]byte{}, false
	}
	c := reflect.New(v.Elem().Type()).Elem()
	c.Set(v.Elem())
	for _, name := range []string{"ObjectMeta", "Status"} {
		if f := c.FieldByName(name); f.IsValid() {
			f.SetZero()
		}
	}
	h := sha256.New()
	if err := json.NewEncoder(h).Encode(c.Addr().Interface()); err != nil {
		return [sha256.Size]byte{}, false
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum, true
}

func kindOf(obj metav1.Object) string {
	switch obj.(type) {
	case *gwv1.GatewayClass:
		return "GatewayClass"
	case *gwv1.Gateway:
		return "Gateway"
	case *gwv1.ListenerSet:
		return "ListenerSet"
	case *gwv1.HTTPRoute:
		return "HTTPRoute"
	case *gwv1.GRPCRoute:
		return "GRPCRoute"
	case *gwv1.TLSRoute:
		return "TLSRoute"
	case *gwv1.TCPRoute:
		return "TCPRoute"
	case *gwv1.UDPRoute:
		return "UDPRoute"
	case *gwv1.ReferenceGrant:
		return "ReferenceGrant"
	case *gwv1.BackendTLSPolicy:
		return "BackendTLSPolicy"
	case *corev1.ConfigMap:
		return "ConfigMap"
	case *certv1.ClusterTrustBundle:
		return "ClusterTrustBundle"
	case *corev1.Namespace:
		return "Namespace"
	case *corev1.Secret:
		return "Secret"
	case *corev1.Service:
		return "Service"
	case *discoveryv1.EndpointSlice:
		return "EndpointSlice"
	case *parameters.PorticoParameters:
		return parameters.Kind
	case *trafficpolicy.BackendTrafficPolicy:
		return trafficpolicy.Kind
	case *securitypolicy.SecurityPolicy:
		return securitypolicy.Kind
	case *clientpolicy.ClientTrafficPolicy:
		return clientpolicy.Kind
	case *gwxv1a1.XBackendTrafficPolicy:
		return xtrafficpolicy.Kind
	}
	return fmt.Sprintf("%T", obj)
}

func displayName(obj metav1.Object) string {
	if obj.GetNamespace() == "" {
		return obj.GetName()
	}
	return obj.GetNamespace() + "/" + obj.GetName()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func cloneLabels(in map[string]string) map[string]string {
	out := make(map[string]string, len(in)+1)
	for k, v := range in {
		out[k] = v
	}
	return out
}

// Run watches the files until ctx ends (pipeline.Source): the watch is in
// place before ready is called, so no edit after the first Snapshot is
// missed.
func (s *Source) Run(ctx context.Context, changed, ready func()) error {
	if err := s.Watch(ctx, changed); err != nil {
		return err
	}
	ready()
	<-ctx.Done()
	return nil
}
