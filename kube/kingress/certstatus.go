package kingress

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/kube/leader"
	"portico.dev/portico/translate"
)

// kcertWriter writes the status of the Certificates of Portico's
// certificate class, while this replica leads: Ready as translate says
// (issued into the Secret, failing, or waiting) and notAfter.
type kcertWriter struct {
	k    *Knative
	log  *zap.Logger
	wake chan struct{}

	mu      sync.Mutex
	results map[types.NamespacedName]translate.KCertificateResult
	dirty   map[types.NamespacedName]struct{}
	all     bool
}

func (w *kcertWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *kcertWriter) markDirty(key types.NamespacedName) {
	w.mu.Lock()
	w.dirty[key] = struct{}{}
	w.mu.Unlock()
	w.poke()
}

func (w *kcertWriter) submit(results map[types.NamespacedName]translate.KCertificateResult) {
	w.mu.Lock()
	if w.results != nil && reflect.ValueOf(results).Pointer() == reflect.ValueOf(w.results).Pointer() {
		// The same map, never changed: a delta of KIngresses shares the
		// Certificates' results with the rebuild before.
		w.mu.Unlock()
		return
	}
	for key, r := range results {
		if old, ok := w.results[key]; !ok || old.Generation != r.Generation || old.Ready != r.Ready ||
			old.Reason != r.Reason || old.Message != r.Message || !old.NotAfter.Equal(r.NotAfter) {
			w.dirty[key] = struct{}{}
		}
	}
	w.results = results
	w.mu.Unlock()
	w.poke()
}

func (w *kcertWriter) run(ctx context.Context) {
	leader.RunWhileLeading(ctx, w.wake, w.k.Cluster.Leading, w.pass)
}

// pass writes the statuses of the Certificates marked dirty, all of them
// on a fresh term; those that fail are marked again for the next tick.
func (w *kcertWriter) pass(ctx context.Context, fresh bool) {
	w.mu.Lock()
	w.all = w.all || fresh
	results := w.results
	dirty := leader.TakeDirty(&w.dirty, &w.all, results)
	w.mu.Unlock()
	for key := range dirty {
		if r, ok := results[key]; ok && !w.write(ctx, key, r) {
			w.mu.Lock()
			w.dirty[key] = struct{}{}
			w.mu.Unlock()
		}
	}
}

// write brings one Certificate's status to r; it reports false when it
// must be tried again.
func (w *kcertWriter) write(ctx context.Context, key types.NamespacedName, r translate.KCertificateResult) bool {
	obj, ok, err := w.k.certs.GetStore().GetByKey(key.String())
	if err != nil || !ok {
		return true
	}
	c := obj.(*knative.Certificate)
	if c.Generation != r.Generation || c.Annotations[knative.CertificateClassAnnotation] != w.k.Settings.CertificateClassOrDefault() {
		return true // a newer translation is on its way
	}
	ready := knative.Condition{Type: knative.ConditionReady, Status: r.Ready, Reason: r.Reason, Message: r.Message}
	conds := []knative.Condition{ready}
	now := metav1.Now()
	conds[0].LastTransitionTime = &now
	for _, p := range c.Status.Conditions {
		if p.Type == ready.Type && p.Status == ready.Status && p.LastTransitionTime != nil {
			conds[0].LastTransitionTime = p.LastTransitionTime
		}
	}
	if sameConditions(c.Status.Conditions, conds) && c.Status.ObservedGeneration == r.Generation && c.Status.NotAfter.Equal(r.NotAfter) {
		return true
	}
	err = patchStatus(ctx, w.k, knative.CertificateResource, c.Namespace, c.Name, c.ResourceVersion, map[string]any{
		"observedGeneration": r.Generation, "conditions": conds, "notAfter": r.NotAfter,
	})
	w.k.report(err)
	if err != nil {
		w.log.Warn("Certificate status not written; will retry", zap.String("certificate", key.String()), zap.Error(err))
		return false
	}
	return true
}

// patchStatus merge-patches the status of one object at resourceVersion
// rv; a nil value removes its field.
func patchStatus(ctx context.Context, k *Knative, gvr schema.GroupVersionResource, namespace, name, rv string, status map[string]any) error {
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": rv}, "status": status})
	if err != nil {
		return fmt.Errorf("encoding status patch: %w", err)
	}
	_, err = k.Dynamic.Resource(gvr).Namespace(namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{}, "status")
	return err
}
