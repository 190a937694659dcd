package translate

import (
	"portico.dev/portico/internal/controlplane/tlsrouting"
	"portico.dev/portico/routing"
)

// tlsRoutes attaches every TLSRoute to the TLS listeners of the merged list
// (package tlsrouting), with the listeners, parents and Services the
// HTTPRoutes saw, and records the routes' statuses. routes adds the counts
// to each listener's attachedRoutes.
func (t *translation) tlsRoutes(in routing.Input) tlsrouting.Output {
	out := tlsrouting.Compile(tlsrouting.Input{
		ControllerName:  in.ControllerName,
		Listeners:       in.Listeners,
		Parents:         in.Parents,
		Routes:          t.res.TLSRoutes,
		NamespaceLabels: in.NamespaceLabels,
		Services:        in.Services,
		ReferenceGrants: in.ReferenceGrants,
		ProxyProtocol:   t.traffic.proxyProtocol(),
	})
	t.st.TLSRoutes = out.RouteParents
	return out
}
