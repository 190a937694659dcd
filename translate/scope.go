package translate

import (
	"slices"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/telemetrypolicy"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
	"portico.dev/portico/internal/controlplane/xtrafficpolicy"
	"portico.dev/portico/listeners"
)

// Scope is the part of res that the data plane of one Gateway needs
// (GEP-1762): translated with Settings.Gateway set to gw, it gives the same
// Config as res does. It holds the Gateway, its class and their
// parameters, its ListenerSets, the HTTPRoutes attached to either, the
// Secrets their listeners and the Gateway's backend client certificate
// name (of another namespace only when a ReferenceGrant lets the
// referring object use them), the Services (and their EndpointSlices) routes send to, the
// BackendTLSPolicies of those Services and the ConfigMaps they and the
// Gateway's client validation name, every ReferenceGrant and Namespace
// (small, and read by attachment and reference rules), and no other
// Secret: a data plane never sees another Gateway's keys.
func Scope(res *snapshot.Resources, gw types.NamespacedName) *snapshot.Resources {
	out := &snapshot.Resources{ReferenceGrants: res.ReferenceGrants, Namespaces: res.Namespaces, ACMEErrors: res.ACMEErrors}
	var g *gwv1.Gateway
	for _, x := range res.Gateways {
		if x.Namespace == gw.Namespace && x.Name == gw.Name {
			g = x
		}
	}
	if g == nil {
		return out
	}
	out.Gateways = []*gwv1.Gateway{g}
	secrets := map[types.NamespacedName]bool{}
	// A Secret of another namespace is sent only when a ReferenceGrant
	// lets the declaring object use it: the data plane runs in the
	// Gateway's namespace, so what it receives its namespace can read.
	addSecret := func(src listeners.Source, ref gwv1.SecretObjectReference) {
		key := nn(refNamespace(src.Namespace, ref.Namespace), string(ref.Name))
		if key.Namespace == src.Namespace || listeners.Granted(res.ReferenceGrants, src, "Secret", key) {
			secrets[key] = true
		}
	}
	addCerts := func(src listeners.Source, ls []gwv1.Listener) {
		for _, l := range ls {
			if l.TLS != nil {
				for _, ref := range l.TLS.CertificateRefs {
					addSecret(src, ref)
				}
			}
		}
	}
	gwSource := listeners.Source{Kind: "Gateway", Namespace: g.Namespace, Name: g.Name}
	addCerts(gwSource, g.Spec.Listeners)
	if g.Spec.TLS != nil && g.Spec.TLS.Backend != nil && g.Spec.TLS.Backend.ClientCertificateRef != nil {
		addSecret(gwSource, *g.Spec.TLS.Backend.ClientCertificateRef)
	}
	parents := map[string]bool{"Gateway/" + gw.String(): true}
	for _, ls := range res.ListenerSets {
		if p, ok := ListenerSetParent(ls); ok && p == gw {
			out.ListenerSets = append(out.ListenerSets, ls)
			parents["ListenerSet/"+nn(ls.Namespace, ls.Name).String()] = true
			lis := make([]gwv1.Listener, len(ls.Spec.Listeners))
			for i, l := range ls.Spec.Listeners {
				lis[i] = gwv1.Listener{TLS: l.TLS}
			}
			addCerts(listeners.Source{Kind: "ListenerSet", Namespace: ls.Namespace, Name: ls.Name}, lis)
		}
	}
	scopeClass(res, out, g)
	services := scopeRoutes(res, out, parents)
	// The authorization Services of its listeners' filters are its
	// backends too.
	addFilterService := func(ns, name string) { services[nn(ns, name)] = true }
	listenerFilterServices(g.Spec.Listeners, gwSource, res.ReferenceGrants, addFilterService)
	for _, ls := range out.ListenerSets {
		listenerFilterServices(listenerSetListeners(ls), listeners.Source{Kind: "ListenerSet", Namespace: ls.Namespace, Name: ls.Name}, res.ReferenceGrants, addFilterService)
	}
	for _, s := range res.Secrets {
		if secrets[nn(s.Namespace, s.Name)] {
			out.Secrets = append(out.Secrets, s)
		}
	}
	scopeSecurityPolicies(res, out, gw)
	for _, p := range out.SecurityPolicies {
		// The authorization Services of its policies are its backends
		// (those they may use: another namespace's needs a grant).
		if svc, ok := p.ExtAuthService(); ok && securitypolicy.ServiceGranted(res.ReferenceGrants, p.Namespace, svc) {
			services[svc] = true
		}
	}
	scopeTelemetryPolicies(res, out, gw, services)
	scopeBackends(res, out, services)
	scopeTrafficPolicies(res, out, gw, services)
	scopeClientPolicies(res, out, gw)
	scopeXTrafficPolicies(res, out, services)
	specOnly(out)
	return out
}

