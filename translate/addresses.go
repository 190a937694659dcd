package translate

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/conditions"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
)

// A Gateway's spec.addresses.
//
// With an address pool (--gateway-address-pool) every Gateway binds its
// ports on addresses of its own: each IPAddress value it asks for, which
// must be a pool address no older Gateway asked for, and one free pool
// address for each IPAddress entry without a value. A Gateway that asks for
// nothing gets one. Only IPAddress entries can be served this way.
//
// Without a pool every Gateway is served on Portico's own addresses
// (--gateway-address, --gateway-service), and spec.addresses can only pick
// some of those to report; see sharedAddresses.

// unsupportedAddress returns why gw cannot be accepted for its
// spec.addresses: the first entry of a type Portico does not serve, or ""
// when there is none.
func unsupportedAddress(gw *gwv1.Gateway, pool bool) string {
	for _, a := range gw.Spec.Addresses {
		switch typ := addressType(a.Type); {
		case typ == gwv1.IPAddressType:
		case typ == gwv1.HostnameAddressType && !pool:
			// Checked against Portico's own addresses, which may be
			// hostnames of a load balancer.
		case typ == gwv1.HostnameAddressType:
			return fmt.Sprintf("address %q: type Hostname is not supported: with an address pool, "+
				"Portico serves each Gateway on IP addresses of the pool", a.Value)
		default:
			return fmt.Sprintf("address %q: type %q is not supported: Portico serves Gateways on IPAddress "+
				"addresses (and Hostname addresses of its own Service)", a.Value, typ)
		}
	}
	return ""
}

func addressType(t *gwv1.AddressType) gwv1.AddressType {
	if t == nil || *t == "" {
		return gwv1.IPAddressType // the schema's default
	}
	return *t
}

// addressRequest is what a Gateway asks of the pool.
type addressRequest struct {
	key types.NamespacedName
	gw  *gwv1.Gateway
	// static are the IPAddress values it names, in spec order; dynamic is
	// how many more addresses it wants from the pool (counted down as
	// assignAddresses gives them).
	static  []string
	dynamic int
	// assigned are the pool addresses it got; problems say which
	// addresses it asked for and cannot have.
	assigned []string
	problems []string
	// routabilities of the static values (by their normal form) and of
	// the entries without a value, in spec order; unsupported lists the
	// entries whose routability the pool cannot meet.
	staticRoutability  map[string]gwv1.GatewayAddressRoutabilityType
	dynamicRoutability []gwv1.GatewayAddressRoutabilityType
	unsupported        []string
}

func newAddressRequest(key types.NamespacedName, gw *gwv1.Gateway) *addressRequest {
	r := &addressRequest{key: key, gw: gw, staticRoutability: map[string]gwv1.GatewayAddressRoutabilityType{}}
	for _, a := range gw.Spec.Addresses {
		if addressType(a.Type) != gwv1.IPAddressType {
			continue
		}
		if msg := routabilityUnsupported(a.Routability); msg != "" {
			r.unsupported = append(r.unsupported, describeEntry(a)+": "+msg)
			continue
		}
		if a.Routability == gwv1.GatewayAddressRoutabilityCluster {
			r.unsupported = append(r.unsupported, describeEntry(a)+": routability Cluster cannot be met: "+
				"with an address pool, Portico serves Gateways on addresses of the pool, which are not cluster IPs")
			continue
		}
		if a.Value == "" {
			r.dynamic++
			r.dynamicRoutability = append(r.dynamicRoutability, a.Routability)
			continue
		}
		r.static = append(r.static, a.Value)
		if ip, err := netip.ParseAddr(a.Value); err == nil {
			r.staticRoutability[ip.String()] = a.Routability
		}
	}
	if len(gw.Spec.Addresses) == 0 {
		r.dynamic = 1
	}
	return r
}

