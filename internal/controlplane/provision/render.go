package provision

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Settings are the controller's, the same for every data plane.
type Settings struct {
	// Image of the data plane: Portico's own.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	// Controller is the host:port data planes connect to for their
	// configuration; ControllerCA the PEM certificate they verify it with.
	Controller   string
	ControllerCA string
}

// ControllerCAEnv is the environment variable that hands a data plane the
// controller's certificate.
const ControllerCAEnv = "PORTICO_CONTROLLER_CA"

// TokenAudience is the audience of the ServiceAccount token a data plane
// presents to the controller: a token meant for the API server or for
// anything else is refused there.
const TokenAudience = "portico.dev/data-plane"

// TokenPath is where a data plane's projected token is mounted.
const TokenPath = "/var/run/secrets/portico.dev/token"

// AdminPort serves a data plane's /readyz and /metrics.
const AdminPort = 9090

const defaultDrain = 30 * time.Second

// Objects are a data plane's objects; PodDisruptionBudget is nil when the
// parameters ask for none.
type Objects struct {
	ServiceAccount      *corev1.ServiceAccount
	Deployment          *appsv1.Deployment
	Service             *corev1.Service
	PodDisruptionBudget *policyv1.PodDisruptionBudget
}

// Render is the objects of in's data plane, as applied with server-side
// apply: only the fields Portico owns are set.
func Render(s Settings, in Input) Objects {
	name := Name(in.Gateway.Name, in.ClassName)
	labels, annotations := metadata(&in)
	meta := func(kind, apiVersion string) (metav1.TypeMeta, metav1.ObjectMeta) {
		return metav1.TypeMeta{Kind: kind, APIVersion: apiVersion}, metav1.ObjectMeta{
			Name:            name,
			Namespace:       in.Gateway.Namespace,
			Labels:          maps.Clone(labels),
			Annotations:     maps.Clone(annotations),
			OwnerReferences: []metav1.OwnerReference{owner(in.Gateway)},
		}
	}
	var o Objects
	o.ServiceAccount = &corev1.ServiceAccount{AutomountServiceAccountToken: ptr.To(false)}
	o.ServiceAccount.TypeMeta, o.ServiceAccount.ObjectMeta = meta("ServiceAccount", "v1")
	o.Deployment = &appsv1.Deployment{Spec: deploymentSpec(s, &in, name, labels, annotations)}
	o.Deployment.TypeMeta, o.Deployment.ObjectMeta = meta("Deployment", "apps/v1")
	o.Service = &corev1.Service{Spec: serviceSpec(&in)}
	o.Service.TypeMeta, o.Service.ObjectMeta = meta("Service", "v1")
	if sv := in.Parameters.Service; sv != nil {
		maps.Copy(o.Service.Annotations, sv.Annotations)
	}
	if p := in.Parameters.PodDisruptionBudget; p != nil {
		o.PodDisruptionBudget = &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(in.Gateway.Name, in.ClassName)},
			MinAvailable:   p.MinAvailable,
			MaxUnavailable: p.MaxUnavailable,
		}}
		o.PodDisruptionBudget.TypeMeta, o.PodDisruptionBudget.ObjectMeta = meta("PodDisruptionBudget", "policy/v1")
	}
	return o
}

func owner(gw *gwv1.Gateway) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: gwv1.GroupVersion.String(),
		Kind:       "Gateway",
		Name:       gw.Name,
		UID:        gw.UID,
		Controller: ptr.To(true),
	}
}

func deploymentSpec(s Settings, in *Input, name string, labels, annotations map[string]string) appsv1.DeploymentSpec {
	p := in.Parameters
	drain := defaultDrain
	if p.DrainTimeout != nil {
		drain = p.DrainTimeout.Duration
	}
	level := p.LogLevel
	if level == "" {
		level = "info"
	}
	c := corev1.Container{
		Name:            "portico",
		Image:           s.Image,
		ImagePullPolicy: s.ImagePullPolicy,
		Args: []string{
			"serve",
			"--gateway=" + in.Gateway.Namespace + "/" + in.Gateway.Name,
			"--controller-address=" + s.Controller,
			"--controller-token=" + TokenPath + "/token",
			fmt.Sprintf("--admin-address=:%d", AdminPort),
			"--drain-timeout=" + drain.String(),
			"--log-level=" + level,
			"--log-format=json",
		},
		Env: []corev1.EnvVar{
			{Name: ControllerCAEnv, Value: s.ControllerCA},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		},
		Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: AdminPort, Protocol: corev1.ProtocolTCP}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("admin")}},
			PeriodSeconds:    2,
			FailureThreshold: 2,
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "token", MountPath: TokenPath, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
	}
	for _, port := range sortedPorts(in.Ports) {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: portName(port), ContainerPort: port.Port, Protocol: transport(port)})
	}
	if p.Resources != nil {
		c.Resources = *p.Resources
	}
	selector := SelectorLabels(in.Gateway.Name, in.ClassName)
	return appsv1.DeploymentSpec{
		Replicas: p.Replicas,
		Selector: &metav1.LabelSelector{MatchLabels: selector},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels), Annotations: maps.Clone(annotations)},
			Spec: corev1.PodSpec{
				ServiceAccountName:            name,
				AutomountServiceAccountToken:  ptr.To(false),
				TerminationGracePeriodSeconds: ptr.To(int64((drain + 15*time.Second) / time.Second)),
				NodeSelector:                  p.NodeSelector,
				Tolerations:                   p.Tolerations,
				SecurityContext: &corev1.PodSecurityContext{
					RunAsNonRoot:   ptr.To(true),
					RunAsUser:      ptr.To(int64(65532)),
					RunAsGroup:     ptr.To(int64(65532)),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					// Listener ports below 1024 without a capability.
					Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}},
				},
				Containers: []corev1.Container{c},
				Volumes: []corev1.Volume{{Name: "token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
						Audience: TokenAudience, ExpirationSeconds: ptr.To(int64(3600)), Path: "token",
					}}},
				}}}},
			},
		},
	}
}

