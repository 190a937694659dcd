package source

import (
	"testing"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"portico.dev/portico/internal/controlplane/securitypolicy"
)

// TestUndecodablePolicyKeepsItsTargets: a SecurityPolicy whose spec does
// not decode keeps its name and targets with an empty spec, which is
// invalid where it is attached (so its targets answer 500), never a policy
// that guards nothing.
func TestUndecodablePolicyKeepsItsTargets(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": securitypolicy.APIVersion,
		"kind":       securitypolicy.Kind,
		"metadata":   map[string]any{"namespace": "shop", "name": "guard", "generation": int64(3)},
		"spec": map[string]any{
			"targetRefs": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "cart"}},
			"basicAuth":  "not an object",
		},
	}}
	obj, err := toPolicy[securitypolicy.SecurityPolicy](securitypolicy.Kind, zap.NewNop())(u)
	if err != nil {
		t.Fatal(err)
	}
	p := obj.(*securitypolicy.SecurityPolicy)
	if p.Namespace != "shop" || p.Name != "guard" || p.Generation != 3 {
		t.Errorf("metadata %s/%s generation %d, want shop/guard 3", p.Namespace, p.Name, p.Generation)
	}
	if len(p.Spec.TargetRefs) != 1 || p.Spec.TargetRefs[0].Name != "cart" || p.Spec.TargetRefs[0].Kind != "HTTPRoute" {
		t.Fatalf("targetRefs %+v, want the HTTPRoute cart", p.Spec.TargetRefs)
	}
	if p.Spec.BasicAuth != nil || p.Spec.Validate() == nil {
		t.Errorf("the undecodable spec must be left empty and invalid: %+v", p.Spec)
	}

	// Targets that do not decode either: the name alone.
	u.Object["spec"] = map[string]any{"targetRefs": "nonsense"}
	obj, err = toPolicy[securitypolicy.SecurityPolicy](securitypolicy.Kind, zap.NewNop())(u)
	if err != nil {
		t.Fatal(err)
	}
	if p := obj.(*securitypolicy.SecurityPolicy); p.Name != "guard" || len(p.Spec.TargetRefs) != 0 {
		t.Errorf("got %s with targets %+v, want guard with none", p.Name, p.Spec.TargetRefs)
	}
}
