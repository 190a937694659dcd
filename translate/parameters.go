package translate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/parameters"
)

// paramsRef is what a GatewayClass's or a Gateway's parametersRef says.
type paramsRef struct {
	group, kind, namespace, name string
}

// resolveParameters finds the PorticoParameters a parametersRef names and
// checks it; the message says why it cannot be used ("" when it can),
// for an Accepted=False condition of reason InvalidParameters.
func (t *translation) resolveParameters(ref paramsRef, gateway bool) (parameters.Spec, string) {
	if ref.group != parameters.Group || ref.kind != parameters.Kind {
		return parameters.Spec{}, fmt.Sprintf("parametersRef names %s %q of group %q: Portico reads only %s of group %s",
			ref.kind, ref.name, ref.group, parameters.Kind, parameters.Group)
	}
	if ref.namespace == "" {
		return parameters.Spec{}, fmt.Sprintf("parametersRef to %s %q needs a namespace", parameters.Kind, ref.name)
	}
	if t.params == nil {
		t.params = make(map[types.NamespacedName]*parameters.PorticoParameters, len(t.res.Parameters))
		for _, p := range t.res.Parameters {
			t.params[nn(p.Namespace, p.Name)] = p
		}
	}
	p := t.params[nn(ref.namespace, ref.name)]
	if p == nil {
		return parameters.Spec{}, fmt.Sprintf("%s %s/%s not found", parameters.Kind, ref.namespace, ref.name)
	}
	if err := p.Spec.Validate(gateway); err != nil {
		return parameters.Spec{}, fmt.Sprintf("%s %s/%s: %v", parameters.Kind, ref.namespace, ref.name, err)
	}
	return p.Spec, ""
}

// classParameters resolves a GatewayClass's spec.parametersRef.
func (t *translation) classParameters(gc *gwv1.GatewayClass) (parameters.Spec, string) {
	ref := gc.Spec.ParametersRef
	if ref == nil {
		return parameters.Spec{}, ""
	}
	r := paramsRef{group: string(ref.Group), kind: string(ref.Kind), name: ref.Name}
	if ref.Namespace != nil {
		r.namespace = string(*ref.Namespace)
	}
	return t.resolveParameters(r, false)
}

// gatewayParameters resolves a Gateway's spec.infrastructure.parametersRef,
// which names an object of the Gateway's namespace.
func (t *translation) gatewayParameters(gw *gwv1.Gateway) (parameters.Spec, string) {
	if gw.Spec.Infrastructure == nil || gw.Spec.Infrastructure.ParametersRef == nil {
		return parameters.Spec{}, ""
	}
	ref := gw.Spec.Infrastructure.ParametersRef
	return t.resolveParameters(paramsRef{group: string(ref.Group), kind: string(ref.Kind),
		namespace: gw.Namespace, name: ref.Name}, true)
}
