// Package parameters holds PorticoParameters (group portico.dev), the
// object a GatewayClass's spec.parametersRef and a Gateway's
// spec.infrastructure.parametersRef name: whether a class's Gateways share
// Portico's own data plane or each get one of their own (GEP-1762), and how
// a Gateway's own data plane is deployed. The class's values are defaults;
// a Gateway's override them field by field (Merge).
package parameters

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"portico.dev/portico/internal/shared/jsoncopy"
)

// Group, Version and Kind of PorticoParameters.
const (
	Group   = "portico.dev"
	Version = "v1alpha1"
	Kind    = "PorticoParameters"
	// APIVersion is Group/Version.
	APIVersion = Group + "/" + Version
)

// Mode says who serves a class's Gateways.
type Mode string

const (
	// ModeShared (the default): Portico's own replicas serve every
	// Gateway of the class on their shared addresses.
	ModeShared Mode = "Shared"
	// ModePerGateway: every Gateway of the class gets a Deployment and a
	// Service of its own, in its namespace.
	ModePerGateway Mode = "PerGateway"
)

// PorticoParameters is the parameters object of a GatewayClass or Gateway.
type PorticoParameters struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec `json:"spec"`
}

// Spec is what PorticoParameters sets. Every field is optional: unset
// fields take the class's value, then Portico's default.
type Spec struct {
	// Mode is chosen by the GatewayClass; a Gateway's parameters may not
	// set it (a Gateway cannot leave its class's data plane).
	Mode Mode `json:"mode,omitempty"`
	// Replicas of a Gateway's data plane. Unset, the Deployment is applied
	// without replicas, so that an autoscaler may own the field.
	Replicas *int32 `json:"replicas,omitempty"`
	// Resources of the data plane's container.
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// Service shapes the Gateway's Service.
	Service *Service `json:"service,omitempty"`
	// NodeSelector and Tolerations place the data plane's pods; each
	// replaces the class's as a whole.
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	// PodDisruptionBudget, when set, gives the data plane one.
	PodDisruptionBudget *PodDisruptionBudget `json:"podDisruptionBudget,omitempty"`
	// DrainTimeout is how long a data-plane pod finishes its requests
	// after SIGTERM.
	DrainTimeout *metav1.Duration `json:"drainTimeout,omitempty"`
	// LogLevel of the data plane: debug, info, warn or error.
	LogLevel string `json:"logLevel,omitempty"`
}

// Service shapes a Gateway's Service; each field overrides on its own, and
// Annotations key by key.
type Service struct {
	Type                  *corev1.ServiceType                  `json:"type,omitempty"`
	Annotations           map[string]string                    `json:"annotations,omitempty"`
	LoadBalancerClass     *string                              `json:"loadBalancerClass,omitempty"`
	ExternalTrafficPolicy *corev1.ServiceExternalTrafficPolicy `json:"externalTrafficPolicy,omitempty"`
}

// PodDisruptionBudget is one of MinAvailable or MaxUnavailable.
type PodDisruptionBudget struct {
	MinAvailable   *intstr.IntOrString `json:"minAvailable,omitempty"`
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// Merge is gw over class: every field the Gateway's parameters set wins,
// the Service's fields one by one and its annotations key by key. Neither
// argument is modified; the result shares no map with them.
func Merge(class, gw Spec) Spec {
	out := class
	if gw.Replicas != nil {
		out.Replicas = gw.Replicas
	}
	if gw.Resources != nil {
		out.Resources = gw.Resources
	}
	if gw.NodeSelector != nil {
		out.NodeSelector = gw.NodeSelector
	}
	if gw.Tolerations != nil {
		out.Tolerations = gw.Tolerations
	}
	if gw.PodDisruptionBudget != nil {
		out.PodDisruptionBudget = gw.PodDisruptionBudget
	}
	if gw.DrainTimeout != nil {
		out.DrainTimeout = gw.DrainTimeout
	}
	if gw.LogLevel != "" {
		out.LogLevel = gw.LogLevel
	}
	out.Service = mergeService(class.Service, gw.Service)
	return out
}

func mergeService(class, gw *Service) *Service {
	if class == nil && gw == nil {
		return nil
	}
	var out Service
	for _, s := range []*Service{class, gw} {
		if s == nil {
			continue
		}
		if s.Type != nil {
			out.Type = s.Type
		}
		if s.LoadBalancerClass != nil {
			out.LoadBalancerClass = s.LoadBalancerClass
		}
		if s.ExternalTrafficPolicy != nil {
			out.ExternalTrafficPolicy = s.ExternalTrafficPolicy
		}
		for k, v := range s.Annotations {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return &out
}

// Validate checks what the CRD's schema cannot express, and the schema's
// own rules again for objects that reach translate without an API server
// (standalone files). gateway is true for a Gateway's parameters.
func (s *Spec) Validate(gateway bool) error {
	switch s.Mode {
	case "", ModeShared, ModePerGateway:
	default:
		return fmt.Errorf("mode %q is neither %s nor %s", s.Mode, ModeShared, ModePerGateway)
	}
	if gateway && s.Mode != "" {
		return fmt.Errorf("mode is chosen by the GatewayClass's parameters, not a Gateway's")
	}
	if s.Replicas != nil && *s.Replicas < 0 {
		return fmt.Errorf("replicas %d is negative", *s.Replicas)
	}
	if s.Service != nil && s.Service.Type != nil {
		switch *s.Service.Type {
		case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer:
		default:
			return fmt.Errorf("service.type %q is not ClusterIP, NodePort or LoadBalancer", *s.Service.Type)
		}
	}
	if s.Service != nil && s.Service.ExternalTrafficPolicy != nil {
		switch *s.Service.ExternalTrafficPolicy {
		case corev1.ServiceExternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal:
		default:
			return fmt.Errorf("service.externalTrafficPolicy %q is not Cluster or Local", *s.Service.ExternalTrafficPolicy)
		}
	}
	if p := s.PodDisruptionBudget; p != nil && (p.MinAvailable == nil) == (p.MaxUnavailable == nil) {
		return fmt.Errorf("podDisruptionBudget needs exactly one of minAvailable and maxUnavailable")
	}
	if s.DrainTimeout != nil && (s.DrainTimeout.Duration < 0 || s.DrainTimeout.Duration > time.Hour) {
		return fmt.Errorf("drainTimeout %s is not between 0 and 1h", s.DrainTimeout.Duration)
	}
	switch s.LogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("logLevel %q is not debug, info, warn or error", s.LogLevel)
	}
	return nil
}

// EffectiveMode is the class's mode with its default.
func (s *Spec) EffectiveMode() Mode {
	if s.Mode == "" {
		return ModeShared
	}
	return s.Mode
}

// DeepCopy copies p (jsoncopy.Copy).
func (p *PorticoParameters) DeepCopy() *PorticoParameters { return jsoncopy.Copy(p) }

// DeepCopyObject makes PorticoParameters a runtime.Object.
func (p *PorticoParameters) DeepCopyObject() runtime.Object { return p.DeepCopy() }