// specOnly replaces the Gateway API objects of a scoped snapshot with
// copies without their status and resource version, which translate does
// not read for a data plane: a status write must not make a new snapshot
// (the data plane's acknowledgement of it would move the status again).
// The copies are shallow; nothing of them is modified.
func specOnly(out *snapshot.Resources) {
	withoutStatus(out.GatewayClasses, func(o *gwv1.GatewayClass) { o.Status = gwv1.GatewayClassStatus{} })
	withoutStatus(out.Gateways, func(o *gwv1.Gateway) { o.Status = gwv1.GatewayStatus{} })
	withoutStatus(out.ListenerSets, func(o *gwv1.ListenerSet) { o.Status = gwv1.ListenerSetStatus{} })
	withoutStatus(out.HTTPRoutes, func(o *gwv1.HTTPRoute) { o.Status = gwv1.HTTPRouteStatus{} })
	withoutStatus(out.TLSRoutes, func(o *gwv1.TLSRoute) { o.Status = gwv1.TLSRouteStatus{} })
	withoutStatus(out.TCPRoutes, func(o *gwv1.TCPRoute) { o.Status = gwv1.TCPRouteStatus{} })
	withoutStatus(out.UDPRoutes, func(o *gwv1.UDPRoute) { o.Status = gwv1.UDPRouteStatus{} })
	withoutStatus(out.GRPCRoutes, func(o *gwv1.GRPCRoute) { o.Status = gwv1.GRPCRouteStatus{} })
	withoutStatus(out.BackendTLSPolicies, func(o *gwv1.BackendTLSPolicy) { o.Status = gwv1.PolicyStatus{} })
	withoutStatus(out.TrafficPolicies, func(o *trafficpolicy.BackendTrafficPolicy) { o.Status = gwv1.PolicyStatus{} })
	withoutStatus(out.SecurityPolicies, func(o *securitypolicy.SecurityPolicy) { o.Status = gwv1.PolicyStatus{} })
	withoutStatus(out.ClientPolicies, func(o *clientpolicy.ClientTrafficPolicy) { o.Status = gwv1.PolicyStatus{} })
	withoutStatus(out.XTrafficPolicies, func(o *gwxv1a1.XBackendTrafficPolicy) { o.Status = gwv1.PolicyStatus{} })
	withoutStatus(out.TelemetryPolicies, func(o *gwxv1a1.XTelemetryPolicy) { o.Status = gwxv1a1.TelemetryPolicyStatus{} })
}

// withoutStatus replaces each object of objs with a shallow copy that
// clear has emptied the status of, and without its resource version.
func withoutStatus[T any, P interface {
	*T
	SetResourceVersion(string)
}](objs []P, clear func(P)) {
	for i, o := range objs {
		c := P(new(T))
		*c = *o
		clear(c)
		c.SetResourceVersion("")
		objs[i] = c
	}
}

// scopeClass adds g's class and the parameters it and g name.
func scopeClass(res, out *snapshot.Resources, g *gwv1.Gateway) {
	params := map[types.NamespacedName]bool{}
	for _, c := range res.GatewayClasses {
		if c.Name == string(g.Spec.GatewayClassName) {
			out.GatewayClasses = append(out.GatewayClasses, c)
			if r := c.Spec.ParametersRef; r != nil && r.Namespace != nil {
				params[nn(string(*r.Namespace), r.Name)] = true
			}
		}
	}
	if g.Spec.Infrastructure != nil && g.Spec.Infrastructure.ParametersRef != nil {
		params[nn(g.Namespace, g.Spec.Infrastructure.ParametersRef.Name)] = true
	}
	for _, p := range res.Parameters {
		if params[nn(p.Namespace, p.Name)] {
			out.Parameters = append(out.Parameters, p)
		}
	}
}

