package filesource

import (
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwxv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/internal/controlplane/clientpolicy"
	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/securitypolicy"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/trafficpolicy"
)

// assemble makes the snapshot of the files as they are now, after the
// files of changed (nil: gone) replaced those of replaced (nil: new). A
// snapshot lists the objects of every file in file order; the lists of the
// kinds no changed file holds, before or after, are the last snapshot's,
// and the others are joined from each file's own lists: nothing is done
// per object of the files that did not change, which at 100,000 hostnames
// is most of what a change would cost. The Namespaces are listed again
// only when one comes or goes. It runs with s.mu held.
func (s *Source) assemble(loadTime time.Time, replaced, changed map[string]*decodedFile) *snapshot.Resources {
	last := s.last
	if last == nil {
		last = &snapshot.Resources{}
	}
	touched := func(kind func(*snapshot.Resources) int) bool {
		if s.last == nil {
			return true
		}
		for f, d := range changed {
			if old := replaced[f]; (old != nil && kind(&old.objects) > 0) || (d != nil && kind(&d.objects) > 0) {
				return true
			}
		}
		return false
	}
	res := &snapshot.Resources{
		GatewayClasses:     joined(s, touched, last.GatewayClasses, func(r *snapshot.Resources) []*gwv1.GatewayClass { return r.GatewayClasses }),
		Gateways:           joined(s, touched, last.Gateways, func(r *snapshot.Resources) []*gwv1.Gateway { return r.Gateways }),
		ListenerSets:       joined(s, touched, last.ListenerSets, func(r *snapshot.Resources) []*gwv1.ListenerSet { return r.ListenerSets }),
		HTTPRoutes:         joined(s, touched, last.HTTPRoutes, func(r *snapshot.Resources) []*gwv1.HTTPRoute { return r.HTTPRoutes }),
		GRPCRoutes:         joined(s, touched, last.GRPCRoutes, func(r *snapshot.Resources) []*gwv1.GRPCRoute { return r.GRPCRoutes }),
		TLSRoutes:          joined(s, touched, last.TLSRoutes, func(r *snapshot.Resources) []*gwv1.TLSRoute { return r.TLSRoutes }),
		TCPRoutes:          joined(s, touched, last.TCPRoutes, func(r *snapshot.Resources) []*gwv1.TCPRoute { return r.TCPRoutes }),
		UDPRoutes:          joined(s, touched, last.UDPRoutes, func(r *snapshot.Resources) []*gwv1.UDPRoute { return r.UDPRoutes }),
		ReferenceGrants:    joined(s, touched, last.ReferenceGrants, func(r *snapshot.Resources) []*gwv1.ReferenceGrant { return r.ReferenceGrants }),
		BackendTLSPolicies: joined(s, touched, last.BackendTLSPolicies, func(r *snapshot.Resources) []*gwv1.BackendTLSPolicy { return r.BackendTLSPolicies }),
		ConfigMaps:         joined(s, touched, last.ConfigMaps, func(r *snapshot.Resources) []*corev1.ConfigMap { return r.ConfigMaps }),
		ClusterTrustBundles: joined(s, touched, last.ClusterTrustBundles, func(r *snapshot.Resources) []*certv1.ClusterTrustBundle {
			return r.ClusterTrustBundles
		}),
		Secrets:        joined(s, touched, last.Secrets, func(r *snapshot.Resources) []*corev1.Secret { return r.Secrets }),
		Services:       joined(s, touched, last.Services, func(r *snapshot.Resources) []*corev1.Service { return r.Services }),
		EndpointSlices: joined(s, touched, last.EndpointSlices, func(r *snapshot.Resources) []*discoveryv1.EndpointSlice { return r.EndpointSlices }),
		Parameters:     joined(s, touched, last.Parameters, func(r *snapshot.Resources) []*parameters.PorticoParameters { return r.Parameters }),
		TrafficPolicies: joined(s, touched, last.TrafficPolicies, func(r *snapshot.Resources) []*trafficpolicy.BackendTrafficPolicy {
			return r.TrafficPolicies
		}),
		SecurityPolicies: joined(s, touched, last.SecurityPolicies, func(r *snapshot.Resources) []*securitypolicy.SecurityPolicy {
			return r.SecurityPolicies
		}),
		ClientPolicies: joined(s, touched, last.ClientPolicies, func(r *snapshot.Resources) []*clientpolicy.ClientTrafficPolicy {
			return r.ClientPolicies
		}),
		XTrafficPolicies: joined(s, touched, last.XTrafficPolicies, func(r *snapshot.Resources) []*gwxv1a1.XBackendTrafficPolicy {
			return r.XTrafficPolicies
		}),
		Namespaces: last.Namespaces,
	}
	if s.countNamespaces(replaced, changed) || s.last == nil {
		res.Namespaces = s.namespaces(loadTime)
	}
	s.last = res
	return res
}

