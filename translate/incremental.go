package translate

import (
	"cmp"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/shared/layered"
	"portico.dev/portico/listeners"
	"portico.dev/portico/routing"
	"portico.dev/portico/sni"
)

// incremental is what a translation keeps so that the next one re-derives
// only what a change touches: indexes of the snapshot by key, who names
// what, and where each ListenerSet's listeners sit on the data plane.
// A change of ListenerSets, HTTPRoutes, Secrets and Services whose
// ListenerSets conflict with nothing is merged, compiled and put on its
// ports again alone (delta); any other change, or a snapshot of a shape
// this does not cover (see incrementalState), is translated in full.
// Like the Memory holding it, it is never changed once built.
type incremental struct {
	settings Settings
	// res is the snapshot's other kinds, to compare the next one's with;
	// lists its ListenerSets, HTTPRoutes, Secrets and Services.
	res      *snapshot.Resources
	lists    keptLists
	ls       layered.Map[types.NamespacedName, *gwv1.ListenerSet]
	routes   layered.Map[types.NamespacedName, *gwv1.HTTPRoute]
	secrets  layered.Map[types.NamespacedName, *corev1.Secret]
	services layered.Map[types.NamespacedName, *corev1.Service]
	// claims counts the listeners of every Gateway of ours and of their
	// ListenerSets by port and hostname, and protocols by port and
	// protocol: a listener alone on its hostname, on a port of one
	// protocol, conflicts with no other and can be merged on its own.
	claims    layered.Map[hostClaim, int32]
	protocols layered.Map[portProtocol, int32]
	// routesByParent are the HTTPRoutes naming each ListenerSet,
	// routesByService those naming each Service, lsBySecret the
	// ListenerSets naming each Secret.
	routesByParent  layered.Map[types.NamespacedName, []types.NamespacedName]
	routesByService layered.Map[types.NamespacedName, []types.NamespacedName]
	lsBySecret      layered.Map[types.NamespacedName, []types.NamespacedName]
	// gatewaySecrets are the Secrets Gateways name themselves.
	gatewaySecrets map[types.NamespacedName]bool
	gateways       map[types.NamespacedName]*gatewayMemo
	// served are each ListenerSet's listeners on the data plane; order
	// is the precedence of each listener of every Port.All.
	served      layered.Map[types.NamespacedName, []servedListener]
	order       layered.Map[*config.Listener, listenerOrder]
	nsLabels    map[string]map[string]string
	clientCerts map[types.NamespacedName]*config.BackendClientCert
	tls         *backendTLS
	cas         caIndex
}

// keptLists are a snapshot's lists of the kinds a delta re-derives, in
// chunks that the lists kept after a change share where they did not
// change (keptlist.go): a copy of each at 100,000 objects per change
// would cost more than the rest of a delta.
type keptLists struct {
	ls       keptList[*gwv1.ListenerSet]
	routes   keptList[*gwv1.HTTPRoute]
	secrets  keptList[*corev1.Secret]
	services keptList[*corev1.Service]
}

type hostClaim struct {
	port int32
	host string
}

type portProtocol struct {
	port     int32
	protocol gwv1.ProtocolType
}

// gatewayMemo is a Gateway's merge input (without ListenerSets) and its
// rank, oldest first.
type gatewayMemo struct {
	in   listeners.Input
	rank int
}

type servedListener struct {
	port  config.PortKey
	host  string
	l     *config.Listener
	entry *sni.Entry
	order listenerOrder
}

// listenerOrder is a listener's place in the merged list: by Gateway, its
// own listeners first, then its ListenerSets by age and name, then by
// position in the object's spec.
type listenerOrder struct {
	gateway  int
	own      bool
	created  time.Time
	ns, name string
	index    int
}

func compareOrder(a, b listenerOrder) int {
	if c := cmp.Compare(a.gateway, b.gateway); c != 0 {
		return c
	}
	if a.own != b.own {
		if a.own {
			return -1
		}
		return 1
	}
	if !a.created.Equal(b.created) {
		return a.created.Compare(b.created)
	}
	if c := snapshot.CompareNames(a.ns, a.name, b.ns, b.name); c != 0 {
		return c
	}
	return cmp.Compare(a.index, b.index)
}

// maxDelta bounds the objects a delta handles: a larger change is
// translated in full.
const maxDelta = 512

