package translate

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/testkit/snitest"
	"portico.dev/portico/sni"
)

// world is a random cluster the property test changes one object at a
// time: few hostnames, namespaces and names, so that changes collide
// (conflicts, routes naming ListenerSets that come and go, Secrets shared
// and rotated).
type world struct {
	r     *rand.Rand
	pairs []snitest.KeyPair
	res   *snapshot.Resources
	clock int
}

var worldPairs = sync.OnceValues(func() ([]snitest.KeyPair, error) {
	ca, err := snitest.NewCA()
	if err != nil {
		return nil, err
	}
	return ca.IssueMany([]string{"a.example.com", "b.example.com", "c.example.com", "d.example.com"}, 1)
})

var (
	worldHosts      = []string{"a.example.com", "b.example.com", "c.example.com", "d.example.com", "e.example.com", "*.wild.example.com", "A.example.com"}
	worldNamespaces = []string{"ns-a", "ns-b", "gw"}
)

func newWorld(t testing.TB, seed uint64) *world {
	pairs, err := worldPairs()
	if err != nil {
		t.Fatal(err)
	}
	w := &world{r: rand.New(rand.NewPCG(seed, 3)), pairs: pairs, res: &snapshot.Resources{}}
	w.res.GatewayClasses = []*gwv1.GatewayClass{{
		ObjectMeta: metav1.ObjectMeta{Name: "portico", Generation: 1},
		Spec:       gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName},
	}}
	for _, ns := range worldNamespaces {
		w.res.Namespaces = append(w.res.Namespaces, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{"kubernetes.io/metadata.name": ns, "team": ns[len(ns)-1:]}}})
	}
	w.res.Gateways = []*gwv1.Gateway{w.gateway("gw", 0), w.gateway("gw2", 1)}
	for range 6 {
		w.step(w.r.IntN(20))
	}
	return w
}

func (w *world) meta(ns, name string) metav1.ObjectMeta {
	w.clock++
	// Creation times collide now and then: ties go by name.
	return metav1.ObjectMeta{Namespace: ns, Name: name, Generation: int64(1 + w.r.IntN(3)),
		CreationTimestamp: metav1.NewTime(time.Date(2025, 1, 1, 0, 0, w.clock/2, 0, time.UTC))}
}

func (w *world) pick(list []string) string { return list[w.r.IntN(len(list))] }

func (w *world) gateway(name string, i int) *gwv1.Gateway {
	froms := []gwv1.FromNamespaces{gwv1.NamespacesFromAll, gwv1.NamespacesFromSame, gwv1.NamespacesFromSelector, gwv1.NamespacesFromNone}
	from := froms[w.r.IntN(len(froms))]
	if w.r.IntN(2) == 0 {
		from = gwv1.NamespacesFromAll
	}
	gw := &gwv1.Gateway{ObjectMeta: w.meta("gw", name), Spec: gwv1.GatewaySpec{
		GatewayClassName: "portico",
		AllowedListeners: &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &from,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}},
		Listeners: []gwv1.Listener{{Name: "http", Port: gwv1.PortNumber(80 + i), Protocol: gwv1.HTTPProtocolType}},
	}}
	if w.r.IntN(3) == 0 {
		host := gwv1.Hostname(w.pick(worldHosts))
		gw.Spec.Listeners = append(gw.Spec.Listeners, gwv1.Listener{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, Hostname: &host,
			TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: gwv1.ObjectName(w.secretName())}}}})
	}
	return gw
}

func (w *world) secretName() string { return fmt.Sprintf("cert-%d", w.r.IntN(5)) }

func (w *world) listenerSet() *gwv1.ListenerSet {
	ns := w.pick(worldNamespaces)
	gwNS := gwv1.Namespace("gw")
	ls := &gwv1.ListenerSet{ObjectMeta: w.meta(ns, fmt.Sprintf("ls-%d", w.r.IntN(8))), Spec: gwv1.ListenerSetSpec{
		ParentRef: gwv1.ParentGatewayReference{Name: gwv1.ObjectName(w.pick([]string{"gw", "gw", "gw", "gw2", "nope"})), Namespace: &gwNS},
	}}
	for i := range 1 + w.r.IntN(2) {
		host := gwv1.Hostname(w.pick(worldHosts))
		l := gwv1.ListenerEntry{Name: gwv1.SectionName(fmt.Sprintf("l%d", i)), Port: 443, Protocol: gwv1.HTTPSProtocolType, Hostname: &host}
		switch w.r.IntN(8) {
		case 0:
			l.Port, l.Protocol = 80, gwv1.HTTPProtocolType
		case 1:
			l.Port, l.Protocol = 8443, gwv1.TLSProtocolType
			mode := gwv1.TLSModePassthrough
			l.TLS = &gwv1.ListenerTLSConfig{Mode: &mode}
		}
		if l.Protocol == gwv1.HTTPSProtocolType {
			ref := gwv1.SecretObjectReference{Name: gwv1.ObjectName(w.secretName())}
			if w.r.IntN(6) == 0 {
				other := gwv1.Namespace(w.pick(worldNamespaces))
				ref.Namespace = &other
			}
			l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{ref}}
		}
		ls.Spec.Listeners = append(ls.Spec.Listeners, l)
	}
	return ls
}

