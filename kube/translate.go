package kube

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"portico.dev/portico/hostname"
	"portico.dev/portico/listeners"
	"portico.dev/portico/proxy"
	"portico.dev/portico/routing"
	"portico.dev/portico/sni"
)

// DefaultControllerName is the controllerName of GatewayClasses Portico
// serves unless told otherwise.
const DefaultControllerName gwv1.GatewayController = "portico.dev/gateway-controller"

// Statuses is every status translate computed. Only objects Portico is
// responsible for appear; route entries are only Portico's parent entries.
type Statuses struct {
	GatewayClasses map[string]gwv1.GatewayClassStatus
	Gateways       map[types.NamespacedName]gwv1.GatewayStatus
	ListenerSets   map[types.NamespacedName]gwv1.ListenerSetStatus
	HTTPRoutes     map[types.NamespacedName][]gwv1.RouteParentStatus
}

// Translator turns Resources into a Config and Statuses. Apart from the
// certificate cache, which only memoizes parsing, it keeps no state between
// calls: the same Resources always give the same result.
type Translator struct {
	ControllerName gwv1.GatewayController
	Certs          *sni.Cache

	// last is the previous full translation, reused when only
	// EndpointSlices changed: endpoints churn constantly in a cluster and
	// must not recompile every route and certificate table.
	last *translation
}

type translation struct {
	inputs []any // every object but EndpointSlices, in snapshot order
	cfg    *proxy.Config
	st     *Statuses
}

// routingInputs lists the objects a full translation depends on besides
// EndpointSlices. Informers hand out a new pointer for every changed object,
// so comparing pointers tells whether anything but endpoints changed.
func routingInputs(res *Resources) []any {
	n := len(res.GatewayClasses) + len(res.Gateways) + len(res.ListenerSets) + len(res.HTTPRoutes) +
		len(res.ReferenceGrants) + len(res.Namespaces) + len(res.Secrets) + len(res.Services)
	in := make([]any, 0, n+8)
	add := func(kind string, objs ...any) {
		in = append(in, kind)
		in = append(in, objs...)
	}
	add("GatewayClass", anys(res.GatewayClasses)...)
	add("Gateway", anys(res.Gateways)...)
	add("ListenerSet", anys(res.ListenerSets)...)
	add("HTTPRoute", anys(res.HTTPRoutes)...)
	add("ReferenceGrant", anys(res.ReferenceGrants)...)
	add("Namespace", anys(res.Namespaces)...)
	add("Secret", anys(res.Secrets)...)
	add("Service", anys(res.Services)...)
	return in
}

func anys[T any](in []T) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

// NewTranslator returns a Translator for GatewayClasses of controllerName.
func NewTranslator(controllerName gwv1.GatewayController) *Translator {
	if controllerName == "" {
		controllerName = DefaultControllerName
	}
	return &Translator{ControllerName: controllerName, Certs: sni.NewCache()}
}

// index holds lookups built once per translation.
type index struct {
	nsLabels  map[string]map[string]string
	secrets   map[types.NamespacedName]*corev1.Secret
	services  map[types.NamespacedName]*corev1.Service
	slices    map[types.NamespacedName][]*discoveryv1.EndpointSlice
	certs     map[types.NamespacedName]*tls.Certificate
	translate *Translator
}

func newIndex(t *Translator, res *Resources) *index {
	ix := &index{
		nsLabels:  make(map[string]map[string]string, len(res.Namespaces)),
		secrets:   make(map[types.NamespacedName]*corev1.Secret, len(res.Secrets)),
		services:  make(map[types.NamespacedName]*corev1.Service, len(res.Services)),
		slices:    make(map[types.NamespacedName][]*discoveryv1.EndpointSlice, len(res.EndpointSlices)),
		certs:     map[types.NamespacedName]*tls.Certificate{},
		translate: t,
	}
	for _, ns := range res.Namespaces {
		ix.nsLabels[ns.Name] = ns.Labels
	}
	for _, s := range res.Secrets {
		ix.secrets[nn(s.Namespace, s.Name)] = s
	}
	for _, s := range res.Services {
		ix.services[nn(s.Namespace, s.Name)] = s
	}
	for _, es := range res.EndpointSlices {
		svc := es.Labels[discoveryv1.LabelServiceName]
		if svc == "" {
			continue
		}
		key := nn(es.Namespace, svc)
		ix.slices[key] = append(ix.slices[key], es)
	}
	return ix
}