// incrementalState indexes a full translation for the next one; nil when
// the snapshot has what a delta does not handle: a Gateway with a data
// plane of its own, an address pool, Knative, ACME, GRPCRoutes,
// TLSRoutes, TCPRoutes, UDPRoutes, BackendTLSPolicies, BackendTrafficPolicies,
// listener filters (whose Services a delta does not follow) or two objects
// of one kind and key.
func (t *translation) incrementalState() *incremental {
	s, res := t.settings, t.res
	if s.Knative != nil || s.Gateway != nil || len(s.AddressPool) > 0 || len(t.dataPlanes) > 0 || t.ix.acme != nil ||
		len(res.GRPCRoutes) > 0 || len(res.TLSRoutes) > 0 || len(res.TCPRoutes) > 0 || len(res.UDPRoutes) > 0 || len(res.BackendTLSPolicies) > 0 || len(res.TrafficPolicies) > 0 ||
		len(res.SecurityPolicies) > 0 || len(res.ClientPolicies) > 0 || len(res.XTrafficPolicies) > 0 ||
		len(res.TelemetryPolicies) > 0 || anyListenerFilters(res) {
		return nil
	}
	inc := &incremental{settings: s, res: snapshotCopy(res), gatewaySecrets: map[types.NamespacedName]bool{},
		gateways: make(map[types.NamespacedName]*gatewayMemo, len(t.mergeInputs)),
		nsLabels: t.ix.nsLabels, clientCerts: t.clientCerts, tls: t.tls, cas: t.cas.caIndex,
		lists: keptLists{ls: newKeptList(res.ListenerSets), routes: newKeptList(res.HTTPRoutes),
			secrets: newKeptList(res.Secrets), services: newKeptList(res.Services)}}
	var ok bool
	if inc.ls, ok = byKey(res.ListenerSets); !ok {
		return nil
	}
	if inc.routes, ok = byKey(res.HTTPRoutes); !ok {
		return nil
	}
	if inc.secrets, ok = byKey(res.Secrets); !ok {
		return nil
	}
	if inc.services, ok = byKey(res.Services); !ok {
		return nil
	}
	claims, protocols := make(map[hostClaim]int32, len(res.ListenerSets)), map[portProtocol]int32{}
	for rank, in := range t.mergeInputs {
		gw := in.Gateway
		inc.gateways[nn(gw.Namespace, gw.Name)] = &gatewayMemo{in: in, rank: rank}
		for i := range gw.Spec.Listeners {
			l := &gw.Spec.Listeners[i]
			countListener(claims, protocols, l.Port, l.Protocol, l.Hostname, 1)
			if l.TLS != nil {
				for _, ref := range l.TLS.CertificateRefs {
					inc.gatewaySecrets[secretKey(gw.Namespace, ref)] = true
				}
			}
		}
		if gw.Spec.TLS != nil && gw.Spec.TLS.Backend != nil && gw.Spec.TLS.Backend.ClientCertificateRef != nil {
			inc.gatewaySecrets[secretKey(gw.Namespace, *gw.Spec.TLS.Backend.ClientCertificateRef)] = true
		}
	}
	lsBySecret := make(map[types.NamespacedName][]types.NamespacedName, len(res.ListenerSets))
	for _, ls := range res.ListenerSets {
		if inc.gatewayOf(ls) == nil {
			continue
		}
		countListenerSet(claims, protocols, ls, 1)
		for _, key := range listenerSetSecrets(ls) {
			lsBySecret[key] = append(lsBySecret[key], nn(ls.Namespace, ls.Name))
		}
	}
	byParent := make(map[types.NamespacedName][]types.NamespacedName, len(res.HTTPRoutes))
	byService := make(map[types.NamespacedName][]types.NamespacedName, len(res.Services))
	for _, r := range res.HTTPRoutes {
		key := nn(r.Namespace, r.Name)
		parents, _ := routeListenerSets(r)
		for _, p := range parents {
			byParent[p] = append(byParent[p], key)
		}
		for _, svc := range routeServices(r) {
			byService[svc] = append(byService[svc], key)
		}
	}
	inc.claims, inc.protocols = layered.Of(claims), layered.Of(protocols)
	inc.lsBySecret, inc.routesByParent, inc.routesByService = layered.Of(lsBySecret), layered.Of(byParent), layered.Of(byService)
	served := make(map[types.NamespacedName][]servedListener, len(res.ListenerSets))
	order := make(map[*config.Listener]listenerOrder, len(t.placed))
	for _, p := range t.placed {
		m := &t.merged[p.i]
		o := inc.orderOf(m)
		order[p.l] = o
		if m.Source.Kind == "ListenerSet" {
			key := nn(m.Source.Namespace, m.Source.Name)
			served[key] = append(served[key], servedListener{port: p.port, host: p.host, l: p.l, entry: p.entry, order: o})
		}
	}
	inc.served = layered.Of(served)
	inc.order = layered.Of(order)
	return inc
}

// snapshotCopy is res with slices of its own: what the next translation
// compares its snapshot with must not change if a caller reuses a slice.
// The kinds a delta re-derives are kept in keptLists instead.
func snapshotCopy(res *snapshot.Resources) *snapshot.Resources {
	c := *res
	c.GatewayClasses, c.Gateways = slices.Clone(res.GatewayClasses), slices.Clone(res.Gateways)
	c.GRPCRoutes, c.TLSRoutes, c.TCPRoutes = slices.Clone(res.GRPCRoutes), slices.Clone(res.TLSRoutes), slices.Clone(res.TCPRoutes)
	c.UDPRoutes = slices.Clone(res.UDPRoutes)
	c.ReferenceGrants, c.BackendTLSPolicies, c.ConfigMaps = slices.Clone(res.ReferenceGrants), slices.Clone(res.BackendTLSPolicies), slices.Clone(res.ConfigMaps)
	c.Namespaces = slices.Clone(res.Namespaces)
	c.KIngresses, c.KCertificates = slices.Clone(res.KIngresses), slices.Clone(res.KCertificates)
	c.Parameters, c.Deployments = slices.Clone(res.Parameters), slices.Clone(res.Deployments)
	c.TrafficPolicies = slices.Clone(res.TrafficPolicies)
	c.SecurityPolicies = slices.Clone(res.SecurityPolicies)
	c.ClientPolicies = slices.Clone(res.ClientPolicies)
	c.XTrafficPolicies = slices.Clone(res.XTrafficPolicies)
	c.ClusterTrustBundles = slices.Clone(res.ClusterTrustBundles)
	c.TelemetryPolicies = slices.Clone(res.TelemetryPolicies)
	c.ListenerSets, c.HTTPRoutes, c.Secrets, c.Services = nil, nil, nil, nil
	c.EndpointSlices = nil // not compared
	return &c
}

