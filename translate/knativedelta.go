package translate

import (
	"container/heap"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/shared/layered"
	"portico.dev/portico/internal/shared/pmap"
	"portico.dev/portico/sni"
)

// knativeState is what a translation keeps so that the next one
// re-derives only what a change of KIngresses, Secrets and Services
// touches: a changed KIngress, or one naming a changed Secret or Service,
// is compiled again alone, the hosts it claims or releases change hands,
// and the gateways' tables take its hosts off and on (config.Table
// WithOrdered, sni.Table.With) in Configs that share the rest. Like the
// Memory holding it, it is never changed once built.
//
// It is kept when the KIngresses are all the Config serves and all
// translate decides beside GatewayClass statuses (no Gateway of Portico's
// classes, so that no status or port of the Gateway API depends on a
// Secret or Service), and their ports are free; any change of another kind,
// of the settings, of a Secret a Knative Certificate names, or of more
// objects than a delta handles is translated in full.
type knativeState struct {
	settings Settings
	// res is the snapshot's other kinds, to compare the next one's with.
	res      *snapshot.Resources
	ings     ropeList[*knative.Ingress]
	secretsL ropeList[*corev1.Secret]
	servL    ropeList[*corev1.Service]
	// byKey, secrets and services index the snapshot (every KIngress,
	// whatever its class).
	byKey    pmap.Map[types.NamespacedName, *knative.Ingress]
	secrets  pmap.Map[types.NamespacedName, *corev1.Secret]
	services pmap.Map[types.NamespacedName, *corev1.Service]
	// compiled are the KIngresses of Portico's class; owners who is
	// served each (gateway, host), wanters every KIngress that claims it.
	compiled pmap.Map[types.NamespacedName, *kCompiled]
	owners   pmap.Map[gatewayHost, types.NamespacedName]
	wanters  pmap.Map[gatewayHost, []types.NamespacedName]
	// bySecret and byService are the KIngresses naming each Secret and
	// Service; certSecrets the Secrets Knative Certificates of Portico's
	// class name.
	bySecret    pmap.Map[types.NamespacedName, users]
	byService   pmap.Map[types.NamespacedName, users]
	certSecrets map[types.NamespacedName]bool
	ports       knativePorts
	// localCerts counts the cluster-local gateway's certificates: its
	// HTTPS port is served while there is one.
	localCerts int
	// changed counts the objects changed since the full translation the
	// state was built from: the persistent maps hold what changed beside
	// what they were made of (deleted objects too) until one builds them
	// anew, which apply asks for once as many objects as the state holds
	// have changed.
	changed int
}

