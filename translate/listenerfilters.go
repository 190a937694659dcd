package translate

import (
	"fmt"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/listeners"
	"portico.dev/portico/routing"
)

// Pre-routing filters of listeners (Listener.filters.requests, GEP-5224).
//
// package listeners decides whether a listener's filters can run (an
// ExtensionRef cannot: Accepted=False UnsupportedValue; an ExternalAuth
// whose Service port does not exist or is not permitted:
// ResolvedRefs=False, InvalidListenerFilterRef or RefNotPermitted, and the
// listener is not served). Here those that can become the listener's
// config.ExtAuth checks, in their order, with the BackendTLSPolicy of
// their Service port.

// requestFilters are the data plane's pre-routing checks of m.
func (t *translation) requestFilters(m *listeners.Listener) []*config.ExtAuth {
	if len(m.RequestFilters) == 0 {
		return nil
	}
	out := make([]*config.ExtAuth, 0, len(m.RequestFilters))
	for i := range m.RequestFilters {
		f := &m.RequestFilters[i]
		if f.Type != gwv1.ListenerFilterExternalAuth || f.ExternalAuth == nil || f.ExternalAuth.BackendRef.Port == nil {
			continue // not given by listeners: it takes such a listener out
		}
		ref := &f.ExternalAuth.BackendRef
		ns := m.Source.Namespace
		if ref.Namespace != nil && *ref.Namespace != "" {
			ns = string(*ref.Namespace)
		}
		r := routing.ResolvedBackend{Key: config.BackendKey{Service: config.NamespacedName{Namespace: ns, Name: string(ref.Name)}, Port: int32(*ref.Port)}}
		for _, p := range t.routingServices[nn(ns, string(ref.Name))].Ports {
			if p.Port == r.Key.Port {
				r.TLS = p.TLS
			}
		}
		name := fmt.Sprintf("%s %s/%s listener %s filters.requests[%d]", m.Source.Kind, m.Source.Namespace, m.Source.Name, m.Name, i)
		e, err := routing.CompileExternalAuth(f.ExternalAuth, r, name)
		if err == nil && r.TLS != nil && r.TLS.Invalid != "" {
			err = fmt.Errorf("BackendTLSPolicy %s: %s", r.TLS.Policy, r.TLS.Invalid)
		}
		if err != nil {
			// A check that cannot be made safely refuses every request
			// (403): the listener's routes are never served unchecked.
			e = &config.ExtAuth{Name: name, Address: "invalid.", Timeout: routing.ExternalAuthTimeout}
		}
		out = append(out, e)
	}
	return out
}

// servicePortsOf is listeners.Input.ServicePorts.
func (t *translation) servicePortsOf(namespace, name string) ([]int32, bool) {
	return t.servicePorts(nn(namespace, name))
}

// listenerFilterServices calls fn with the Service of each ExternalAuth
// filter of ls, listeners declared in namespace ns, that it may use (one
// of another namespace needs a ReferenceGrant to src).
func listenerFilterServices(ls []gwv1.Listener, src listeners.Source, grants []*gwv1.ReferenceGrant, fn func(ns, name string)) {
	for i := range ls {
		if ls[i].Filters == nil {
			continue
		}
		for _, f := range ls[i].Filters.Requests {
			if f.ExternalAuth == nil {
				continue
			}
			ref := f.ExternalAuth.BackendRef
			if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != "Service") {
				continue
			}
			key := nn(refNamespace(src.Namespace, ref.Namespace), string(ref.Name))
			if key.Namespace == src.Namespace || listeners.Granted(grants, src, "Service", key) {
				fn(key.Namespace, key.Name)
			}
		}
	}
}

// hasListenerFilters reports whether a listener of ls has pre-routing
// filters.
func hasListenerFilters(ls []gwv1.Listener) bool {
	for i := range ls {
		if ls[i].Filters != nil && len(ls[i].Filters.Requests) > 0 {
			return true
		}
	}
	return false
}

// listenerSetListeners is ls's entries as Gateway listeners (the same
// fields).
func listenerSetListeners(ls *gwv1.ListenerSet) []gwv1.Listener {
	out := make([]gwv1.Listener, len(ls.Spec.Listeners))
	for i, l := range ls.Spec.Listeners {
		out[i] = gwv1.Listener(l)
	}
	return out
}
