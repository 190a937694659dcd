package kube

import (
	"cmp"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

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
	// BackendTLSPolicies holds Portico's ancestor entries of each policy.
	BackendTLSPolicies map[types.NamespacedName][]gwv1.PolicyAncestorStatus
	// ACME lists the certificates to obtain over ACME HTTP-01, one per
	// accepted, non-conflicted, opted-in listener (see acme.go), in
	// listener order. It is not a status: it is what the ACME manager is
	// told to order.
	ACME []ACMECertificate
}

// Translator turns Resources into a Config and Statuses. Apart from the
// certificate cache, which only memoizes parsing, it keeps no state between
// calls: the same Resources always give the same result.
type Translator struct {
	ControllerName gwv1.GatewayController
	Certs          *sni.Cache

	// AddressPool, when set, gives every Gateway an IP address of its own
	// from this list, on which its ports are bound and which its status
	// reports; without it all Gateways share Portico's addresses.
	AddressPool []string
	// Shared, without an AddressPool, says where Portico's own addresses
	// come from: every accepted Gateway reports them, and its spec.addresses
	// is checked against them. Nil in standalone mode, which writes no
	// status and knows no addresses of its own: Gateways report none.
	Shared *SharedAddresses

	// caBundles are the parsed CA certificates of the ConfigMaps the last
	// translation read, by object.
	caBundles map[*corev1.ConfigMap]caBundle

	// poolAssigned are the pool addresses the last translation gave each
	// Gateway. Until its status reports them (written a second or more
	// later), they are what keeps a Gateway on its address when another
	// Gateway, created in the same second with a name that sorts first,
	// appears.
	poolAssigned map[types.NamespacedName][]string

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
		len(res.ReferenceGrants) + len(res.BackendTLSPolicies) + len(res.ConfigMaps) +
		len(res.Namespaces) + len(res.Secrets) + len(res.Services)
	in := make([]any, 0, n+10)
	add := func(kind string, objs ...any) {
		in = append(in, kind)
		in = append(in, objs...)
	}
	add("GatewayClass", anys(res.GatewayClasses)...)
	add("Gateway", anys(res.Gateways)...)
	add("ListenerSet", anys(res.ListenerSets)...)
	add("HTTPRoute", anys(res.HTTPRoutes)...)
	add("ReferenceGrant", anys(res.ReferenceGrants)...)
	add("BackendTLSPolicy", anys(res.BackendTLSPolicies)...)
	// Only the ConfigMaps a policy names: the others, of which a cluster
	// has many, change nothing here.
	add("ConfigMap", anys(referencedConfigMaps(res))...)
	add("Namespace", anys(res.Namespaces)...)
	add("Secret", anys(res.Secrets)...)
	add("Service", anys(res.Services)...)
	// Replaced, never modified: its address tells whether it changed.
	add("ACMEErrors", reflect.ValueOf(res.ACMEErrors).Pointer())
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
	certs     map[types.NamespacedName]*tls.Certificate
	translate *Translator
	// acme maps each Secret an ACME listener wants written to its
	// hostname; acmeErrors are the manager's last errors by hostname.
	acme       map[types.NamespacedName]string
	acmeErrors map[string]string
}

func newIndex(t *Translator, res *Resources) *index {
	ix := &index{
		nsLabels:  make(map[string]map[string]string, len(res.Namespaces)),
		secrets:   make(map[types.NamespacedName]*corev1.Secret, len(res.Secrets)),
		certs:     make(map[types.NamespacedName]*tls.Certificate, len(res.Secrets)),
		translate: t,
	}
	for _, ns := range res.Namespaces {
		ix.nsLabels[ns.Name] = ns.Labels
	}
	for _, s := range res.Secrets {
		ix.secrets[nn(s.Namespace, s.Name)] = s
	}
	return ix
}

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

