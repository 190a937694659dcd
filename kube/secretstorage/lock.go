package secretstorage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"portico.dev/portico/internal/controlplane/wellknown"
)

// A lock is a Lease named after the lock. Its holder renews it while it
// holds it and deletes it on Unlock. A Lease that nobody renewed for its
// duration belongs to a holder that died: the next Lock takes it over.
//
// Expiry is judged by the waiter's own clock, from the moment it saw the
// Lease change last (as client-go's leader election does), never by the
// holder's renewTime: clocks of two nodes may disagree, and a waiter that is
// ahead would otherwise take a live lock.

// heldLock is one lock this Storage holds.
type heldLock struct {
	leaseName string
	holder    string // HolderIdentity: Identity plus a token of this acquisition
	stop      context.CancelFunc
	done      chan struct{} // closed when the renewer has returned
	rv        string        // resourceVersion last written; owned by the renewer until done
}

// observation is what a waiting Lock last saw of a Lease.
type observation struct {
	rv string
	at time.Time
}

// Lock acquires the named lock, waiting while another holder keeps it,
// until ctx ends.
func (s *Storage) Lock(ctx context.Context, name string) error {
	holder, err := s.newHolder()
	if err != nil {
		return err
	}
	var seen observation
	for {
		ok, err := s.acquire(ctx, name, holder, &seen)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("lock %q: %w", name, ctx.Err())
		case <-time.After(s.opts.PollInterval):
		}
	}
}

// TryLock acquires the named lock if nobody holds it, without waiting. A
// Lease whose renewTime is more than its duration in the past counts as
// free here, since TryLock has no time to watch it.
func (s *Storage) TryLock(ctx context.Context, name string) (bool, error) {
	holder, err := s.newHolder()
	if err != nil {
		return false, err
	}
	return s.acquire(ctx, name, holder, nil)
}

// Unlock releases a lock that Lock or TryLock of this Storage acquired.
func (s *Storage) Unlock(ctx context.Context, name string) error {
	s.mu.Lock()
	h := s.held[name]
	delete(s.held, name)
	s.mu.Unlock()
	if h == nil {
		return fmt.Errorf("unlock %q: not held by %s", name, s)
	}
	h.stop()
	<-h.done

	leases := s.client.CoordinationV1().Leases(s.opts.Namespace)
	rv := h.rv
	for range 3 {
		err := leases.Delete(ctx, h.leaseName, metav1.DeleteOptions{
			Preconditions: &metav1.Preconditions{ResourceVersion: &rv},
		})
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("unlock %q: %w", name, err)
		}
		// The renewer may have written once more than h.rv says when it
		// was stopped; the Lease is still ours if the holder is.
		lease, err := leases.Get(ctx, h.leaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("unlock %q: %w", name, err)
		}
		if holderOf(lease) != h.holder {
			return fmt.Errorf("unlock %q: lock was taken over by %q", name, holderOf(lease))
		}
		rv = lease.ResourceVersion
	}
	return fmt.Errorf("unlock %q: Lease %s keeps changing", name, h.leaseName)
}

