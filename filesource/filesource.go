// Package filesource is the standalone source: it reads Gateway API and
// core objects from YAML files, gives them what the API server would
// (namespace, creation time, generation), hands them out as
// resources.Resources snapshots and tells when the files change.
package filesource

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/admission"
	"portico.dev/portico/parameters"
	"portico.dev/portico/resources"
)

// namespaceNameLabel is set by the API server on every Namespace; selectors
// in allowedRoutes and allowedListeners commonly use it.
const namespaceNameLabel = "kubernetes.io/metadata.name"

type objectKey struct {
	kind, namespace, name string
}

type decodedFile struct {
	sum  [sha256.Size]byte
	docs []Document
}

type generation struct {
	specHash [32]byte
	value    int64
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
	admit    *admission.Checker
	admitErr error

	mu sync.Mutex
	// decoded keeps each file's documents with the hash of its bytes: a
	// file that has not changed is not decoded again, and its objects stay
	// the same pointers, which lets translate reuse what it derived from
	// them. With thousands of objects, decoding is most of a reload.
	decoded   map[string]decodedFile
	firstSeen map[objectKey]time.Time
	gens      map[objectKey]generation
	// lastCreated is the newest creation time handed out: an object first
	// seen later must never look older than one seen before it.
	lastCreated time.Time
}

// DefaultMaxConfigBytes is Source.MaxBytes unless told otherwise: ten
// thousand hostnames with a certificate each fit several times over.
const DefaultMaxConfigBytes = 64 << 20

// New reads path, a YAML file or a directory searched recursively for
// *.yaml and *.yml.
func New(path string, log *zap.Logger) *Source {
	return NewWithClock(path, log, time.Now)
}

// NewWithClock is New with the clock that gives creation times: a clock
// that stands still makes a snapshot the same on every run (tests).
func NewWithClock(path string, log *zap.Logger, now func() time.Time) *Source {
	admit, err := admission.New()
	return &Source{
		path:      path,
		log:       log,
		now:       now,
		MaxBytes:  DefaultMaxConfigBytes,
		admit:     admit,
		admitErr:  err,
		decoded:   map[string]decodedFile{},
		firstSeen: map[objectKey]time.Time{},
		gens:      map[objectKey]generation{},
	}
}

