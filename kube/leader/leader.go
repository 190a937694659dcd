// Package leader elects the one replica of Portico that writes to the API
// server (statuses, provisioned data planes, Knative statuses) over a
// coordination.k8s.io Lease, and runs the passes of those leader-only
// writers. Every replica serves traffic whether it leads or not.
package leader

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// Election configures the election of the one replica that writes
// status.
type Election struct {
	// Namespace and Name locate the Lease; Namespace is Portico's own.
	Namespace string
	Name      string
	// Identity must differ between replicas: the pod name.
	Identity string
	// LeaseDuration is how long a lease lasts without renewal: the longest
	// a dead leader can hold up status writes. RenewDeadline is how long the
	// leader keeps trying to renew before it gives up leading; RetryPeriod
	// is the interval between attempts.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// ReleaseOnCancel gives the lease up when Run's context ends, so that
	// another replica takes over at once after a clean shutdown instead of
	// after LeaseDuration.
	ReleaseOnCancel bool
}

// Default returns the usual client-go timings with the Lease named
// "portico" in namespace.
func Default(namespace, identity string) Election {
	return Election{
		Namespace:       namespace,
		Name:            "portico",
		Identity:        identity,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
	}
}

// Validate checks what client-go would otherwise only refuse later, so
// that a Cluster refuses to start rather than fail once running.
func (cfg Election) Validate() error {
	switch {
	case cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "":
		return fmt.Errorf("leader election: namespace, name and identity are required (have %q, %q, %q)", cfg.Namespace, cfg.Name, cfg.Identity)
	case cfg.RetryPeriod <= 0 || float64(cfg.RenewDeadline) <= leaderelection.JitterFactor*float64(cfg.RetryPeriod) || cfg.LeaseDuration <= cfg.RenewDeadline:
		return fmt.Errorf("leader election: need lease duration (%v) > renew deadline (%v) > %v × retry period (%v) > 0",
			cfg.LeaseDuration, cfg.RenewDeadline, leaderelection.JitterFactor, cfg.RetryPeriod)
	}
	return nil
}

// Elect takes part in the election until ctx ends: whenever this replica
// gains the lease it calls onLead with a context that ends when the lease
// is lost, and after losing it, it stands again.
func Elect(ctx context.Context, kube kubernetes.Interface, cfg Election, log *zap.Logger, onLead func(context.Context), onStop func()) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Transitions are recorded as Events on the Lease, in Portico's own
	// namespace, where "kubectl get events" shows them next to the pods.
	// Not tied to ctx: the Event of releasing the lease is recorded after
	// ctx ends.
	broadcaster := record.NewBroadcaster()
	defer broadcaster.Shutdown()
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events(cfg.Namespace)})
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "portico", Host: cfg.Identity})

	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.Namespace, cfg.Name,
		kube.CoreV1(), kube.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: cfg.Identity, EventRecorder: recorder})
	if err != nil {
		return fmt.Errorf("leader election lock: %w", err)
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            cfg.Name,
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: cfg.ReleaseOnCancel,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(leadCtx context.Context) {
				log.Info("leading: this replica writes status", zap.String("lease", cfg.Namespace+"/"+cfg.Name))
				onLead(leadCtx)
			},
			OnStoppedLeading: onStop,
			OnNewLeader: func(identity string) {
				if identity != cfg.Identity {
					log.Info("following", zap.String("leader", identity))
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	for ctx.Err() == nil {
		// Run returns when ctx ends or the lease is lost.
		le.Run(ctx)
		if ctx.Err() == nil {
			log.Warn("lost the leader lease; standing again")
		}
	}
	return nil
}