func (w *world) route() *gwv1.HTTPRoute {
	ns := w.pick(worldNamespaces)
	lsKind := gwv1.Kind("ListenerSet")
	r := &gwv1.HTTPRoute{ObjectMeta: w.meta(ns, fmt.Sprintf("rt-%d", w.r.IntN(8)))}
	for range 1 + w.r.IntN(2) {
		ref := gwv1.ParentReference{Kind: &lsKind, Name: gwv1.ObjectName(fmt.Sprintf("ls-%d", w.r.IntN(8)))}
		if w.r.IntN(4) == 0 {
			other := gwv1.Namespace(w.pick(worldNamespaces))
			ref.Namespace = &other
		}
		if w.r.IntN(8) == 0 {
			ref = gwv1.ParentReference{Name: "gw", Namespace: ptrTo(gwv1.Namespace("gw"))}
		}
		r.Spec.ParentRefs = append(r.Spec.ParentRefs, ref)
	}
	if w.r.IntN(2) == 0 {
		r.Spec.Hostnames = []gwv1.Hostname{gwv1.Hostname(w.pick(worldHosts))}
	}
	port := gwv1.PortNumber(80)
	svcNS := gwv1.Namespace(w.pick(worldNamespaces))
	r.Spec.Rules = []gwv1.HTTPRouteRule{{BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{
		BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(fmt.Sprintf("svc-%d", w.r.IntN(4))), Namespace: &svcNS, Port: &port}}}}}}
	return r
}

func ptrTo[T any](v T) *T { return &v }

// grpcRoute and tlsRoute name the parents of route; a translation with
// either kind present is a full one.
func (w *world) grpcRoute() *gwv1.GRPCRoute {
	r := w.route()
	port := gwv1.PortNumber(80)
	return &gwv1.GRPCRoute{ObjectMeta: r.ObjectMeta, Spec: gwv1.GRPCRouteSpec{CommonRouteSpec: r.Spec.CommonRouteSpec, Hostnames: r.Spec.Hostnames,
		Rules: []gwv1.GRPCRouteRule{{BackendRefs: []gwv1.GRPCBackendRef{{BackendRef: gwv1.BackendRef{
			BackendObjectReference: gwv1.BackendObjectReference{Name: "svc-0", Port: &port}}}}}}}}
}

func (w *world) tlsRoute() *gwv1.TLSRoute {
	r := w.route()
	port := gwv1.PortNumber(80)
	return &gwv1.TLSRoute{ObjectMeta: r.ObjectMeta, Spec: gwv1.TLSRouteSpec{CommonRouteSpec: r.Spec.CommonRouteSpec, Hostnames: r.Spec.Hostnames,
		Rules: []gwv1.TLSRouteRule{{BackendRefs: []gwv1.BackendRef{{BackendObjectReference: gwv1.BackendObjectReference{Name: "svc-1", Port: &port}}}}}}}
}

func (w *world) secret() *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: w.meta(w.pick(worldNamespaces), w.secretName()), Type: corev1.SecretTypeTLS}
	p := w.pairs[w.r.IntN(len(w.pairs))]
	s.Data = map[string][]byte{corev1.TLSCertKey: p.CertPEM, corev1.TLSPrivateKeyKey: p.KeyPEM}
	switch w.r.IntN(10) {
	case 0:
		s.Data[corev1.TLSCertKey] = []byte("broken")
	case 1:
		s.Type = corev1.SecretTypeOpaque
	}
	return s
}

func (w *world) service() *corev1.Service {
	svc := &corev1.Service{ObjectMeta: w.meta(w.pick(worldNamespaces), fmt.Sprintf("svc-%d", w.r.IntN(4))),
		Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("198.19.0.%d", w.r.IntN(250)), Ports: []corev1.ServicePort{{Name: "http", Port: int32(80 + w.r.IntN(2))}}}}
	return svc
}

