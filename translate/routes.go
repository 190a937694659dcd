package translate

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/listeners"
	"portico.dev/portico/routing"
)

// routes attaches every HTTPRoute and GRPCRoute to the merged listeners and compiles each
// listener's route table (package routing), then records the routes'
// statuses and each listener's attachedRoutes.
func (t *translation) routes() {
	res := t.res
	in := routing.Input{
		ControllerName:  t.controller,
		Listeners:       make([]routing.Listener, len(t.merged)),
		Parents:         t.parents,
		Routes:          res.HTTPRoutes,
		GRPCRoutes:      res.GRPCRoutes,
		NamespaceLabels: t.ix.nsLabels,
		Services:        t.services(),
		ReferenceGrants: res.ReferenceGrants,
		Traffic:         withClientRules(t.traffic.traffic(), t.client.rules()),
		Security:        t.security.rules(),
	}
	t.routingServices = in.Services
	for i := range t.merged {
		in.Listeners[i] = routingListener(i, &t.merged[i])
	}
	t.compiled = routing.Compile(in)
	t.compiledTLS = t.tlsRoutes(in)
	t.compiledTCP = t.tcpRoutes(in)

	// The maps of the compiled output and of a single result are ours
	// alone: they become the statuses without a copy.
	t.st.HTTPRoutes = t.compiled.RouteParents
	t.st.GRPCRoutes = t.compiled.GRPCRouteParents
	if len(t.results) == 1 {
		t.st.ListenerSets = t.results[0].ListenerSets
	} else {
		t.st.ListenerSets = make(map[types.NamespacedName]gwv1.ListenerSetStatus, len(res.ListenerSets))
		for _, r := range t.results {
			for lsKey, lss := range r.ListenerSets {
				t.st.ListenerSets[lsKey] = lss
			}
		}
	}
	offset := 0
	for _, r := range t.results {
		for i := range r.Listeners {
			r.SetAttachedRoutes(i, t.compiled.AttachedRoutes[offset+i]+t.compiledTLS.AttachedRoutes[offset+i]+t.compiledTCP.AttachedRoutes[offset+i])
		}
		offset += len(r.Listeners)
		t.st.Gateways[r.key] = r.Gateway
	}
}

// routingListener is merged listener m as routing sees it, with ID i.
func routingListener(i int, m *listeners.Listener) routing.Listener {
	return routing.Listener{
		ID:             i,
		Gateway:        m.Gateway,
		Parent:         routing.Parent{Kind: m.Source.Kind, Namespace: m.Source.Namespace, Name: m.Source.Name},
		Name:           m.Name,
		Port:           m.Port,
		Protocol:       m.Protocol,
		Hostname:       m.Hostname,
		AllowedRoutes:  m.AllowedRoutes,
		SupportedKinds: m.SupportedKinds,
		// A conflicted listener still counts the routes that attach to it
		// (the spec requires attachedRoutes whatever the listener's
		// state); it just is not put on the data plane.
		Accepted: m.Accepted || m.Conflicted,
	}
}

// service is one Service as routes see it (see services).
func (t *translation) service(svc *corev1.Service) routing.Service {
	key := nn(svc.Namespace, svc.Name)
	tr := t.traffic.service(key)
	rs := t.xtraffic.withX(key, routing.Service{LB: tr.LB, Outlier: tr.Outlier, Active: tr.Active, Breaker: tr.Breaker, Conn: tr.Conn})
	if len(svc.Spec.Ports) > 0 {
		rs.Ports = make([]routing.ServicePort, 0, len(svc.Spec.Ports))
	}
	for _, p := range svc.Spec.Ports {
		rs.Ports = append(rs.Ports, routing.ServicePort{Name: p.Name, Port: p.Port, AppProtocol: ptr.Deref(p.AppProtocol, ""),
			TLS: t.tls.forPort(key, p.Name)})
	}
	return rs
}

// services are the Services routes may name, with the TLS settings of
// each port's BackendTLSPolicy.
func (t *translation) services() map[types.NamespacedName]routing.Service {
	res := t.res
	out := make(map[types.NamespacedName]routing.Service, len(res.Services))
	nports := 0
	for _, svc := range res.Services {
		nports += len(svc.Spec.Ports)
	}
	ports := make([]routing.ServicePort, 0, nports) // every Service's ports are a piece of it
	for _, svc := range res.Services {              // a Service listed twice: the last one counts
		start := len(ports)
		key := nn(svc.Namespace, svc.Name)
		for _, p := range svc.Spec.Ports {
			ports = append(ports, routing.ServicePort{Name: p.Name, Port: p.Port, AppProtocol: ptr.Deref(p.AppProtocol, ""),
				TLS: t.tls.forPort(key, p.Name)})
		}
		tr := t.traffic.service(key)
		rs := t.xtraffic.withX(key, routing.Service{LB: tr.LB, Outlier: tr.Outlier, Active: tr.Active, Breaker: tr.Breaker, Conn: tr.Conn})
		if len(ports) > start {
			rs.Ports = ports[start:len(ports):len(ports)]
		}
		out[key] = rs
	}
	return out
}
