package kingress

import (
	"slices"
	"sync"

	"k8s.io/client-go/tools/cache"

	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
)

// ingressList is the KIngresses of the informer's store in namespace/name
// order, as snapshots hand them out, kept up to date by the informer's
// events rather than listed and sorted again for every snapshot: at
// 10,000 KIngresses a sort per change cost more than translating it. An
// update that changes neither the generation nor the annotations (a status
// written, mostly Portico's own) keeps the object snapshots had: nothing
// translate reads changed, and the next translation need not look at it.
type ingressList struct {
	store cache.Store

	mu sync.Mutex
	// sorted is the last list handed out; a snapshot after a change gets
	// a new one, so that none handed out changes.
	sorted []*knative.Ingress
	// pending are the keys (namespace/name) changed since; all asks for
	// the store to be listed again.
	pending map[string]struct{}
	all     bool
}

func newIngressList(store cache.Store) *ingressList {
	return &ingressList{store: store, pending: map[string]struct{}{}, all: true}
}

// changed records that the object of key was added, changed or deleted.
func (l *ingressList) changed(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.all = true
		return
	}
	l.pending[key] = struct{}{}
}

// list returns the KIngresses as they are now, sorted.
func (l *ingressList) list() []*knative.Ingress {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.all && len(l.pending) == 0 && l.sorted != nil {
		return l.sorted
	}
	if l.all || len(l.pending) > len(l.sorted)/8 {
		// Listing and sorting costs less than this many inserts.
		l.sorted = l.relisted()
	} else {
		l.sorted = l.patched()
	}
	l.all, l.pending = false, map[string]struct{}{}
	return l.sorted
}

func (l *ingressList) relisted() []*knative.Ingress {
	objs := l.store.List()
	out := make([]*knative.Ingress, 0, len(objs))
	for _, obj := range objs {
		if ing, ok := obj.(*knative.Ingress); ok {
			out = append(out, ing)
		}
	}
	slices.SortFunc(out, compareIngresses)
	return out
}

// patched is sorted with the pending keys as the store has them.
func (l *ingressList) patched() []*knative.Ingress {
	out := slices.Clone(l.sorted)
	for key := range l.pending {
		obj, exists, err := l.store.GetByKey(key)
		ing, ok := obj.(*knative.Ingress)
		if err != nil || exists && !ok {
			return l.relisted()
		}
		ns, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil {
			return l.relisted()
		}
		at, found := slices.BinarySearchFunc(out, key, func(x *knative.Ingress, _ string) int {
			return snapshot.CompareNames(x.Namespace, x.Name, ns, name)
		})
		switch {
		case exists && found:
			out[at] = ing
		case exists:
			out = slices.Insert(out, at, ing)
		case found:
			out = slices.Delete(out, at, at+1)
		}
	}
	return out
}

func compareIngresses(a, b *knative.Ingress) int {
	return snapshot.CompareNames(a.Namespace, a.Name, b.Namespace, b.Name)
}