func (w *world) endpointSlice() *discoveryv1.EndpointSlice {
	svc := fmt.Sprintf("svc-%d", w.r.IntN(4))
	m := w.meta(w.pick(worldNamespaces), svc+"-"+fmt.Sprint(w.r.IntN(2)))
	m.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	name, port, ready := "http", int32(8080), w.r.IntN(4) != 0
	return &discoveryv1.EndpointSlice{ObjectMeta: m, AddressType: discoveryv1.AddressTypeIPv4,
		Ports:     []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{fmt.Sprintf("10.0.0.%d", w.r.IntN(250))}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}}}
}

func (w *world) grant() *gwv1.ReferenceGrant {
	from := w.pick(worldNamespaces)
	return &gwv1.ReferenceGrant{ObjectMeta: w.meta(w.pick(worldNamespaces), fmt.Sprintf("grant-%d", w.r.IntN(2))), Spec: gwv1.ReferenceGrantSpec{
		From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: gwv1.Kind(w.pick([]string{"ListenerSet", "Gateway", "HTTPRoute"})), Namespace: gwv1.Namespace(from)}},
		To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: gwv1.Kind(w.pick([]string{"Secret", "Service"}))}},
	}}
}

// upsert replaces the object of o's key in list, or adds o (at a random
// place: sources list objects in any order); remove deletes a random one.
func upsert[T snapshot.Object](w *world, list []T, o T) []T {
	out := slices.Clone(list)
	for i, x := range out {
		if x.GetNamespace() == o.GetNamespace() && x.GetName() == o.GetName() {
			// An update keeps the creation time, as the API server does.
			setCreated(o, x.GetCreationTimestamp())
			out[i] = o
			return out
		}
	}
	return slices.Insert(out, w.r.IntN(len(out)+1), o)
}

func setCreated(o any, ts metav1.Time) {
	if m, ok := o.(interface{ SetCreationTimestamp(metav1.Time) }); ok {
		m.SetCreationTimestamp(ts)
	}
}

func remove[T any](w *world, list []T) []T {
	if len(list) == 0 {
		return list
	}
	i := w.r.IntN(len(list))
	return slices.Delete(slices.Clone(list), i, i+1)
}

// step changes one object of the world, picked by kind.
func (w *world) step(kind int) {
	next := *w.res
	res := &next
	switch kind {
	case 0, 1, 2:
		res.ListenerSets = upsert(w, res.ListenerSets, w.listenerSet())
	case 3:
		res.ListenerSets = remove(w, res.ListenerSets)
	case 4, 5, 6:
		res.HTTPRoutes = upsert(w, res.HTTPRoutes, w.route())
	case 7:
		res.HTTPRoutes = remove(w, res.HTTPRoutes)
	case 8, 9:
		res.Secrets = upsert(w, res.Secrets, w.secret())
	case 10:
		res.Secrets = remove(w, res.Secrets)
	case 11:
		res.Services = upsert(w, res.Services, w.service())
	case 12:
		res.Services = remove(w, res.Services)
	case 13, 14:
		res.EndpointSlices = upsert(w, res.EndpointSlices, w.endpointSlice())
	case 15:
		res.EndpointSlices = remove(w, res.EndpointSlices)
	case 16:
		res.ReferenceGrants = upsert(w, res.ReferenceGrants, w.grant())
	case 17:
		res.ReferenceGrants = remove(w, res.ReferenceGrants)
	case 18:
		// A Gateway's allowedListeners or listeners change.
		i := w.r.IntN(len(res.Gateways))
		res.Gateways = slices.Clone(res.Gateways)
		gw := w.gateway(res.Gateways[i].Name, i)
		gw.CreationTimestamp = res.Gateways[i].CreationTimestamp
		res.Gateways[i] = gw
	case 20:
		res.GRPCRoutes = upsert(w, res.GRPCRoutes, w.grpcRoute())
	case 21:
		res.TLSRoutes = upsert(w, res.TLSRoutes, w.tlsRoute())
	case 22:
		res.GRPCRoutes, res.TLSRoutes = remove(w, res.GRPCRoutes), remove(w, res.TLSRoutes)
	case 19:
		// The same objects, listed in another order.
		res.ListenerSets = slices.Clone(res.ListenerSets)
		w.r.Shuffle(len(res.ListenerSets), func(i, j int) {
			res.ListenerSets[i], res.ListenerSets[j] = res.ListenerSets[j], res.ListenerSets[i]
		})
	}
	w.res = res
}