// gatewayAddresses gives each of our accepted Gateways its addresses from
// the pool (nil when there is no pool), in three passes, oldest Gateway
// first in each:
//
//  1. A Gateway keeps the pool addresses its stored status reports, then
//     those the last translation gave it (its status may not say so yet),
//     as far as it still asks for them (by value, or by an entry without
//     one), so that addresses survive restarts, are the same on every
//     replica, and are never taken from a Gateway serving on them.
//  2. The addresses named in spec.addresses: a free pool address is given,
//     one another Gateway holds or named first is refused.
//  3. The remaining entries without a value (or a Gateway asking for
//     nothing) take the lowest free addresses.
//
// A Gateway with an address it cannot have is not programmed (reason
// AddressNotUsable, or AddressNotAssigned when the pool ran out); it still
// serves on the addresses it got, and one with none is not served.
func (t *translation) gatewayAddresses() {
	t.dataPlaneStatuses()
	if len(t.settings.AddressPool) == 0 {
		if t.settings.Shared != nil {
			reportSharedAddresses(t.settings.Shared, t.res, t.st, t.perGateway)
		}
		t.poolAssigned = nil
		return
	}
	var reqs []*addressRequest
	for _, gw := range snapshot.SortedByAge(t.res.Gateways) {
		key := nn(gw.Namespace, gw.Name)
		gs, ours := t.st.Gateways[key]
		if !ours || t.perGateway[key] || !meta.IsStatusConditionTrue(gs.Conditions, string(gwv1.GatewayConditionAccepted)) {
			// Not served: it holds no address, and its conditions
			// already say why.
			continue
		}
		reqs = append(reqs, newAddressRequest(key, gw))
	}
	p := newPoolState(t.settings.AddressPool, len(reqs))
	for _, r := range reqs {
		p.keepHeld(r, t.poolAssigned[r.key])
	}
	for _, r := range reqs {
		p.giveNamed(r)
	}
	for _, r := range reqs {
		p.giveFree(r)
	}
	out := make(map[types.NamespacedName][]string, len(reqs))
	for _, r := range reqs {
		r.report(t.st, len(p.pool))
		if len(r.assigned) > 0 {
			out[r.key] = r.assigned
		}
	}
	t.addresses = out
	t.poolAssigned = out
}

// poolState is the address pool while addresses are handed out.
type poolState struct {
	pool   []string
	inPool map[string]bool
	taken  map[string]bool
	next   int // no address before it is free
}

func newPoolState(pool []string, gateways int) *poolState {
	p := &poolState{pool: pool, inPool: make(map[string]bool, len(pool)), taken: make(map[string]bool, gateways)}
	for _, a := range pool {
		p.inPool[a] = true
	}
	return p
}

// keepHeld gives r the pool addresses its stored status reports, then
// those the previous translation gave it (prev), as far as it still asks
// for them.
func (p *poolState) keepHeld(r *addressRequest, prev []string) {
	named := map[string]bool{}
	for _, v := range r.static {
		if a, err := netip.ParseAddr(v); err == nil {
			named[a.String()] = true
		}
	}
	// The stored status first: it is what every replica reads, so
	// replicas that saw different snapshots agree once it is written.
	var held []string
	for _, a := range r.gw.Status.Addresses {
		if addressType(a.Type) == gwv1.IPAddressType {
			held = append(held, a.Value)
		}
	}
	for _, a := range prev {
		if !slices.Contains(held, a) {
			held = append(held, a)
		}
	}
	for _, a := range held {
		if !p.inPool[a] || p.taken[a] {
			continue
		}
		switch {
		case named[a]:
		case r.dynamic > 0:
			r.dynamic--
		default:
			continue // no longer asked for: released
		}
		r.assigned = append(r.assigned, a)
		p.taken[a] = true
	}
}

// giveNamed gives r the addresses its spec.addresses names, or records why
// it cannot have them.
func (p *poolState) giveNamed(r *addressRequest) {
	for _, v := range r.static {
		a, err := netip.ParseAddr(v)
		switch {
		case err != nil:
			r.problems = append(r.problems, fmt.Sprintf("%q is not an IP address", v))
		case !p.inPool[a.String()]:
			r.problems = append(r.problems, fmt.Sprintf("%s is not in Portico's address pool; "+
				"ask for an address of --gateway-address-pool, or for none", v))
		case slices.Contains(r.assigned, a.String()):
			// Kept from its status, or listed twice (two spellings of
			// one IPv6 address).
		case p.taken[a.String()]:
			r.problems = append(r.problems, fmt.Sprintf("%s is in use by another Gateway", v))
		default:
			r.assigned = append(r.assigned, a.String())
			p.taken[a.String()] = true
		}
	}
}