// anyListenerFilters reports whether a listener of a Gateway or
// ListenerSet of res has pre-routing filters.
func anyListenerFilters(res *snapshot.Resources) bool {
	for _, g := range res.Gateways {
		if hasListenerFilters(g.Spec.Listeners) {
			return true
		}
	}
	for _, ls := range res.ListenerSets {
		if hasListenerFilters(listenerSetListeners(ls)) {
			return true
		}
	}
	return false
}

// byKey indexes objects by namespace/name; false when a key repeats.
func byKey[T interface {
	comparable
	snapshot.Object
}](objs []T) (layered.Map[types.NamespacedName, T], bool) {
	m, ok := plainByKey(objs)
	if !ok {
		return layered.Map[types.NamespacedName, T]{}, false
	}
	return layered.Of(m), true
}

// plainByKey is objs in a plain map by namespace/name, which byKey and
// pmapByKey make their maps of; false when a key repeats.
func plainByKey[T snapshot.Object](objs []T) (map[types.NamespacedName]T, bool) {
	m := make(map[types.NamespacedName]T, len(objs))
	for _, o := range objs {
		key := nn(o.GetNamespace(), o.GetName())
		if _, dup := m[key]; dup {
			return nil, false
		}
		m[key] = o
	}
	return m, true
}

// orderOf is the precedence of a merged listener.
func (inc *incremental) orderOf(m *listeners.Listener) listenerOrder {
	o := listenerOrder{gateway: inc.gateways[m.Gateway].rank, ns: m.Source.Namespace, name: m.Source.Name}
	var names []gwv1.SectionName
	if m.Source.Kind == "Gateway" {
		o.own = true
		for _, l := range inc.gateways[m.Gateway].in.Gateway.Spec.Listeners {
			names = append(names, l.Name)
		}
	} else {
		ls, _ := inc.ls.Get(nn(m.Source.Namespace, m.Source.Name))
		o.created = ls.CreationTimestamp.Time
		for _, l := range ls.Spec.Listeners {
			names = append(names, l.Name)
		}
	}
	o.index = slices.Index(names, m.Name)
	return o
}

// gatewayOf is the Gateway of ours a ListenerSet names, nil for none.
func (inc *incremental) gatewayOf(ls *gwv1.ListenerSet) *gatewayMemo {
	if ls == nil {
		return nil
	}
	parent, ok := ListenerSetParent(ls)
	if !ok {
		return nil
	}
	return inc.gateways[parent]
}

func countListener(claims map[hostClaim]int32, protocols map[portProtocol]int32, port gwv1.PortNumber, protocol gwv1.ProtocolType, host *gwv1.Hostname, n int32) {
	h := ""
	if host != nil {
		h = hostname.Normalize(string(*host))
	}
	claims[hostClaim{int32(port), h}] += n
	protocols[portProtocol{int32(port), protocol}] += n
}

func countListenerSet(claims map[hostClaim]int32, protocols map[portProtocol]int32, ls *gwv1.ListenerSet, n int32) {
	for i := range ls.Spec.Listeners {
		l := &ls.Spec.Listeners[i]
		countListener(claims, protocols, l.Port, l.Protocol, l.Hostname, n)
	}
}

func secretKey(namespace string, ref gwv1.SecretObjectReference) types.NamespacedName {
	if ref.Namespace != nil && *ref.Namespace != "" {
		namespace = string(*ref.Namespace)
	}
	return nn(namespace, string(ref.Name))
}

// listenerSetSecrets are the Secrets a ListenerSet's listeners name.
func listenerSetSecrets(ls *gwv1.ListenerSet) []types.NamespacedName {
	var out []types.NamespacedName
	for i := range ls.Spec.Listeners {
		if tls := ls.Spec.Listeners[i].TLS; tls != nil {
			for _, ref := range tls.CertificateRefs {
				out = append(out, secretKey(ls.Namespace, ref))
			}
		}
	}
	return out
}

// routeListenerSets are the ListenerSets a route names as parents; false
// when it names a parent of another kind too.
func routeListenerSets(r *gwv1.HTTPRoute) ([]types.NamespacedName, bool) {
	var out []types.NamespacedName
	only := true
	for _, ref := range r.Spec.ParentRefs {
		if ref.Kind == nil || *ref.Kind != "ListenerSet" || (ref.Group != nil && *ref.Group != gwv1.GroupName) {
			only = false
			continue
		}
		out = append(out, nn(refNamespace(r.Namespace, ref.Namespace), string(ref.Name)))
	}
	return out, only
}

// routeServices are the Services a route may send to or mirror to.
func routeServices(r *gwv1.HTTPRoute) []types.NamespacedName {
	var out []types.NamespacedName
	eachBackendRef(r, func(ref gwv1.BackendObjectReference) {
		out = append(out, nn(refNamespace(r.Namespace, ref.Namespace), string(ref.Name)))
	})
	return out
}

// eachBackendRef calls fn with every backend a route sends to or mirrors
// to, in its rules and in their backends' filters.
func eachBackendRef(r *gwv1.HTTPRoute, fn func(gwv1.BackendObjectReference)) {
	mirrors := func(fs []gwv1.HTTPRouteFilter) {
		for _, f := range fs {
			if f.RequestMirror != nil {
				fn(f.RequestMirror.BackendRef)
			}
			if f.ExternalAuth != nil {
				fn(f.ExternalAuth.BackendRef)
			}
		}
	}
	for _, rule := range r.Spec.Rules {
		mirrors(rule.Filters)
		for _, b := range rule.BackendRefs {
			fn(b.BackendObjectReference)
			mirrors(b.Filters)
		}
	}
}