// certificate resolves and parses a listener's Secret, once per translation.
func (ix *index) certificate(namespace, name string) error {
	key := nn(namespace, name)
	if _, ok := ix.certs[key]; ok {
		return nil
	}
	s, ok := ix.secrets[key]
	if !ok {
		return errors.New("does not exist")
	}
	if s.Type != corev1.SecretTypeTLS {
		return fmt.Errorf("is of type %q, not %q", s.Type, corev1.SecretTypeTLS)
	}
	c, err := ix.translate.Certs.Load(key.String(), s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return err
	}
	ix.certs[key] = c
	return nil
}

// Translate computes the data plane Config and every status from res.
// When nothing but EndpointSlices changed since the previous call, the
// route and certificate tables are reused and only endpoints are resolved
// again.
func (t *Translator) Translate(res *Resources) (*proxy.Config, *Statuses) {
	inputs := routingInputs(res)
	if t.last != nil && slices.Equal(t.last.inputs, inputs) {
		cfg := *t.last.cfg
		cfg.Endpoints = endpoints(newIndex(t, &Resources{Services: res.Services, EndpointSlices: res.EndpointSlices}))
		return &cfg, t.last.st
	}
	cfg, st := t.translate(res)
	t.last = &translation{inputs: inputs, cfg: cfg, st: st}
	return cfg, st
}