// Files lists the YAML files the source reads, in the order it reads them.
func (s *Source) Files() ([]string, error) {
	info, err := os.Stat(s.path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if !info.IsDir() {
		return []string{s.path}, nil
	}
	var files []string
	err = filepath.WalkDir(s.path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != s.path && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(p); (ext == ".yaml" || ext == ".yml") && !strings.HasPrefix(d.Name(), ".") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	slices.Sort(files)
	return files, nil
}

// Snapshot reads every file and returns one snapshot. Any error (unreadable
// file, bad YAML, unknown kind, duplicate object) fails the whole load, so a
// half-edited directory never replaces a good configuration.
//
// Objects of files whose bytes did not change since the last Snapshot are the
// same objects as then; callers must treat them as read-only.
func (s *Source) Snapshot() (*resources.Resources, error) {
	if s.admitErr != nil {
		return nil, fmt.Errorf("config: the API server's rules are unusable: %w", s.admitErr)
	}
	files, err := s.Files()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var docs []Document
	listed := make(map[string]bool, len(files))
	var total int64
	for _, f := range files {
		listed[f] = true
		raw, err := readAtMost(f, s.MaxBytes-total)
		if err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
		total += int64(len(raw))
		sum := sha256.Sum256(raw)
		if c, ok := s.decoded[f]; ok && c.sum == sum {
			docs = append(docs, c.docs...)
			continue
		}
		d, err := Decode(f, bytes.NewReader(raw), s.admit)
		if err != nil {
			return nil, err
		}
		s.decoded[f] = decodedFile{sum: sum, docs: d}
		docs = append(docs, d...)
	}
	for f := range s.decoded {
		if !listed[f] {
			delete(s.decoded, f)
		}
	}
	return s.assemble(docs)
}

// Assemble makes a snapshot of decoded documents, as Snapshot does with
// those of the files (fuzzing decodes input itself).
func (s *Source) Assemble(docs []Document) (*resources.Resources, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.assemble(docs)
}

// readAtMost reads file, failing without reading it all when it holds more
// than limit bytes.
func readAtMost(file string, limit int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, max(limit, 0)+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%s: the configuration is larger than its limit of %d bytes (--max-config-bytes)", file, limit)
	}
	return raw, nil
}

// assemble runs with s.mu held. Objects reused from an earlier load went
// through it before: every change it makes to them is already in place.
func (s *Source) assemble(docs []Document) (*resources.Resources, error) {
	loadTime := s.now().Truncate(time.Second)
	seen := map[objectKey]Document{}
	namespaces := map[string]*corev1.Namespace{}
	res := &resources.Resources{}
	for _, d := range docs {
		obj := d.Object
		kind := kindOf(obj)
		if kind != "Namespace" && kind != "GatewayClass" {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(corev1.NamespaceDefault)
			}
			if _, ok := namespaces[obj.GetNamespace()]; !ok {
				namespaces[obj.GetNamespace()] = nil
			}
		}
		key := objectKey{kind, obj.GetNamespace(), obj.GetName()}
		if prev, dup := seen[key]; dup {
			return nil, &DecodeError{File: d.File, Index: d.Index, Err: fmt.Errorf("%s %s is also defined in %s document %d", kind, displayName(obj), prev.File, prev.Index)}
		}
		seen[key] = d
		if ts := obj.GetCreationTimestamp(); ts.IsZero() {
			obj.SetCreationTimestamp(metav1.NewTime(s.createdAt(key, loadTime)))
		}
		if obj.GetGeneration() == 0 {
			obj.SetGeneration(s.generationOf(key, obj))
		}
		if ns, ok := obj.(*corev1.Namespace); ok {
			namespaces[ns.Name] = ns
		} else {
			add(res, obj)
		}
	}
	// Namespaces exist implicitly in standalone mode, as they must in a
	// cluster before objects can live in them.
	for _, name := range sortedKeys(namespaces) {
		ns := namespaces[name]
		if ns == nil {
			ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(loadTime)}}
		}
		if ns.Labels[namespaceNameLabel] != name {
			ns.Labels = cloneLabels(ns.Labels)
			ns.Labels[namespaceNameLabel] = name
		}
		res.Namespaces = append(res.Namespaces, ns)
	}
	// Forget objects that are gone so a re-created object is new again.
	for key := range s.firstSeen {
		if _, ok := seen[key]; !ok {
			delete(s.firstSeen, key)
			delete(s.gens, key)
		}
	}
	return res, nil
}

// createdAt is the creation time of an object without one: when it was
// first seen. New objects keep file order and come after every object seen
// before: one nanosecond apart is enough for ordering and invisible in the
// second-precision times the API shows.
func (s *Source) createdAt(key objectKey, loadTime time.Time) time.Time {
	first, ok := s.firstSeen[key]
	if !ok {
		first = loadTime
		if !first.After(s.lastCreated) {
			first = s.lastCreated.Add(1)
		}
		s.lastCreated = first
		s.firstSeen[key] = first
	}
	return first
}