// unchangedKinds reports whether every kind a delta does not re-derive is
// the same in both snapshots.
func unchangedKinds(a, b *snapshot.Resources) bool {
	return slices.Equal(a.GatewayClasses, b.GatewayClasses) && slices.Equal(a.Gateways, b.Gateways) &&
		slices.Equal(a.GRPCRoutes, b.GRPCRoutes) && slices.Equal(a.TLSRoutes, b.TLSRoutes) && slices.Equal(a.TCPRoutes, b.TCPRoutes) && slices.Equal(a.UDPRoutes, b.UDPRoutes) &&
		slices.Equal(a.ReferenceGrants, b.ReferenceGrants) && slices.Equal(a.BackendTLSPolicies, b.BackendTLSPolicies) &&
		// Only the ConfigMaps Gateways and policies name, as for a full
		// translation (routingInputs): a cluster has many others.
		slices.Equal(referencedConfigMaps(a), referencedConfigMaps(b)) &&
		slices.Equal(referencedTrustBundles(a), referencedTrustBundles(b)) && slices.Equal(a.Namespaces, b.Namespaces) &&
		slices.Equal(a.KIngresses, b.KIngresses) && slices.Equal(a.KCertificates, b.KCertificates) &&
		slices.Equal(a.Parameters, b.Parameters) && slices.Equal(a.Deployments, b.Deployments) &&
		slices.Equal(a.TrafficPolicies, b.TrafficPolicies) &&
		slices.Equal(a.SecurityPolicies, b.SecurityPolicies) &&
		slices.Equal(a.ClientPolicies, b.ClientPolicies) &&
		slices.Equal(a.XTrafficPolicies, b.XTrafficPolicies) &&
		slices.Equal(a.TelemetryPolicies, b.TelemetryPolicies) &&
		reflect.ValueOf(a.ACMEErrors).Pointer() == reflect.ValueOf(b.ACMEErrors).Pointer()
}

// diffMiddle lists the objects only in o and only in nw, by identity
// (informers hand out a new object for every change): what is left of two
// lists between their common prefix and suffix (keptList.diff).
func diffMiddle[T comparable](o, nw []T) (removed, added []T) {
	in := make(map[T]bool, len(o))
	for _, x := range o {
		in[x] = true
	}
	for _, x := range nw {
		if in[x] {
			delete(in, x)
		} else {
			added = append(added, x)
		}
	}
	for _, x := range o {
		if in[x] {
			removed = append(removed, x)
		}
	}
	return removed, added
}

// applyDiff applies a kind's changes to its index and returns the keys
// that changed; false when an added object's key is taken.
func applyDiff[T interface {
	comparable
	snapshot.Object
}](idx layered.Map[types.NamespacedName, T], removed, added []T) (layered.Map[types.NamespacedName, T], []types.NamespacedName, bool) {
	if len(removed) == 0 && len(added) == 0 {
		return idx, nil, true
	}
	e := idx.Edit()
	keys, ok := diffInto(e, removed, added)
	if !ok {
		return idx, nil, false
	}
	return e.Done(), keys, true
}

// indexEdit is an edit of an index by key, of either kind of map translate
// keeps (layered.Map, pmap.Map).
type indexEdit[T any] interface {
	Get(types.NamespacedName) (T, bool)
	Set(types.NamespacedName, T)
	Delete(types.NamespacedName)
}

// diffInto applies a kind's changes to e and returns the keys that
// changed; false when an added object's key is taken (e is then to be
// dropped).
func diffInto[T interface {
	comparable
	snapshot.Object
}](e indexEdit[T], removed, added []T) ([]types.NamespacedName, bool) {
	var keys []types.NamespacedName
	for _, o := range removed {
		key := nn(o.GetNamespace(), o.GetName())
		if cur, ok := e.Get(key); ok && cur == o {
			e.Delete(key)
		}
		keys = append(keys, key)
	}
	for _, o := range added {
		key := nn(o.GetNamespace(), o.GetName())
		if _, taken := e.Get(key); taken {
			return nil, false
		}
		e.Set(key, o)
		keys = append(keys, key)
	}
	return keys, true
}

// relist edits an index of key lists: key leaves the lists of from and
// joins those of to.
func relist(idx layered.Map[types.NamespacedName, []types.NamespacedName], key types.NamespacedName, from, to []types.NamespacedName) layered.Map[types.NamespacedName, []types.NamespacedName] {
	if slices.Equal(from, to) {
		return idx
	}
	e := idx.Edit()
	for _, f := range from {
		list, _ := e.Get(f)
		list = slices.DeleteFunc(slices.Clone(list), func(k types.NamespacedName) bool { return k == key })
		if len(list) == 0 {
			e.Delete(f)
		} else {
			e.Set(f, list)
		}
	}
	for _, f := range to {
		list, _ := e.Get(f)
		if !slices.Contains(list, key) {
			e.Set(f, append(slices.Clip(list), key))
		}
	}
	return e.Done()
}