// scopeRoutes adds the HTTPRoutes, GRPCRoutes, TLSRoutes, TCPRoutes and UDPRoutes with a parentRef among parents
// ("Kind/namespace/name") and returns the Services they send to.
func scopeRoutes(res, out *snapshot.Resources, parents map[string]bool) map[types.NamespacedName]bool {
	services := map[types.NamespacedName]bool{}
	for _, r := range res.GRPCRoutes {
		if !attachedTo(r.Namespace, r.Spec.ParentRefs, parents) {
			continue
		}
		out.GRPCRoutes = append(out.GRPCRoutes, r)
		addRef := backendAdder(services, r.Namespace)
		addMirrors := func(fs []gwv1.GRPCRouteFilter) {
			for _, f := range fs {
				if f.RequestMirror != nil {
					addRef(f.RequestMirror.BackendRef)
				}
			}
		}
		for _, rule := range r.Spec.Rules {
			addMirrors(rule.Filters)
			for _, b := range rule.BackendRefs {
				addRef(b.BackendObjectReference)
				addMirrors(b.Filters)
			}
		}
	}
	for _, r := range res.TLSRoutes {
		if !attachedTo(r.Namespace, r.Spec.ParentRefs, parents) {
			continue
		}
		out.TLSRoutes = append(out.TLSRoutes, r)
		addRef := backendAdder(services, r.Namespace)
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				addRef(b.BackendObjectReference)
			}
		}
	}
	for _, r := range res.TCPRoutes {
		if !attachedTo(r.Namespace, r.Spec.ParentRefs, parents) {
			continue
		}
		out.TCPRoutes = append(out.TCPRoutes, r)
		addRef := backendAdder(services, r.Namespace)
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				addRef(b.BackendObjectReference)
			}
		}
	}
	for _, r := range res.UDPRoutes {
		if !attachedTo(r.Namespace, r.Spec.ParentRefs, parents) {
			continue
		}
		out.UDPRoutes = append(out.UDPRoutes, r)
		addRef := backendAdder(services, r.Namespace)
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				addRef(b.BackendObjectReference)
			}
		}
	}
	for _, r := range res.HTTPRoutes {
		if !attachedTo(r.Namespace, r.Spec.ParentRefs, parents) {
			continue
		}
		out.HTTPRoutes = append(out.HTTPRoutes, r)
		eachBackendRef(r, backendAdder(services, r.Namespace))
	}
	return services
}

// attachedTo reports whether a route in namespace ns has a parentRef
// among parents ("Kind/namespace/name").
func attachedTo(ns string, refs []gwv1.ParentReference, parents map[string]bool) bool {
	for _, p := range refs {
		kind := "Gateway"
		if p.Kind != nil {
			kind = string(*p.Kind)
		}
		if parents[kind+"/"+nn(refNamespace(ns, p.Namespace), string(p.Name)).String()] {
			return true
		}
	}
	return false
}

// backendAdder returns a function that adds the Service a backend
// reference of a route in namespace ns names to services.
func backendAdder(services map[types.NamespacedName]bool, ns string) func(gwv1.BackendObjectReference) {
	return func(ref gwv1.BackendObjectReference) {
		if (ref.Group == nil || *ref.Group == "") && (ref.Kind == nil || *ref.Kind == "Service") {
			services[nn(refNamespace(ns, ref.Namespace), string(ref.Name))] = true
		}
	}
}

// scopeBackends adds the Services routes send to, their EndpointSlices,
// the BackendTLSPolicies that target them, and the ConfigMaps those and
// the Gateway name.
func scopeBackends(res, out *snapshot.Resources, services map[types.NamespacedName]bool) {
	for _, s := range res.Services {
		if services[nn(s.Namespace, s.Name)] {
			out.Services = append(out.Services, s)
		}
	}
	for _, es := range res.EndpointSlices {
		if services[nn(es.Namespace, es.Labels[discoveryv1.LabelServiceName])] {
			out.EndpointSlices = append(out.EndpointSlices, es)
		}
	}
	for _, p := range res.BackendTLSPolicies {
		for _, t := range p.Spec.TargetRefs {
			if t.Group == "" && t.Kind == "Service" && services[nn(p.Namespace, string(t.Name))] {
				out.BackendTLSPolicies = append(out.BackendTLSPolicies, p)
				break
			}
		}
	}
	names := configMapNames(out)
	for _, cm := range res.ConfigMaps {
		if names[nn(cm.Namespace, cm.Name)] {
			out.ConfigMaps = append(out.ConfigMaps, cm)
		}
	}
	// Only the ClusterTrustBundles the Gateway and its policies name: a
	// data plane learns nothing of the others, and a rotation of one of
	// them reaches no other data plane.
	out.ClusterTrustBundles = referencedTrustBundles(&snapshot.Resources{
		Gateways: out.Gateways, BackendTLSPolicies: out.BackendTLSPolicies, ClusterTrustBundles: res.ClusterTrustBundles,
	})
}

// scopeTrafficPolicies adds the BackendTrafficPolicies that target the
// Gateway, its ListenerSets, the routes attached to either or the Services
// they send to; every policy contending for one of those targets is then
// in scope too, so the same one wins.
func scopeTrafficPolicies(res, out *snapshot.Resources, gw types.NamespacedName, services map[types.NamespacedName]bool) {
	if len(res.TrafficPolicies) == 0 {
		return
	}
	in := policyTargets(out, gw)
	for svc := range services {
		in["Service/"+svc.String()] = true
	}
	for _, p := range res.TrafficPolicies {
		if targetsAny(in, p.Namespace, p.Spec.TargetRefs) {
			out.TrafficPolicies = append(out.TrafficPolicies, p)
		}
	}
}