// add appends obj to the list of its kind in res.
func add(res *resources.Resources, obj metav1.Object) {
	switch o := obj.(type) {
	case *gwv1.GatewayClass:
		res.GatewayClasses = append(res.GatewayClasses, o)
	case *gwv1.Gateway:
		res.Gateways = append(res.Gateways, o)
	case *gwv1.ListenerSet:
		res.ListenerSets = append(res.ListenerSets, o)
	case *gwv1.HTTPRoute:
		res.HTTPRoutes = append(res.HTTPRoutes, o)
	case *gwv1.GRPCRoute:
		res.GRPCRoutes = append(res.GRPCRoutes, o)
	case *gwv1.TLSRoute:
		res.TLSRoutes = append(res.TLSRoutes, o)
	case *gwv1.ReferenceGrant:
		res.ReferenceGrants = append(res.ReferenceGrants, o)
	case *gwv1.BackendTLSPolicy:
		res.BackendTLSPolicies = append(res.BackendTLSPolicies, o)
	case *corev1.ConfigMap:
		res.ConfigMaps = append(res.ConfigMaps, o)
	case *corev1.Secret:
		// The API server folds stringData into data on write; do the same
		// so YAML can carry readable PEM.
		if len(o.StringData) > 0 {
			data := make(map[string][]byte, len(o.Data)+len(o.StringData))
			for k, v := range o.Data {
				data[k] = v
			}
			for k, v := range o.StringData {
				data[k] = []byte(v)
			}
			o.Data, o.StringData = data, nil
		}
		res.Secrets = append(res.Secrets, o)
	case *corev1.Service:
		res.Services = append(res.Services, o)
	case *discoveryv1.EndpointSlice:
		res.EndpointSlices = append(res.EndpointSlices, o)
	case *parameters.PorticoParameters:
		res.Parameters = append(res.Parameters, o)
	}
}

// generationOf bumps an object's generation when its spec changes, like the
// API server does for objects with a status subresource.
func (s *Source) generationOf(key objectKey, obj metav1.Object) int64 {
	raw, err := json.Marshal(obj)
	if err != nil {
		return 1
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return 1
	}
	delete(fields, "metadata")
	delete(fields, "status")
	canonical, _ := json.Marshal(fields)
	h := sha256.Sum256(canonical)
	g, ok := s.gens[key]
	switch {
	case !ok:
		g = generation{specHash: h, value: 1}
	case g.specHash != h:
		g = generation{specHash: h, value: g.value + 1}
	}
	s.gens[key] = g
	return g.value
}

// Watch starts watching the path and calls onChange, from another
// goroutine, after anything under it changes, until ctx ends. The watch is
// in place when Watch returns, so a Snapshot after it misses no change.
func (s *Source) Watch(ctx context.Context, onChange func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	dirs := watchedDirs{}
	// Watch directories, not files: editors and ConfigMap mounts replace
	// files by rename, which ends a watch on the file itself.
	addDirs := func() {
		root := s.path
		if info, err := os.Stat(root); err == nil && !info.IsDir() {
			root = filepath.Dir(root)
			if w.Add(root) == nil {
				dirs[root] = true
			}
			return
		}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				if addErr := w.Add(p); addErr != nil {
					s.log.Warn("cannot watch directory", zap.String("dir", p), zap.Error(addErr))
					return nil
				}
				dirs[p] = true
			}
			return nil
		})
	}
	addDirs()
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if !s.relevant(ev, dirs) {
					continue
				}
				if ev.Has(fsnotify.Create) {
					addDirs()
				}
				if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					delete(dirs, ev.Name)
				}
				onChange()
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				s.log.Warn("config watch error", zap.Error(err))
			}
		}
	}()
	return nil
}

// watchedDirs are the directories a watch is on, so that the removal or
// rename of one (which leaves nothing to stat) is still known for one.
type watchedDirs map[string]bool

// relevant says whether a change under the watched path can change what
// Snapshot reads. Editors write swap, backup and probe files next to the
// one being edited, and each would otherwise cost a reload of everything.
// What counts: a YAML file, a directory (created, removed or renamed), and
// the "..data"-style entries through which a ConfigMap mount swaps all of
// its files at once by one symlink rename.
func (s *Source) relevant(ev fsnotify.Event, dirs watchedDirs) bool {
	base := filepath.Base(ev.Name)
	if strings.HasPrefix(base, "..") {
		return true
	}
	if info, err := os.Stat(s.path); err == nil && !info.IsDir() {
		// One file: only that name is read (whatever its extension).
		return filepath.Clean(ev.Name) == filepath.Clean(s.path)
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
	case *gwv1.ReferenceGrant:
		return "ReferenceGrant"
	case *gwv1.BackendTLSPolicy:
		return "BackendTLSPolicy"
	case *corev1.ConfigMap:
		return "ConfigMap"
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
