package translate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/status"
)

const twoGateways = classYAML + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: first, namespace: ns}
spec:
  gatewayClassName: portico
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: second, namespace: ns}
spec:
  gatewayClassName: portico
  listeners: [{name: http, port: 80, protocol: HTTP}]
`

func gatewayAddress(st *status.Computed, name string) string {
	gs := st.Gateways.At(types.NamespacedName{Namespace: "ns", Name: name})
	if len(gs.Addresses) != 1 {
		return ""
	}
	return gs.Addresses[0].Value
}

// TestAddressPoolGivesGatewaysTheirOwnPorts: with a pool, two Gateways with
// the same catch-all listener on port 80 both serve, each on its own
// address, and a Gateway keeps the address its status already reports.
func TestAddressPoolGivesGatewaysTheirOwnPorts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(twoGateways), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)

	tr := newTranslator()
	tr.AddressPool = []string{"198.18.7.1", "198.18.7.2"}
	cfg, st := tr.Translate(res)
	if a, b := gatewayAddress(st, "first"), gatewayAddress(st, "second"); a != "198.18.7.1" || b != "198.18.7.2" {
		t.Fatalf("addresses first=%q second=%q", a, b)
	}
	if len(cfg.Ports) != 2 || cfg.Ports[0].Address == cfg.Ports[1].Address {
		t.Fatalf("want port 80 on two addresses, got %+v", cfg.Ports)
	}
	for _, name := range []string{"first", "second"} {
		gs := st.Gateways.At(types.NamespacedName{Namespace: "ns", Name: name})
		if !meta.IsStatusConditionTrue(gs.Listeners[0].Conditions, "Programmed") {
			t.Errorf("%s: listener not programmed: %+v", name, gs.Listeners[0].Conditions)
		}
	}

	// The address a Gateway's status holds is kept, even against age order.
	addrType := gwv1.IPAddressType
	for _, gw := range res.Gateways {
		gw.Status.Addresses = []gwv1.GatewayStatusAddress{{Type: &addrType, Value: map[string]string{"first": "198.18.7.2", "second": "198.18.7.1"}[gw.Name]}}
	}
	_, st = translatorWithPool(tr.AddressPool).Translate(res)
	if a, b := gatewayAddress(st, "first"), gatewayAddress(st, "second"); a != "198.18.7.2" || b != "198.18.7.1" {
		t.Errorf("stored addresses not kept: first=%q second=%q", a, b)
	}

	// A pool too small: the newer Gateway is not programmed and not served.
	for _, gw := range res.Gateways {
		gw.Status.Addresses = nil
	}
	cfg, st = translatorWithPool([]string{"198.18.7.1"}).Translate(res)
	gs := st.Gateways.At(types.NamespacedName{Namespace: "ns", Name: "second"})
	if c := meta.FindStatusCondition(gs.Conditions, "Programmed"); c == nil || c.Status != "False" || c.Reason != string(gwv1.GatewayReasonAddressNotAssigned) {
		t.Errorf("second Gateway without an address: Programmed = %+v", c)
	}
	if c := meta.FindStatusCondition(gs.Listeners[0].Conditions, "Programmed"); c == nil || c.Status != "False" || c.Reason != string(gwv1.ListenerReasonPending) {
		t.Errorf("listener of the Gateway without an address: Programmed = %+v", c)
	}
	if len(cfg.Ports) != 1 || cfg.Ports[0].Address != "198.18.7.1" {
		t.Errorf("ports with a one-address pool: %+v", cfg.Ports)
	}
}

func translatorWithPool(pool []string) *translator {
	tr := newTranslator()
	tr.AddressPool = pool
	return tr
}

// staticGateways are Gateways, oldest first, that ask for addresses in
// spec.addresses; translated with the pool 198.18.7.1-4.
const staticGateways = classYAML + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: picked, namespace: ns}
spec:
  gatewayClassName: portico
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: static, namespace: ns}
spec:
  gatewayClassName: portico
  addresses: [{type: IPAddress, value: 198.18.7.1}]
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: unusable, namespace: ns}
spec:
  gatewayClassName: portico
  addresses: [{value: 192.0.2.9}, {value: 198.18.7.3}]
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: taken, namespace: ns}
spec:
  gatewayClassName: portico
  addresses: [{type: IPAddress, value: 198.18.7.1}]
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: unsupported, namespace: ns}
spec:
  gatewayClassName: portico
  addresses: [{type: example.com/fake, value: anything}, {value: 198.18.7.4}]
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: empty, namespace: ns}
spec:
  gatewayClassName: portico
  addresses: [{type: IPAddress}]
  listeners: [{name: http, port: 80, protocol: HTTP}]
`

