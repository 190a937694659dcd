package translate

import (
	"crypto/tls"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/conditions"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/shared/slab"
	"portico.dev/portico/listeners"
	"portico.dev/portico/sni"
)

// portTables puts the serving listeners on their ports: for each address
// and port number, the Host table (package hostname) that picks a listener
// for a request, and on HTTPS ports the SNI table (package sni) that picks
// a certificate for a handshake. Gateways are visited oldest first, so when
// two Gateways want one port for different protocols, or the same hostname
// on one port, the older one keeps it and the newer listener is reported as
// not programmed.
func (t *translation) portTables() {
	b := newPortsBuilder(t)
	for i := range t.merged {
		if t.merged[i].Serves() && t.servesHere(t.merged[i].Gateway) {
			b.add(i)
		}
	}
	t.cfg = b.config()
	t.placed = b.placed
}

// placedListener is a serving listener, merged[i], on its port.
type placedListener struct {
	i     int
	port  config.PortKey
	host  string
	l     *config.Listener
	entry *sni.Entry
}

// portsBuilder groups serving listeners by port. The listeners, SNI
// entries and certificate lists of the Config are cut from one allocation
// each instead of one per listener.
type portsBuilder struct {
	t       *translation
	ports   map[config.PortKey]*portBuild
	order   []config.PortKey
	perPort map[config.PortKey]int // serving listeners, to size each port
	// The listeners of a port share one ClientValidation, and so one
	// sni.ClientAuth.
	clientAuths map[*listeners.ClientValidation]*sni.ClientAuth
	listeners   slab.Slab[config.Listener]
	entries     slab.Slab[sni.Entry]
	certs       slab.Slab[*tls.Certificate]
	// shared is where every Gateway binds without an address pool:
	// Portico's own address.
	shared []string
	placed []placedListener
}

// portBuild is one port being built.
type portBuild struct {
	protocol  config.Protocol
	patterns  []string
	listeners []*config.Listener
	entries   []*sni.Entry
	hosts     map[string]bool
	streams   bool // a TLS listener is on the port
	// proxyProtocol is that of the port's first listener with one.
	proxyProtocol *config.ProxyProtocol
	// cleartext are the strictest connection settings of its listeners.
	cleartext *config.ClientTraffic
}

func newPortsBuilder(t *translation) *portsBuilder {
	b := &portsBuilder{
		t:           t,
		ports:       map[config.PortKey]*portBuild{},
		perPort:     map[config.PortKey]int{},
		clientAuths: map[*listeners.ClientValidation]*sni.ClientAuth{},
		shared:      []string{""},
	}
	serving, certs := 0, 0
	for i := range t.merged {
		m := &t.merged[i]
		if !m.Serves() || !t.servesHere(m.Gateway) {
			continue
		}
		serving++
		certs += len(m.Certificates)
		for _, address := range b.binds(m) {
			b.perPort[config.PortKey{Address: address, Number: int32(m.Port), UDP: m.Protocol == gwv1.UDPProtocolType}]++
		}
	}
	b.listeners = slab.New[config.Listener](serving)
	b.entries = slab.New[sni.Entry](serving)
	b.certs = slab.New[*tls.Certificate](certs)
	return b
}

// binds lists the addresses a listener's Gateway binds: without an address
// pool Portico's own, with one the Gateway's own (none when it got none:
// its status says so).
func (b *portsBuilder) binds(m *listeners.Listener) []string {
	if b.t.addresses == nil {
		return b.shared
	}
	return b.t.addresses[m.Gateway]
}