// transport is the Kubernetes protocol of a listener port.
func transport(p Port) corev1.Protocol {
	if p.Protocol == gwv1.UDPProtocolType {
		return corev1.ProtocolUDP
	}
	return corev1.ProtocolTCP
}

func portName(p Port) string {
	proto := "http"
	switch p.Protocol {
	case gwv1.HTTPSProtocolType, gwv1.TLSProtocolType:
		proto = "https"
	case gwv1.UDPProtocolType:
		proto = "udp"
	}
	return fmt.Sprintf("%s-%d", proto, p.Port)
}

// serviceSpec: the listener ports, the parameters' type (LoadBalancer by
// default; ClusterIP when every spec.addresses entry asks for routability
// Cluster), the Gateway's first IPAddress
// value with routability Cluster as cluster IP, and its first other one as
// the address asked of the load balancer (or as the cluster IP of a
// ClusterIP Service). The Gateway's status reports what the Service then got, and
// an address asked for but not given is AddressNotUsable there.
func serviceSpec(in *Input) corev1.ServiceSpec {
	spec := corev1.ServiceSpec{
		Type:     corev1.ServiceTypeLoadBalancer,
		Selector: SelectorLabels(in.Gateway.Name, in.ClassName),
	}
	if sv := in.Parameters.Service; sv != nil {
		if sv.Type != nil {
			spec.Type = *sv.Type
		}
		if spec.Type == corev1.ServiceTypeLoadBalancer {
			spec.LoadBalancerClass = sv.LoadBalancerClass
		}
		if spec.Type != corev1.ServiceTypeClusterIP {
			spec.ExternalTrafficPolicy = ptr.Deref(sv.ExternalTrafficPolicy, "")
		}
	}
	for _, port := range sortedPorts(in.Ports) {
		spec.Ports = append(spec.Ports, corev1.ServicePort{
			Name: portName(port), Port: port.Port, TargetPort: intstr.FromInt32(port.Port), Protocol: transport(port),
		})
	}
	if onlyCluster(in.Gateway) {
		// Every address asked for is to be a cluster IP (routability
		// Cluster): no load balancer is needed, nor wanted, whatever
		// type the parameters name for the class's other Gateways.
		spec.Type = corev1.ServiceTypeClusterIP
		spec.ExternalTrafficPolicy = ""
	}
	if ip := RequestedIP(in.Gateway, gwv1.GatewayAddressRoutabilityCluster); ip != "" {
		spec.ClusterIP = ip
	}
	if ip := RequestedIP(in.Gateway, gwv1.GatewayAddressRoutabilityDefault); ip != "" {
		if spec.Type == corev1.ServiceTypeClusterIP {
			if spec.ClusterIP == "" {
				spec.ClusterIP = ip
			}
		} else {
			spec.LoadBalancerIP = ip
		}
	}
	return spec
}

// RequestedIP is the first IPAddress value of gw's spec.addresses asking
// for routability (testing.x-k8s.io/sentinel counting as the default ""),
// the one its Service asks for as load balancer IP ("") or cluster IP
// (Cluster); "" when it names none.
func RequestedIP(gw *gwv1.Gateway, routability gwv1.GatewayAddressRoutabilityType) string {
	for _, a := range gw.Spec.Addresses {
		if a.Type != nil && *a.Type != gwv1.IPAddressType || a.Value == "" {
			continue
		}
		r := a.Routability
		if r != gwv1.GatewayAddressRoutabilityCluster {
			r = gwv1.GatewayAddressRoutabilityDefault
		}
		if r != routability {
			continue
		}
		if addr, err := netip.ParseAddr(strings.TrimSpace(a.Value)); err == nil {
			return addr.String()
		}
	}
	return ""
}

// onlyCluster reports whether every spec.addresses entry of gw asks for
// routability Cluster, and there is one.
func onlyCluster(gw *gwv1.Gateway) bool {
	for _, a := range gw.Spec.Addresses {
		if a.Routability != gwv1.GatewayAddressRoutabilityCluster {
			return false
		}
	}
	return len(gw.Spec.Addresses) > 0
}