// giveFree gives r the lowest free addresses for its entries without a
// value, as long as there are any.
func (p *poolState) giveFree(r *addressRequest) {
	for ; r.dynamic > 0; r.dynamic-- {
		for p.next < len(p.pool) && p.taken[p.pool[p.next]] {
			p.next++
		}
		if p.next == len(p.pool) {
			return
		}
		r.assigned = append(r.assigned, p.pool[p.next])
		p.taken[p.pool[p.next]] = true
	}
}

// report puts r's addresses into its Gateway's status, and the reason it
// is not programmed when it did not get all it asked for.
func (r *addressRequest) report(st *status.Maps, poolSize int) {
	gs := st.Gateways[r.key]
	switch {
	case len(r.problems) > 0:
		gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse,
			gwv1.GatewayReasonAddressNotUsable, "Cannot use the addresses asked for: "+strings.Join(r.problems, "; "))
	case r.dynamic > 0:
		gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse,
			gwv1.GatewayReasonAddressNotAssigned, fmt.Sprintf("all %d addresses of the pool are in use", poolSize))
	}
	addrType := gwv1.IPAddressType
	gs.Addresses = nil
	dynamic := r.dynamicRoutability
	for _, a := range r.assigned {
		ra, ok := r.staticRoutability[a]
		if !ok && len(dynamic) > 0 {
			ra, dynamic = dynamic[0], dynamic[1:]
		}
		gs.Addresses = append(gs.Addresses, gwv1.GatewayStatusAddress{Type: &addrType, Value: a, Routability: routability(ra)})
	}
	unmet := append(slices.Clone(r.problems), r.unsupported...)
	if r.dynamic > 0 {
		unmet = append(unmet, fmt.Sprintf("all %d addresses of the pool are in use", poolSize))
	}
	setAddressesAssigned(&gs, len(r.gw.Spec.Addresses), len(r.assigned), unmet)
	st.Gateways[r.key] = gs
}

// reportSharedAddresses sets, without an address pool, the addresses of
// every accepted Gateway: Portico's own, or those of them its spec.addresses
// names (see sharedAddresses). They bind nothing: every Gateway is served on
// Portico's listening addresses.
func reportSharedAddresses(shared *SharedAddresses, res *snapshot.Resources, st *status.Maps, perGateway map[types.NamespacedName]bool) {
	own := shared.own(res)
	for _, gw := range res.Gateways {
		key := nn(gw.Namespace, gw.Name)
		gs, ours := st.Gateways[key]
		if !ours || perGateway[key] || !meta.IsStatusConditionTrue(gs.Conditions, string(gwv1.GatewayConditionAccepted)) ||
			(len(own.def) == 0 && len(gw.Spec.Addresses) == 0) {
			continue
		}
		m := sharedAddresses(gw, own)
		gs.Addresses = m.out
		if m.problem != "" {
			gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse, m.reason, m.problem)
		}
		setAddressesAssigned(&gs, len(gw.Spec.Addresses), m.met, m.unmet)
		st.Gateways[key] = gs
	}
}

// SharedAddresses are Portico's own addresses, on which every Gateway is
// served without an address pool.
type SharedAddresses struct {
	// Addresses are reported as they are (--gateway-address).
	Addresses []gwv1.GatewayStatusAddress
	// Service, when set, is the Service in front of Portico
	// (--gateway-service): its load balancer ingress addresses, else its
	// cluster IPs, are reported after Addresses.
	Service types.NamespacedName
}

// ownAddresses are the addresses a Gateway is served on: def those
// reported when spec.addresses asks for none (and met by entries without
// routability), cluster the Service's cluster IPs (met by entries asking
// for Cluster).
type ownAddresses struct {
	def, cluster []gwv1.GatewayStatusAddress
}