// incrementalDiff compares an incremental output with a full one: statuses
// and everything of the Config by value, and each port's Host and SNI
// tables by what they hold, which is what they match by.
func incrementalDiff(a, b Output) string {
	if d := diff(reflect.ValueOf(a.Statuses.Maps()), reflect.ValueOf(b.Statuses.Maps()), "Statuses"); d != "" {
		return d
	}
	for _, f := range []string{"ACME", "Knative", "DataPlanes"} {
		if d := diff(reflect.ValueOf(a).FieldByName(f), reflect.ValueOf(b).FieldByName(f), f); d != "" {
			return d
		}
	}
	// Endpoint tables are compared by what they hold: how much of it sits
	// in an overlay depends on the changes that built them.
	ea, eb := maps.Collect(a.Config.Endpoints.All()), maps.Collect(b.Config.Endpoints.All())
	if d := diff(reflect.ValueOf(ea), reflect.ValueOf(eb), "Config.Endpoints"); d != "" {
		return d
	}
	if a.Config.Endpoints.Len() != len(ea) || b.Config.Endpoints.Len() != len(eb) {
		return "Config.Endpoints.Len"
	}
	ca, cb := *a.Config, *b.Config
	ca.Ports, cb.Ports = nil, nil
	ca.Endpoints, cb.Endpoints = config.EndpointTable{}, config.EndpointTable{}
	if d := diff(reflect.ValueOf(ca), reflect.ValueOf(cb), "Config"); d != "" {
		return d
	}
	if len(a.Config.Ports) != len(b.Config.Ports) {
		return "Config.Ports.len"
	}
	for i, p := range a.Config.Ports {
		q := b.Config.Ports[i]
		path := fmt.Sprintf("Config.Ports[%d]", i)
		if p.Address != q.Address || p.Number != q.Number || p.Protocol != q.Protocol || p.Streams != q.Streams {
			return path
		}
		if d := diff(reflect.ValueOf(p.All.Slice()), reflect.ValueOf(q.All.Slice()), path+".All"); d != "" {
			return d
		}
		if d := entriesDiff(p.Listeners, q.Listeners, path+".Listeners"); d != "" {
			return d
		}
		if (p.SNI == nil) != (q.SNI == nil) {
			return path + ".SNI"
		}
		if p.SNI != nil {
			if d := sniDiff(p.SNI, q.SNI, path+".SNI"); d != "" {
				return d
			}
		}
	}
	return ""
}

func entriesDiff(a, b *hostname.Table[*config.Listener], path string) string {
	ap, av := a.Entries()
	bp, bv := b.Entries()
	if len(ap) != len(bp) {
		return path + ".len"
	}
	byPattern := map[string]*config.Listener{}
	for i, p := range bp {
		byPattern[p] = bv[i]
	}
	for i, p := range ap {
		v, ok := byPattern[p]
		if !ok {
			return fmt.Sprintf("%s[%q] missing", path, p)
		}
		if d := diff(reflect.ValueOf(av[i]), reflect.ValueOf(v), fmt.Sprintf("%s[%q]", path, p)); d != "" {
			return d
		}
	}
	return ""
}

func sniDiff(a, b *sni.Table, path string) string {
	ae, be := a.Entries(), b.Entries()
	if len(ae) != len(be) {
		return path + ".len"
	}
	byHost := map[string]*sni.Entry{}
	for _, e := range be {
		byHost[hostname.Normalize(e.Hostname)] = e
	}
	for _, e := range ae {
		if d := diff(reflect.ValueOf(e), reflect.ValueOf(byHost[hostname.Normalize(e.Hostname)]), path+"["+e.Hostname+"]"); d != "" {
			return d
		}
	}
	return ""
}

