package translate

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/shared/layered"
)

// EndpointsMemory is what one resolution of endpoints hands the next, as
// Memory is for the rest of a translation (Memory.WithEndpoints carries
// it). The zero value resolves everything.
type EndpointsMemory struct {
	m *endpointsMemo
}

// endpointsMemo is a resolution's Services and EndpointSlices, indexed,
// and its result: the next resolution resolves again only the Services
// whose Service or EndpointSlices changed.
type endpointsMemo struct {
	services keptList[*corev1.Service]
	slices   keptList[*discoveryv1.EndpointSlice]
	svcs     layered.Map[types.NamespacedName, *corev1.Service]
	bySvc    layered.Map[types.NamespacedName, []*discoveryv1.EndpointSlice]
	out      config.EndpointTable
}

// WithEndpoints returns m carrying e.
func (m Memory) WithEndpoints(e EndpointsMemory) Memory {
	m.eps = e.m
	return m
}

// ResolveEndpoints is Endpoints with mem: only the Services whose Service
// or EndpointSlices changed since the resolution mem carries are resolved
// again, and the table returned shares the rest with the one before.
func ResolveEndpoints(res *snapshot.Resources, mem Memory) (config.EndpointTable, EndpointsMemory) {
	if prev := mem.eps; prev != nil {
		if m, ok := prev.next(res); ok {
			return m.out, EndpointsMemory{m}
		}
	}
	out := Endpoints(res)
	svcs, ok := byKey(res.Services)
	if !ok {
		return out, EndpointsMemory{}
	}
	bySvc := make(map[types.NamespacedName][]*discoveryv1.EndpointSlice, len(res.Services))
	for _, es := range res.EndpointSlices {
		if svc := es.Labels[discoveryv1.LabelServiceName]; svc != "" {
			key := nn(es.Namespace, svc)
			bySvc[key] = append(bySvc[key], es)
		}
	}
	return out, EndpointsMemory{&endpointsMemo{services: newKeptList(res.Services), slices: newKeptList(res.EndpointSlices),
		svcs: svcs, bySvc: layered.Of(bySvc), out: out}}
}

// next is the resolution of res from m; false when res changed too much.
func (m *endpointsMemo) next(res *snapshot.Resources) (*endpointsMemo, bool) {
	svcRemoved, svcAdded, services, ok1 := m.services.diff(res.Services)
	esRemoved, esAdded, kept, ok2 := m.slices.diff(res.EndpointSlices)
	if !ok1 || !ok2 {
		return nil, false
	}
	if len(svcRemoved)+len(svcAdded)+len(esRemoved)+len(esAdded) == 0 {
		return m, true
	}
	n := &endpointsMemo{services: services, slices: kept}
	var changed []types.NamespacedName
	var ok bool
	if n.svcs, changed, ok = applyDiff(m.svcs, svcRemoved, svcAdded); !ok {
		return nil, false
	}
	e := m.bySvc.Edit()
	edit := func(es *discoveryv1.EndpointSlice, add bool) {
		svc := es.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			return
		}
		key := nn(es.Namespace, svc)
		changed = append(changed, key)
		list, _ := e.Get(key)
		if add {
			e.Set(key, append(slices.Clip(list), es))
			return
		}
		list = slices.DeleteFunc(slices.Clone(list), func(x *discoveryv1.EndpointSlice) bool { return x == es })
		if len(list) == 0 {
			e.Delete(key)
		} else {
			e.Set(key, list)
		}
	}
	for _, es := range esRemoved {
		edit(es, false)
	}
	for _, es := range esAdded {
		edit(es, true)
	}
	n.bySvc = e.Done()
	// The changed Services' ports: those they had are removed, those they
	// have resolved again.
	set := make(map[config.BackendKey]*config.Endpoints, len(changed))
	var r resolver
	for _, key := range changed {
		if old, ok := m.svcs.Get(key); ok {
			for _, sp := range old.Spec.Ports {
				set[config.BackendKey{Service: config.NamespacedName(key), Port: sp.Port}] = nil
			}
		}
	}
	for _, key := range changed {
		svc, ok := n.svcs.Get(key)
		if !ok {
			continue
		}
		list := endpointSlices{svc: svc}
		slicesOf, _ := n.bySvc.Get(key)
		for _, es := range slicesOf {
			list.add(es)
		}
		r.service(set, key, svc, list)
	}
	n.out = m.out.With(set)
	return n, true
}
