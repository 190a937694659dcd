// Package provisioner runs the cluster's side of per-Gateway data planes
// (GEP-1762): it applies each one's objects with server-side apply while
// this replica leads, serves the data planes their configuration over TLS
// (a configstream.Hub; tokens reviewed by the API server), and records
// their acknowledgements on their Deployments.
package provisioner

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
)

// Provisioner applies the data planes of Gateways that have their own
// (GEP-1762) while this replica leads: it renders each one (package
// provision) and applies what changed with server-side apply, and removes
// the objects of a Gateway that left its class. Objects of a deleted
// Gateway are removed by the garbage collector (they are owned by it).
type Provisioner struct {
	kube     kubernetes.Interface
	settings provision.Settings
	log      *zap.Logger
	leading  func() bool

	wake chan struct{}
	// latest is the last batch submitted (mu); applied is, by object, a
	// hash of what was last applied, so that an unchanged rendering costs
	// no request (only the run goroutine touches it).
	latest  latestBatch
	applied map[string][32]byte
}

type dataPlaneBatch struct {
	inputs []provision.Input
	res    *snapshot.Resources
}

// New returns a Provisioner of the data planes s renders; leading says
// whether this replica leads, when it is woken. Run starts it.
func New(kube kubernetes.Interface, s provision.Settings, leading func() bool, log *zap.Logger) *Provisioner {
	return &Provisioner{kube: kube, settings: s, leading: leading, log: log, wake: make(chan struct{}, 1), applied: map[string][32]byte{}}
}

// Submit hands over the Gateways with data planes of their own, from the
// snapshot res; it does not block. Only the latest is applied.
func (p *Provisioner) Submit(inputs []provision.Input, res *snapshot.Resources) {
	p.latest.set(&dataPlaneBatch{inputs: inputs, res: res})
	p.poke()
}

func (p *Provisioner) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// StartLeading forgets what was applied: a new leader applies every data
// plane once (a no-op on the server when nothing changed).
func (p *Provisioner) StartLeading() {
	p.latest.forget()
	p.poke()
}

// Run reconciles on every wake while leading, and again after a failure,
// until ctx ends.
func (p *Provisioner) Run(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-retry.C:
		}
		if p.latest.takeForget() {
			clear(p.applied)
		}
		b := p.latest.get()
		if b == nil || !p.leading() {
			continue
		}
		if err := p.reconcile(ctx, b); err != nil && ctx.Err() == nil {
			p.log.Warn("data planes not fully provisioned; retrying", zap.Error(err))
			retry.Reset(2 * time.Second)
		}
	}
}