// own lists the addresses: the fixed ones, then those of the Service.
func (sh *SharedAddresses) own(res *snapshot.Resources) ownAddresses {
	out := ownAddresses{def: slices.Clone(sh.Addresses)}
	if sh.Service.Name != "" {
		for _, svc := range res.Services {
			if svc.Namespace == sh.Service.Namespace && svc.Name == sh.Service.Name {
				out.def = append(out.def, serviceAddresses(svc)...)
				out.cluster = clusterIPs(svc)
				break
			}
		}
	}
	out.def = slices.CompactFunc(out.def, func(a, b gwv1.GatewayStatusAddress) bool {
		return ptr.Deref(a.Type, "") == ptr.Deref(b.Type, "") && a.Value == b.Value
	})
	for i, a := range out.def {
		if a.Routability == nil {
			// A fixed address given without one is of the default.
			out.def[i] = withRoutability(a, gwv1.GatewayAddressRoutabilityDefault)
		}
	}
	return out
}

// serviceAddresses are the load balancer's ingress addresses when it has
// any (routability ""), else the cluster IPs (Cluster).
func serviceAddresses(svc *corev1.Service) []gwv1.GatewayStatusAddress {
	var out []gwv1.GatewayStatusAddress
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		switch {
		case ing.IP != "":
			out = append(out, GatewayAddress(ing.IP))
		case ing.Hostname != "":
			out = append(out, GatewayAddress(ing.Hostname))
		}
	}
	if len(out) > 0 {
		return out
	}
	return clusterIPs(svc)
}

// clusterIPs are a Service's cluster IPs: addresses of the cluster's
// ServiceCIDR, reachable from within the cluster (routability Cluster).
func clusterIPs(svc *corev1.Service) []gwv1.GatewayStatusAddress {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []gwv1.GatewayStatusAddress
	for _, ip := range ips {
		if _, err := netip.ParseAddr(ip); err == nil {
			out = append(out, withRoutability(GatewayAddress(ip), gwv1.GatewayAddressRoutabilityCluster))
		}
	}
	return out
}

// addressMatch is what a Gateway gets of the addresses it is served on.
type addressMatch struct {
	out []gwv1.GatewayStatusAddress
	// reason and problem, when set, make Programmed False: an address
	// value Portico does not have (AddressNotUsable) or no address of a
	// type asked for (AddressNotAssigned).
	reason  gwv1.GatewayConditionReason
	problem string
	// met counts the spec entries met; unmet says why the others are not.
	met   int
	unmet []string
}

