// Package secretstorage is a certmagic.Storage kept in Kubernetes: every key
// is one Secret and every lock one coordination.k8s.io Lease, all in one
// namespace, so that every replica of Portico shares ACME accounts,
// certificates and challenge state, and a certificate is ordered once.
//
// A key maps to the Secret "portico-<name>-<hash of the key>": Secret names
// cannot hold every key, so the key itself is kept in an annotation, and each
// ancestor directory of the key in a label, which lets the API server select
// the keys under a directory without reading the others.
//
// The ServiceAccount needs, in that namespace: secrets get, list, create,
// update, delete and deletecollection; leases get, create, update and delete.
package secretstorage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/controlplane/wellknown"
)

const (
	// LabelStorage names the storage an object belongs to, so that several
	// storages can share a namespace.
	LabelStorage = "storage.portico.dev/name"
	// AnnotationKey holds the storage key of a Secret, or the lock name of a
	// Lease.
	AnnotationKey = "storage.portico.dev/key"
	// AnnotationModified is when the value was last stored (RFC 3339, in
	// nanoseconds): a Secret has no modification time of its own.
	AnnotationModified = "storage.portico.dev/modified"
	// SecretType is the type of the Secrets that hold values.
	SecretType corev1.SecretType = "portico.dev/storage"
	// dataKey holds the value in a Secret.
	dataKey = "value"
	// dirLabelPrefix + depth labels a Secret with the hash of its ancestor
	// directory at that depth ("a" is depth 1 of "a/b/c").
	dirLabelPrefix = "storage.portico.dev/d"
	// maxDepth bounds the components of a key, and so the labels per Secret.
	// The keys certmagic writes have at most five.
	maxDepth = 16
)

// Options configures New.
type Options struct {
	// Namespace holds the Secrets and Leases. Required.
	Namespace string
	// Name tells this storage's objects from others in the namespace and
	// prefixes their names. Default "acme".
	Name string
	// Identity names this process in the Leases it holds, for people
	// reading them (e.g. the pod name). Default: the host name.
	Identity string
	// LeaseDuration is how long a lock outlives its last renewal when its
	// holder stops renewing it (died or lost the API server). Whole seconds,
	// at least one. Default 60s.
	LeaseDuration time.Duration
	// RenewInterval is how often a held lock is renewed. Default a third
	// of LeaseDuration.
	RenewInterval time.Duration
	// PollInterval is how often Lock looks again at a lock that someone
	// else holds. Default 1s.
	PollInterval time.Duration
	// Logger receives what happens to held locks in the background.
	// Default: no logging.
	Logger *zap.Logger
}

// Storage implements certmagic.Storage and certmagic.TryLocker. It is safe
// for concurrent use.
type Storage struct {
	client kubernetes.Interface
	opts   Options
	log    *zap.Logger

	mu   sync.Mutex
	held map[string]*heldLock // by lock name
}

var (
	_ certmagic.Storage   = (*Storage)(nil)
	_ certmagic.TryLocker = (*Storage)(nil)
)