// knativeState indexes a full translation for the next one; nil when it
// is of a shape a delta does not cover (see knativeState).
func (t *translation) knativeState(out Output) *knativeState {
	s, res := t.settings, t.res
	if s.Knative == nil || s.Gateway != nil || len(s.AddressPool) > 0 || len(t.dataPlanes) > 0 || t.ix.acme != nil || t.knativeProblems {
		return nil
	}
	served := 0
	for _, at := range t.knativePorts.at {
		if at >= 0 {
			served++
		}
	}
	st := out.Statuses
	if len(t.cfg.Ports) != served || st.Gateways.Len()+st.ListenerSets.Len()+st.HTTPRoutes.Len()+st.GRPCRoutes.Len()+
		st.TLSRoutes.Len()+st.BackendTLSPolicies.Len() > 0 {
		return nil
	}
	kn := &knativeState{settings: s, res: knativeSnapshotCopy(res), ports: *t.knativePorts, localCerts: t.knativeLocalCerts,
		ings: newRopeList(res.KIngresses), secretsL: newRopeList(res.Secrets), servL: newRopeList(res.Services),
		certSecrets: map[types.NamespacedName]bool{}}
	var ok bool
	if kn.byKey, ok = pmapByKey(res.KIngresses); !ok {
		return nil
	}
	if kn.secrets, ok = pmapByKey(res.Secrets); !ok {
		return nil
	}
	if kn.services, ok = pmapByKey(res.Services); !ok {
		return nil
	}
	if len(t.knativeCompiled) != len(ours(res.KIngresses, s.Knative.class())) {
		return nil // two of one key
	}
	compiled := make(map[types.NamespacedName]*kCompiled, len(t.knativeCompiled))
	wanters := make(map[gatewayHost][]types.NamespacedName, len(t.knativeOwners))
	bySecret, byService := map[types.NamespacedName]map[types.NamespacedName]struct{}{}, map[types.NamespacedName]map[types.NamespacedName]struct{}{}
	add := func(m map[types.NamespacedName]map[types.NamespacedName]struct{}, ref, key types.NamespacedName) {
		if m[ref] == nil {
			m[ref] = map[types.NamespacedName]struct{}{}
		}
		m[ref][key] = struct{}{}
	}
	for key, c := range t.knativeCompiled {
		compiled[key] = c
		for _, k := range c.keys {
			wanters[k] = append(wanters[k], key)
		}
		for _, sec := range c.secrets {
			add(bySecret, sec, key)
		}
		for _, svc := range c.services {
			add(byService, svc, key)
		}
	}
	owners := make(map[gatewayHost]types.NamespacedName, len(t.knativeOwners))
	for k, c := range t.knativeOwners {
		owners[k] = c.key
	}
	for _, c := range res.KCertificates {
		if c.Annotations[knative.CertificateClassAnnotation] == s.Knative.certificateClass() {
			kn.certSecrets[nn(c.Namespace, c.Spec.SecretName)] = true
		}
	}
	kn.compiled, kn.owners, kn.wanters = pmap.Of(compiled), pmap.Of(owners), pmap.Of(wanters)
	kn.bySecret, kn.byService = usersOf(bySecret), usersOf(byService)
	return kn
}

// pmapByKey is byKey in a persistent map: the Knative state's maps are
// edited by every change, and a change copies a path of one, where a
// layered map copies its overlay and now and then the map.
func pmapByKey[T interface {
	comparable
	snapshot.Object
}](objs []T) (pmap.Map[types.NamespacedName, T], bool) {
	m, ok := plainByKey(objs)
	if !ok {
		return pmap.Map[types.NamespacedName, T]{}, false
	}
	return pmap.Of(m), true
}

