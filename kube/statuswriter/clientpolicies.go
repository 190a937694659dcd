package statuswriter

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/kube/source"
)

// clientPolicyJobs lists the ClientTrafficPolicies to write, when their
// CRD is installed.
func (w *Writer) clientPolicyJobs(ts metav1.Time) []statusJob {
	if w.dynamic == nil || w.in.ClientPolicies == nil {
		return nil
	}
	var cached []*clientpolicy.ClientTrafficPolicy
	for _, o := range w.in.ClientPolicies.List() {
		if p, ok := o.(*clientpolicy.ClientTrafficPolicy); ok {
			cached = append(cached, p)
		}
	}
	return kindJobs(w, ts, statusKind[*clientpolicy.ClientTrafficPolicy, []gwv1.PolicyAncestorStatus]{
		name: clientpolicy.Kind,
		client: func(ns string) statusClient[*clientpolicy.ClientTrafficPolicy] {
			return clientPolicyStatusClient{w.dynamic.Resource(source.ClientPolicyResource).Namespace(ns)}
		},
		merge: func(o *clientpolicy.ClientTrafficPolicy, c []gwv1.PolicyAncestorStatus, now metav1.Time) (*clientpolicy.ClientTrafficPolicy, bool) {
			return status.MergeClientPolicy(o, c, w.controller, now)
		},
	}, fromCache(cached, w.cur.ClientPolicies, func(p *clientpolicy.ClientTrafficPolicy) bool {
		return status.HasAncestorsOf(p.Status.Ancestors, w.controller)
	}))
}

// clientPolicyStatusClient reads and writes ClientTrafficPolicies, a kind
// of Portico's own with no typed client, through the dynamic one.
type clientPolicyStatusClient struct {
	ri dynamic.ResourceInterface
}

func (c clientPolicyStatusClient) Get(ctx context.Context, name string, opts metav1.GetOptions) (*clientpolicy.ClientTrafficPolicy, error) {
	u, err := c.ri.Get(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	return clientPolicyFrom(u)
}

func (c clientPolicyStatusClient) UpdateStatus(ctx context.Context, obj *clientpolicy.ClientTrafficPolicy, opts metav1.UpdateOptions) (*clientpolicy.ClientTrafficPolicy, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("encode ClientTrafficPolicy %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(clientpolicy.APIVersion)
	u.SetKind(clientpolicy.Kind)
	out, err := c.ri.UpdateStatus(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	return clientPolicyFrom(out)
}

func clientPolicyFrom(u *unstructured.Unstructured) (*clientpolicy.ClientTrafficPolicy, error) {
	p := &clientpolicy.ClientTrafficPolicy{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		return nil, fmt.Errorf("decode ClientTrafficPolicy %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return p, nil
}
