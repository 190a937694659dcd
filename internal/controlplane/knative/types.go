// Package knative holds Portico's own types for the two Knative Serving
// networking kinds it serves, Ingress (KIngress) and Certificate
// (networking.internal.knative.dev/v1alpha1), and the probe hash of an
// Ingress. Their JSON encoding is field for field the upstream API's: the
// hash Knative's prober compares is computed over it.
package knative

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Group and Version of both kinds.
const (
	Group   = "networking.internal.knative.dev"
	Version = "v1alpha1"
)

// Resources of both kinds, for the dynamic client.
var (
	IngressResource     = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "ingresses"}
	CertificateResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "certificates"}
)

// The annotations that select the implementation of an object, and the
// classes Portico answers to unless told otherwise.
const (
	IngressClassAnnotation     = "networking.knative.dev/ingress.class"
	CertificateClassAnnotation = "networking.knative.dev/certificate.class"
	DefaultIngressClass        = "portico.ingress.networking.knative.dev"
	DefaultCertificateClass    = "portico.certificate.networking.knative.dev"
)

// Ingress is a KIngress.
type Ingress struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              IngressSpec   `json:"spec,omitempty"`
	Status            IngressStatus `json:"status,omitempty"`
}

// IngressSpec is what Knative Serving asks of the ingress. The order and
// tags of every field here and below are the upstream ones: do not reorder.
type IngressSpec struct {
	TLS        []IngressTLS  `json:"tls,omitempty"`
	Rules      []IngressRule `json:"rules,omitempty"`
	HTTPOption HTTPOption    `json:"httpOption,omitempty"`
}

// HTTPOption says what plain HTTP does for external hosts with TLS.
type HTTPOption string

const (
	HTTPOptionEnabled    HTTPOption = "Enabled"
	HTTPOptionRedirected HTTPOption = "Redirected"
)

// Visibility says which gateway serves a rule's hosts.
type Visibility string

const (
	VisibilityExternalIP   Visibility = "ExternalIP"
	VisibilityClusterLocal Visibility = "ClusterLocal"
)

// IngressTLS is a certificate for some hosts, from a Secret.
type IngressTLS struct {
	Hosts           []string `json:"hosts,omitempty"`
	SecretName      string   `json:"secretName,omitempty"`
	SecretNamespace string   `json:"secretNamespace,omitempty"`
}

// IngressRule maps hosts to paths, on one visibility.
type IngressRule struct {
	Hosts      []string              `json:"hosts,omitempty"`
	Visibility Visibility            `json:"visibility,omitempty"`
	HTTP       *HTTPIngressRuleValue `json:"http,omitempty"`
}

// HTTPIngressRuleValue holds a rule's paths, the first match winning.
type HTTPIngressRuleValue struct {
	Paths []HTTPIngressPath `json:"paths"`
}

// HTTPIngressPath is one path: a literal prefix, header conditions, where
// to send it and which headers to set.
type HTTPIngressPath struct {
	Path          string                 `json:"path,omitempty"`
	RewriteHost   string                 `json:"rewriteHost,omitempty"`
	Headers       map[string]HeaderMatch `json:"headers,omitempty"`
	Splits        []IngressBackendSplit  `json:"splits"`
	AppendHeaders map[string]string      `json:"appendHeaders,omitempty"`
}

// HeaderMatch is an exact header value; "" means the header is present.
type HeaderMatch struct {
	Exact string `json:"exact"`
}

// IngressBackendSplit is a share of a path's traffic.
type IngressBackendSplit struct {
	IngressBackend `json:",inline"`
	Percent        int               `json:"percent,omitempty"`
	AppendHeaders  map[string]string `json:"appendHeaders,omitempty"`
}

// IngressBackend is a Service port.
type IngressBackend struct {
	ServiceNamespace string             `json:"serviceNamespace"`
	ServiceName      string             `json:"serviceName"`
	ServicePort      intstr.IntOrString `json:"servicePort"`
}

// IngressStatus is what the ingress reports.
type IngressStatus struct {
	ObservedGeneration  int64               `json:"observedGeneration,omitempty"`
	Conditions          []Condition         `json:"conditions,omitempty"`
	Annotations         map[string]string   `json:"annotations,omitempty"`
	PublicLoadBalancer  *LoadBalancerStatus `json:"publicLoadBalancer,omitempty"`
	PrivateLoadBalancer *LoadBalancerStatus `json:"privateLoadBalancer,omitempty"`
}

// LoadBalancerStatus lists where a visibility's traffic goes.
type LoadBalancerStatus struct {
	Ingress []LoadBalancerIngressStatus `json:"ingress,omitempty"`
}

// LoadBalancerIngressStatus is one such place.
type LoadBalancerIngressStatus struct {
	IP             string `json:"ip,omitempty"`
	Domain         string `json:"domain,omitempty"`
	DomainInternal string `json:"domainInternal,omitempty"`
	MeshOnly       bool   `json:"meshOnly,omitempty"`
}

// Condition is a Knative condition (knative.dev/pkg/apis.Condition's
// encoding).
type Condition struct {
	Type               string                 `json:"type"`
	Status             metav1.ConditionStatus `json:"status"`
	Severity           string                 `json:"severity,omitempty"`
	LastTransitionTime *metav1.Time           `json:"lastTransitionTime,omitempty"`
	Reason             string                 `json:"reason,omitempty"`
	Message            string                 `json:"message,omitempty"`
}

// Condition types of both kinds.
const (
	ConditionReady             = "Ready"
	ConditionNetworkConfigured = "NetworkConfigured"
	ConditionLoadBalancerReady = "LoadBalancerReady"
)

// Certificate asks for a certificate for some DNS names in a Secret.
type Certificate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              CertificateSpec   `json:"spec,omitempty"`
	Status            CertificateStatus `json:"status,omitempty"`
}

// CertificateSpec is the names and the Secret to write.
type CertificateSpec struct {
	DNSNames   []string `json:"dnsNames"`
	Domain     string   `json:"domain,omitempty"`
	SecretName string   `json:"secretName"`
}

// CertificateStatus is what the certificate class reports.
type CertificateStatus struct {
	ObservedGeneration int64             `json:"observedGeneration,omitempty"`
	Conditions         []Condition       `json:"conditions,omitempty"`
	Annotations        map[string]string `json:"annotations,omitempty"`
	NotAfter           *metav1.Time      `json:"notAfter,omitempty"`
	HTTP01Challenges   []HTTP01Challenge `json:"http01Challenges,omitempty"`
}

// HTTP01Challenge is a challenge Knative routes to its solver; Portico
// answers its own on the external gateway and lists none.
type HTTP01Challenge struct {
	URL              string             `json:"url,omitempty"`
	ServiceName      string             `json:"serviceName,omitempty"`
	ServiceNamespace string             `json:"serviceNamespace,omitempty"`
	ServicePort      intstr.IntOrString `json:"servicePort,omitempty"`
}