// TestGatewayStaticAddresses covers spec.addresses with a pool: a named
// pool address goes to the oldest Gateway asking for it, before any address
// Portico picks; an address outside the pool or already asked for leaves
// the Gateway not programmed (AddressNotUsable) but served on what it got;
// an address type Portico does not serve makes the Gateway not accepted;
// an entry without a value gets a free pool address.
func TestGatewayStaticAddresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(staticGateways), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)
	cfg, st := translatorWithPool([]string{"198.18.7.1", "198.18.7.2", "198.18.7.3", "198.18.7.4"}).Translate(res)

	cases := []struct {
		name      string
		addresses []string
		accepted  string // reason of Accepted
		program   string // reason of Programmed
		message   string // in the Programmed or Accepted message
	}{
		// Asked for nothing: the lowest address no Gateway asked for.
		{name: "picked", addresses: []string{"198.18.7.2"}, accepted: "Accepted", program: "Programmed"},
		{name: "static", addresses: []string{"198.18.7.1"}, accepted: "Accepted", program: "Programmed"},
		{name: "unusable", addresses: []string{"198.18.7.3"}, accepted: "Accepted", program: "AddressNotUsable", message: "192.0.2.9 is not in Portico's address pool"},
		{name: "taken", accepted: "Accepted", program: "AddressNotUsable", message: "198.18.7.1 is in use by another Gateway"},
		{name: "unsupported", accepted: "UnsupportedAddress", program: "Invalid", message: `type "example.com/fake" is not supported`},
		{name: "empty", addresses: []string{"198.18.7.4"}, accepted: "Accepted", program: "Programmed"},
	}
	for _, c := range cases {
		gs := st.Gateways.At(types.NamespacedName{Namespace: "ns", Name: c.name})
		var got []string
		for _, a := range gs.Addresses {
			if ptr.Deref(a.Type, "") != gwv1.IPAddressType {
				t.Errorf("%s: address %q has type %q", c.name, a.Value, ptr.Deref(a.Type, ""))
			}
			got = append(got, a.Value)
		}
		if !slices.Equal(got, c.addresses) {
			t.Errorf("%s: status addresses %q, want %q", c.name, got, c.addresses)
		}
		acc := meta.FindStatusCondition(gs.Conditions, "Accepted")
		prog := meta.FindStatusCondition(gs.Conditions, "Programmed")
		if acc == nil || acc.Reason != c.accepted || (acc.Status == "True") != (c.accepted == "Accepted") {
			t.Errorf("%s: Accepted = %+v, want reason %s", c.name, acc, c.accepted)
		}
		if prog == nil || prog.Reason != c.program || (prog.Status == "True") != (c.program == "Programmed") {
			t.Errorf("%s: Programmed = %+v, want reason %s", c.name, prog, c.program)
		}
		if c.message != "" && !strings.Contains(acc.Message+prog.Message, c.message) {
			t.Errorf("%s: conditions say %q / %q, want %q in them", c.name, acc.Message, prog.Message, c.message)
		}
	}

	// Port 80 is bound on every address handed out, and nowhere else.
	var bound []string
	for _, p := range cfg.Ports {
		if p.Number != 80 || p.Listeners.Len() != 1 {
			t.Errorf("port %s:%d with %d listeners", p.Address, p.Number, p.Listeners.Len())
		}
		bound = append(bound, p.Address)
	}
	slices.Sort(bound)
	if want := []string{"198.18.7.1", "198.18.7.2", "198.18.7.3", "198.18.7.4"}; !slices.Equal(bound, want) {
		t.Errorf("port 80 bound on %q, want %q", bound, want)
	}
}