// sharedAddresses is what a Gateway reports when it is served on
// addresses it does not choose (Portico's own without an address pool, or
// its data plane's Service): all of the default ones, or one for each
// entry of its spec.addresses (the address an entry names; for an entry
// without a value, the first of its type and routability no other entry
// has). An entry that cannot be met is reported:
// a value Portico does not have (AddressNotUsable), a type of which it has
// no address (AddressNotAssigned) make the Gateway not Programmed; a
// routability that cannot be met (a Cluster entry without a cluster IP
// for it, a value Portico does not serve) leaves the entry unmet
// (AddressesAssigned), the Gateway being served on the others (GEP-5093).
func sharedAddresses(gw *gwv1.Gateway, own ownAddresses) addressMatch {
	if len(gw.Spec.Addresses) == 0 {
		return addressMatch{out: slices.Clone(own.def)}
	}
	var m addressMatch
	var unusable, unassigned, unsupported []string
	// Each entry is met by an address of its own (GEP-5093): those naming
	// a value first, then those asking for a routability, then the rest,
	// so that the least constrained take what is left.
	entries := slices.Clone(gw.Spec.Addresses)
	rank := func(a gwv1.GatewaySpecAddress) int {
		switch {
		case a.Value != "":
			return 0
		case a.Routability != gwv1.GatewayAddressRoutabilityDefault:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(entries, func(a, b gwv1.GatewaySpecAddress) int { return rank(a) - rank(b) })
	taken := map[string]bool{}
	for _, want := range entries {
		if msg := routabilityUnsupported(want.Routability); msg != "" {
			unsupported = append(unsupported, describeEntry(want)+": "+msg)
			continue
		}
		typ := addressType(want.Type)
		from := own.def
		if want.Routability == gwv1.GatewayAddressRoutabilityCluster {
			if typ != gwv1.IPAddressType {
				unsupported = append(unsupported, describeEntry(want)+": routability Cluster is served for IPAddress addresses only")
				continue
			}
			from = own.cluster
		}
		found, ofKind := false, false
		for _, a := range from {
			if addressType(a.Type) != typ || (want.Value != "" && !sameAddress(typ, a.Value, want.Value)) {
				continue
			}
			ofKind = true
			if taken[a.Value] {
				continue
			}
			found, taken[a.Value] = true, true
			if want.Routability == sentinelRoutability {
				a = withRoutability(a, sentinelRoutability)
			}
			m.out = append(m.out, a)
			break
		}
		switch {
		case found:
			m.met++
		case ofKind && want.Value != "":
			// Listed twice (two spellings of one address): met once.
			m.met++
		case ofKind:
			unsupported = append(unsupported, describeEntry(want)+": every address of its kind meets another entry already")
		case want.Routability == gwv1.GatewayAddressRoutabilityCluster && want.Value == "":
			// Unmet routability: no other scope stands in for it, and only
			// AddressesAssigned (and Programmed, when nothing is met) says so.
			unsupported = append(unsupported, describeEntry(want)+" with routability Cluster: there is no cluster IP to give")
		case want.Routability == gwv1.GatewayAddressRoutabilityCluster:
			unsupported = append(unsupported, describeEntry(want)+" with routability Cluster: it is not a cluster IP of the Service "+
				"the Gateway is served on (the cluster's ServiceCIDR)")
		case want.Value == "":
			unassigned = append(unassigned, fmt.Sprintf("Portico has no %s address to give", typ))
		default:
			unusable = append(unusable, fmt.Sprintf("%s %q is not one of Portico's addresses", typ, want.Value))
		}
	}
	// Status lists them in the order of the addresses offered, whatever
	// the order they were given in.
	order := func(a gwv1.GatewayStatusAddress) int {
		if i := slices.IndexFunc(own.def, func(b gwv1.GatewayStatusAddress) bool { return b.Value == a.Value }); i >= 0 {
			return i
		}
		return len(own.def) + slices.IndexFunc(own.cluster, func(b gwv1.GatewayStatusAddress) bool { return b.Value == a.Value })
	}
	slices.SortStableFunc(m.out, func(a, b gwv1.GatewayStatusAddress) int { return order(a) - order(b) })
	m.unmet = append(append(slices.Clone(unusable), unassigned...), unsupported...)
	if len(unusable)+len(unassigned) == 0 {
		return m
	}
	values := make([]string, len(own.def))
	for i, a := range own.def {
		values[i] = a.Value
	}
	m.reason = gwv1.GatewayReasonAddressNotUsable
	if len(unusable) == 0 {
		m.reason = gwv1.GatewayReasonAddressNotAssigned
	}
	ownList := "none yet: see --gateway-address and --gateway-service"
	if len(values) > 0 {
		ownList = strings.Join(values, ", ")
	}
	m.problem = fmt.Sprintf("Cannot use the addresses asked for: %s. Without an address pool every Gateway is served "+
		"on Portico's addresses (%s); ask for some of those, or for none", strings.Join(append(unusable, unassigned...), "; "), ownList)
	return m
}

// describeEntry names a spec.addresses entry in a message.
func describeEntry(a gwv1.GatewaySpecAddress) string {
	if a.Value == "" {
		return fmt.Sprintf("an %s address", addressType(a.Type))
	}
	return fmt.Sprintf("%s %q", addressType(a.Type), a.Value)
}

func sameAddress(typ gwv1.AddressType, a, b string) bool {
	if typ == gwv1.HostnameAddressType {
		return strings.EqualFold(a, b)
	}
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	if errX != nil || errY != nil {
		return a == b
	}
	return x == y
}

// GatewayAddress is a status address: of type IPAddress when value parses
// as an IP, else Hostname; of the default routability ("").
func GatewayAddress(value string) gwv1.GatewayStatusAddress {
	t := gwv1.HostnameAddressType
	if _, err := netip.ParseAddr(value); err == nil {
		t = gwv1.IPAddressType
	}
	return gwv1.GatewayStatusAddress{Type: &t, Value: value, Routability: routability(gwv1.GatewayAddressRoutabilityDefault)}
}
