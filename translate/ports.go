package translate

import (
	"crypto/tls"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/conditions"
	"portico.dev/portico/hostname"
	"portico.dev/portico/listeners"
	"portico.dev/portico/proxy"
	"portico.dev/portico/sni"
	"portico.dev/portico/status"
)

// portTables puts the serving listeners on their ports: for each address
// and port number, the Host table (package hostname) that picks a listener
// for a request, and on HTTPS ports the SNI table (package sni) that picks
// a certificate for a handshake. Gateways are visited oldest first, so when
// two Gateways want one port for different protocols, or the same hostname
// on one port, the older one keeps it and the newer listener is reported as
// not programmed.
//
// It is one function, longer than most, because its two passes over the
// listeners (sizing, then filling one allocation per kind of piece) must
// agree on which listeners serve where; split, they would each repeat the
// other's walk.
func (t *translation) portTables() {
	ix, merged, out, st, addresses, clientCerts := t.ix, t.merged, t.compiled, t.st, t.addresses, t.clientCerts
	type portBuild struct {
		protocol  proxy.Protocol
		patterns  []string
		listeners []*proxy.Listener
		entries   []*sni.Entry
		hosts     map[string]bool
	}
	ports := map[proxy.PortKey]*portBuild{}
	var order []proxy.PortKey
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
	perPort := map[proxy.PortKey]int{}
	for i := range merged {
		m := &merged[i]
		if !m.Serves() {
			continue
		}
		serving++
		certs += len(m.Certificates)
		for _, address := range binds(m) {
			perPort[proxy.PortKey{Address: address, Number: int32(m.Port)}]++
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
			pk := proxy.PortKey{Address: address, Number: int32(m.Port)}
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
						if c := ix.parsed(ref); c != nil {
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
			Address:   pk.Address,
			Number:    pk.Number,
			Protocol:  pb.protocol,
			Listeners: hostname.NewTable(pb.patterns, pb.listeners),
			All:       pb.listeners,
		}
		if pb.protocol == proxy.HTTPS {
			p.SNI = sni.NewTable(pb.entries)
		}
		cfg.Ports = append(cfg.Ports, p)
	}
	cfg.BackendTLSIDs = t.tls.ids()
	cfg.BackendClientCertIDs = make(map[string]struct{}, len(clientCerts))
	for _, c := range clientCerts {
		cfg.BackendClientCertIDs[c.ID] = struct{}{}
	}
	t.cfg = cfg
}

// notProgrammed marks a listener that could not be put on a port, and a
// ListenerSet left with no programmed listener, as not programmed.
func notProgrammed(st *status.Computed, m *listeners.Listener, reason gwv1.ListenerConditionReason, msg string) {
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