// TestGatewayStaticAddressKeepsHeldAddresses: a Gateway serving on a pool
// address (its status says so) keeps it when a Gateway, older or newer,
// names that address in spec.addresses; the one asking is refused. An
// address a Gateway no longer asks for is released.
func TestGatewayStaticAddressKeepsHeldAddresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(twoGateways), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)
	pool := []string{"198.18.7.1", "198.18.7.2", "198.18.7.3"}
	addrType := gwv1.IPAddressType
	for _, gw := range res.Gateways {
		switch gw.Name {
		case "first": // older, asks for what second serves on
			gw.Spec.Addresses = []gwv1.GatewaySpecAddress{{Value: "198.18.7.2"}}
		case "second":
			gw.Status.Addresses = []gwv1.GatewayStatusAddress{{Type: &addrType, Value: "198.18.7.2"}}
		}
	}
	_, st := translatorWithPool(pool).Translate(res)
	if got := gatewayAddress(st, "second"); got != "198.18.7.2" {
		t.Errorf("the Gateway serving on 198.18.7.2 now has %q", got)
	}
	first := st.Gateways.At(types.NamespacedName{Namespace: "ns", Name: "first"})
	if c := meta.FindStatusCondition(first.Conditions, "Programmed"); c == nil || c.Reason != "AddressNotUsable" || !strings.Contains(c.Message, "198.18.7.2 is in use by another Gateway") {
		t.Errorf("Gateway asking for a held address: Programmed = %+v", c)
	}
	if len(first.Addresses) != 0 {
		t.Errorf("Gateway asking for a held address got %+v", first.Addresses)
	}

	// second now names another address: the one it held is released, and
	// first gets it.
	for _, gw := range res.Gateways {
		if gw.Name == "second" {
			gw.Spec.Addresses = []gwv1.GatewaySpecAddress{{Value: "198.18.7.3"}}
		}
	}
	_, st = translatorWithPool(pool).Translate(res)
	if a, b := gatewayAddress(st, "first"), gatewayAddress(st, "second"); a != "198.18.7.2" || b != "198.18.7.3" {
		t.Errorf("after second moved: first=%q second=%q", a, b)
	}
}

// TestGatewayAddressesEveryAddressServes: a Gateway given two pool
// addresses binds each of its listeners on both, and reports both.
func TestGatewayAddressesEveryAddressServes(t *testing.T) {
	const yaml = classYAML + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: two, namespace: ns}