// runIncremental applies the changes kinds picks to a world and compares,
// after each, the translation carried from step to step with a full one of
// the same snapshot. It returns how many steps changed ListenerSets,
// routes, Secrets or Services and were deltas.
func runIncremental(t *testing.T, seed uint64, kinds []int) int {
	w := newWorld(t, seed)
	var s Settings
	if seed%2 == 1 {
		// Gateways report the addresses of a Service the changes touch.
		s.Shared = &SharedAddresses{Addresses: []gwv1.GatewayStatusAddress{GatewayAddress("192.0.2.1")},
			Service: types.NamespacedName{Namespace: "ns-a", Name: "svc-1"}}
	}
	prevWant, mem := Translate(s, w.res, Memory{})
	prevGot := prevWant
	deltas := 0
	for step, kind := range kinds {
		w.step(kind)
		// The data plane serves the Output before while the next is
		// built: a delta shares parts of it and must change none.
		held := portLists(prevGot)
		// The full translation gets the same memory without what lets it
		// skip work: parsed key pairs stay, as a broken Secret update
		// serves the key pair the memory holds.
		full := mem
		full.inc, full.last, full.eps = nil, nil, nil
		prev := mem
		var got Output
		got, mem = Translate(s, w.res, mem)
		want, _ := Translate(s, w.res, full)
		if step%7 == 0 {
			// A memory used before translates again, in full, to the same.
			again, _ := Translate(s, w.res, prev)
			if d := incrementalDiff(again, want); d != "" {
				t.Fatalf("seed %d, step %d: a second translation from one memory differs at %s", seed, step, d)
			}
		}
		// Kinds 0 to 12 change ListenerSets, routes, Secrets and Services:
		// what a delta re-derives.
		if mem.Incremental() && kind <= 12 {
			deltas++
		}
		if d := incrementalDiff(got, want); d != "" {
			t.Fatalf("seed %d, step %d (change of kind %d): incremental and full translations differ at %s", seed, step, kind, d)
		}
		if !slices.EqualFunc(held, portLists(prevGot), slices.Equal) {
			t.Fatalf("seed %d, step %d (change of kind %d): the translation changed the listener lists of the Output before", seed, step, kind)
		}
		prevGot = got
		if d := unlistedStatusChange(prevWant.Statuses, want.Statuses, got.StatusesChanged); d != "" {
			t.Fatalf("seed %d, step %d (change of kind %d): %s", seed, step, kind, d)
		}
		prevWant = want
	}
	return deltas
}

// portLists are the listeners of each port of out, in order.
func portLists(out Output) [][]*config.Listener {
	var lists [][]*config.Listener
	for _, p := range out.Config.Ports {
		lists = append(lists, p.All.Slice())
	}
	return lists
}

// unlistedStatusChange names a status that differs between two full
// translations in a row although the incremental translation of the second
// step said it did not change (changed nil says any may have).
func unlistedStatusChange(beforeSt, afterSt *status.Computed, changed *status.Changed) string {
	if changed == nil {
		return ""
	}
	before, after := beforeSt.Maps(), afterSt.Maps()
	listed := func(keys []types.NamespacedName) map[types.NamespacedName]bool {
		m := map[types.NamespacedName]bool{}
		for _, k := range keys {
			m[k] = true
		}
		return m
	}
	if d := unlisted(before.Gateways, after.Gateways, listed(changed.Gateways), "Gateway"); d != "" {
		return d
	}
	if d := unlisted(before.ListenerSets, after.ListenerSets, listed(changed.ListenerSets), "ListenerSet"); d != "" {
		return d
	}
	if d := unlisted(before.HTTPRoutes, after.HTTPRoutes, listed(changed.HTTPRoutes), "HTTPRoute"); d != "" {
		return d
	}
	b, a := *before, *after
	b.Gateways, b.ListenerSets, b.HTTPRoutes = nil, nil, nil
	a.Gateways, a.ListenerSets, a.HTTPRoutes = nil, nil, nil
	if d := diff(reflect.ValueOf(b), reflect.ValueOf(a), "Statuses"); d != "" {
		return "a status of a kind a delta does not change changed: " + d
	}
	return ""
}

func unlisted[V any](before, after map[types.NamespacedName]V, listed map[types.NamespacedName]bool, kind string) string {
	for _, m := range []map[types.NamespacedName]V{before, after} {
		for key := range m {
			if listed[key] {
				continue
			}
			if d := diff(reflect.ValueOf(before[key]), reflect.ValueOf(after[key]), kind+" "+key.String()); d != "" {
				return "status changed but not listed as changed: " + d
			}
			if _, ok := before[key]; !ok {
				return kind + " " + key.String() + " gained a status but is not listed as changed"
			}
			if _, ok := after[key]; !ok {
				return kind + " " + key.String() + " lost its status but is not listed as changed"
			}
		}
	}
	return ""
}