// joined is the list of one kind (kind picks it from a file's objects):
// last when no changed file holds objects of that kind (touched says),
// else the lists of every file, in file order.
func joined[T any](s *Source, touched func(func(*snapshot.Resources) int) bool, last []T, kind func(*snapshot.Resources) []T) []T {
	if !touched(func(r *snapshot.Resources) int { return len(kind(r)) }) {
		return last
	}
	n := 0
	for _, f := range s.order {
		n += len(kind(&s.files[f].objects))
	}
	if n == 0 {
		return nil
	}
	out := make([]T, 0, n)
	for _, f := range s.order {
		out = append(out, kind(&s.files[f].objects)...)
	}
	return out
}

// countNamespaces takes the files of replaced out of the Namespaces'
// counts of users and definitions and puts those of changed in, and says
// whether a Namespace came, went or was defined anew.
func (s *Source) countNamespaces(replaced, changed map[string]*decodedFile) bool {
	moved := false
	for f, d := range changed {
		if old := replaced[f]; old != nil {
			for _, name := range old.namespaces {
				if s.nsUsers[name]--; s.nsUsers[name] <= 0 {
					delete(s.nsUsers, name)
					moved = true
				}
			}
			for _, ns := range old.objects.Namespaces {
				if s.nsDefined[ns.Name] == ns {
					delete(s.nsDefined, ns.Name)
				}
				moved = true
			}
		}
		if d == nil {
			continue
		}
		for _, name := range d.namespaces {
			if s.nsUsers[name]++; s.nsUsers[name] == 1 {
				moved = true
			}
		}
		for _, ns := range d.objects.Namespaces {
			s.nsDefined[ns.Name] = ns
			moved = true
		}
	}
	return moved
}

// namespaces lists the Namespaces: those defined, and those used without
// a definition, which exist implicitly in standalone mode as they must in
// a cluster before objects can live in them.
func (s *Source) namespaces(loadTime time.Time) []*corev1.Namespace {
	names := map[string]*corev1.Namespace{}
	for name := range s.nsUsers {
		names[name] = nil
	}
	for name, ns := range s.nsDefined {
		names[name] = ns
	}
	for name := range s.implicit {
		if ns, used := names[name]; !used || ns != nil {
			delete(s.implicit, name)
		}
	}
	list := make([]*corev1.Namespace, 0, len(names))
	for _, name := range sortedKeys(names) {
		ns := names[name]
		if ns == nil {
			if ns = s.implicit[name]; ns == nil {
				ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(loadTime),
					Labels: map[string]string{namespaceNameLabel: name}}}
				s.implicit[name] = ns
			}
		}
		if ns.Labels[namespaceNameLabel] != name {
			ns.Labels = cloneLabels(ns.Labels)
			ns.Labels[namespaceNameLabel] = name
		}
		list = append(list, ns)
	}
	return list
}

// objectsOf lists the objects of docs by kind, in their order.
func objectsOf(docs []Document) snapshot.Resources {
	var res snapshot.Resources
	for _, doc := range docs {
		add(&res, doc.Object)
	}
	return res
}

// add appends obj to the list of its kind in res.
func add(res *snapshot.Resources, obj metav1.Object) {
	switch o := obj.(type) {
	case *corev1.Namespace:
		res.Namespaces = append(res.Namespaces, o)
	case *gwv1.GatewayClass:
		res.GatewayClasses = append(res.GatewayClasses, o)
	case *gwv1.Gateway:
		res.Gateways = append(res.Gateways, o)
	case *gwv1.ListenerSet:
		res.ListenerSets = append(res.ListenerSets, o)
	case *gwv1.HTTPRoute:
		res.HTTPRoutes = append(res.HTTPRoutes, o)
	case *gwv1.GRPCRoute:
		res.GRPCRoutes = append(res.GRPCRoutes, o)
	case *gwv1.TLSRoute:
		res.TLSRoutes = append(res.TLSRoutes, o)
	case *gwv1.TCPRoute:
		res.TCPRoutes = append(res.TCPRoutes, o)
	case *gwv1.UDPRoute:
		res.UDPRoutes = append(res.UDPRoutes, o)
	case *gwv1.ReferenceGrant:
		res.ReferenceGrants = append(res.ReferenceGrants, o)
	case *gwv1.BackendTLSPolicy:
		res.BackendTLSPolicies = append(res.BackendTLSPolicies, o)
	case *corev1.ConfigMap:
		res.ConfigMaps = append(res.ConfigMaps, o)
	case *certv1.ClusterTrustBundle:
		res.ClusterTrustBundles = append(res.ClusterTrustBundles, o)
	case *corev1.Secret:
		foldStringData(o) // done when decoded; documents of Assemble come here first
		res.Secrets = append(res.Secrets, o)
	case *corev1.Service:
		res.Services = append(res.Services, o)
	case *discoveryv1.EndpointSlice:
		res.EndpointSlices = append(res.EndpointSlices, o)
	case *parameters.PorticoParameters:
		res.Parameters = append(res.Parameters, o)
	case *trafficpolicy.BackendTrafficPolicy:
		res.TrafficPolicies = append(res.TrafficPolicies, o)
	case *securitypolicy.SecurityPolicy:
		res.SecurityPolicies = append(res.SecurityPolicies, o)
	case *clientpolicy.ClientTrafficPolicy:
		res.ClientPolicies = append(res.ClientPolicies, o)
	case *gwxv1a1.XBackendTrafficPolicy:
		res.XTrafficPolicies = append(res.XTrafficPolicies, o)
	}
}