func (t *Translator) translate(res *Resources) (*proxy.Config, *Statuses) {
	ix := newIndex(t, res)
	st := &Statuses{
		GatewayClasses: map[string]gwv1.GatewayClassStatus{},
		Gateways:       map[types.NamespacedName]gwv1.GatewayStatus{},
		ListenerSets:   map[types.NamespacedName]gwv1.ListenerSetStatus{},
		HTTPRoutes:     map[types.NamespacedName][]gwv1.RouteParentStatus{},
	}

	classes := map[string]bool{} // ours -> accepted
	for _, gc := range res.GatewayClasses {
		if gc.Spec.ControllerName != t.ControllerName {
			continue
		}
		classes[gc.Name] = true
		st.GatewayClasses[gc.Name] = gatewayClassStatus(gc)
	}

	lsByParent := map[types.NamespacedName][]*gwv1.ListenerSet{}
	for _, ls := range res.ListenerSets {
		if parent, ok := listenerSetParent(ls); ok {
			lsByParent[parent] = append(lsByParent[parent], ls)
		}
	}

	var merged []listeners.Listener
	type gatewayResult struct {
		key types.NamespacedName
		*listeners.Result
	}
	var results []gatewayResult
	parents := map[routing.Parent]bool{}
	for _, gw := range sortedByAge(res.Gateways) {
		accepted, ours := classes[string(gw.Spec.GatewayClassName)]
		if !ours {
			continue
		}
		key := nn(gw.Namespace, gw.Name)
		r := listeners.Merge(listeners.Input{
			Gateway:         gw,
			ClassAccepted:   accepted,
			ListenerSets:    lsByParent[key],
			NamespaceLabels: ix.nsLabels,
			ReferenceGrants: res.ReferenceGrants,
			Certificates:    ix.certificate,
		})
		results = append(results, gatewayResult{key, &r})
		parents[routing.Parent{Kind: "Gateway", Namespace: gw.Namespace, Name: gw.Name}] = meta.IsStatusConditionTrue(r.Gateway.Conditions, string(gwv1.GatewayConditionAccepted))
		for lsKey, lss := range r.ListenerSets {
			parents[routing.Parent{Kind: "ListenerSet", Namespace: lsKey.Namespace, Name: lsKey.Name}] = meta.IsStatusConditionTrue(lss.Conditions, string(gwv1.ListenerSetConditionAccepted))
		}
		merged = append(merged, r.Listeners...)
	}

	in := routing.Input{
		ControllerName:  t.ControllerName,
		Listeners:       make([]routing.Listener, len(merged)),
		Parents:         parents,
		Routes:          res.HTTPRoutes,
		NamespaceLabels: ix.nsLabels,
		Services:        make(map[types.NamespacedName]routing.Service, len(ix.services)),
		ReferenceGrants: res.ReferenceGrants,
	}
	for i := range merged {
		m := &merged[i]
		in.Listeners[i] = routing.Listener{
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
	for key, svc := range ix.services {
		rs := routing.Service{}
		for _, p := range svc.Spec.Ports {
			rs.Ports = append(rs.Ports, routing.ServicePort{Name: p.Name, Port: p.Port, AppProtocol: ptrValue(p.AppProtocol)})
		}
		in.Services[key] = rs
	}
	out := routing.Compile(in)
	for key, parentsStatus := range out.RouteParents {
		st.HTTPRoutes[key] = parentsStatus
	}
	offset := 0
	for _, r := range results {
		for i := range r.Listeners {
			r.SetAttachedRoutes(i, out.AttachedRoutes[offset+i])
		}
		offset += len(r.Listeners)
		st.Gateways[r.key] = r.Gateway
		for lsKey, lss := range r.ListenerSets {
			st.ListenerSets[lsKey] = lss
		}
	}

	cfg := buildConfig(ix, merged, out, st)
	cfg.Endpoints = endpoints(ix)
	t.Certs.Sweep()
	return cfg, st
}

// buildConfig groups serving listeners by port. Gateways are visited oldest
// first, so when two Gateways want one port for different protocols, or the
// same hostname on one port, the older one keeps it and the newer listener
// is reported as not programmed.
func buildConfig(ix *index, merged []listeners.Listener, out routing.Output, st *Statuses) *proxy.Config {
	type portBuild struct {
		protocol  proxy.Protocol
		patterns  []string
		listeners []*proxy.Listener
		entries   []*sni.Entry
		hosts     map[string]bool
	}
	ports := map[int32]*portBuild{}
	var order []int32
	for i := range merged {
		m := &merged[i]
		if !m.Serves() {
			continue
		}
		protocol := proxy.HTTP
		if m.Protocol == gwv1.HTTPSProtocolType {
			protocol = proxy.HTTPS
		}
		pb, ok := ports[m.Port]
		if !ok {
			pb = &portBuild{protocol: protocol, hosts: map[string]bool{}}
			ports[m.Port] = pb
			order = append(order, m.Port)
		}
		host := hostname.Normalize(m.Hostname)
		switch {
		case pb.protocol != protocol:
			// The message names no other Gateway: a ListenerSet's status
			// must not reveal what lives elsewhere.
			notProgrammed(st, m, gwv1.ListenerReasonPortUnavailable,
				fmt.Sprintf("port %d is already served as %s by an older Gateway", m.Port, pb.protocol))
			continue
		case pb.hosts[host]:
			notProgrammed(st, m, gwv1.ListenerReasonHostnameConflict,
				fmt.Sprintf("hostname %q on port %d is already served by an older Gateway", m.Hostname, m.Port))
			continue
		}
		pb.hosts[host] = true
		l := &proxy.Listener{
			Key:      fmt.Sprintf("%s/%s/%s/%s", m.Source.Kind, m.Source.Namespace, m.Source.Name, m.Name),
			Hostname: m.Hostname,
			Routes:   out.Tables[i],
		}
		pb.patterns = append(pb.patterns, host)
		pb.listeners = append(pb.listeners, l)
		if protocol == proxy.HTTPS {
			e := &sni.Entry{Hostname: host, Value: l}
			for _, ref := range m.Certificates {
				if c := ix.certs[ref]; c != nil {
					e.Certificates = append(e.Certificates, c)
				}
			}
			pb.entries = append(pb.entries, e)
		}
	}
	cfg := &proxy.Config{}
	for _, number := range order {
		pb := ports[number]
		p := &proxy.Port{
			Number:    number,
			Protocol:  pb.protocol,
			Listeners: hostname.NewTable(pb.patterns, pb.listeners),
			All:       pb.listeners,
		}
		if pb.protocol == proxy.HTTPS {
			p.SNI = sni.NewTable(pb.entries)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	return cfg
}

// endpoints resolves every Service port to the ready addresses of its
// EndpointSlices; terminating endpoints are used only when nothing else is.
func endpoints(ix *index) map[routing.BackendKey]*proxy.Endpoints {
	out := map[routing.BackendKey]*proxy.Endpoints{}
	for key, svc := range ix.services {
		for _, sp := range svc.Spec.Ports {
			var ready, terminating []string
			for _, es := range ix.slices[key] {
				if es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6 {
					continue
				}
				port, ok := slicePort(es, sp.Name)
				if !ok {
					continue
				}
				for _, ep := range es.Endpoints {
					serving := ep.Conditions.Serving == nil || *ep.Conditions.Serving
					isReady := ep.Conditions.Ready == nil || *ep.Conditions.Ready
					for _, a := range ep.Addresses {
						addr := net.JoinHostPort(a, strconv.Itoa(int(port)))
						switch {
						case isReady:
							ready = append(ready, addr)
						case serving && ep.Conditions.Terminating != nil && *ep.Conditions.Terminating:
							terminating = append(terminating, addr)
						}
					}
				}
			}
			addrs := ready
			if len(addrs) == 0 {
				addrs = terminating
			}
			slices.Sort(addrs)
			out[routing.BackendKey{Service: key, Port: sp.Port}] = proxy.NewEndpoints(slices.Compact(addrs)...)
		}
	}
	return out
}

// slicePort finds the EndpointSlice port for a Service port by name, the
// way kube-proxy pairs them.
func slicePort(es *discoveryv1.EndpointSlice, name string) (int32, bool) {
	for _, p := range es.Ports {
		if ptrValue(p.Name) == name && p.Port != nil {
			return *p.Port, true
		}
	}
	return 0, false
}

// notProgrammed marks a listener that translate could not put on a port,
// and a ListenerSet left with no programmed listener as not programmed.
// Conditions are replaced in place without a time: translate uses no clock.
func notProgrammed(st *Statuses, m *listeners.Listener, reason gwv1.ListenerConditionReason, msg string) {
	switch m.Source.Kind {
	case "Gateway":
		gs := st.Gateways[m.Gateway]
		for j := range gs.Listeners {
			if gs.Listeners[j].Name == m.Name {
				setCondition(gs.Listeners[j].Conditions, string(gwv1.ListenerConditionProgrammed), metav1.ConditionFalse, string(reason), msg)
			}
		}
	case "ListenerSet":
		key := nn(m.Source.Namespace, m.Source.Name)
		ls := st.ListenerSets[key]
		programmed := 0
		for j := range ls.Listeners {
			if ls.Listeners[j].Name == m.Name {
				setCondition(ls.Listeners[j].Conditions, string(gwv1.ListenerConditionProgrammed), metav1.ConditionFalse, string(reason), msg)
			}
			if meta.IsStatusConditionTrue(ls.Listeners[j].Conditions, string(gwv1.ListenerConditionProgrammed)) {
				programmed++
			}
		}
		if programmed == 0 {
			setCondition(ls.Conditions, string(gwv1.ListenerSetConditionProgrammed), metav1.ConditionFalse, string(reason), "no listener of this ListenerSet is programmed: "+msg)
		}
	}
}

// setCondition changes an existing condition in place, keeping its
// observedGeneration.
func setCondition(conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason, msg string) {
	for i := range conds {
		if conds[i].Type == typ {
			conds[i].Status, conds[i].Reason, conds[i].Message = status, reason, msg
		}
	}
}

func gatewayClassStatus(gc *gwv1.GatewayClass) gwv1.GatewayClassStatus {
	return gwv1.GatewayClassStatus{Conditions: []metav1.Condition{
		{
			Type:               string(gwv1.GatewayClassConditionStatusAccepted),
			Status:             metav1.ConditionTrue,
			Reason:             string(gwv1.GatewayClassReasonAccepted),
			Message:            "Portico serves this class",
			ObservedGeneration: gc.Generation,
		},
		{
			Type:               string(gwv1.GatewayClassConditionStatusSupportedVersion),
			Status:             metav1.ConditionTrue,
			Reason:             string(gwv1.GatewayClassReasonSupportedVersion),
			Message:            "Gateway API " + consts.BundleVersion,
			ObservedGeneration: gc.Generation,
		},
	}}
}

// listenerSetParent resolves a ListenerSet's parentRef to a Gateway.
func listenerSetParent(ls *gwv1.ListenerSet) (types.NamespacedName, bool) {
	ref := ls.Spec.ParentRef
	if ref.Group != nil && *ref.Group != gwv1.GroupName {
		return types.NamespacedName{}, false
	}
	if ref.Kind != nil && *ref.Kind != "Gateway" {
		return types.NamespacedName{}, false
	}
	ns := ls.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return nn(ns, string(ref.Name)), true
}

func nn(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