// TestIncrementalMatchesFull applies random sequences of adds, updates and
// deletes of every kind and compares the incremental translation with a
// full one after every step.
func TestIncrementalMatchesFull(t *testing.T) {
	steps, deltas := 0, 0
	for seed := range uint64(100) {
		kinds := newRandKinds(seed)
		deltas += runIncremental(t, seed, kinds)
		steps += len(kinds)
	}
	// The comparison means something only if deltas were taken.
	if deltas < steps/5 {
		t.Fatalf("%d of %d steps were deltas", deltas, steps)
	}
	t.Logf("%d of %d steps were deltas", deltas, steps)
}

func newRandKinds(seed uint64) []int {
	r := rand.New(rand.NewPCG(seed, 9))
	kinds := make([]int, 60)
	for i := range kinds {
		kinds[i] = r.IntN(20)
		if r.IntN(40) == 0 {
			kinds[i] = 20 + r.IntN(3) // GRPCRoutes and TLSRoutes, now and then
		}
	}
	return kinds
}

// FuzzIncremental does what TestIncrementalMatchesFull does with the seed
// and the sequence of changes from the fuzzer.
func FuzzIncremental(f *testing.F) {
	f.Add(uint64(1), []byte{0, 4, 8, 1, 5, 9, 3, 7, 10, 18, 16, 2, 6})
	f.Add(uint64(2), []byte{0, 0, 0, 4, 4, 11, 12, 13, 15, 19, 17})
	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) {
		if len(ops) > 200 {
			return
		}
		kinds := make([]int, len(ops))
		for i, op := range ops {
			kinds[i] = int(op) % 23
		}
		runIncremental(t, seed, kinds)
	})
}

// TestMemoryReused translates twice from one Memory, with different
// changes, one after the other and then at once: each output is what a
// full translation of its snapshot gives, and neither translation changes
// the Output returned with the Memory nor the other's (outputs are never
// changed once returned, Memory's contract). Before statuses were
// shared copy-on-write, a delta patched the status maps of the Output
// before it in place.
func TestMemoryReused(t *testing.T) {
	var s Settings
	deltas, statusChanges := 0, 0
	for seed := range uint64(40) {
		w := newWorld(t, seed)
		_, mem := Translate(s, w.res, Memory{})
		// A memory kept from a delta: its Output is the one a delta made.
		w.step(int(seed % 3))
		prevOut, mem := Translate(s, w.res, mem)
		wantPrev, _ := Translate(s, w.res, Memory{})
		held := portLists(prevOut)
		branch := func(stream uint64) *snapshot.Resources {
			b := &world{r: rand.New(rand.NewPCG(seed, stream)), pairs: w.pairs, res: w.res, clock: w.clock}
			// Kinds 0 to 12 change ListenerSets, routes, Secrets and
			// Services: what a delta re-derives.
			b.step(b.r.IntN(13))
			return b.res
		}
		resA, resB := branch(100), branch(200)
		wantA, _ := Translate(s, resA, Memory{})
		wantB, _ := Translate(s, resB, Memory{})
		check := func(what string, got, want Output) {
			t.Helper()
			if d := incrementalDiff(got, want); d != "" {
				t.Fatalf("seed %d: %s differs from a full translation at %s", seed, what, d)
			}
		}
		gotA, memA := Translate(s, resA, mem)
		gotB, memB := Translate(s, resB, mem)
		for _, m := range []Memory{memA, memB} {
			if m.Incremental() {
				deltas++
			}
		}
		if gotA.StatusesChanged != nil && gotA.StatusesChanged.Len() > 0 {
			statusChanges++
		}
		check("the first translation", gotA, wantA)
		check("the second translation", gotB, wantB)
		check("the Output the memory came with", prevOut, wantPrev)
		if !slices.EqualFunc(held, portLists(prevOut), slices.Equal) {
			t.Fatalf("seed %d: the listener lists of the Output the memory came with changed", seed)
		}

		// The same two at once (go test -race).
		var wg sync.WaitGroup
		var again [2]Output
		for i, res := range []*snapshot.Resources{resA, resB} {
			wg.Go(func() { again[i], _ = Translate(s, res, mem) })
		}
		wg.Wait()
		check("the first translation, again at once with the second", again[0], wantA)
		check("the second translation, again at once with the first", again[1], wantB)
		check("the first translation, after the others", gotA, wantA)
		check("the Output the memory came with, after the others", prevOut, wantPrev)
	}
	// The test means something only if the translations were deltas and
	// changed statuses the Output before them holds.
	if deltas < 40 || statusChanges < 10 {
		t.Fatalf("%d of 80 translations were deltas, %d of 40 changed statuses", deltas, statusChanges)
	}
	t.Logf("%d of 80 translations were deltas, %d of 40 changed statuses", deltas, statusChanges)
}