// delta is one incremental translation: what changed, and the state it
// builds for the next.
type delta struct {
	prev *incremental
	next *incremental
	mem  Memory
	res  *snapshot.Resources
	// old versions of the changed ListenerSets and routes.
	oldLS     map[types.NamespacedName]*gwv1.ListenerSet
	oldRoutes map[types.NamespacedName]*gwv1.HTTPRoute
	// sets are the ListenerSets merged again, routes the routes compiled
	// again.
	sets   map[types.NamespacedName]bool
	routes map[types.NamespacedName]bool
}

// apply translates res from the translation inc was kept from, re-deriving
// only what changed; false when res must be translated in full.
func (inc *incremental) apply(s Settings, res *snapshot.Resources, mem Memory) (Output, Memory, bool) {
	if !reflect.DeepEqual(s, inc.settings) || !unchangedKinds(inc.res, res) {
		return Output{}, mem, false
	}
	d := &delta{prev: inc, mem: mem, res: res, oldLS: map[types.NamespacedName]*gwv1.ListenerSet{},
		oldRoutes: map[types.NamespacedName]*gwv1.HTTPRoute{}, sets: map[types.NamespacedName]bool{}, routes: map[types.NamespacedName]bool{}}
	// The kinds compared equal keep the copies they have (res), the
	// others are kept by index.
	next := *inc
	d.next = &next
	changed, ok := d.index()
	if !ok {
		return Output{}, mem, false
	}
	if !changed {
		// EndpointSlices only, or nothing.
		nm := mem
		nm.inc, nm.incremental = d.next, true
		return unchanged(mem.last.out), nm, true
	}
	if !d.affected() || !d.conflictFree() {
		return Output{}, mem, false
	}
	return d.translate()
}

// index brings the indexes up to date with res and records what changed.
func (d *delta) index() (changed, ok bool) {
	inc, next, res := d.prev, d.next, d.res
	lsRemoved, lsAdded, lsList, ok1 := inc.lists.ls.diff(res.ListenerSets)
	rtRemoved, rtAdded, rtList, ok2 := inc.lists.routes.diff(res.HTTPRoutes)
	secRemoved, secAdded, secList, ok3 := inc.lists.secrets.diff(res.Secrets)
	svcRemoved, svcAdded, svcList, ok4 := inc.lists.services.diff(res.Services)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return false, false
	}
	next.lists = keptLists{ls: lsList, routes: rtList, secrets: secList, services: svcList}
	var lsKeys, rtKeys, secKeys, svcKeys []types.NamespacedName
	if next.ls, lsKeys, ok = applyDiff(inc.ls, lsRemoved, lsAdded); !ok {
		return false, false
	}
	if next.routes, rtKeys, ok = applyDiff(inc.routes, rtRemoved, rtAdded); !ok {
		return false, false
	}
	if next.secrets, secKeys, ok = applyDiff(inc.secrets, secRemoved, secAdded); !ok {
		return false, false
	}
	if next.services, svcKeys, ok = applyDiff(inc.services, svcRemoved, svcAdded); !ok {
		return false, false
	}
	if len(lsKeys)+len(rtKeys)+len(secKeys)+len(svcKeys) == 0 {
		return false, true
	}
	for _, key := range lsKeys {
		if !d.listenerSetChanged(key) {
			return false, false
		}
	}
	for _, key := range rtKeys {
		old, _ := inc.routes.Get(key)
		cur, _ := next.routes.Get(key)
		d.oldRoutes[key] = old
		d.routes[key] = true
		var oldParents, newParents, oldSvcs, newSvcs []types.NamespacedName
		if old != nil {
			oldParents, _ = routeListenerSets(old)
			oldSvcs = routeServices(old)
		}
		if cur != nil {
			newParents, _ = routeListenerSets(cur)
			newSvcs = routeServices(cur)
		}
		next.routesByParent = relist(next.routesByParent, key, oldParents, newParents)
		next.routesByService = relist(next.routesByService, key, oldSvcs, newSvcs)
	}
	for _, key := range secKeys {
		if inc.gatewaySecrets[key] {
			return false, false
		}
		users, _ := next.lsBySecret.Get(key)
		for _, ls := range users {
			d.sets[ls] = true
		}
	}
	for _, key := range svcKeys {
		if sh := next.settings.Shared; sh != nil && sh.Service == key {
			return false, false // every Gateway's addresses
		}
		users, _ := next.routesByService.Get(key)
		for _, r := range users {
			d.routes[r] = true
		}
	}
	return true, true
}

// listenerSetChanged records a changed ListenerSet; false when the change
// is not one a delta handles (its Gateway is not ours or changed, it
// asks for ACME).
func (d *delta) listenerSetChanged(key types.NamespacedName) bool {
	inc, next := d.prev, d.next
	old, _ := inc.ls.Get(key)
	cur, _ := next.ls.Get(key)
	for _, ls := range []*gwv1.ListenerSet{old, cur} {
		// Listener filters name Services, which a delta does not follow
		// for listeners: a ListenerSet with some is translated in full.
		if ls != nil && (inc.gatewayOf(ls) == nil || ls.Annotations[wellknown.ACMEAnnotation] != "" || hasListenerFilters(listenerSetListeners(ls))) {
			return false
		}
	}
	if old != nil && cur != nil && inc.gatewayOf(old) != inc.gatewayOf(cur) {
		return false
	}
	d.oldLS[key] = old
	d.sets[key] = true
	claims, protocols := map[hostClaim]int32{}, map[portProtocol]int32{}
	var oldSecrets, newSecrets []types.NamespacedName
	if old != nil {
		countListenerSet(claims, protocols, old, -1)
		oldSecrets = listenerSetSecrets(old)
	}
	if cur != nil {
		countListenerSet(claims, protocols, cur, 1)
		newSecrets = listenerSetSecrets(cur)
	}
	next.claims = addCounts(next.claims, claims)
	next.protocols = addCounts(next.protocols, protocols)
	next.lsBySecret = relist(next.lsBySecret, key, oldSecrets, newSecrets)
	return true
}

