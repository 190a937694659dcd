package configstream

import (
	"slices"

	"portico.dev/portico/internal/controlplane/snapshot"
)

// canonical is res with every list ordered by namespace and name. A
// snapshot's version is a hash of its encoding, and sources list objects in
// no particular order (an informer's cache is a map): without one order,
// each rebuild gave an unchanged snapshot a new version, which its data
// plane applied and acknowledged, whose recording made a rebuild, and so
// on, and Programmed waited for an acknowledgement that never caught up.
// Lists that are in order already are kept; the others are sorted copies,
// as res is shared with the source.
func canonical(res *snapshot.Resources) *snapshot.Resources {
	out := *res
	out.GatewayClasses = byName(res.GatewayClasses)
	out.Gateways = byName(res.Gateways)
	out.ListenerSets = byName(res.ListenerSets)
	out.HTTPRoutes = byName(res.HTTPRoutes)
	out.GRPCRoutes = byName(res.GRPCRoutes)
	out.TLSRoutes = byName(res.TLSRoutes)
	out.TCPRoutes = byName(res.TCPRoutes)
	out.UDPRoutes = byName(res.UDPRoutes)
	out.ReferenceGrants = byName(res.ReferenceGrants)
	out.BackendTLSPolicies = byName(res.BackendTLSPolicies)
	out.ConfigMaps = byName(res.ConfigMaps)
	out.ClusterTrustBundles = byName(res.ClusterTrustBundles)
	out.Namespaces = byName(res.Namespaces)
	out.Secrets = byName(res.Secrets)
	out.Services = byName(res.Services)
	out.EndpointSlices = byName(res.EndpointSlices)
	out.KIngresses = byName(res.KIngresses)
	out.KCertificates = byName(res.KCertificates)
	out.Parameters = byName(res.Parameters)
	out.TrafficPolicies = byName(res.TrafficPolicies)
	out.SecurityPolicies = byName(res.SecurityPolicies)
	out.ClientPolicies = byName(res.ClientPolicies)
	out.XTrafficPolicies = byName(res.XTrafficPolicies)
	out.Deployments = byName(res.Deployments)
	return &out
}

type namedObject interface {
	GetNamespace() string
	GetName() string
}

// byName returns objs ordered by namespace/name (unique within a kind), a
// sorted copy when they are not already.
func byName[T namedObject](objs []T) []T {
	cmp := func(a, b T) int {
		return snapshot.CompareNames(a.GetNamespace(), a.GetName(), b.GetNamespace(), b.GetName())
	}
	if slices.IsSortedFunc(objs, cmp) {
		return objs
	}
	out := slices.Clone(objs)
	slices.SortFunc(out, cmp)
	return out
}