// certificate resolves and parses a listener's Secret, once per translation.
func (ix *index) certificate(namespace, name string) error {
	key := nn(namespace, name)
	if _, ok := ix.certs[key]; ok {
		return nil
	}
	s, ok := ix.secrets[key]
	// A managed Secret still holding the certificate of a hostname the
	// listener no longer has is as good as missing.
	if host, isACME := ix.acme[key]; isACME && (!ok || len(s.Data[corev1.TLSCertKey]) == 0 ||
		cmp.Or(s.Annotations[ACMEHostnameAnnotation], host) != host) {
		if msg := ix.acmeErrors[host]; msg != "" {
			return fmt.Errorf("ACME order for %s failed, will retry: %s", host, msg)
		}
		return fmt.Errorf("waiting for an ACME certificate for %s", host)
	}
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
		cfg.Endpoints = endpoints(res.Services, res.EndpointSlices)
		// Callers may set fields of what they get (addresses, apply
		// failures); the maps are theirs, the previous result stays intact.
		st := *t.last.st
		st.GatewayClasses = maps.Clone(st.GatewayClasses)
		st.Gateways = maps.Clone(st.Gateways)
		st.ListenerSets = maps.Clone(st.ListenerSets)
		st.HTTPRoutes = maps.Clone(st.HTTPRoutes)
		st.BackendTLSPolicies = maps.Clone(st.BackendTLSPolicies)
		return &cfg, &st
	}
	cfg, st := t.translate(res)
	t.last = &translation{inputs: inputs, cfg: cfg, st: st}
	return cfg, st
}

