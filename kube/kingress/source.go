// Package kingress is Portico's Knative Serving ingress in a cluster: the
// source of KIngresses and Certificates (informers over the dynamic
// client, since Portico's types are its own), which it adds to the
// snapshots of the cluster source it extends, and, while that source's
// replica leads, their status writers and the prober that tells when
// every replica serves a KIngress's version.
package kingress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/translate"
)

// Cluster is what Knative mode takes of the cluster source it extends
// (kube.Cluster's methods, in cmd): functions rather than the type, so
// that this package needs nothing else of it.
type Cluster struct {
	// Run runs the cluster source (pipeline.Source), once the KIngress
	// informers are synced.
	Run func(ctx context.Context, changed, ready func()) error
	// Snapshot is the cluster source's snapshot, to which the KIngresses
	// and Certificates are added.
	Snapshot func() (*snapshot.Resources, error)
	// Leading reports whether this replica holds the leader lease: the
	// status writers write only then.
	Leading func() bool
}

// Knative is the cluster source of Knative mode: the Cluster's informers
// and one over KIngresses (read through the dynamic client, since
// Portico's types are its own), and the KIngress status writer with its
// prober, which act while the Cluster's replica leads.
type Knative struct {
	Cluster Cluster
	Dynamic dynamic.Interface
	Log     *zap.Logger
	// OnStatusWrite, when set, is told of every status write (kind
	// "Knative"), as the Cluster's hook of the same name is of its own; it
	// must not block.
	OnStatusWrite func(kind, result string)
	// Settings are translate's: the class, the gateways' ports and the
	// cluster-local Service, whose ready endpoints are the replicas to
	// probe.
	Settings translate.KnativeSettings
	// ExternalService is the external gateway's Service; with
	// Settings.LocalService it gives the status' domainInternal values.
	ExternalService types.NamespacedName
	// Probe tunes the readiness probing; zero values take defaults.
	Probe ProbeOptions
	// Workers bounds the status writes in flight; 0 means 8. The
	// client's rate limit (Dynamic's) is what paces them.
	Workers int

	informer   cache.SharedIndexInformer
	ingresses  *ingressList
	certs      cache.SharedIndexInformer
	writer     *kingressWriter
	certWriter *kcertWriter
}

// Run watches KIngresses beside the Cluster's kinds until ctx ends
// (pipeline.Source).
func (k *Knative) Run(ctx context.Context, changed, ready func()) error {
	c := k.Cluster
	if c.Run == nil || c.Snapshot == nil || c.Leading == nil || k.Dynamic == nil || k.Log == nil {
		return errors.New("knative: Cluster (Run, Snapshot, Leading), Dynamic and Log are required")
	}
	log := k.Log.Named("knative")
	factory := dynamicinformer.NewDynamicSharedInformerFactory(k.Dynamic, 0)
	k.informer = factory.ForResource(knative.IngressResource).Informer()
	if err := k.informer.SetTransform(toTyped[knative.Ingress](log, "KIngress")); err != nil {
		return fmt.Errorf("knative: %w", err)
	}
	k.certs = factory.ForResource(knative.CertificateResource).Informer()
	if err := k.certs.SetTransform(toTyped[knative.Certificate](log, "Certificate")); err != nil {
		return fmt.Errorf("knative: %w", err)
	}
	k.writer = newKIngressWriter(k, log)
	k.certWriter = &kcertWriter{k: k, log: log, wake: make(chan struct{}, 1), dirty: map[types.NamespacedName]struct{}{}}
	_, err := k.certs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		DeleteFunc: func(any) { changed() },
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*knative.Certificate), newObj.(*knative.Certificate)
			if o.Generation != n.Generation || !maps.Equal(o.Annotations, n.Annotations) {
				changed()
			}
			k.certWriter.markDirty(types.NamespacedName{Namespace: n.Namespace, Name: n.Name})
		},
	})
	if err != nil {
		return fmt.Errorf("knative: %w", err)
	}
	k.ingresses = newIngressList(k.informer.GetStore())
	_, err = k.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			k.ingresses.changed(obj)
			changed()
		},
		DeleteFunc: func(obj any) {
			k.ingresses.changed(obj)
			changed()
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, n := oldObj.(*knative.Ingress), newObj.(*knative.Ingress)
			// A status change (mostly Portico's own write) changes
			// nothing served; the writer looks at it again.
			if o.Generation != n.Generation || !maps.Equal(o.Annotations, n.Annotations) {
				k.ingresses.changed(newObj)
				changed()
			}
			k.writer.markDirty(types.NamespacedName{Namespace: n.Namespace, Name: n.Name})
		},
	})
	if err != nil {
		return fmt.Errorf("knative: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), k.informer.HasSynced, k.certs.HasSynced) {
		return nil // ctx ended first
	}
	go k.writer.run(ctx)
	go k.certWriter.run(ctx)
	return c.Run(ctx, changed, ready)
}

