package translate

import (
	"portico.dev/portico/internal/controlplane/tcprouting"
	"portico.dev/portico/routing"
)

// tcpRoutes attaches every TCPRoute to the TCP listeners and every UDPRoute
// to the UDP listeners of the merged list (package tcprouting), with the
// listeners, parents and Services the HTTPRoutes saw, and records the
// routes' statuses. routes adds the counts
// to each listener's attachedRoutes.
func (t *translation) tcpRoutes(in routing.Input) tcprouting.Output {
	out := tcprouting.Compile(tcprouting.Input{
		ControllerName:  in.ControllerName,
		Listeners:       in.Listeners,
		Parents:         in.Parents,
		Routes:          t.res.TCPRoutes,
		UDPRoutes:       t.res.UDPRoutes,
		NamespaceLabels: in.NamespaceLabels,
		Services:        in.Services,
		ReferenceGrants: in.ReferenceGrants,
		ProxyProtocol:   t.traffic.proxyProtocol(),
	})
	t.st.TCPRoutes = out.RouteParents
	t.st.UDPRoutes = out.UDPRouteParents
	return out
}