// New returns a Storage that talks to the API server through client.
func New(client kubernetes.Interface, opts Options) (*Storage, error) {
	if opts.Namespace == "" {
		return nil, errors.New("secret storage: namespace is required")
	}
	if opts.Name == "" {
		opts.Name = "acme"
	}
	// The name is a label value and part of object names next to a
	// 40-character hash and the "-lock-" infix.
	if errs := validation.IsDNS1123Label(opts.Name); len(errs) > 0 || len(opts.Name) > 40 {
		return nil, fmt.Errorf("secret storage: name %q: must be a DNS label of at most 40 characters", opts.Name)
	}
	if opts.Identity == "" {
		opts.Identity = defaultIdentity()
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = 60 * time.Second
	}
	if opts.LeaseDuration < time.Second || opts.LeaseDuration%time.Second != 0 {
		return nil, fmt.Errorf("secret storage: lease duration %v is not a whole number of seconds", opts.LeaseDuration)
	}
	if opts.RenewInterval == 0 {
		opts.RenewInterval = opts.LeaseDuration / 3
	}
	if opts.RenewInterval <= 0 || opts.RenewInterval >= opts.LeaseDuration {
		return nil, fmt.Errorf("secret storage: renew interval %v must be positive and shorter than the lease (%v)", opts.RenewInterval, opts.LeaseDuration)
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	log := opts.Logger
	if log == nil {
		log = zap.NewNop()
	}
	return &Storage{client: client, opts: opts, log: log, held: map[string]*heldLock{}}, nil
}

// String identifies the storage in certmagic's logs.
func (s *Storage) String() string {
	return "SecretStorage:" + s.opts.Namespace + "/" + s.opts.Name
}

// Store puts value at key, creating or replacing its Secret.
func (s *Storage) Store(ctx context.Context, key string, value []byte) error {
	parts, err := splitKey(key)
	if err != nil {
		return err
	}
	name := s.objectName("", key)
	modified := time.Now().UTC().Format(time.RFC3339Nano)
	secrets := s.client.CoreV1().Secrets(s.opts.Namespace)
	// Create first: most keys are written once. Losing a race to another
	// writer only means another round.
	for range 5 {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Namespace:   s.opts.Namespace,
				Labels:      s.keyLabels(parts),
				Annotations: map[string]string{AnnotationKey: key, AnnotationModified: modified},
			},
			Type: SecretType,
			Data: map[string][]byte{dataKey: value},
		}
		_, err := secrets.Create(ctx, secret, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("store %q: %w", key, err)
		}
		cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("store %q: %w", key, err)
		}
		if !s.owns(cur, key) {
			return fmt.Errorf("store %q: Secret %s/%s exists and does not belong to %s", key, s.opts.Namespace, name, s)
		}
		cur.Data = secret.Data
		cur.Annotations[AnnotationModified] = modified
		_, err = secrets.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			return fmt.Errorf("store %q: %w", key, err)
		}
	}
	return fmt.Errorf("store %q: Secret %s/%s keeps changing under concurrent writers", key, s.opts.Namespace, name)
}

// Load returns the value at key, or an error wrapping fs.ErrNotExist.
func (s *Storage) Load(ctx context.Context, key string) ([]byte, error) {
	secret, err := s.getFile(ctx, key)
	if err != nil {
		return nil, err
	}
	return secret.Data[dataKey], nil
}

// Delete removes key and, if it is a directory, every key under it.
func (s *Storage) Delete(ctx context.Context, key string) error {
	parts, err := splitKey(key)
	if err != nil {
		return err
	}
	secrets := s.client.CoreV1().Secrets(s.opts.Namespace)
	name := s.objectName("", key)
	cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("delete %q: %w", key, err)
	case s.owns(cur, key):
		// The precondition keeps a Secret that replaced ours meanwhile.
		err := secrets.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %q: %w", key, err)
		}
	}
	sel := s.dirSelector(parts)
	if err := secrets.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
		return fmt.Errorf("delete %q: keys under it: %w", key, err)
	}
	return nil
}

// Exists reports whether key is a stored value or a directory of some.
func (s *Storage) Exists(ctx context.Context, key string) bool {
	_, err := s.Stat(ctx, key)
	return err == nil
}