spec:
  gatewayClassName: portico
  addresses: [{value: 198.18.7.3}, {type: IPAddress}]
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - {name: alt, port: 8080, protocol: HTTP, hostname: a.example.com}
`
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, st := translatorWithPool([]string{"198.18.7.1", "198.18.7.2", "198.18.7.3"}).Translate(loadFixture(t, path))
	gs := st.Gateways.At(types.NamespacedName{Namespace: "ns", Name: "two"})
	if len(gs.Addresses) != 2 || gs.Addresses[0].Value != "198.18.7.3" || gs.Addresses[1].Value != "198.18.7.1" {
		t.Fatalf("status addresses %+v", gs.Addresses)
	}
	if !meta.IsStatusConditionTrue(gs.Conditions, "Programmed") {
		t.Errorf("not programmed: %+v", gs.Conditions)
	}
	var bound []string
	for _, p := range cfg.Ports {
		bound = append(bound, fmt.Sprintf("%s:%d", p.Address, p.Number))
		if p.Listeners.Len() != 1 {
			t.Errorf("%s:%d has %d listeners", p.Address, p.Number, p.Listeners.Len())
		}
	}
	slices.Sort(bound)
	if want := []string{"198.18.7.1:80", "198.18.7.1:8080", "198.18.7.3:80", "198.18.7.3:8080"}; !slices.Equal(bound, want) {
		t.Errorf("bound %q, want %q", bound, want)
	}
}

// TestGatewayHostnameAddressWithPool: a pool hands out IP addresses only.
func TestGatewayHostnameAddressWithPool(t *testing.T) {
	gw := &gwv1.Gateway{Spec: gwv1.GatewaySpec{Addresses: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.HostnameAddressType), Value: "lb.example.com"}}}}
	if msg := unsupportedAddress(gw, true); !strings.Contains(msg, "type Hostname is not supported") {
		t.Errorf("with a pool: %q", msg)
	}
	if msg := unsupportedAddress(gw, false); msg != "" {
		t.Errorf("without a pool: %q", msg)
	}
}

// TestSharedAddresses: without a pool, spec.addresses picks among
// Portico's own addresses, and naming another is reported.
func TestSharedAddresses(t *testing.T) {
	own := []gwv1.GatewayStatusAddress{
		{Type: ptr.To(gwv1.IPAddressType), Value: "10.0.0.1"},
		{Type: ptr.To(gwv1.IPAddressType), Value: "fd00::1"},
		{Type: ptr.To(gwv1.HostnameAddressType), Value: "lb.example.com"},
	}
	cases := []struct {
		name    string
		spec    []gwv1.GatewaySpecAddress
		own     []gwv1.GatewayStatusAddress // nil: all three
		want    []string
		reason  gwv1.GatewayConditionReason
		problem string
	}{
		{name: "none asked", want: []string{"10.0.0.1", "fd00::1", "lb.example.com"}},
		{name: "one IP", spec: []gwv1.GatewaySpecAddress{{Value: "10.0.0.1"}}, want: []string{"10.0.0.1"}},
		{name: "IPv6 spelled out", spec: []gwv1.GatewaySpecAddress{{Value: "fd00:0::0001"}}, want: []string{"fd00::1"}},
		{name: "one IP per entry", spec: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType)}}, want: []string{"10.0.0.1"}},
		{name: "two entries, two IPs", spec: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType)}, {Type: ptr.To(gwv1.IPAddressType)}},
			want: []string{"10.0.0.1", "fd00::1"}},
		{name: "a named IP is not taken by an entry without value", spec: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.IPAddressType)}, {Value: "10.0.0.1"}},
			want: []string{"10.0.0.1", "fd00::1"}},
		{name: "hostname", spec: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.HostnameAddressType), Value: "LB.example.com"}}, want: []string{"lb.example.com"}},
		{name: "not ours", spec: []gwv1.GatewaySpecAddress{{Value: "10.0.0.1"}, {Value: "10.9.9.9"}}, want: []string{"10.0.0.1"},
			reason: gwv1.GatewayReasonAddressNotUsable, problem: `IPAddress "10.9.9.9" is not one of Portico's addresses`},
		{name: "no address of a type", spec: []gwv1.GatewaySpecAddress{{Type: ptr.To(gwv1.HostnameAddressType)}, {Value: "10.0.0.1"}}, own: own[:2], want: []string{"10.0.0.1"},
			reason: gwv1.GatewayReasonAddressNotAssigned, problem: "Portico has no Hostname address to give"},
		{name: "no addresses yet", spec: []gwv1.GatewaySpecAddress{{Value: "10.0.0.1"}}, own: []gwv1.GatewayStatusAddress{},
			reason: gwv1.GatewayReasonAddressNotUsable, problem: "none yet: see --gateway-address"},
	}
	for _, c := range cases {
		gw := &gwv1.Gateway{Spec: gwv1.GatewaySpec{Addresses: c.spec}}
		ownAddrs := own
		if c.own != nil {
			ownAddrs = c.own
		}
		m := sharedAddresses(gw, ownAddresses{def: ownAddrs})
		reason, problem := m.reason, m.problem
		var values []string
		for _, a := range m.out {
			values = append(values, a.Value)
		}
		if !slices.Equal(values, c.want) {
			t.Errorf("%s: addresses %q, want %q", c.name, values, c.want)
		}
		if (problem == "") != (c.problem == "") || !strings.Contains(problem, c.problem) || reason != c.reason {
			t.Errorf("%s: %s %q, want %s %q", c.name, reason, problem, c.reason, c.problem)
		}
	}
}