// pmapApplyDiff is applyDiff on a persistent map.
func pmapApplyDiff[T interface {
	comparable
	snapshot.Object
}](idx pmap.Map[types.NamespacedName, T], removed, added []T) (pmap.Map[types.NamespacedName, T], []types.NamespacedName, bool) {
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

// knativeSnapshotCopy is res with slices of its own, but for the kinds a
// Knative delta re-derives (kept in ropeLists) and EndpointSlices.
func knativeSnapshotCopy(res *snapshot.Resources) *snapshot.Resources {
	c := *snapshotCopy(res)
	c.KIngresses = nil
	c.ListenerSets, c.HTTPRoutes = slices.Clone(res.ListenerSets), slices.Clone(res.HTTPRoutes)
	return &c
}

// knativeUnchangedKinds reports whether every kind a Knative delta does not
// re-derive is the same in both snapshots.
func knativeUnchangedKinds(a, b *snapshot.Resources) bool {
	return slices.Equal(a.ListenerSets, b.ListenerSets) && slices.Equal(a.HTTPRoutes, b.HTTPRoutes) &&
		slices.Equal(a.KCertificates, b.KCertificates) && unchangedKindsBut(a, b)
}

// unchangedKindsBut is unchangedKinds without KIngresses and
// KCertificates.
func unchangedKindsBut(a, b *snapshot.Resources) bool {
	x, y := *a, *b
	x.KIngresses, y.KIngresses, x.KCertificates, y.KCertificates = nil, nil, nil, nil
	return unchangedKinds(&x, &y)
}

// knativeDelta is one incremental translation of KIngresses.
type knativeDelta struct {
	prev, next *knativeState
	mem        Memory
	res        *snapshot.Resources
	k          *knativeTranslation
	// dirty are the KIngresses (any class) that changed or name a changed
	// Secret or Service: compiled again.
	dirty map[types.NamespacedName]bool
	// fresh are their new compilations, of those of Portico's class.
	fresh map[types.NamespacedName]*kCompiled
	// outcome is the conflict (or "" for served) of each KIngress whose
	// claims were looked at again.
	outcome map[types.NamespacedName]string
	queue   ageQueue
	queued  map[types.NamespacedName]bool
	owners  ownerEdit
}

// ownerEdit is the claims as a delta changes them: hosts released and
// claimed again by the same KIngress (most of a change) leave the kept
// map as it was, so that its overlay grows with what changed hands only.
type ownerEdit struct {
	prev pmap.Map[gatewayHost, types.NamespacedName]
	now  map[gatewayHost]ownerNow
}

type ownerNow struct {
	key types.NamespacedName
	ok  bool
}

func (o *ownerEdit) Get(k gatewayHost) (types.NamespacedName, bool) {
	if x, ok := o.now[k]; ok {
		return x.key, x.ok
	}
	return o.prev.Get(k)
}

func (o *ownerEdit) Set(k gatewayHost, key types.NamespacedName) { o.now[k] = ownerNow{key, true} }
func (o *ownerEdit) Delete(k gatewayHost)                        { o.now[k] = ownerNow{} }

// Done is the claims kept for the next translation.
func (o *ownerEdit) Done() pmap.Map[gatewayHost, types.NamespacedName] {
	var e *pmap.Edit[gatewayHost, types.NamespacedName]
	for k, x := range o.now {
		if key, ok := o.prev.Get(k); ok == x.ok && key == x.key {
			continue
		}
		if e == nil {
			e = o.prev.Edit()
		}
		if x.ok {
			e.Set(k, x.key)
		} else {
			e.Delete(k)
		}
	}
	if e == nil {
		return o.prev
	}
	return e.Done()
}

// maxKnativeCascade bounds the KIngresses whose claims a delta looks at
// again: a longer chain of DomainConflict hand-overs is translated in
// full.
const maxKnativeCascade = 4 * maxDelta

// apply translates res from the translation st was kept from, re-deriving
// only what changed; false when res must be translated in full.
func (st *knativeState) apply(s Settings, res *snapshot.Resources, mem Memory) (Output, Memory, bool) {
	if !reflect.DeepEqual(s, st.settings) || !knativeUnchangedKinds(st.res, res) || st.changed > max(4*maxDelta, st.byKey.Len()) {
		return Output{}, mem, false
	}
	next := *st
	d := &knativeDelta{prev: st, next: &next, mem: mem, res: res, dirty: map[types.NamespacedName]bool{},
		fresh: map[types.NamespacedName]*kCompiled{}, outcome: map[types.NamespacedName]string{}, queued: map[types.NamespacedName]bool{}}
	changed, ok := d.index()
	if !ok {
		return Output{}, mem, false
	}
	if !changed {
		// EndpointSlices only, or nothing.
		nm := mem
		nm.kn, nm.incremental = d.next, true
		return knativeUnchanged(mem.last.out), nm, true
	}
	return d.translate()
}

// knativeUnchanged is out again, saying that no status or KIngress result
// changed since.
func knativeUnchanged(out Output) Output {
	out = unchanged(out)
	if out.Knative != nil {
		kn := *out.Knative
		kn.Changed = []types.NamespacedName{}
		out.Knative = &kn
	}
	return out
}

// index brings the indexes up to date with res and marks what changed;
// false when the change is not one a delta handles.
func (d *knativeDelta) index() (changed, ok bool) {
	st, next, res := d.prev, d.next, d.res
	ingRemoved, ingAdded, ingList, ok1 := st.ings.diff(res.KIngresses)
	secRemoved, secAdded, secList, ok2 := st.secretsL.diff(res.Secrets)
	svcRemoved, svcAdded, svcList, ok3 := st.servL.diff(res.Services)
	if !ok1 || !ok2 || !ok3 {
		return false, false
	}
	next.ings, next.secretsL, next.servL = ingList, secList, svcList
	var ingKeys, secKeys, svcKeys []types.NamespacedName
	if next.byKey, ingKeys, ok = pmapApplyDiff(st.byKey, ingRemoved, ingAdded); !ok {
		return false, false
	}
	if next.secrets, secKeys, ok = pmapApplyDiff(st.secrets, secRemoved, secAdded); !ok {
		return false, false
	}
	if next.services, svcKeys, ok = pmapApplyDiff(st.services, svcRemoved, svcAdded); !ok {
		return false, false
	}
	if len(ingKeys)+len(secKeys)+len(svcKeys) == 0 {
		return false, true
	}
	next.changed += len(ingKeys) + len(secKeys) + len(svcKeys)
	for _, key := range ingKeys {
		d.dirty[key] = true
	}
	for _, key := range secKeys {
		if st.certSecrets[key] {
			return false, false // a Knative Certificate's Ready
		}
		users, _ := st.bySecret.Get(key)
		for u := range users.Keys() {
			d.dirty[u] = true
		}
	}
	for _, key := range svcKeys {
		users, _ := st.byService.Get(key)
		if users.Len() > 2*maxDelta {
			return false, false
		}
		for u := range users.Keys() {
			d.dirty[u] = true
		}
	}
	return true, len(d.dirty) <= 2*maxDelta
}

// translate compiles the dirty KIngresses, hands their hosts over, puts
// what changed on the gateways and makes the next Output of the previous
// one, which it does not change.
func (d *knativeDelta) translate() (Output, Memory, bool) {
	prevOut := d.mem.last.out
	s := d.next.settings.Knative
	t := &translation{settings: d.next.settings, res: d.res,
		ix: &index{secrets: map[types.NamespacedName]*corev1.Secret{},
			certs: certSource{prev: d.mem.certs, used: map[types.NamespacedName]parsedCert{}}}}
	d.k = &knativeTranslation{t: t, s: s, prevKn: d.prev,
		service: func(key types.NamespacedName) *corev1.Service { return d.next.services.At(key) }}
	if !d.compileDirty() || !d.claims() {
		return Output{}, d.mem, false
	}
	// What is compiled again: the dirty KIngresses of Portico's class, and
	// those whose conflict changed.
	var removed, recompiled []*kCompiled // before and after
	var changedKeys []types.NamespacedName
	compiled := d.prev.compiled.Edit()
	for key := range d.dirty {
		if old, ok := d.prev.compiled.Get(key); ok {
			removed = append(removed, old)
		}
		if c := d.fresh[key]; c != nil {
			recompiled = append(recompiled, c)
		} else {
			compiled.Delete(key)
		}
		changedKeys = append(changedKeys, key)
	}
	for key, conflict := range d.outcome {
		if d.dirty[key] {
			continue
		}
		old, _ := d.prev.compiled.Get(key)
		if old.result.Conflict == conflict {
			continue
		}
		removed = append(removed, old)
		c := *old
		c.external, c.externalPlain, c.local = knativeGateway{}, knativeGateway{}, knativeGateway{}
		c.result = KIngressResult{Generation: old.result.Generation, Hash: old.result.Hash}
		recompiled = append(recompiled, &c)
		changedKeys = append(changedKeys, key)
	}
	for _, c := range recompiled {
		for _, key := range c.secrets {
			if sec, ok := d.next.secrets.Get(key); ok {
				t.ix.secrets[key] = sec
			}
		}
	}
	results := prevOut.Knative.Ingresses.Edit()
	for _, c := range recompiled {
		if conflict := d.outcome[c.key]; conflict != "" {
			c.result.Conflict = conflict
		} else {
			d.k.serve(c)
		}
		compiled.Set(c.key, c)
		results.Set(c.key, c.result)
	}
	for key := range d.dirty {
		if d.fresh[key] == nil {
			results.Delete(key)
		}
	}
	d.next.compiled, d.next.owners = compiled.Done(), d.owners.Done()
	cfg, ok := d.place(prevOut.Config, removed, recompiled)
	if !ok {
		return Output{}, d.mem, false
	}
	slices.SortFunc(changedKeys, func(a, b types.NamespacedName) int {
		return snapshot.CompareNames(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	out := prevOut
	kn := *prevOut.Knative
	kn.Ingresses, kn.Changed = results.Done(), changedKeys
	out.Config, out.Knative, out.StatusesChanged = cfg, &kn, &status.Changed{}
	next := d.mem
	next.kn, next.incremental, next.kingressHashes = d.next, true, nil
	next.certs = d.certs(t.ix.certs.used, removed)
	next.last = &fullTranslation{out: out}
	return out, next, true
}

// compileDirty compiles the dirty KIngresses of Portico's class and
// brings who claims and names what up to date.
func (d *knativeDelta) compileDirty() bool {
	class := d.next.settings.Knative.class()
	wanters, bySecret, byService := d.next.wanters.Edit(), d.next.bySecret.Edit(), d.next.byService.Edit()
	for key := range d.dirty {
		var oldKeys []gatewayHost
		var oldSecrets, oldServices []types.NamespacedName
		if old, ok := d.prev.compiled.Get(key); ok {
			oldKeys, oldSecrets, oldServices = old.keys, old.secrets, old.services
		}
		var newKeys []gatewayHost
		var newSecrets, newServices []types.NamespacedName
		if ing := d.next.byKey.At(key); isOurs(ing, class) {
			c := d.k.compile(ing)
			d.fresh[key] = c
			newKeys, newSecrets, newServices = c.keys, c.secrets, c.services
		}
		relistEdit(wanters, key, oldKeys, newKeys)
		reuse(bySecret, key, oldSecrets, newSecrets)
		reuse(byService, key, oldServices, newServices)
	}
	d.next.wanters, d.next.bySecret, d.next.byService = wanters.Done(), bySecret.Done(), byService.Done()
	return true
}

// relistEdit is relist on an Edit: key leaves the lists of from and joins
// those of to.
func relistEdit[K comparable](e *pmap.Edit[K, []types.NamespacedName], key types.NamespacedName, from, to []K) {
	if slices.Equal(from, to) {
		return
	}
	for _, f := range from {
		if slices.Contains(to, f) {
			continue
		}
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
}

// users are the KIngresses naming a Secret or Service: a set that a
// change copies a path of, not all of (a Service may be named by every
// KIngress).
type users = pmap.Map[types.NamespacedName, struct{}]

func usersOf(m map[types.NamespacedName]map[types.NamespacedName]struct{}) pmap.Map[types.NamespacedName, users] {
	out := make(map[types.NamespacedName]users, len(m))
	for ref, set := range m {
		out[ref] = pmap.Of(set)
	}
	return pmap.Of(out)
}

// reuse records that key no longer names the objects of from but those of
// to.
func reuse(e *pmap.Edit[types.NamespacedName, users], key types.NamespacedName, from, to []types.NamespacedName) {
	if slices.Equal(from, to) {
		return
	}
	for _, f := range from {
		if slices.Contains(to, f) {
			continue
		}
		set, _ := e.Get(f)
		if set.Len() <= 1 {
			e.Delete(f)
			continue
		}
		edit := set.Edit()
		edit.Delete(key)
		e.Set(f, edit.Done())
	}
	for _, f := range to {
		set, _ := e.Get(f)
		if _, ok := set.Get(key); ok {
			continue
		}
		edit := set.Edit()
		edit.Set(key, struct{}{})
		e.Set(f, edit.Done())
	}
}

// current is the KIngress of key as the claims see it now: its new
// compilation when it is dirty, else the one before; nil when it is not
// one of Portico's class any more.
func (d *knativeDelta) current(key types.NamespacedName) *kCompiled {
	if d.dirty[key] {
		return d.fresh[key]
	}
	c, _ := d.prev.compiled.Get(key)
	return c
}

// claims hands hosts over as a full translation would have, which gives
// each host to the oldest KIngress that can claim all of its hosts: the
// dirty KIngresses release what they held, and every KIngress whose claims
// that may change is looked at again, oldest first, so that each one looked
// at sees the final claims of every older one. One that claims all its
// hosts takes those a younger one held, which is then looked at again;
// one that cannot releases what it held; either way the younger
// KIngresses that claim the hosts that changed hands are looked at again.
// False when that grows past maxKnativeCascade.
func (d *knativeDelta) claims() bool {
	d.owners = ownerEdit{prev: d.prev.owners, now: map[gatewayHost]ownerNow{}}
	for key := range d.dirty {
		if old, ok := d.prev.compiled.Get(key); ok {
			d.release(key, old.ing, old.keys)
		}
		if d.fresh[key] != nil {
			d.push(key)
		}
	}
	looked := 0
	for d.queue.Len() > 0 {
		key := heap.Pop(&d.queue).(queued).key
		delete(d.queued, key)
		if looked++; looked > maxKnativeCascade {
			return false
		}
		c := d.current(key)
		if c == nil {
			continue
		}
		conflict := ""
		for i, k := range c.keys {
			if o, ok := d.owners.Get(k); ok && o != key {
				if oc := d.current(o); snapshot.CompareAge(oc.ing, c.ing) < 0 {
					conflict = conflictMessage(c.keyHosts[i], oc.ing)
					break
				}
			}
		}
		d.outcome[key] = conflict
		if conflict != "" {
			d.release(key, c.ing, c.keys)
			continue
		}
		for _, k := range c.keys {
			if o, ok := d.owners.Get(k); ok && o == key {
				continue
			}
			// A younger owner loses the host, and so its others: it is
			// among those looked at again.
			d.owners.Set(k, key)
			d.pushYounger(k, key, c.ing)
		}
	}
	return true
}

// release gives up the hosts of keys that key holds, and looks again at
// the KIngresses younger than ing (its version that held them) claiming
// them.
func (d *knativeDelta) release(key types.NamespacedName, ing *knative.Ingress, keys []gatewayHost) {
	for _, k := range keys {
		if o, ok := d.owners.Get(k); ok && o == key {
			d.owners.Delete(k)
			d.pushYounger(k, key, ing)
		}
	}
}

// pushYounger looks again at the KIngresses younger than ing that claim
// k, but key.
func (d *knativeDelta) pushYounger(k gatewayHost, key types.NamespacedName, ing *knative.Ingress) {
	users, _ := d.next.wanters.Get(k)
	for _, u := range users {
		if u == key {
			continue
		}
		if c := d.current(u); c != nil && snapshot.CompareAge(c.ing, ing) > 0 {
			d.push(u)
		}
	}
}

func (d *knativeDelta) push(key types.NamespacedName) {
	c := d.current(key)
	if c == nil || d.queued[key] {
		return
	}
	d.queued[key] = true
	heap.Push(&d.queue, queued{key: key, ing: c.ing})
}

// queued is a KIngress to look at again; ageQueue gives them oldest first.
type queued struct {
	key types.NamespacedName
	ing *knative.Ingress
}

type ageQueue []queued

func (q ageQueue) Len() int           { return len(q) }
func (q ageQueue) Less(i, j int) bool { return snapshot.CompareAge(q[i].ing, q[j].ing) < 0 }
func (q ageQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *ageQueue) Push(x any)        { *q = append(*q, x.(queued)) }
func (q *ageQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// place takes what removed put on the gateways off them and puts on what
// added puts, in a Config that shares everything else with prev; false
// when the cluster-local HTTPS port would come or go, which changes the
// list of ports.
func (d *knativeDelta) place(prev *config.Config, removed, added []*kCompiled) (*config.Config, bool) {
	var plainOff, externalOff, localOff, externalCertsOff, localCertsOff []string
	var plainOn, externalOn, localOn []config.OrderedHost
	var externalCertsOn, localCertsOn []*sni.Entry
	p := &d.next.ports
	for _, c := range removed {
		if !c.served() {
			continue
		}
		h, _ := c.externalPlain.hostnames()
		plainOff = append(plainOff, h...)
		h, certs := c.external.hostnames()
		externalOff, externalCertsOff = append(externalOff, h...), append(externalCertsOff, certs...)
		h, certs = c.local.hostnames()
		localOff, localCertsOff = append(localOff, h...), append(localCertsOff, certs...)
	}
	for _, c := range added {
		if !c.served() {
			continue
		}
		plainOn, externalOn, localOn = append(plainOn, c.externalPlain.hosts...), append(externalOn, c.external.hosts...), append(localOn, c.local.hosts...)
		for _, e := range c.external.certs {
			externalCertsOn = append(externalCertsOn, withSNIListener(e, p.externalSNIListener))
		}
		for _, e := range c.local.certs {
			localCertsOn = append(localCertsOn, withSNIListener(e, p.localSNIListener))
		}
	}
	localCerts := d.prev.localCerts - len(localCertsOff) + len(localCertsOn)
	if (localCerts > 0) != (d.prev.localCerts > 0) {
		return nil, false
	}
	d.next.localCerts = localCerts
	// A table nothing changed on is kept: even an empty change copies its
	// overlay.
	if len(plainOff)+len(plainOn) > 0 {
		p.plain = p.plain.WithOrdered(plainOff, plainOn)
	}
	if len(externalOff)+len(externalOn) > 0 {
		p.external = p.external.WithOrdered(externalOff, externalOn)
	}
	if len(localOff)+len(localOn) > 0 {
		p.local = p.local.WithOrdered(localOff, localOn)
	}
	if len(externalCertsOff)+len(externalCertsOn) > 0 {
		p.externalSNI = p.externalSNI.With(externalCertsOff, externalCertsOn)
	}
	if len(localCertsOff)+len(localCertsOn) > 0 {
		p.localSNI = p.localSNI.With(localCertsOff, localCertsOn)
	}
	s := d.next.settings.Knative
	cfg := *prev
	cfg.Ports = slices.Clone(prev.Ports)
	set := func(at int, number int32, proto config.Protocol, key string, table *config.Table, st *sni.Table) {
		if p.at[at] >= 0 {
			cfg.Ports[p.at[at]] = knativePort(number, proto, key, table, st)
		}
	}
	set(0, s.ExternalHTTPPort, config.HTTP, KnativeExternalKey, p.plain, nil)
	set(1, s.ExternalHTTPSPort, config.HTTPS, KnativeExternalKey, p.external, p.externalSNI)
	set(2, s.LocalHTTPPort, config.HTTP, KnativeLocalKey, p.local, nil)
	set(3, s.LocalHTTPSPort, config.HTTPS, KnativeLocalKey, p.local, p.localSNI)
	return &cfg, true
}

// certs is the next memory's key pairs: those parsed now join, and those
// of Secrets that left the snapshot, or that no KIngress and no Knative
// Certificate names any more, leave.
func (d *knativeDelta) certs(used map[types.NamespacedName]parsedCert, removed []*kCompiled) layered.Map[types.NamespacedName, parsedCert] {
	e := d.mem.certs.Edit()
	for key, p := range used {
		e.Set(key, p)
	}
	for _, c := range removed {
		for _, s := range c.secrets {
			users, _ := d.next.bySecret.Get(s)
			if _, exists := d.next.secrets.Get(s); !exists || users.Len() == 0 && !d.next.certSecrets[s] {
				e.Delete(s)
			}
		}
	}
	return e.Done()
}