// List returns the keys under dir: its direct children (values and
// directories), or, if recursive, every key and directory below it. A
// directory with nothing under it does not exist: the error wraps
// fs.ErrNotExist.
func (s *Storage) List(ctx context.Context, dir string, recursive bool) ([]string, error) {
	dir = strings.Trim(dir, "/")
	var parts []string
	if dir != "" {
		var err error
		if parts, err = splitKey(dir); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	err := s.eachUnder(ctx, parts, 0, func(key string) {
		rel := key
		if dir != "" {
			rel = strings.TrimPrefix(key, dir+"/")
		}
		comps := strings.Split(rel, "/")
		n := len(comps)
		if !recursive {
			n = 1
		}
		for i := 1; i <= n; i++ {
			seen[path.Join(dir, strings.Join(comps[:i], "/"))] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", dir, err)
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("list %q: %w", dir, fs.ErrNotExist)
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// Stat describes key: a stored value (with its size and time of storing) or
// a directory, else an error wrapping fs.ErrNotExist.
func (s *Storage) Stat(ctx context.Context, key string) (certmagic.KeyInfo, error) {
	secret, err := s.getFile(ctx, key)
	if err == nil {
		modified, _ := time.Parse(time.RFC3339Nano, secret.Annotations[AnnotationModified])
		return certmagic.KeyInfo{
			Key:        key,
			Modified:   modified,
			Size:       int64(len(secret.Data[dataKey])),
			IsTerminal: true,
		}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return certmagic.KeyInfo{}, err
	}
	parts, err := splitKey(key)
	if err != nil {
		return certmagic.KeyInfo{}, err
	}
	found := false
	if err := s.eachUnder(ctx, parts, 1, func(string) { found = true }); err != nil {
		return certmagic.KeyInfo{}, fmt.Errorf("stat %q: %w", key, err)
	}
	if !found {
		return certmagic.KeyInfo{}, fmt.Errorf("stat %q: %w", key, fs.ErrNotExist)
	}
	return certmagic.KeyInfo{Key: key, IsTerminal: false}, nil
}

// getFile returns the Secret that holds key, or an error wrapping
// fs.ErrNotExist.
func (s *Storage) getFile(ctx context.Context, key string) (*corev1.Secret, error) {
	if _, err := splitKey(key); err != nil {
		return nil, err
	}
	secret, err := s.client.CoreV1().Secrets(s.opts.Namespace).Get(ctx, s.objectName("", key), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%q: %w", key, fs.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("%q: %w", key, err)
	}
	if !s.owns(secret, key) {
		return nil, fmt.Errorf("%q: %w", key, fs.ErrNotExist)
	}
	return secret, nil
}

// eachUnder calls fn with every stored key below the directory parts (all
// keys if parts is empty). limit > 0 stops after about that many.
func (s *Storage) eachUnder(ctx context.Context, parts []string, limit int, fn func(key string)) error {
	dir := strings.Join(parts, "/")
	opts := metav1.ListOptions{LabelSelector: s.dirSelector(parts), Limit: 500}
	if limit > 0 {
		opts.Limit = int64(limit)
	}
	count := 0
	for {
		list, err := s.client.CoreV1().Secrets(s.opts.Namespace).List(ctx, opts)
		if err != nil {
			return err
		}
		for i := range list.Items {
			key := list.Items[i].Annotations[AnnotationKey]
			// A hash shared by two directories must not mix their keys.
			if dir != "" && !strings.HasPrefix(key, dir+"/") {
				continue
			}
			if !s.owns(&list.Items[i], key) {
				continue
			}
			fn(key)
			count++
		}
		if list.Continue == "" || (limit > 0 && count >= limit) {
			return nil
		}
		opts.Continue = list.Continue
	}
}

// owns reports whether secret is this storage's Secret for key.
func (s *Storage) owns(secret *corev1.Secret, key string) bool {
	return secret.Labels[wellknown.ManagedByLabel] == wellknown.ManagedByValue &&
		secret.Labels[LabelStorage] == s.opts.Name &&
		secret.Annotations[AnnotationKey] == key &&
		secret.Type == SecretType
}

func (s *Storage) keyLabels(parts []string) map[string]string {
	l := map[string]string{wellknown.ManagedByLabel: wellknown.ManagedByValue, LabelStorage: s.opts.Name}
	for depth := 1; depth < len(parts); depth++ {
		l[dirLabelPrefix+strconv.Itoa(depth)] = hashOf(strings.Join(parts[:depth], "/"))
	}
	return l
}

// dirSelector selects this storage's Secrets below the directory parts.
func (s *Storage) dirSelector(parts []string) string {
	set := labels.Set{wellknown.ManagedByLabel: wellknown.ManagedByValue, LabelStorage: s.opts.Name}
	if len(parts) > 0 {
		set[dirLabelPrefix+strconv.Itoa(len(parts))] = hashOf(strings.Join(parts, "/"))
	}
	return labels.SelectorFromSet(set).String()
}

// objectName is the name of the Secret (infix "") or Lease (infix "lock")
// for key.
func (s *Storage) objectName(infix, key string) string {
	if infix != "" {
		infix += "-"
	}
	return "portico-" + s.opts.Name + "-" + infix + hashOf(key)
}

// hashOf is 160 bits of SHA-256 in hex: short enough for a label value, long
// enough that keys do not collide (they are checked anyway).
func hashOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:20])
}

// splitKey checks that key is a storage key (slash-separated, no empty
// components, at most maxDepth of them) and returns its components.
func splitKey(key string) ([]string, error) {
	if key == "" {
		return nil, errors.New("storage key is empty")
	}
	parts := strings.Split(key, "/")
	if len(parts) > maxDepth {
		return nil, fmt.Errorf("storage key %q has more than %d components", key, maxDepth)
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return nil, fmt.Errorf("storage key %q has an empty or relative component", key)
		}
	}
	return parts, nil
}