// scopeXTrafficPolicies adds the XBackendTrafficPolicies that target a
// Service the Gateway's routes send to; every policy naming one of them
// is then in scope, so the same one wins.
func scopeXTrafficPolicies(res, out *snapshot.Resources, services map[types.NamespacedName]bool) {
	for _, p := range res.XTrafficPolicies {
		for _, ref := range p.Spec.TargetRefs {
			if xtrafficpolicy.IsService(ref) && services[nn(p.Namespace, string(ref.Name))] {
				out.XTrafficPolicies = append(out.XTrafficPolicies, p)
				break
			}
		}
	}
}

// policyTargets are the objects of a Gateway's scope that a policy may
// target, as "Kind/namespace/name": the Gateway, its ListenerSets and the
// routes attached to either. A policy naming one of them is in scope with
// every other policy naming the same target, so the same one wins there as
// in the whole translation.
func policyTargets(out *snapshot.Resources, gw types.NamespacedName) map[string]bool {
	in := map[string]bool{"Gateway/" + gw.String(): true}
	for _, ls := range out.ListenerSets {
		in["ListenerSet/"+nn(ls.Namespace, ls.Name).String()] = true
	}
	for _, r := range out.HTTPRoutes {
		in["HTTPRoute/"+nn(r.Namespace, r.Name).String()] = true
	}
	for _, r := range out.GRPCRoutes {
		in["GRPCRoute/"+nn(r.Namespace, r.Name).String()] = true
	}
	return in
}

// targetsAny reports whether one of a policy's refs (local to namespace ns)
// names one of targets.
func targetsAny(targets map[string]bool, ns string, refs []gwv1.LocalPolicyTargetReferenceWithSectionName) bool {
	for _, t := range refs {
		if targets[string(t.Kind)+"/"+nn(ns, string(t.Name)).String()] {
			return true
		}
	}
	return false
}

func refNamespace(own string, ref *gwv1.Namespace) string {
	if ref != nil && *ref != "" {
		return string(*ref)
	}
	return own
}

// scopeSecurityPolicies adds the SecurityPolicies that target the Gateway,
// its ListenerSets or the routes attached to either (every policy
// contending for one of those targets is then in scope too, so the same
// one wins), and the Secrets those policies may read: a data plane gets
// the htpasswd files and API keys of its own Gateway's policies, and no
// other.
func scopeSecurityPolicies(res, out *snapshot.Resources, gw types.NamespacedName) {
	if len(res.SecurityPolicies) == 0 {
		return
	}
	in := policyTargets(out, gw)
	wanted := map[types.NamespacedName]bool{}
	for _, p := range res.SecurityPolicies {
		if !targetsAny(in, p.Namespace, p.Spec.TargetRefs) {
			continue
		}
		out.SecurityPolicies = append(out.SecurityPolicies, p)
		for _, s := range p.SecretRefs() {
			if securitypolicy.Granted(res.ReferenceGrants, p.Namespace, s) {
				wanted[s] = true
			}
		}
	}
	if len(wanted) == 0 {
		return
	}
	for _, s := range out.Secrets {
		delete(wanted, nn(s.Namespace, s.Name))
	}
	for _, s := range res.Secrets {
		if wanted[nn(s.Namespace, s.Name)] {
			out.Secrets = append(out.Secrets, s)
		}
	}
}

// scopeTelemetryPolicies adds the XTelemetryPolicies that target the
// Gateway (all of them: which one wins is decided as in the full
// snapshot), and their collectors' Services to services, those they may
// use, so that the data plane exports to the same endpoints.
func scopeTelemetryPolicies(res, out *snapshot.Resources, gw types.NamespacedName, services map[types.NamespacedName]bool) {
	for _, p := range res.TelemetryPolicies {
		if p.Namespace != gw.Namespace || !slices.ContainsFunc(p.Spec.TargetRefs, func(r gwv1.LocalObjectReference) bool {
			return r.Group == gwv1.GroupName && r.Kind == "Gateway" && string(r.Name) == gw.Name
		}) {
			continue
		}
		out.TelemetryPolicies = append(out.TelemetryPolicies, p)
		if svc, _, ok := telemetrypolicy.Collector(p); ok && telemetrypolicy.Granted(res.ReferenceGrants, p.Namespace, svc) {
			services[svc] = true
		}
	}
}

// scopeClientPolicies adds the ClientTrafficPolicies that target the
// Gateway, its ListenerSets or the routes attached to either.
func scopeClientPolicies(res, out *snapshot.Resources, gw types.NamespacedName) {
	if len(res.ClientPolicies) == 0 {
		return
	}
	in := policyTargets(out, gw)
	for _, p := range res.ClientPolicies {
		if targetsAny(in, p.Namespace, p.Spec.TargetRefs) {
			out.ClientPolicies = append(out.ClientPolicies, p)
		}
	}
}