func addCounts[K comparable](idx layered.Map[K, int32], counts map[K]int32) layered.Map[K, int32] {
	e := idx.Edit()
	for k, n := range counts {
		if n == 0 {
			continue
		}
		v, _ := e.Get(k)
		if v+n == 0 {
			e.Delete(k)
		} else {
			e.Set(k, v+n)
		}
	}
	return e.Done()
}

// affected closes the sets of ListenerSets and routes to translate
// again: a route is compiled with every listener it attaches to, and a
// listener with every route attached to it. False when a route names a
// parent other than a ListenerSet, or the change grows too large.
func (d *delta) affected() bool {
	for {
		grew := false
		for key := range d.sets {
			users, _ := d.next.routesByParent.Get(key)
			for _, r := range users {
				if !d.routes[r] {
					d.routes[r], grew = true, true
				}
			}
		}
		for key := range d.routes {
			for _, r := range []*gwv1.HTTPRoute{d.oldRoutes[key], d.route(key)} {
				if r == nil {
					continue
				}
				parents, only := routeListenerSets(r)
				if !only {
					return false
				}
				for _, p := range parents {
					if !d.sets[p] {
						d.sets[p], grew = true, true
					}
				}
			}
		}
		if len(d.sets)+len(d.routes) > maxDelta {
			return false
		}
		if !grew {
			return true
		}
	}
}

// route is the route of key in the new snapshot, nil when there is none.
func (d *delta) route(key types.NamespacedName) *gwv1.HTTPRoute {
	r, _ := d.next.routes.Get(key)
	return r
}

// oldListenerSet is the ListenerSet of key in the snapshot before.
func (d *delta) oldListenerSet(key types.NamespacedName) *gwv1.ListenerSet {
	if old, changed := d.oldLS[key]; changed {
		return old
	}
	ls, _ := d.prev.ls.Get(key)
	return ls
}

// conflictFree reports whether every listener of the ListenerSets merged
// again, before and after, is alone on its port and hostname among the
// listeners of every Gateway of ours, on a port of its protocol only: then
// its merge depends on its Gateway and itself alone, and it takes no
// hostname from another Gateway's listener on the data plane.
func (d *delta) conflictFree() bool {
	check := func(inc *incremental, ls *gwv1.ListenerSet) bool {
		if ls == nil || inc.gatewayOf(ls) == nil {
			return ls == nil
		}
		for i := range ls.Spec.Listeners {
			l := &ls.Spec.Listeners[i]
			if l.Protocol != gwv1.HTTPProtocolType && l.Protocol != gwv1.HTTPSProtocolType {
				return false
			}
			h := ""
			if l.Hostname != nil {
				h = hostname.Normalize(string(*l.Hostname))
			}
			if n, _ := inc.claims.Get(hostClaim{int32(l.Port), h}); n != 1 {
				return false
			}
			for _, other := range []gwv1.ProtocolType{gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType, gwv1.TLSProtocolType} {
				if n, _ := inc.protocols.Get(portProtocol{int32(l.Port), other}); other != l.Protocol && n != 0 {
					return false
				}
			}
		}
		return true
	}
	for key := range d.sets {
		cur, _ := d.next.ls.Get(key)
		if !check(d.prev, d.oldListenerSet(key)) || !check(d.next, cur) {
			return false
		}
	}
	return true
}

