package provisioner

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"portico.dev/portico/internal/configstream"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/wellknown"
)

// ackWriter records acknowledgements on the data planes' Deployments: one
// write at a time per Deployment, the latest acknowledgement replacing those
// still waiting, and none of a version this replica has replaced with a
// newer one. Writes made side by side landed in any order: an
// older version written last left the Gateway waiting for an
// acknowledgement its data plane had already sent.
type ackWriter struct {
	kube kubernetes.Interface
	log  *zap.Logger
	// superseded says whether this replica replaced a Gateway's version
	// with a newer one (Hub.Superseded).
	superseded func(gw types.NamespacedName, version string) bool
	// retry is the pause after a failed write; 0 means a second.
	retry time.Duration

	mu      sync.Mutex
	waiting map[types.NamespacedName]waitingAck // by Deployment
	busy    map[types.NamespacedName]bool       // a writer runs for the Deployment
}

type waitingAck struct {
	gateway  types.NamespacedName
	version  string
	attempts int
}

// minAckGap is the least time between two writes of a Deployment's
// acknowledgement: those that come sooner replace each other and the
// latest is written then. A data plane that acknowledges without pause
// (alternating versions) would otherwise have its Deployment written,
// and every replica's informer woken, as fast as the API server answers.
const minAckGap = 200 * time.Millisecond

// maxAckAttempts bounds the writes of one acknowledgement that fail: the
// next change the data plane applies brings another.
const maxAckAttempts = 5

func newAckWriter(kube kubernetes.Interface, superseded func(types.NamespacedName, string) bool, log *zap.Logger) *ackWriter {
	return &ackWriter{kube: kube, superseded: superseded, log: log,
		waiting: map[types.NamespacedName]waitingAck{}, busy: map[types.NamespacedName]bool{}}
}

// record takes an acknowledgement (Hub.OnAck); it does not block. One of
// an apply that failed in part is not recorded: the Gateway stays waiting,
// and the hub logged what failed.
func (w *ackWriter) record(gw types.NamespacedName, deployment string, a configstream.Ack) {
	if a.Error != "" {
		return
	}
	key := types.NamespacedName{Namespace: gw.Namespace, Name: deployment}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting[key] = waitingAck{gateway: gw, version: a.Version}
	if !w.busy[key] {
		w.busy[key] = true
		go w.write(key)
	}
}

// write records the Deployment's waiting acknowledgements until none is
// left.
func (w *ackWriter) write(key types.NamespacedName) {
	retry := w.retry
	if retry == 0 {
		retry = time.Second
	}
	for {
		w.mu.Lock()
		a, ok := w.waiting[key]
		delete(w.waiting, key)
		if !ok {
			delete(w.busy, key)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		if w.superseded(a.gateway, a.version) {
			continue // a newer configuration is on its way to the data plane
		}
		err := w.patch(key, a.version)
		if err == nil || apierrors.IsNotFound(err) {
			time.Sleep(minAckGap)
			continue
		}
		a.attempts++
		w.log.Info("acknowledgement not recorded", zap.Stringer("gateway", a.gateway), zap.String("version", a.version),
			zap.Int("attempts", a.attempts), zap.Error(err))
		if a.attempts >= maxAckAttempts {
			continue
		}
		w.mu.Lock()
		if _, newer := w.waiting[key]; !newer {
			w.waiting[key] = a
		}
		w.mu.Unlock()
		time.Sleep(retry)
	}
}

func (w *ackWriter) patch(deployment types.NamespacedName, version string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{provision.AppliedVersionAnnotation: version}}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = w.kube.AppsV1().Deployments(deployment.Namespace).Patch(ctx, deployment.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: wellknown.FieldManager + "-acks"})
	return err
}