// TestTranslateSharedAddresses: without a pool, translate reports Portico's
// own addresses (flags, then the Service in front of it) in every accepted
// Gateway's status, and a change of that Service's addresses is a change
// translate sees, not one it serves from its endpoints-only shortcut.
// Standalone, with no addresses of its own, reports none and checks none.
func TestTranslateSharedAddresses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(twoGateways+`---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: elsewhere, namespace: ns}
spec:
  gatewayClassName: portico
  addresses: [{value: 10.9.9.9}]
  listeners: [{name: http, port: 8080, protocol: HTTP}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico"},
		Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.10"}}
	res.Services = append(res.Services, svc)

	tr := newTranslator()
	tr.Shared = &SharedAddresses{
		Addresses: []gwv1.GatewayStatusAddress{GatewayAddress("192.0.2.1")},
		Service:   types.NamespacedName{Namespace: "portico-system", Name: "portico"},
	}
	values := func(st *status.Computed, name string) []string {
		var out []string
		for _, a := range st.Gateways.At(types.NamespacedName{Namespace: "ns", Name: name}).Addresses {
			out = append(out, a.Value)
		}
		return out
	}

	_, st := tr.Translate(res)
	for _, name := range []string{"first", "second"} {
		if got := values(st, name); !slices.Equal(got, []string{"192.0.2.1", "198.19.0.10"}) {
			t.Errorf("%s: addresses %q, want the flag's and the Service's", name, got)
		}
	}
	gs := st.Gateways.At(types.NamespacedName{Namespace: "ns", Name: "elsewhere"})
	if c := meta.FindStatusCondition(gs.Conditions, string(gwv1.GatewayConditionProgrammed)); c == nil ||
		c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.GatewayReasonAddressNotUsable) || !strings.Contains(c.Message, "10.9.9.9") {
		t.Errorf("elsewhere: Programmed %+v, want False/AddressNotUsable naming 10.9.9.9", c)
	}

	// Standalone (no Shared): no addresses to report, and none to check
	// spec.addresses against.
	_, st0 := newTranslator().Translate(res)
	gs = st0.Gateways.At(types.NamespacedName{Namespace: "ns", Name: "elsewhere"})
	if !meta.IsStatusConditionTrue(gs.Conditions, string(gwv1.GatewayConditionProgrammed)) || len(gs.Addresses) != 0 {
		t.Errorf("standalone: elsewhere %+v, want programmed without addresses", gs)
	}

	// The load balancer gets an address: a new Service object, as from an
	// informer.
	lb := svc.DeepCopy()
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.7"}}
	res.Services[len(res.Services)-1] = lb
	_, st = tr.Translate(res)
	if got := values(st, "first"); !slices.Equal(got, []string{"192.0.2.1", "203.0.113.7"}) {
		t.Errorf("after the load balancer's address: %q", got)
	}
}

// TestPoolAddressKeptBeforeStatus: a Gateway keeps the pool address it was
// given while its status does not report it yet, also when a Gateway
// created in the same second, whose name sorts first, appears; and once a
// status is stored, it wins over what this replica gave.
func TestPoolAddressKeptBeforeStatus(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(twoGateways), 0o644); err != nil {
		t.Fatal(err)
	}
	both := loadFixture(t, path)
	var second *gwv1.Gateway
	for _, gw := range both.Gateways {
		if gw.Name == "second" {
			second = gw
		}
	}
	for _, gw := range both.Gateways {
		gw.CreationTimestamp = second.CreationTimestamp // same second; "first" sorts first
	}
	alone := *both
	alone.Gateways = []*gwv1.Gateway{second}

	tr := translatorWithPool([]string{"198.18.7.1", "198.18.7.2", "198.18.7.3"})
	_, st := tr.Translate(&alone)
	if got := gatewayAddress(st, "second"); got != "198.18.7.1" {
		t.Fatalf("second alone: %q", got)
	}
	_, st = tr.Translate(both)
	if a, b := gatewayAddress(st, "first"), gatewayAddress(st, "second"); b != "198.18.7.1" || a != "198.18.7.2" {
		t.Errorf("after first appeared: first=%q second=%q, want second to keep 198.18.7.1", a, b)
	}

	// Another replica's leader stored 198.18.7.3 for second: the status wins.
	addrType := gwv1.IPAddressType
	stored := second.DeepCopy()
	stored.Status.Addresses = []gwv1.GatewayStatusAddress{{Type: &addrType, Value: "198.18.7.3"}}
	withStatus := *both
	withStatus.Gateways = nil
	for _, gw := range both.Gateways {
		if gw.Name == "second" {
			gw = stored
		}
		withStatus.Gateways = append(withStatus.Gateways, gw)
	}
	_, st = tr.Translate(&withStatus)
	if got := gatewayAddress(st, "second"); got != "198.18.7.3" {
		t.Errorf("with a stored status: second=%q, want 198.18.7.3", got)
	}
}