// translate merges, compiles and places the affected ListenerSets and
// routes, and makes the next output of the previous one with them: a
// new Output sharing what they did not change, the previous one unchanged.
func (d *delta) translate() (Output, Memory, bool) {
	prevOut := d.mem.last.out
	t := &translation{
		settings:   d.next.settings,
		controller: d.next.settings.controller(),
		res:        d.res,
		ix: &index{nsLabels: d.next.nsLabels, secrets: map[types.NamespacedName]*corev1.Secret{},
			certs: certSource{prev: d.mem.certs, used: map[types.NamespacedName]parsedCert{}}},
		cas:         &caSource{caIndex: d.next.cas, prev: d.mem.caBundles, used: map[any]caBundle{}},
		parents:     map[routing.Parent]bool{},
		clientCerts: d.next.clientCerts,
		tls:         d.next.tls,
		st:          &status.Maps{Gateways: map[types.NamespacedName]gwv1.GatewayStatus{}},
	}
	for key := range d.next.gatewaySecrets {
		if sec, ok := d.next.secrets.Get(key); ok {
			t.ix.secrets[key] = sec
		}
	}
	byGateway := map[*gatewayMemo][]*gwv1.ListenerSet{}
	for key := range d.sets {
		if ls, ok := d.next.ls.Get(key); ok && d.next.gatewayOf(ls) != nil {
			byGateway[d.next.gatewayOf(ls)] = append(byGateway[d.next.gatewayOf(ls)], ls)
			for _, s := range listenerSetSecrets(ls) {
				if sec, ok := d.next.secrets.Get(s); ok {
					t.ix.secrets[s] = sec
				}
			}
		}
	}
	gws := make([]*gatewayMemo, 0, len(byGateway))
	for g := range byGateway {
		gws = append(gws, g)
	}
	slices.SortFunc(gws, func(a, b *gatewayMemo) int { return cmp.Compare(a.rank, b.rank) })
	lsStatuses := map[types.NamespacedName]gwv1.ListenerSetStatus{}
	for _, g := range gws {
		in := g.in
		in.ListenerSets = byGateway[g]
		in.NamespaceLabels, in.Certificates, in.CACertificates, in.TrustBundles = t.ix.nsLabels, t.ix.certificate, t.cas.certificates, t.cas.trustBundle
		r := listeners.Merge(in)
		key := nn(in.Gateway.Namespace, in.Gateway.Name)
		// Only the ListenerSets' listeners: the Gateway's own are as
		// they were.
		own := len(r.Gateway.Listeners)
		r.Listeners = r.Listeners[own:]
		t.results = append(t.results, gatewayResult{key, &r})
		for lsKey, lss := range r.ListenerSets {
			t.parents[routing.Parent{Kind: "ListenerSet", Namespace: lsKey.Namespace, Name: lsKey.Name}] = meta.IsStatusConditionTrue(lss.Conditions, string(gwv1.ListenerSetConditionAccepted))
			lsStatuses[lsKey] = lss
		}
		t.merged = append(t.merged, r.Listeners...)
	}
	if !d.compile(t) {
		return Output{}, d.mem, false
	}
	cfg, ok := d.place(t, prevOut.Config)
	if !ok {
		return Output{}, d.mem, false
	}
	st, changed := d.statuses(prevOut.Statuses, lsStatuses, t.compiled.RouteParents)
	out := prevOut
	out.Config, out.Statuses, out.StatusesChanged = cfg, st, changed
	next := d.mem
	next.inc, next.incremental = d.next, true
	next.certs = d.certs(t.ix.certs.used)
	next.last = &fullTranslation{out: out}
	return out, next, true
}

// compile compiles the affected routes on the merged listeners of the
// affected ListenerSets, and sets the listeners' attachedRoutes.
func (d *delta) compile(t *translation) bool {
	var routes []*gwv1.HTTPRoute
	services := map[types.NamespacedName]routing.Service{}
	for key := range d.routes {
		r := d.route(key)
		if r == nil {
			continue
		}
		routes = append(routes, r)
		for _, svc := range routeServices(r) {
			if s, ok := d.next.services.Get(svc); ok {
				services[svc] = t.service(s)
			}
		}
	}
	// The order Compile is given routes in does not matter (it sorts), but
	// keep it fixed.
	slices.SortFunc(routes, snapshot.CompareAge)
	in := routing.Input{
		ControllerName:  t.controller,
		Listeners:       make([]routing.Listener, len(t.merged)),
		Parents:         t.parents,
		Routes:          routes,
		NamespaceLabels: t.ix.nsLabels,
		Services:        services,
		ReferenceGrants: d.res.ReferenceGrants,
	}
	for i := range t.merged {
		in.Listeners[i] = routingListener(i, &t.merged[i])
	}
	t.compiled = routing.Compile(in)
	offset := 0
	for _, r := range t.results {
		for i := range r.Listeners {
			r.SetAttachedRoutes(i, t.compiled.AttachedRoutes[offset+i])
		}
		offset += len(r.Listeners)
	}
	return true
}

// place takes the affected ListenerSets' listeners off their ports and
// puts their new ones on, in a Config that shares every other port.
func (d *delta) place(t *translation, prev *config.Config) (*config.Config, bool) {
	changes := map[config.PortKey]*portChange{}
	change := func(pk config.PortKey) *portChange {
		c, ok := changes[pk]
		if !ok {
			c = &portChange{removed: map[*config.Listener]bool{}}
			changes[pk] = c
		}
		return c
	}
	servedEdit := d.next.served.Edit()
	for key := range d.sets {
		old, _ := d.prev.served.Get(key)
		for _, s := range old {
			c := change(s.port)
			c.removeHosts = append(c.removeHosts, s.host)
			c.removed[s.l] = true
		}
		servedEdit.Delete(key)
	}
	b := newPortsBuilder(t)
	for i := range t.merged {
		m := &t.merged[i]
		if !m.Serves() {
			continue
		}
		key := nn(m.Source.Namespace, m.Source.Name)
		pk := config.PortKey{Number: int32(m.Port)}
		l := b.listener(i)
		s := servedListener{port: pk, host: hostname.Normalize(m.Hostname), l: l, order: d.next.orderOf(m)}
		if m.Protocol == gwv1.HTTPSProtocolType {
			s.entry = b.entry(m, s.host, l)
		}
		list, _ := servedEdit.Get(key)
		servedEdit.Set(key, append(list, s))
		c := change(pk)
		c.adds = append(c.adds, s)
	}
	d.next.served = servedEdit.Done()
	order := d.prev.order.Edit()
	for _, c := range changes {
		for _, s := range c.adds {
			order.Set(s.l, s.order)
		}
	}
	cfg := *prev
	cfg.Ports = slices.Clone(prev.Ports)
	for pk, c := range changes {
		at := slices.IndexFunc(cfg.Ports, func(p *config.Port) bool { return p.Address == pk.Address && p.Number == pk.Number })
		if at < 0 {
			return nil, false
		}
		p, ok := patchPort(cfg.Ports[at], c, order)
		if !ok {
			return nil, false
		}
		cfg.Ports[at] = p
	}
	for _, c := range changes {
		for l := range c.removed {
			order.Delete(l)
		}
	}
	// Ports come in the order of their first listeners, which may have
	// changed.
	first := func(p *config.Port) listenerOrder {
		o, _ := order.Get(p.All.At(0))
		return o
	}
	slices.SortStableFunc(cfg.Ports, func(a, b *config.Port) int { return compareOrder(first(a), first(b)) })
	d.next.order = order.Done()
	return &cfg, true
}

