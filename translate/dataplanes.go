package translate

import (
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/conditions"
	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/listeners"
)

// addDataPlane records a Gateway of a class whose Gateways have data
// planes of their own (GEP-1762), with the ports of every listener merged
// into it (its own and its attached ListenerSets').
func (t *translation) addDataPlane(gw *gwv1.Gateway, r *listeners.Result, params parameters.Spec) {
	if t.perGateway == nil {
		t.perGateway = map[types.NamespacedName]bool{}
	}
	t.perGateway[nn(gw.Namespace, gw.Name)] = true
	ports := make([]provision.Port, 0, len(r.Listeners))
	for _, l := range r.Listeners {
		ports = append(ports, provision.Port{Port: int32(l.Port), Protocol: l.Protocol})
	}
	t.dataPlanes = append(t.dataPlanes, provision.Input{
		Gateway:    gw,
		ClassName:  string(gw.Spec.GatewayClassName),
		Parameters: params,
		Ports:      ports,
		Accepted:   meta.IsStatusConditionTrue(r.Gateway.Conditions, string(gwv1.GatewayConditionAccepted)),
	})
}

// servesHere says whether this translation's Config serves the Gateway
// key: its own data plane serves one Gateway; the shared one every
// Gateway that has none of its own.
func (t *translation) servesHere(key types.NamespacedName) bool {
	if t.settings.Gateway != nil {
		return key == *t.settings.Gateway
	}
	return !t.perGateway[key]
}

// perGatewayUnsupportedAddress: a Gateway with its own data plane is
// reached on the IP addresses of its Service; a Hostname address cannot be
// asked of a Service.
func perGatewayUnsupportedAddress(gw *gwv1.Gateway) string {
	for _, a := range gw.Spec.Addresses {
		if typ := addressType(a.Type); typ != gwv1.IPAddressType {
			return fmt.Sprintf("address %q: type %q is not supported: a Gateway's own data plane is reached "+
				"on the IP addresses of its Service", a.Value, typ)
		}
	}
	return ""
}

// dataPlaneStatuses sets the addresses and Programmed condition of every
// accepted Gateway with a data plane of its own: its addresses are those
// of its Service (dataPlaneAddresses), and it is
// programmed once it has one and a replica of its Deployment is available.
func (t *translation) dataPlaneStatuses() {
	holders := provision.Holders(t.dataPlanes)
	for _, dp := range t.dataPlanes {
		if !dp.Accepted {
			continue
		}
		key := nn(dp.Gateway.Namespace, dp.Gateway.Name)
		gs := t.st.Gateways[key]
		name := provision.Name(dp.Gateway.Name, dp.ClassName)
		if h := holders[[2]string{key.Namespace, name}]; h != dp.Gateway {
			// The Service and Deployment of that name are the other
			// Gateway's: their addresses are not this one's.
			gs.Addresses = nil
			gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse, gwv1.GatewayReasonInvalid,
				fmt.Sprintf("its data plane would be named %s like that of Gateway %s, created before it: rename this Gateway", name, h.Name))
			t.st.Gateways[key] = gs
			continue
		}
		svc := findNamed(t.res.Services, key.Namespace, name)
		dep := findNamed(t.res.Deployments, key.Namespace, name)
		var own ownAddresses
		if svc != nil {
			own = ownAddresses{def: dataPlaneAddresses(svc), cluster: clusterIPs(svc)}
		}
		m := perGatewayAddresses(dp.Gateway, own)
		gs.Addresses = m.out
		reason, problem := m.reason, m.problem
		if svc != nil && (len(own.def) > 0 || len(own.cluster) > 0) {
			// The Service has its addresses: assignment is decided.
			setAddressesAssigned(&gs, len(dp.Gateway.Spec.Addresses), m.met, m.unmet)
		}
		switch {
		case problem != "":
		case m.met == 0 && len(m.unmet) > 0:
			// AddressesAssigned has made Programmed False
			// (AddressNotAssigned) and said why.
		case len(gs.Addresses) == 0 && svc != nil && len(dp.Gateway.Spec.Addresses) > 0:
			reason, problem = gwv1.GatewayReasonAddressNotUsable, fmt.Sprintf("the load balancer has not given Service %s/%s "+
				"the addresses spec.addresses asks for", key.Namespace, name)
		case len(gs.Addresses) == 0:
			reason, problem = gwv1.GatewayReasonAddressNotAssigned, fmt.Sprintf("waiting for Service %s/%s to get an address", key.Namespace, name)
		case dep == nil || dep.Status.AvailableReplicas == 0:
			reason, problem = gwv1.GatewayReasonPending, fmt.Sprintf("waiting for an available replica of Deployment %s/%s", key.Namespace, name)
		}
		if problem != "" {
			gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse, reason, problem)
		}
		t.st.Gateways[key] = gs
	}
}

// dataPlaneAddresses are the addresses of a data plane's Service. Those of
// a LoadBalancer Service are its load balancer's only: until it has one,
// the Gateway has no address (and is not Programmed), as its cluster IP is
// not where the Gateway's clients are; reported first, it is the address
// they would keep using.
func dataPlaneAddresses(svc *corev1.Service) []gwv1.GatewayStatusAddress {
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) == 0 {
		return nil
	}
	return serviceAddresses(svc)
}

// perGatewayAddresses maps spec.addresses onto what the Gateway's Service
// got: an IPAddress value it did not get is AddressNotUsable. Its cluster
// IPs meet requests for routability Cluster, its load balancer's
// addresses (or, for a ClusterIP Service, its cluster IPs) the others.
func perGatewayAddresses(gw *gwv1.Gateway, own ownAddresses) addressMatch {
	if len(own.def) == 0 && !onlyClusterRequested(gw) {
		return addressMatch{} // still waiting for the Service's address
	}
	m := sharedAddresses(gw, own)
	if m.problem != "" {
		m.problem = fmt.Sprintf("the Gateway's Service has %s; spec.addresses asks for others",
			addressList(append(slices.Clone(own.def), own.cluster...)))
	}
	return m
}

// onlyClusterRequested reports whether every spec.addresses entry of gw
// asks for routability Cluster (and there is one): its data plane's
// cluster IP is then all it waits for.
func onlyClusterRequested(gw *gwv1.Gateway) bool {
	for _, a := range gw.Spec.Addresses {
		if a.Routability != gwv1.GatewayAddressRoutabilityCluster {
			return false
		}
	}
	return len(gw.Spec.Addresses) > 0
}

func addressList(as []gwv1.GatewayStatusAddress) string {
	s := ""
	for i, a := range as {
		if i > 0 {
			s += ", "
		}
		s += a.Value
	}
	return s
}

type named interface {
	*corev1.Service | *appsv1.Deployment
	GetNamespace() string
	GetName() string
}

func findNamed[T named](objs []T, namespace, name string) T {
	for _, o := range objs {
		if o.GetNamespace() == namespace && o.GetName() == name {
			return o
		}
	}
	var zero T
	return zero
}
