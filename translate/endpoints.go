package translate

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"portico.dev/portico/config"
)

// endpointSlices are a Service and its EndpointSlices. Most Services have
// one, kept inline: a slice per Service would cost an allocation each.
type endpointSlices struct {
	svc   *corev1.Service
	first *discoveryv1.EndpointSlice
	more  []*discoveryv1.EndpointSlice
}

func (e *endpointSlices) add(es *discoveryv1.EndpointSlice) {
	if e.first == nil {
		e.first = es
		return
	}
	e.more = append(e.more, es)
}

func (e endpointSlices) len() int {
	if e.first == nil {
		return 0
	}
	return 1 + len(e.more)
}

// at returns the i-th slice, in snapshot order.
func (e endpointSlices) at(i int) *discoveryv1.EndpointSlice {
	if i == 0 {
		return e.first
	}
	return e.more[i-1]
}

// endpoints resolves every Service port to the ready addresses of its
// EndpointSlices; terminating endpoints are used only when nothing else is.
func endpoints(services []*corev1.Service, allSlices []*discoveryv1.EndpointSlice) map[config.BackendKey]*config.Endpoints {
	bySvc := make(map[types.NamespacedName]endpointSlices, len(services))
	for _, s := range services {
		bySvc[nn(s.Namespace, s.Name)] = endpointSlices{svc: s}
	}
	for _, es := range allSlices {
		svc := es.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		key := nn(es.Namespace, svc)
		if list, ok := bySvc[key]; ok {
			list.add(es)
			bySvc[key] = list
		}
	}

	out := make(map[config.BackendKey]*config.Endpoints, len(services))
	var r resolver
	// Services are visited in snapshot order, which is also the order they
	// sit in memory.
	for _, svc := range services {
		key := nn(svc.Namespace, svc.Name)
		list := bySvc[key]
		if list.svc != svc {
			continue // listed twice: the last one counts
		}
		r.service(out, key, svc, list)
	}
	return out
}

// resolver resolves the ports of Services, with buffers reused from one
// port to the next.
type resolver struct {
	ready, terminating []string
}

// service puts the endpoints of every port of svc into out.
func (r *resolver) service(out map[config.BackendKey]*config.Endpoints, key types.NamespacedName, svc *corev1.Service, list endpointSlices) {
	for _, sp := range svc.Spec.Ports {
		ready, terminating := r.ready[:0], r.terminating[:0]
		for i := range list.len() {
			es := list.at(i)
			if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
				continue
			}
			port, ok := slicePort(es, sp.Name)
			if !ok {
				continue
			}
			portSuffix := ":" + strconv.Itoa(int(port))
			for _, ep := range es.Endpoints {
				serving := ep.Conditions.Serving == nil || *ep.Conditions.Serving
				isReady := ep.Conditions.Ready == nil || *ep.Conditions.Ready
				if !isReady && !(serving && ep.Conditions.Terminating != nil && *ep.Conditions.Terminating) {
					continue
				}
				for _, a := range ep.Addresses {
					addr := joinHostPort(a, portSuffix)
					if isReady {
						ready = append(ready, addr)
					} else {
						terminating = append(terminating, addr)
					}
				}
			}
		}
		addrs := ready
		if len(addrs) == 0 {
			addrs = terminating
		}
		var kept []string // nil when there is no address
		if len(addrs) > 0 {
			slices.Sort(addrs)
			// A copy: the Config keeps it, and the buffers are reused.
			kept = slices.Clone(slices.Compact(addrs))
		}
		out[config.BackendKey{Service: config.NamespacedName(key), Port: sp.Port}] = config.NewEndpoints(kept...)
		r.ready, r.terminating = ready, terminating
	}
}

// joinHostPort is net.JoinHostPort with the port already formatted as
// ":port", so that a Service's many addresses share one formatting.
func joinHostPort(host, portSuffix string) string {
	if strings.IndexByte(host, ':') >= 0 {
		return "[" + host + "]" + portSuffix
	}
	return host + portSuffix
}

// slicePort finds the EndpointSlice port for a Service port by name, the
// way kube-proxy pairs them.
func slicePort(es *discoveryv1.EndpointSlice, name string) (int32, bool) {
	for _, p := range es.Ports {
		if ptr.Deref(p.Name, "") == name && p.Port != nil {
			return *p.Port, true
		}
	}
	return 0, false
}