// portChange is what a delta changes on one port.
type portChange struct {
	removeHosts []string
	removed     map[*config.Listener]bool
	adds        []servedListener
}

// patchPort is prev with c applied; false when the port would go, which
// changes the list of ports.
func patchPort(prev *config.Port, c *portChange, order *layered.Edit[*config.Listener, listenerOrder]) (*config.Port, bool) {
	p := *prev
	p.All = placeAll(p.All, order, c.removed, c.adds)
	if p.All.Len() == 0 {
		return nil, false
	}
	hosts, ls, entries := make([]string, len(c.adds)), make([]*config.Listener, len(c.adds)), make([]*sni.Entry, 0, len(c.adds))
	for i, s := range c.adds {
		hosts[i], ls[i] = s.host, s.l
		if s.entry != nil {
			entries = append(entries, s.entry)
		}
		if (s.entry != nil) != (p.Protocol == config.HTTPS) {
			return nil, false
		}
	}
	p.Listeners = p.Listeners.With(c.removeHosts, hosts, ls)
	if p.SNI != nil {
		p.SNI = p.SNI.With(c.removeHosts, entries)
	}
	return &p, true
}

// placeAll is a port's listener list without those removed and with adds,
// each where its precedence (order, which knows both) puts it.
func placeAll(all chunked.List[*config.Listener], order *layered.Edit[*config.Listener, listenerOrder], removed map[*config.Listener]bool,
	adds []servedListener) chunked.List[*config.Listener] {
	byOrder := func(target listenerOrder) func(*config.Listener) int {
		return func(l *config.Listener) int {
			o, _ := order.Get(l)
			return compareOrder(o, target)
		}
	}
	for l := range removed {
		o, _ := order.Get(l)
		if at, found := all.Search(byOrder(o)); found && all.At(at) == l {
			all = all.Delete(at)
		}
	}
	for _, s := range adds {
		at, _ := all.Search(byOrder(s.order))
		all = all.Insert(at, s.l)
	}
	return all
}

// statuses is prev with the statuses of the affected ListenerSets and
// routes, and their Gateways' attachedListenerSets. prev is not changed:
// the maps changed are edited copies sharing every other entry with it.
func (d *delta) statuses(prev *status.Computed, sets map[types.NamespacedName]gwv1.ListenerSetStatus,
	routes map[types.NamespacedName][]gwv1.RouteParentStatus) (*status.Computed, *status.Changed) {
	lsEdit, routeEdit := prev.ListenerSets.Edit(), prev.HTTPRoutes.Edit()
	attached := map[types.NamespacedName]int32{}
	accepted := func(s gwv1.ListenerSetStatus) int32 {
		if meta.IsStatusConditionTrue(s.Conditions, string(gwv1.ListenerSetConditionAccepted)) {
			return 1
		}
		return 0
	}
	changed := &status.Changed{}
	for key := range d.sets {
		changed.ListenerSets = append(changed.ListenerSets, key)
		if old, ok := prev.ListenerSets.Get(key); ok {
			if g := d.prev.gatewayOf(d.oldListenerSet(key)); g != nil {
				attached[nn(g.in.Gateway.Namespace, g.in.Gateway.Name)] -= accepted(old)
			}
		}
		lsEdit.Delete(key)
		if s, ok := sets[key]; ok {
			lsEdit.Set(key, s)
			cur, _ := d.next.ls.Get(key)
			g := d.next.gatewayOf(cur)
			attached[nn(g.in.Gateway.Namespace, g.in.Gateway.Name)] += accepted(s)
		}
	}
	for key := range d.routes {
		changed.HTTPRoutes = append(changed.HTTPRoutes, key)
		routeEdit.Delete(key)
		if r, ok := routes[key]; ok {
			routeEdit.Set(key, r)
		}
	}
	gwEdit := prev.Gateways.Edit()
	for key, n := range attached {
		gs, _ := gwEdit.Get(key)
		count := n
		if gs.AttachedListenerSets != nil {
			count += *gs.AttachedListenerSets
		}
		gs.AttachedListenerSets = &count
		gwEdit.Set(key, gs)
		changed.Gateways = append(changed.Gateways, key)
	}
	st := *prev
	st.ListenerSets, st.HTTPRoutes, st.Gateways = lsEdit.Done(), routeEdit.Done(), gwEdit.Done()
	return &st, changed
}

// certs is the next memory's key pairs: those parsed now join, and those
// of Secrets that left the snapshot or that no listener names any more
// leave.
func (d *delta) certs(used map[types.NamespacedName]parsedCert) layered.Map[types.NamespacedName, parsedCert] {
	e := d.mem.certs.Edit()
	for key, p := range used {
		e.Set(key, p)
	}
	for key := range d.sets {
		if old := d.oldListenerSet(key); old != nil {
			for _, s := range listenerSetSecrets(old) {
				users, _ := d.next.lsBySecret.Get(s)
				if _, exists := d.next.secrets.Get(s); !exists || len(users) == 0 && !d.next.gatewaySecrets[s] {
					e.Delete(s)
				}
			}
		}
	}
	return e.Done()
}