// acquire makes one attempt at the lock. With seen == nil (TryLock) a Lease
// counts as expired by its renewTime; otherwise by how long seen has shown
// it unchanged.
func (s *Storage) acquire(ctx context.Context, name, holder string, seen *observation) (bool, error) {
	leases := s.client.CoordinationV1().Leases(s.opts.Namespace)
	leaseName := s.objectName("lock", name)
	now := time.Now()
	lease, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		created, err := leases.Create(ctx, s.newLease(leaseName, name, holder, now), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("lock %q: %w", name, err)
		}
		s.hold(name, leaseName, holder, created.ResourceVersion)
		return true, nil
	case err != nil:
		return false, fmt.Errorf("lock %q: %w", name, err)
	}
	if lease.Labels[wellknown.ManagedByLabel] != wellknown.ManagedByValue || lease.Annotations[AnnotationKey] != name {
		return false, fmt.Errorf("lock %q: Lease %s/%s does not belong to %s", name, s.opts.Namespace, leaseName, s)
	}

	duration := leaseDuration(lease, s.opts.LeaseDuration)
	free := holderOf(lease) == ""
	switch {
	case free:
	case seen == nil:
		free = lease.Spec.RenewTime == nil || now.After(lease.Spec.RenewTime.Add(duration))
	case seen.rv != lease.ResourceVersion:
		*seen = observation{rv: lease.ResourceVersion, at: now}
	default:
		free = now.Sub(seen.at) > duration
	}
	if !free {
		return false, nil
	}

	// Taking over is an update at the resourceVersion we judged: if the
	// holder renewed or another waiter won meanwhile, it fails.
	prev := holderOf(lease)
	transitions := int32(1)
	if lease.Spec.LeaseTransitions != nil {
		transitions = *lease.Spec.LeaseTransitions + 1
	}
	fresh := s.newLease(leaseName, name, holder, now)
	lease.Spec = fresh.Spec
	lease.Spec.LeaseTransitions = &transitions
	updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("lock %q: %w", name, err)
	}
	if prev != "" {
		s.log.Info("took over expired lock", zap.String("lock", name), zap.String("previous_holder", prev), zap.String("holder", holder))
	}
	s.hold(name, leaseName, holder, updated.ResourceVersion)
	return true, nil
}

// hold records an acquired lock and starts renewing it.
func (s *Storage) hold(name, leaseName, holder, rv string) {
	ctx, stop := context.WithCancel(context.Background())
	h := &heldLock{leaseName: leaseName, holder: holder, stop: stop, done: make(chan struct{}), rv: rv}
	s.mu.Lock()
	s.held[name] = h
	s.mu.Unlock()
	go s.renew(ctx, name, h)
}

// renew keeps h's Lease fresh until ctx ends or the lock is lost.
func (s *Storage) renew(ctx context.Context, name string, h *heldLock) {
	defer close(h.done)
	leases := s.client.CoordinationV1().Leases(s.opts.Namespace)
	tick := time.NewTicker(s.opts.RenewInterval)
	defer tick.Stop()
	lastRenewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lease, err := leases.Get(ctx, h.leaseName, metav1.GetOptions{})
		if err == nil && holderOf(lease) != h.holder {
			err = errLost
		}
		if apierrors.IsNotFound(err) {
			err = errLost
		}
		if err == nil {
			now := metav1.NewMicroTime(time.Now())
			lease.Spec.RenewTime = &now
			var updated *coordinationv1.Lease
			updated, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
			if err == nil {
				h.rv = updated.ResourceVersion
				lastRenewed = now.Time
				continue
			}
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errLost) {
			// Another holder has it: whoever holds h learns at Unlock.
			s.mu.Lock()
			if s.held[name] == h {
				delete(s.held, name)
			}
			s.mu.Unlock()
			s.log.Error("lost lock", zap.String("lock", name), zap.String("holder", h.holder))
			return
		}
		s.log.Warn("cannot renew lock", zap.String("lock", name), zap.Duration("since_renewed", time.Since(lastRenewed)), zap.Error(err))
	}
}

var errLost = errors.New("lock lost")

func (s *Storage) newLease(leaseName, lockName, holder string, now time.Time) *coordinationv1.Lease {
	seconds := int32(s.opts.LeaseDuration / time.Second)
	t := metav1.NewMicroTime(now)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        leaseName,
			Namespace:   s.opts.Namespace,
			Labels:      map[string]string{wellknown.ManagedByLabel: wellknown.ManagedByValue, LabelStorage: s.opts.Name},
			Annotations: map[string]string{AnnotationKey: lockName},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &holder,
			LeaseDurationSeconds: &seconds,
			AcquireTime:          &t,
			RenewTime:            &t,
		},
	}
}

// newHolder names one acquisition: two Lock calls of one process for the
// same name must exclude each other as two processes do.
func (s *Storage) newHolder() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("lock holder: %w", err)
	}
	return s.opts.Identity + "/" + hex.EncodeToString(b), nil
}

func holderOf(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func leaseDuration(l *coordinationv1.Lease, def time.Duration) time.Duration {
	if l.Spec.LeaseDurationSeconds == nil || *l.Spec.LeaseDurationSeconds <= 0 {
		return def
	}
	return time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
}

func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "portico"
	}
	return host
}
