package statuswriter

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/kube/source"
)

// securityPolicyJobs are the status writes of SecurityPolicies: every one
// translate gave a status, and every one with entries of Portico's (so
// that entries of ancestors no longer there go). None without the
// dynamic client or the CRD.
func (w *Writer) securityPolicyJobs(ts metav1.Time) []statusJob {
	if w.dynamic == nil || w.in.SecurityPolicies == nil {
		return nil
	}
	var cached []*securitypolicy.SecurityPolicy
	for _, o := range w.in.SecurityPolicies.List() {
		if p, ok := o.(*securitypolicy.SecurityPolicy); ok {
			cached = append(cached, p)
		}
	}
	return kindJobs(w, ts, statusKind[*securitypolicy.SecurityPolicy, []gwv1.PolicyAncestorStatus]{
		name: securitypolicy.Kind,
		client: func(ns string) statusClient[*securitypolicy.SecurityPolicy] {
			return securityStatusClient{w.dynamic.Resource(source.SecurityPolicyResource).Namespace(ns)}
		},
		merge: func(o *securitypolicy.SecurityPolicy, c []gwv1.PolicyAncestorStatus, now metav1.Time) (*securitypolicy.SecurityPolicy, bool) {
			return status.MergeSecurityPolicy(o, c, w.controller, now)
		},
	}, fromCache(cached, w.cur.SecurityPolicies, func(p *securitypolicy.SecurityPolicy) bool {
		return status.HasAncestorsOf(p.Status.Ancestors, w.controller)
	}))
}

// securityStatusClient reads and writes SecurityPolicies, a kind of
// Portico's own with no typed client, through the dynamic one.
type securityStatusClient struct {
	ri dynamic.ResourceInterface
}

func (c securityStatusClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*securitypolicy.SecurityPolicy, error) {
	u, err := c.ri.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return securityFromUnstructured(u)
}

func (c securityStatusClient) UpdateStatus(ctx context.Context, obj *securitypolicy.SecurityPolicy, opts metav1.UpdateOptions) (*securitypolicy.SecurityPolicy, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encode SecurityPolicy %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(securitypolicy.APIVersion)
	u.SetKind(securitypolicy.Kind)
	out, err := c.ri.UpdateStatus(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	return securityFromUnstructured(out)
}

func securityFromUnstructured(u *unstructured.Unstructured) (*securitypolicy.SecurityPolicy, error) {
	p := &securitypolicy.SecurityPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		return nil, fmt.Errorf("decode SecurityPolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return p, nil
}