// reconcile applies every accepted Gateway's data plane and removes those
// of Gateways that left a per-Gateway class. A Gateway that is not
// accepted keeps what runs for it.
func (p *Provisioner) reconcile(ctx context.Context, b *dataPlaneBatch) error {
	var errs []error
	wanted := map[[2]string]bool{}
	deployments := deploymentsByName(b.res.Deployments)
	holders := provision.Holders(b.inputs)
	for _, in := range b.inputs {
		key := [2]string{in.Gateway.Namespace, provision.Name(in.Gateway.Name, in.ClassName)}
		wanted[key] = true
		if !in.Accepted {
			continue
		}
		if h := holders[key]; h != in.Gateway {
			errs = append(errs, fmt.Errorf("Gateway %s/%s: its data plane would be named %s like Gateway %s's: not provisioned",
				in.Gateway.Namespace, in.Gateway.Name, key[1], h.Name))
			continue
		}
		if d := deployments[key]; d != nil && !ownedBy(d, in.Gateway.UID) {
			errs = append(errs, fmt.Errorf("Deployment %s/%s belongs to another Gateway: not taken over", key[0], key[1]))
			continue
		}
		if err := p.apply(ctx, provision.Render(p.settings, in)); err != nil {
			errs = append(errs, fmt.Errorf("Gateway %s/%s: %w", in.Gateway.Namespace, in.Gateway.Name, err))
		}
	}
	gateways := map[types.UID]*gwv1.Gateway{}
	for _, gw := range b.res.Gateways {
		gateways[gw.UID] = gw
	}
	for key, d := range deployments {
		if wanted[key] {
			continue
		}
		// Its Gateway is gone: the garbage collector removes it.
		owner := metav1.GetControllerOfNoCopy(d)
		if owner == nil || gateways[owner.UID] == nil {
			continue
		}
		if err := p.remove(ctx, key[0], key[1]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func ownedBy(o metav1.Object, uid types.UID) bool {
	c := metav1.GetControllerOfNoCopy(o)
	return c != nil && c.UID == uid
}

// apply applies each object whose rendering changed since it was last
// applied. The order lets the Deployment's pods find their
// ServiceAccount.
func (p *Provisioner) apply(ctx context.Context, o provision.Objects) error {
	opts := metav1.PatchOptions{FieldManager: wellknown.FieldManager, Force: ptr.To(true)}
	ns, name := o.Deployment.Namespace, o.Deployment.Name
	core, apps, policy := p.kube.CoreV1(), p.kube.AppsV1(), p.kube.PolicyV1()
	steps := []applyStep{
		{"ServiceAccount", o.ServiceAccount, func(data []byte) error {
			_, err := core.ServiceAccounts(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
			return err
		}},
		{"Service", o.Service, func(data []byte) error {
			_, err := core.Services(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
			return err
		}},
		{"Deployment", o.Deployment, func(data []byte) error {
			_, err := apps.Deployments(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
			return err
		}},
	}
	if o.PodDisruptionBudget != nil {
		steps = append(steps, applyStep{"PodDisruptionBudget", o.PodDisruptionBudget, func(data []byte) error {
			_, err := policy.PodDisruptionBudgets(ns).Patch(ctx, name, types.ApplyPatchType, data, opts)
			return err
		}})
	} else if _, had := p.applied[objectKey("PodDisruptionBudget", ns, name)]; had {
		// The parameters no longer ask for one.
		err := policy.PodDisruptionBudgets(ns).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete PodDisruptionBudget %s/%s: %w", ns, name, err)
		}
		delete(p.applied, objectKey("PodDisruptionBudget", ns, name))
	}
	for _, s := range steps {
		data, err := json.Marshal(s.obj)
		if err != nil {
			return fmt.Errorf("encode %s %s/%s: %w", s.kind, ns, name, err)
		}
		key, sum := objectKey(s.kind, ns, name), sha256.Sum256(data)
		if p.applied[key] == sum {
			continue
		}
		if err := s.patch(data); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", s.kind, ns, name, err)
		}
		p.applied[key] = sum
		p.log.Info("applied", zap.String("kind", s.kind), zap.String("namespace", ns), zap.String("name", name))
	}
	return nil
}

// remove deletes a data plane's objects (its Gateway moved to another
// class or stopped being Portico's).
func (p *Provisioner) remove(ctx context.Context, ns, name string) error {
	opts := metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
	core, apps, policy := p.kube.CoreV1(), p.kube.AppsV1(), p.kube.PolicyV1()
	var errs []error
	for kind, del := range map[string]func() error{
		"Deployment":          func() error { return apps.Deployments(ns).Delete(ctx, name, opts) },
		"Service":             func() error { return core.Services(ns).Delete(ctx, name, opts) },
		"ServiceAccount":      func() error { return core.ServiceAccounts(ns).Delete(ctx, name, opts) },
		"PodDisruptionBudget": func() error { return policy.PodDisruptionBudgets(ns).Delete(ctx, name, opts) },
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s %s/%s: %w", kind, ns, name, err))
			continue
		}
		delete(p.applied, objectKey(kind, ns, name))
	}
	if len(errs) == 0 {
		p.log.Info("removed a data plane whose Gateway left its class", zap.String("namespace", ns), zap.String("name", name))
	}
	return errors.Join(errs...)
}

// applyStep is one object to apply and the request that applies it.
type applyStep struct {
	kind  string
	obj   any
	patch func(data []byte) error
}

func objectKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// deploymentsByName is a lookup of res.Deployments.
func deploymentsByName(deps []*appsv1.Deployment) map[[2]string]*appsv1.Deployment {
	out := make(map[[2]string]*appsv1.Deployment, len(deps))
	for _, d := range deps {
		out[[2]string{d.Namespace, d.Name}] = d
	}
	return out
}