// add puts the serving listener merged[i] on its port at every address of
// its Gateway. One Listener and SNI entry serve all of them.
func (b *portsBuilder) add(i int) {
	m := &b.t.merged[i]
	st := b.t.st
	protocol := config.HTTP
	switch m.Protocol {
	case gwv1.HTTPSProtocolType, gwv1.TLSProtocolType:
		// TLS listeners share HTTPS ports: the data plane tells them apart
		// by the SNI of each ClientHello.
		protocol = config.HTTPS
	case gwv1.TCPProtocolType:
		protocol = config.TCP
	case gwv1.UDPProtocolType:
		protocol = config.UDP
	}
	host := hostname.Normalize(m.Hostname)
	bound := b.binds(m)
	if len(bound) == 0 {
		notProgrammed(st, m, gwv1.ListenerReasonPending, "The Gateway has no address to serve on; its conditions say why")
		return
	}
	var l *config.Listener
	var e *sni.Entry
	for _, address := range bound {
		pk := config.PortKey{Address: address, Number: int32(m.Port), UDP: protocol == config.UDP}
		pb := b.port(pk, protocol)
		switch {
		case pb.protocol != protocol:
			// The message names no other Gateway: a ListenerSet's status
			// must not reveal what lives elsewhere.
			notProgrammed(st, m, gwv1.ListenerReasonPortUnavailable,
				fmt.Sprintf("port %d is already served as %s by an older Gateway", m.Port, pb.protocol))
			continue
		case pb.hosts[host] && (protocol == config.TCP || protocol == config.UDP):
			notProgrammed(st, m, gwv1.ListenerReasonPortUnavailable,
				fmt.Sprintf("port %d is already served by a %s listener of an older Gateway", m.Port, protocol))
			continue
		case pb.hosts[host]:
			notProgrammed(st, m, gwv1.ListenerReasonHostnameConflict,
				fmt.Sprintf("hostname %q on port %d is already served by an older Gateway", m.Hostname, m.Port))
			continue
		}
		pb.hosts[host] = true
		if l == nil {
			l = b.listener(i)
		}
		pb.patterns = append(pb.patterns, host)
		pb.listeners = append(pb.listeners, l)
		if pb.proxyProtocol == nil && l.Client != nil {
			pb.proxyProtocol = l.Client.ProxyProtocol
		}
		if l.Client != nil && protocol == config.HTTP {
			pb.cleartext = config.Strictest(pb.cleartext, l.Client)
		}
		pb.streams = pb.streams || (protocol == config.HTTPS && l.Stream != config.StreamNone)
		if protocol == config.HTTPS {
			if e == nil {
				e = b.entry(m, host, l)
			}
			pb.entries = append(pb.entries, e)
		}
		b.placed = append(b.placed, placedListener{i: i, port: pk, host: host, l: l, entry: e})
	}
}

// port returns the port being built at pk, starting it with protocol.
func (b *portsBuilder) port(pk config.PortKey, protocol config.Protocol) *portBuild {
	if pb, ok := b.ports[pk]; ok {
		return pb
	}
	n := b.perPort[pk]
	pb := &portBuild{
		protocol:  protocol,
		hosts:     make(map[string]bool, n),
		patterns:  make([]string, 0, n),
		listeners: make([]*config.Listener, 0, n),
	}
	if protocol == config.HTTPS {
		pb.entries = make([]*sni.Entry, 0, n)
	}
	b.ports[pk] = pb
	b.order = append(b.order, pk)
	return pb
}

// listener is the data plane's listener for merged[i].
func (b *portsBuilder) listener(i int) *config.Listener {
	m := &b.t.merged[i]
	l := b.listeners.One()
	*l = config.Listener{
		Key:               m.Source.Kind + "/" + m.Source.Namespace + "/" + m.Source.Name + "/" + string(m.Name),
		Hostname:          m.Hostname,
		Routes:            b.t.compiled.Tables[i],
		BackendClientCert: b.t.clientCerts[m.Gateway],
		ClientAuth:        b.clientAuth(m.ClientValidation),
	}
	switch m.TLSMode {
	case gwv1.TLSModePassthrough:
		l.Stream, l.Streams = config.StreamPassthrough, b.t.compiledTLS.Tables[i]
	case gwv1.TLSModeTerminate:
		l.Stream, l.Streams = config.StreamTerminate, b.t.compiledTLS.Tables[i]
	}
	if m.Protocol == gwv1.TCPProtocolType {
		l.Stream, l.TCP = config.StreamTCP, b.t.compiledTCP.Routes[i]
	}
	l.Client = b.t.client.listener(m)
	l.Tracing = b.t.telemetry.listener(m)
	l.RequestFilters = b.t.requestFilters(m)
	if m.Protocol == gwv1.UDPProtocolType {
		l.Stream, l.UDP = config.StreamUDP, b.t.compiledTCP.Routes[i]
	}
	return l
}

