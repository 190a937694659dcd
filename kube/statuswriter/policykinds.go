package statuswriter

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
	"portico.dev/portico/internal/shared/pmap"
	"portico.dev/portico/kube/source"
)

// ownPolicyJobs are the status writes of Portico's own policy kinds
// (group portico.dev), in a fixed kind order.
func (w *Writer) ownPolicyJobs(ts metav1.Time, st *status.Computed) []statusJob {
	var jobs []statusJob
	jobs = append(jobs, policyJobs(w, ts, ownPolicy[*trafficpolicy.BackendTrafficPolicy]{
		kind: trafficpolicy.Kind, apiVersion: trafficpolicy.APIVersion, resource: source.TrafficPolicyResource,
		cached: w.in.TrafficPolicies, computed: st.TrafficPolicies,
		merge:     status.MergeTrafficPolicy,
		ancestors: func(p *trafficpolicy.BackendTrafficPolicy) []gwv1.PolicyAncestorStatus { return p.Status.Ancestors },
	})...)
	jobs = append(jobs, policyJobs(w, ts, ownPolicy[*securitypolicy.SecurityPolicy]{
		kind: securitypolicy.Kind, apiVersion: securitypolicy.APIVersion, resource: source.SecurityPolicyResource,
		cached: w.in.SecurityPolicies, computed: st.SecurityPolicies,
		merge:     status.MergeSecurityPolicy,
		ancestors: func(p *securitypolicy.SecurityPolicy) []gwv1.PolicyAncestorStatus { return p.Status.Ancestors },
	})...)
	jobs = append(jobs, policyJobs(w, ts, ownPolicy[*clientpolicy.ClientTrafficPolicy]{
		kind: clientpolicy.Kind, apiVersion: clientpolicy.APIVersion, resource: source.ClientPolicyResource,
		cached: w.in.ClientPolicies, computed: st.ClientPolicies,
		merge:     status.MergeClientPolicy,
		ancestors: func(p *clientpolicy.ClientTrafficPolicy) []gwv1.PolicyAncestorStatus { return p.Status.Ancestors },
	})...)
	// The Gateway API's experimental XBackendTrafficPolicy has no typed
	// client in use here either: it goes the same dynamic way.
	jobs = append(jobs, policyJobs(w, ts, ownPolicy[*gwxv1a1.XBackendTrafficPolicy]{
		kind: xtrafficpolicy.Kind, apiVersion: xtrafficpolicy.APIVersion, resource: source.XTrafficPolicyResource,
		cached: w.in.XTrafficPolicies, computed: st.XTrafficPolicies,
		merge:     status.MergeXTrafficPolicy,
		ancestors: func(p *gwxv1a1.XBackendTrafficPolicy) []gwv1.PolicyAncestorStatus { return p.Status.Ancestors },
	})...)
	return jobs
}

// ownPolicy is one of Portico's own policy kinds, whose status lists
// ancestors.
type ownPolicy[P metav1.Object] struct {
	kind       string
	apiVersion string
	resource   schema.GroupVersionResource
	// cached is the informer's store; nil when the CRD is not installed.
	cached   cache.Store
	computed pmap.Map[types.NamespacedName, []gwv1.PolicyAncestorStatus]
	merge    func(P, []gwv1.PolicyAncestorStatus, gwv1.GatewayController, metav1.Time) (P, bool)
	// ancestors are the stored ancestor entries of a policy.
	ancestors func(P) []gwv1.PolicyAncestorStatus
}

// policyJobs are the status writes of one kind k: every policy translate
// gave a status, and every one with entries of Portico's (so that entries
// of ancestors no longer there go). None without the dynamic client or
// the CRD.
func policyJobs[T any, P interface {
	*T
	metav1.Object
}](w *Writer, ts metav1.Time, k ownPolicy[P]) []statusJob {
	if w.dynamic == nil || k.cached == nil {
		return nil
	}
	var cached []P
	for _, o := range k.cached.List() {
		if p, ok := o.(P); ok {
			cached = append(cached, p)
		}
	}
	return kindJobs(w, ts, statusKind[P, []gwv1.PolicyAncestorStatus]{
		name: k.kind,
		client: func(ns string) statusClient[P] {
			return dynamicStatusClient[T, P]{ri: w.dynamic.Resource(k.resource).Namespace(ns), kind: k.kind, apiVersion: k.apiVersion}
		},
		merge: func(o P, c []gwv1.PolicyAncestorStatus, now metav1.Time) (P, bool) {
			return k.merge(o, c, w.controller, now)
		},
	}, fromCache(cached, k.computed, func(p P) bool {
		return status.HasAncestorsOf(k.ancestors(p), w.controller)
	}))
}

// dynamicStatusClient reads and writes a kind of Portico's own, which has
// no typed client, through the dynamic one.
type dynamicStatusClient[T any, P interface {
	*T
	metav1.Object
}] struct {
	ri               dynamic.ResourceInterface
	kind, apiVersion string
}

func (c dynamicStatusClient[T, P]) Get(ctx context.Context, name string, opts metav1.GetOptions) (P, error) {
	u, err := c.ri.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return c.decode(u)
}

func (c dynamicStatusClient[T, P]) UpdateStatus(ctx context.Context, obj P, opts metav1.UpdateOptions) (P, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s/%s: %w", c.kind, obj.GetNamespace(), obj.GetName(), err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(c.apiVersion)
	u.SetKind(c.kind)
	out, err := c.ri.UpdateStatus(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	return c.decode(out)
}

func (c dynamicStatusClient[T, P]) decode(u *unstructured.Unstructured) (P, error) {
	p := P(new(T))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		return nil, fmt.Errorf("decode %s %s/%s: %w", c.kind, u.GetNamespace(), u.GetName(), err)
	}
	return p, nil
}
