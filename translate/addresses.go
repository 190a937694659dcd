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
}

func newAddressRequest(key types.NamespacedName, gw *gwv1.Gateway) *addressRequest {
	r := &addressRequest{key: key, gw: gw}
	for _, a := range gw.Spec.Addresses {
		if addressType(a.Type) != gwv1.IPAddressType {
			continue
		}
		if a.Value == "" {
			r.dynamic++
			continue
		}
		r.static = append(r.static, a.Value)
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
	for _, a := range r.assigned {
		gs.Addresses = append(gs.Addresses, gwv1.GatewayStatusAddress{Type: &addrType, Value: a})
	}
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
			(len(own) == 0 && len(gw.Spec.Addresses) == 0) {
			continue
		}
		var reason gwv1.GatewayConditionReason
		var problem string
		gs.Addresses, reason, problem = sharedAddresses(gw, own)
		if problem != "" {
			gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse, reason, problem)
		}
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

// own lists the addresses: the fixed ones, then those of the Service.
func (sh *SharedAddresses) own(res *snapshot.Resources) []gwv1.GatewayStatusAddress {
	out := slices.Clone(sh.Addresses)
	if sh.Service.Name != "" {
		for _, svc := range res.Services {
			if svc.Namespace == sh.Service.Namespace && svc.Name == sh.Service.Name {
				out = append(out, serviceAddresses(svc)...)
				break
			}
		}
	}
	return slices.CompactFunc(out, func(a, b gwv1.GatewayStatusAddress) bool {
		return ptr.Deref(a.Type, "") == ptr.Deref(b.Type, "") && a.Value == b.Value
	})
}

// serviceAddresses are the load balancer's ingress addresses when it has
// any, else the cluster IPs.
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
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range ips {
		if ip != corev1.ClusterIPNone {
			out = append(out, GatewayAddress(ip))
		}
	}
	return out
}

// sharedAddresses is what a Gateway reports without an address pool, when
// it is served on Portico's own addresses: all of them, or the ones its
// spec.addresses names (an entry without a value names every address of
// its type). When an entry cannot be met it also returns the reason for
// Programmed=False (AddressNotUsable for a value Portico does not have,
// AddressNotAssigned for an entry without a value when Portico has no
// address of its type) and a message.
func sharedAddresses(gw *gwv1.Gateway, own []gwv1.GatewayStatusAddress) ([]gwv1.GatewayStatusAddress, gwv1.GatewayConditionReason, string) {
	if len(gw.Spec.Addresses) == 0 {
		return slices.Clone(own), "", ""
	}
	var out []gwv1.GatewayStatusAddress
	var unusable, unassigned []string
	for _, want := range gw.Spec.Addresses {
		typ := addressType(want.Type)
		found := false
		for _, a := range own {
			if addressType(a.Type) != typ || (want.Value != "" && !sameAddress(typ, a.Value, want.Value)) {
				continue
			}
			found = true
			if !slices.ContainsFunc(out, func(b gwv1.GatewayStatusAddress) bool { return b.Value == a.Value }) {
				out = append(out, a)
			}
		}
		switch {
		case found:
		case want.Value == "":
			unassigned = append(unassigned, fmt.Sprintf("Portico has no %s address to give", typ))
		default:
			unusable = append(unusable, fmt.Sprintf("%s %q is not one of Portico's addresses", typ, want.Value))
		}
	}
	if len(unusable)+len(unassigned) == 0 {
		return out, "", ""
	}
	values := make([]string, len(own))
	for i, a := range own {
		values[i] = a.Value
	}
	reason := gwv1.GatewayReasonAddressNotUsable
	if len(unusable) == 0 {
		reason = gwv1.GatewayReasonAddressNotAssigned
	}
	ownList := "none yet: see --gateway-address and --gateway-service"
	if len(values) > 0 {
		ownList = strings.Join(values, ", ")
	}
	return out, reason, fmt.Sprintf("Cannot use the addresses asked for: %s. Without an address pool every Gateway is served "+
		"on Portico's addresses (%s); ask for some of those, or for none", strings.Join(append(unusable, unassigned...), "; "), ownList)
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
// as an IP, else Hostname.
func GatewayAddress(value string) gwv1.GatewayStatusAddress {
	t := gwv1.HostnameAddressType
	if _, err := netip.ParseAddr(value); err == nil {
		t = gwv1.IPAddressType
	}
	return gwv1.GatewayStatusAddress{Type: &t, Value: value}
}