func (b *portsBuilder) clientAuth(v *listeners.ClientValidation) *sni.ClientAuth {
	if v == nil {
		return nil
	}
	a, ok := b.clientAuths[v]
	if !ok {
		a = &sni.ClientAuth{ID: v.ID, CAs: v.CAs, Optional: v.Optional}
		b.clientAuths[v] = a
	}
	return a
}

// entry is the SNI entry of an HTTPS listener: its certificates that
// resolved.
func (b *portsBuilder) entry(m *listeners.Listener, host string, l *config.Listener) *sni.Entry {
	e := b.entries.One()
	*e = sni.Entry{Hostname: host, Value: l, ClientAuth: l.ClientAuth}
	if l.Client != nil {
		e.TLS = l.Client.TLS
	}
	if len(m.Certificates) == 0 {
		return e
	}
	certs := b.certs.Take(len(m.Certificates))[:0]
	for _, ref := range m.Certificates {
		if c := b.t.ix.parsed(ref); c != nil {
			certs = append(certs, c)
		}
	}
	if len(certs) > 0 {
		e.Certificates = certs[:len(certs):len(certs)]
	}
	return e
}

// config builds each port's tables, in the order the ports were first
// asked for.
func (b *portsBuilder) config() *config.Config {
	cfg := &config.Config{}
	for _, pk := range b.order {
		pb := b.ports[pk]
		p := &config.Port{
			Address:   pk.Address,
			Number:    pk.Number,
			Protocol:  pb.protocol,
			Listeners: hostname.NewTable(pb.patterns, pb.listeners),
			All:       chunked.Of(pb.listeners),
			Streams:   pb.streams,
		}
		p.ProxyProtocol = pb.proxyProtocol
		p.Cleartext = pb.cleartext
		if pb.protocol == config.HTTPS {
			p.SNI = sni.NewTable(pb.entries)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	cfg.BackendTLSIDs = b.t.tls.ids()
	cfg.HealthChecks = b.t.compiled.HealthChecks
	cfg.BackendClientCertIDs = make(map[string]struct{}, len(b.t.clientCerts))
	for key, c := range b.t.clientCerts {
		if b.t.servesHere(key) {
			cfg.BackendClientCertIDs[c.ID] = struct{}{}
		}
	}
	return cfg
}

// notProgrammed marks a listener that could not be put on a port, and a
// ListenerSet left with no programmed listener, as not programmed.
func notProgrammed(st *status.Maps, m *listeners.Listener, reason gwv1.ListenerConditionReason, msg string) {
	switch m.Source.Kind {
	case "Gateway":
		gs := st.Gateways[m.Gateway]
		for j := range gs.Listeners {
			if gs.Listeners[j].Name == m.Name {
				gs.Listeners[j].Conditions = conditions.Set(gs.Listeners[j].Conditions, gwv1.ListenerConditionProgrammed, metav1.ConditionFalse, reason, msg)
			}
		}
	case "ListenerSet":
		key := nn(m.Source.Namespace, m.Source.Name)
		ls := st.ListenerSets[key]
		programmed := 0
		for j := range ls.Listeners {
			if ls.Listeners[j].Name == m.Name {
				ls.Listeners[j].Conditions = conditions.Set(ls.Listeners[j].Conditions, gwv1.ListenerConditionProgrammed, metav1.ConditionFalse, reason, msg)
			}
			if meta.IsStatusConditionTrue(ls.Listeners[j].Conditions, string(gwv1.ListenerConditionProgrammed)) {
				programmed++
			}
		}
		if programmed == 0 {
			ls.Conditions = conditions.Set(ls.Conditions, gwv1.ListenerSetConditionProgrammed, metav1.ConditionFalse, reason, "no listener of this ListenerSet is programmed: "+msg)
			st.ListenerSets[key] = ls
		}
	}
}