func (t *Translator) translate(res *Resources) (*proxy.Config, *Statuses) {
	// Endpoints depend on Services and EndpointSlices only, which nothing
	// here writes: they are resolved on another core while the rest is
	// translated.
	eps := make(chan map[routing.BackendKey]*proxy.Endpoints, 1)
	go func() { eps <- endpoints(res.Services, res.EndpointSlices) }()
	ix := newIndex(t, res)
	acmeListeners := ix.acmeCandidates(res)
	cas := t.newCASource(res)
	defer func() { t.caBundles = cas.used }()

	st := &Statuses{
		GatewayClasses: map[string]gwv1.GatewayClassStatus{},
		Gateways:       make(map[types.NamespacedName]gwv1.GatewayStatus, len(res.Gateways)),
		// ListenerSets and HTTPRoutes are filled in below.
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
	// The certificates Gateways present to TLS backends.
	clientCerts := map[types.NamespacedName]*proxy.BackendClientCert{}
	parents := make(map[routing.Parent]bool, len(res.Gateways)+len(res.ListenerSets))
	for _, gw := range sortedByAge(res.Gateways) {
		accepted, ours := classes[string(gw.Spec.GatewayClassName)]
		if !ours {
			continue
		}
		key := nn(gw.Namespace, gw.Name)
		r := listeners.Merge(listeners.Input{
			Gateway:            gw,
			ClassAccepted:      accepted,
			UnsupportedAddress: unsupportedAddress(gw, len(t.AddressPool) > 0),
			ListenerSets:       lsByParent[key],
			NamespaceLabels:    ix.nsLabels,
			ReferenceGrants:    res.ReferenceGrants,
			Certificates:       ix.certificate,
			CACertificates:     cas.certificates,
		})
		results = append(results, gatewayResult{key, &r})
		if ref := r.BackendClientCertificate; ref != nil {
			if c := ix.certs[*ref]; c != nil && len(c.Certificate) > 0 {
				h := sha256.New()
				for _, der := range c.Certificate {
					h.Write(der)
				}
				clientCerts[key] = &proxy.BackendClientCert{ID: hex.EncodeToString(h.Sum(nil)[:12]), Cert: c}
			}
		}
		parents[routing.Parent{Kind: "Gateway", Namespace: gw.Namespace, Name: gw.Name}] = meta.IsStatusConditionTrue(r.Gateway.Conditions, string(gwv1.GatewayConditionAccepted))
		for lsKey, lss := range r.ListenerSets {
			parents[routing.Parent{Kind: "ListenerSet", Namespace: lsKey.Namespace, Name: lsKey.Name}] = meta.IsStatusConditionTrue(lss.Conditions, string(gwv1.ListenerSetConditionAccepted))
		}
		if merged == nil {
			// One Gateway is the common case: its list is the merged list.
			// (Clipped, so that appending the next Gateway's copies.)
			merged = slices.Clip(r.Listeners)
		} else {
			merged = append(merged, r.Listeners...)
		}
	}

	in := routing.Input{
		ControllerName:  t.ControllerName,
		Listeners:       make([]routing.Listener, len(merged)),
		Parents:         parents,
		Routes:          res.HTTPRoutes,
		NamespaceLabels: ix.nsLabels,
		Services:        make(map[types.NamespacedName]routing.Service, len(res.Services)),
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
	nports := 0
	for _, svc := range res.Services {
		nports += len(svc.Spec.Ports)
	}
	backendTLS := resolveBackendTLS(res, cas)
	ports := make([]routing.ServicePort, 0, nports) // every Service's ports are a piece of it
	for _, svc := range res.Services {              // a Service listed twice: the last one counts
		start := len(ports)
		key := nn(svc.Namespace, svc.Name)
		for _, p := range svc.Spec.Ports {
			ports = append(ports, routing.ServicePort{Name: p.Name, Port: p.Port, AppProtocol: ptrValue(p.AppProtocol),
				TLS: backendTLS.forPort(key, p.Name)})
		}
		rs := routing.Service{}
		if len(ports) > start {
			rs.Ports = ports[start:len(ports):len(ports)]
		}
		in.Services[nn(svc.Namespace, svc.Name)] = rs
	}
	out := routing.Compile(in)
	// The maps of out and of a single result are ours alone: they become
	// the statuses without a copy.
	st.HTTPRoutes = out.RouteParents
	if len(results) == 1 {
		st.ListenerSets = results[0].ListenerSets
	} else {
		st.ListenerSets = make(map[types.NamespacedName]gwv1.ListenerSetStatus, len(res.ListenerSets))
		for _, r := range results {
			for lsKey, lss := range r.ListenerSets {
				st.ListenerSets[lsKey] = lss
			}
		}
	}
	offset := 0
	for _, r := range results {
		for i := range r.Listeners {
			r.SetAttachedRoutes(i, out.AttachedRoutes[offset+i])
		}
		offset += len(r.Listeners)
		st.Gateways[r.key] = r.Gateway
	}

	st.BackendTLSPolicies = policyAncestors(res, st, backendTLS, t.ControllerName)
	st.ACME = acmeWanted(st, acmeListeners)
	addresses := t.assignAddresses(res, st)
	cfg := buildConfig(ix, merged, out, st, addresses, clientCerts)
	cfg.BackendTLSIDs = backendTLS.ids()
	cfg.BackendClientCertIDs = make(map[string]struct{}, len(clientCerts))
	for _, c := range clientCerts {
		cfg.BackendClientCertIDs[c.ID] = struct{}{}
	}
	cfg.Endpoints = <-eps
	t.Certs.Sweep()
	return cfg, st
}

// buildConfig groups serving listeners by port. Gateways are visited oldest
// first, so when two Gateways want one port for different protocols, or the
// same hostname on one port, the older one keeps it and the newer listener
// is reported as not programmed.
func buildConfig(ix *index, merged []listeners.Listener, out routing.Output, st *Statuses, addresses map[types.NamespacedName][]string,
	clientCerts map[types.NamespacedName]*proxy.BackendClientCert) *proxy.Config {
	type portBuild struct {
		protocol  proxy.Protocol
		patterns  []string
		listeners []*proxy.Listener
		entries   []*sni.Entry
		hosts     map[string]bool
	}
	type portKey struct {
		address string
		number  gwv1.PortNumber
	}
	ports := map[portKey]*portBuild{}
	var order []portKey
	// Without an address pool every Gateway binds Portico's own address;
	// with one, its own (none when it got none: its status says so).
	shared := []string{""}
	binds := func(m *listeners.Listener) []string {
		if addresses == nil {
			return shared
		}
		return addresses[m.Gateway]
	}
	serving, certs := 0, 0
	perPort := map[portKey]int{}
	for i := range merged {
		m := &merged[i]
		if !m.Serves() {
			continue
		}
		serving++
		certs += len(m.Certificates)
		for _, address := range binds(m) {
			perPort[portKey{address, m.Port}]++
		}
	}
	// The listeners, SNI entries and certificate lists of the Config are
	// cut from one allocation each instead of one per listener.
	// The listeners of a port share one ClientValidation, and so one
	// sni.ClientAuth.
	clientAuths := map[*listeners.ClientValidation]*sni.ClientAuth{}
	clientAuth := func(v *listeners.ClientValidation) *sni.ClientAuth {
		if v == nil {
			return nil
		}
		a, ok := clientAuths[v]
		if !ok {
			a = &sni.ClientAuth{ID: v.ID, CAs: v.CAs, Optional: v.Optional}
			clientAuths[v] = a
		}
		return a
	}
	listenerSlab := make([]proxy.Listener, serving)
	entrySlab := make([]sni.Entry, serving)
	certSlab := make([]*tls.Certificate, 0, certs)
	for i := range merged {
		m := &merged[i]
		if !m.Serves() {
			continue
		}
		protocol := proxy.HTTP
		if m.Protocol == gwv1.HTTPSProtocolType {
			protocol = proxy.HTTPS
		}
		host := hostname.Normalize(m.Hostname)
		bound := binds(m)
		if len(bound) == 0 {
			notProgrammed(st, m, gwv1.ListenerReasonPending, "The Gateway has no address to serve on; its conditions say why")
			continue
		}
		// One Listener and SNI entry serve every address of the Gateway.
		var l *proxy.Listener
		var e *sni.Entry
		for _, address := range bound {
			pk := portKey{address, m.Port}
			pb, ok := ports[pk]
			if !ok {
				n := perPort[pk]
				pb = &portBuild{
					protocol:  protocol,
					hosts:     make(map[string]bool, n),
					patterns:  make([]string, 0, n),
					listeners: make([]*proxy.Listener, 0, n),
				}
				if protocol == proxy.HTTPS {
					pb.entries = make([]*sni.Entry, 0, n)
				}
				ports[pk] = pb
				order = append(order, pk)
			}
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
			if l == nil {
				l = &listenerSlab[0]
				listenerSlab = listenerSlab[1:]
				*l = proxy.Listener{
					Key:               m.Source.Kind + "/" + m.Source.Namespace + "/" + m.Source.Name + "/" + string(m.Name),
					Hostname:          m.Hostname,
					Routes:            out.Tables[i],
					BackendClientCert: clientCerts[m.Gateway],
					ClientAuth:        clientAuth(m.ClientValidation),
				}
			}
			pb.patterns = append(pb.patterns, host)
			pb.listeners = append(pb.listeners, l)
			if protocol == proxy.HTTPS {
				if e == nil {
					e = &entrySlab[0]
					entrySlab = entrySlab[1:]
					*e = sni.Entry{Hostname: host, Value: l, ClientAuth: l.ClientAuth}
					start := len(certSlab)
					for _, ref := range m.Certificates {
						if c := ix.certs[ref]; c != nil {
							certSlab = append(certSlab, c)
						}
					}
					if len(certSlab) > start {
						e.Certificates = certSlab[start:len(certSlab):len(certSlab)]
					}
				}
				pb.entries = append(pb.entries, e)
			}
		}
	}
	cfg := &proxy.Config{}
	for _, pk := range order {
		pb := ports[pk]
		p := &proxy.Port{
			Address:   pk.address,
			Number:    pk.number,
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
func endpoints(services []*corev1.Service, allSlices []*discoveryv1.EndpointSlice) map[routing.BackendKey]*proxy.Endpoints {
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

	out := make(map[routing.BackendKey]*proxy.Endpoints, len(services))
	var ready, terminating []string // reused from one port to the next
	// Services are visited in snapshot order, which is also the order they
	// sit in memory.
	for _, svc := range services {
		key := nn(svc.Namespace, svc.Name)
		list := bySvc[key]
		if list.svc != svc {
			continue // listed twice: the last one counts
		}
		for _, sp := range svc.Spec.Ports {
			ready, terminating = ready[:0], terminating[:0]
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
			out[routing.BackendKey{Service: key, Port: sp.Port}] = proxy.NewEndpoints(kept...)
		}
	}
	return out
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