// Snapshot is the Cluster's snapshot with the KIngresses, in
// namespace/name order (pipeline.Source). The list is shared with the
// snapshots before it until a KIngress changes (ingressList).
func (k *Knative) Snapshot() (*snapshot.Resources, error) {
	res, err := k.Cluster.Snapshot()
	if err != nil {
		return nil, err
	}
	out := *res
	out.KIngresses = k.ingresses.list()
	certs := k.certs.GetStore().List()
	out.KCertificates = make([]*knative.Certificate, 0, len(certs))
	for _, obj := range certs {
		if c, ok := obj.(*knative.Certificate); ok {
			out.KCertificates = append(out.KCertificates, c)
		}
	}
	slices.SortFunc(out.KCertificates, func(a, b *knative.Certificate) int {
		return snapshot.CompareNames(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	return &out, nil
}

// WriteKnative hands what translate says of the KIngresses and
// Certificates of Portico's classes to their status writers
// (pipeline.Outputs.Knative).
func (k *Knative) WriteKnative(out *translate.KnativeOutput, res *snapshot.Resources) {
	k.writer.submit(out, res)
	k.certWriter.submit(out.Certificates)
}

// toTyped turns the dynamic informer's objects into Portico's type T
// before they are cached. An object that does not decode (the CRD's schema
// makes that rare) is kept with its metadata alone: nothing is done for it.
func toTyped[T any, PT interface {
	*T
	metav1.Object
}](log *zap.Logger, kind string) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // a tombstone
		}
		typed := PT(new(T))
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
			log.Warn(kind+" does not decode; nothing is done for it", zap.String("namespace", u.GetNamespace()),
				zap.String("name", u.GetName()), zap.Error(err))
			typed = PT(new(T))
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"metadata": u.Object["metadata"]}, typed); err != nil {
				return nil, fmt.Errorf("%s %s/%s: %w", kind, u.GetNamespace(), u.GetName(), err)
			}
		}
		typed.SetManagedFields(nil)
		return typed, nil
	}
}

// ingressConditions are the conditions of a KIngress for what translate
// said (r) and whether every replica was probed with its hash, keeping the
// transition times of conditions whose status did not change.
func ingressConditions(prev []knative.Condition, r translate.KIngressResult, probed bool, now metav1.Time) []knative.Condition {
	net := knative.Condition{Type: knative.ConditionNetworkConfigured, Status: metav1.ConditionTrue}
	lb := knative.Condition{Type: knative.ConditionLoadBalancerReady, Status: metav1.ConditionUnknown,
		Reason: "Uninitialized", Message: "Waiting for load balancer to be ready"}
	switch {
	case r.Conflict != "":
		lb = knative.Condition{Type: knative.ConditionLoadBalancerReady, Status: metav1.ConditionFalse,
			Reason: "DomainConflict", Message: r.Conflict}
	case probed:
		lb = knative.Condition{Type: knative.ConditionLoadBalancerReady, Status: metav1.ConditionTrue}
	}
	if len(r.Problems) > 0 {
		net = knative.Condition{Type: knative.ConditionNetworkConfigured, Status: metav1.ConditionFalse,
			Reason: "ReconcileIngressFailed", Message: joinProblems(r.Problems)}
	}
	ready := readyOf(net, lb)
	out := []knative.Condition{lb, net, ready}
	for i := range out {
		out[i].LastTransitionTime = &now
		for _, p := range prev {
			if p.Type == out[i].Type && p.Status == out[i].Status && p.LastTransitionTime != nil {
				out[i].LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	return out
}

// readyOf is the Ready condition of the two others: False when either is
// False, else Unknown when either is Unknown, else True.
func readyOf(conds ...knative.Condition) knative.Condition {
	ready := knative.Condition{Type: knative.ConditionReady, Status: metav1.ConditionTrue}
	for _, want := range []metav1.ConditionStatus{metav1.ConditionFalse, metav1.ConditionUnknown} {
		for _, c := range conds {
			if c.Status == want {
				ready.Status, ready.Reason, ready.Message = c.Status, c.Reason, c.Message
				return ready
			}
		}
	}
	return ready
}

func joinProblems(p []string) string {
	const most = 5
	if len(p) > most {
		return fmt.Sprintf("%s; and %d more", strings.Join(p[:most], "; "), len(p)-most)
	}
	return strings.Join(p, "; ")
}

// serviceDomain is a Service's name in the cluster's DNS.
func serviceDomain(svc types.NamespacedName, clusterDomain string) string {
	return svc.Name + "." + svc.Namespace + ".svc." + cmp.Or(clusterDomain, "cluster.local")
}

// sameConditions compares conditions without their transition times.
func sameConditions(a, b []knative.Condition) bool {
	return slices.EqualFunc(a, b, func(x, y knative.Condition) bool {
		return x.Type == y.Type && x.Status == y.Status && x.Reason == y.Reason && x.Message == y.Message && x.Severity == y.Severity
	})
}

// sameLoadBalancer compares two load balancer statuses.
func sameLoadBalancer(a, b *knative.LoadBalancerStatus) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.Ingress, b.Ingress)
}
