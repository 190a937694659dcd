package translate

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"
)

// knWorld is a random set of KIngresses, Secrets and Services the property
// test changes one object at a time: few hosts and names, so that
// KIngresses claim each other's hosts (DomainConflict, and hosts handed
// over when the owner changes or goes) and share Secrets and Services.
type knWorld struct {
	*world
}

var (
	knWorldHosts = []string{"a.example.com", "b.example.com", "c.example.com", "A.example.com", "a.ns-a.svc.cluster.local",
		"b.ns-a.svc.cluster.local", "c.ns-b", "d.example.com."}
	knWorldNamespaces = []string{"ns-a", "ns-b"}
)

func newKnWorld(t testing.TB, seed uint64) *knWorld {
	pairs, err := worldPairs()
	if err != nil {
		t.Fatal(err)
	}
	w := &knWorld{&world{r: rand.New(rand.NewPCG(seed, 5)), pairs: pairs, res: &snapshot.Resources{}}}
	for range 8 {
		w.knStep(w.r.IntN(4))
	}
	return w
}

func (w *knWorld) kingress() *knative.Ingress {
	m := w.meta(w.pick(knWorldNamespaces), fmt.Sprintf("ki-%d", w.r.IntN(8)))
	m.Annotations = map[string]string{knative.IngressClassAnnotation: knative.DefaultIngressClass}
	if w.r.IntN(12) == 0 {
		m.Annotations[knative.IngressClassAnnotation] = "other"
	}
	ing := &knative.Ingress{ObjectMeta: m}
	ing.Spec.HTTPOption = []knative.HTTPOption{knative.HTTPOptionEnabled, knative.HTTPOptionRedirected}[w.r.IntN(2)]
	for range 1 + w.r.IntN(2) {
		rule := knative.IngressRule{Visibility: []knative.Visibility{knative.VisibilityExternalIP, knative.VisibilityClusterLocal}[w.r.IntN(2)]}
		for range 1 + w.r.IntN(2) {
			rule.Hosts = append(rule.Hosts, w.pick(knWorldHosts))
		}
		rule.HTTP = &knative.HTTPIngressRuleValue{}
		for range 1 + w.r.IntN(2) {
			p := knative.HTTPIngressPath{Path: w.pick([]string{"", "/", "/api", "bad"})}
			if w.r.IntN(3) == 0 {
				p.Headers = map[string]knative.HeaderMatch{"X-V": {Exact: w.pick([]string{"", "1"})}}
			}
			for range 1 + w.r.IntN(2) {
				split := knative.IngressBackendSplit{IngressBackend: knative.IngressBackend{ServiceName: fmt.Sprintf("svc-%d", w.r.IntN(4)),
					ServicePort: intstr.FromInt32(int32(80 + w.r.IntN(2)))}, Percent: w.r.IntN(101)}
				if w.r.IntN(4) == 0 {
					split.ServicePort = intstr.FromString("http")
				}
				p.Splits = append(p.Splits, split)
			}
			rule.HTTP.Paths = append(rule.HTTP.Paths, p)
		}
		ing.Spec.Rules = append(ing.Spec.Rules, rule)
	}
	if w.r.IntN(2) == 0 {
		ing.Spec.TLS = []knative.IngressTLS{{Hosts: []string{w.pick(knWorldHosts), w.pick(knWorldHosts)}, SecretName: w.secretName()}}
	}
	return ing
}

func (w *knWorld) secret(ns string) *corev1.Secret {
	s := w.world.secret()
	s.Namespace = ns
	return s
}

func (w *knWorld) service() *corev1.Service {
	svc := w.world.service()
	svc.Namespace = w.pick(knWorldNamespaces)
	if w.r.IntN(5) == 0 {
		svc.Spec.Type, svc.Spec.ExternalName = corev1.ServiceTypeExternalName, w.pick([]string{"example.net", "portico-internal.portico-system.svc"})
	}
	return svc
}

// knStep changes one object of the world, picked by kind: 0 to 9 are the
// kinds a Knative delta re-derives.
func (w *knWorld) knStep(kind int) {
	next := *w.res
	res := &next
	switch kind {
	case 0, 1, 2, 3:
		res.KIngresses = upsert(w.world, res.KIngresses, w.kingress())
	case 4:
		res.KIngresses = remove(w.world, res.KIngresses)
	case 5:
		// Deleted and created again: younger, with the same name.
		if len(res.KIngresses) > 0 {
			i := w.r.IntN(len(res.KIngresses))
			again := *res.KIngresses[i]
			again.CreationTimestamp = metav1.NewTime(time.Date(2025, 1, 1, 0, 0, w.clock, 0, time.UTC))
			w.clock += 2
			res.KIngresses = slices.Clone(res.KIngresses)
			res.KIngresses[i] = &again
		}
	case 6:
		res.Secrets = upsert(w.world, res.Secrets, w.secret(w.pick(knWorldNamespaces)))
	case 7:
		res.Secrets = remove(w.world, res.Secrets)
	case 8:
		res.Services = upsert(w.world, res.Services, w.service())
	case 9:
		res.Services = remove(w.world, res.Services)
	case 10:
		res.EndpointSlices = upsert(w.world, res.EndpointSlices, w.endpointSlice())
	case 11:
		// A Knative Certificate of the Secrets' names: a change of its
		// Secret is translated in full.
		c := &knative.Certificate{ObjectMeta: w.meta(w.pick(knWorldNamespaces), "cert"),
			Spec: knative.CertificateSpec{DNSNames: []string{"a.example.com"}, SecretName: w.secretName()}}
		c.Annotations = map[string]string{knative.CertificateClassAnnotation: knative.DefaultCertificateClass}
		res.KCertificates = upsert(w.world, res.KCertificates, c)
	case 12:
		// A Gateway of Portico's: every translation is full while it is
		// there.
		if len(res.Gateways) == 0 {
			res.GatewayClasses = []*gwv1.GatewayClass{{ObjectMeta: metav1.ObjectMeta{Name: "portico", Generation: 1},
				Spec: gwv1.GatewayClassSpec{ControllerName: wellknown.ControllerName}}}
			res.Gateways = []*gwv1.Gateway{{ObjectMeta: w.meta("gw", "gw"), Spec: gwv1.GatewaySpec{GatewayClassName: "portico",
				Listeners: []gwv1.Listener{{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType}}}}}
		} else {
			res.GatewayClasses, res.Gateways = nil, nil
		}
	case 13:
		// The same KIngresses, listed in another order.
		res.KIngresses = slices.Clone(res.KIngresses)
		w.r.Shuffle(len(res.KIngresses), func(i, j int) {
			res.KIngresses[i], res.KIngresses[j] = res.KIngresses[j], res.KIngresses[i]
		})
	}
	w.res = res
}

// knDiff compares an incremental translation with a full one: statuses,
// ACME wants, the results of every KIngress and Certificate, endpoints,
// and each Knative port by what its tables hold (how much of a table sits
// in an overlay depends on the changes that built it).
func knDiff(a, b Output) string {
	if d := diff(reflect.ValueOf(a.Statuses.Maps()), reflect.ValueOf(b.Statuses.Maps()), "Statuses"); d != "" {
		return d
	}
	if d := diff(reflect.ValueOf(a.ACME), reflect.ValueOf(b.ACME), "ACME"); d != "" {
		return d
	}
	if d := diff(reflect.ValueOf(maps.Collect(a.Knative.Ingresses.All())), reflect.ValueOf(maps.Collect(b.Knative.Ingresses.All())), "Knative.Ingresses"); d != "" {
		return d
	}
	if d := diff(reflect.ValueOf(a.Knative.Certificates), reflect.ValueOf(b.Knative.Certificates), "Knative.Certificates"); d != "" {
		return d
	}
	ea, eb := maps.Collect(a.Config.Endpoints.All()), maps.Collect(b.Config.Endpoints.All())
	if d := diff(reflect.ValueOf(ea), reflect.ValueOf(eb), "Config.Endpoints"); d != "" {
		return d
	}
	if len(a.Config.Ports) != len(b.Config.Ports) {
		return "Config.Ports.len"
	}
	for i, p := range a.Config.Ports {
		q := b.Config.Ports[i]
		path := fmt.Sprintf("Config.Ports[%d]", i)
		if p.Address != q.Address || p.Number != q.Number || p.Protocol != q.Protocol || p.Streams != q.Streams || p.All.Len() != 1 || q.All.Len() != 1 {
			return path
		}
		lp, lq := p.All.At(0), q.All.At(0)
		if x, _ := p.Listeners.Lookup("any.example"); x != lp || lp.Key != lq.Key || lp.Hostname != lq.Hostname {
			return path + ".Listener"
		}
		if d := orderedDiff(lp.Routes, lq.Routes, path+".Routes"); d != "" {
			return d
		}
		if (p.SNI == nil) != (q.SNI == nil) {
			return path + ".SNI"
		}
		if p.SNI == nil {
			continue
		}
		ae, be := p.SNI.Entries(), q.SNI.Entries()
		if len(ae) != len(be) {
			return path + ".SNI.len"
		}
		for _, e := range ae {
			f := q.SNI.Lookup(e.Hostname)
			if f == nil || f.Hostname != e.Hostname || !slices.EqualFunc(f.Certificates, e.Certificates, sameKeyPair) ||
				f.Value.(*config.Listener).Key != lq.Key || e.Value.(*config.Listener).Key != lp.Key {
				return path + ".SNI[" + e.Hostname + "]"
			}
		}
	}
	return ""
}

// sameKeyPair compares parsed key pairs by their certificates' bytes:
// translations that each parse a Secret hold key pairs of their own.
func sameKeyPair(a, b *tls.Certificate) bool {
	return slices.EqualFunc(a.Certificate, b.Certificate, bytes.Equal)
}

// orderedDiff compares two ordered tables by their hosts and entries.
func orderedDiff(a, b *config.Table, path string) string {
	sorted := func(t *config.Table) []config.OrderedHost {
		h := t.OrderedHosts()
		slices.SortFunc(h, func(x, y config.OrderedHost) int { return cmp.Compare(x.Hostname, y.Hostname) })
		return h
	}
	ha, hb := sorted(a), sorted(b)
	if len(ha) != len(hb) {
		return path + ".len"
	}
	for i := range ha {
		x, y := ha[i], hb[i]
		p := path + "[" + x.Hostname + "]"
		if x.Hostname != y.Hostname || len(x.Entries) != len(y.Entries) {
			return p
		}
		for j := range x.Entries {
			ex, ey := x.Entries[j], y.Entries[j]
			if d := diff(reflect.ValueOf(ex.Rule), reflect.ValueOf(ey.Rule), fmt.Sprintf("%s[%d].Rule", p, j)); d != "" {
				return d
			}
			if ex.Match.Path != ey.Match.Path || !reflect.DeepEqual(ex.Match.Headers, ey.Match.Headers) {
				return fmt.Sprintf("%s[%d].Match", p, j)
			}
		}
	}
	return ""
}

// runKnativeIncremental applies the changes kinds picks to a Knative
// world and compares, after each, the translation carried from step to
// step with a full one of the same snapshot; it checks that the KIngresses
// the delta says changed include every one whose result changed, and that
// no translation changed the Output before it. It returns the steps that
// were deltas, and those of them in which a KIngress's conflict changed
// although the KIngress did not (a host handed over).
func runKnativeIncremental(t *testing.T, seed uint64, kinds []int) (deltas, handovers int) {
	w := newKnWorld(t, seed)
	s := Settings{Knative: knSettings}
	prevWant, mem := Translate(s, w.res, Memory{})
	prevGot := prevWant
	for step, kind := range kinds {
		before := w.res
		w.knStep(kind)
		heldResults := maps.Collect(prevGot.Knative.Ingresses.All())
		heldPorts := slices.Clone(prevGot.Config.Ports)
		heldTables := knTables(prevGot)
		full := mem
		full.kn, full.last, full.eps, full.inc = nil, nil, nil, nil
		prev := mem
		var got Output
		got, mem = Translate(s, w.res, mem)
		want, _ := Translate(s, w.res, full)
		if step%5 == 0 {
			// A memory translated from before translates again to the
			// same: the delta changed nothing of it.
			again, _ := Translate(s, w.res, prev)
			if d := knDiff(again, want); d != "" {
				t.Fatalf("seed %d, step %d: a second translation from one memory differs at %s", seed, step, d)
			}
		}
		if d := knDiff(got, want); d != "" {
			t.Fatalf("seed %d, step %d (change of kind %d): incremental and full translations differ at %s", seed, step, kind, d)
		}
		if d := diff(reflect.ValueOf(heldResults), reflect.ValueOf(maps.Collect(prevGot.Knative.Ingresses.All())), "results"); d != "" ||
			!slices.Equal(heldPorts, prevGot.Config.Ports) || !reflect.DeepEqual(heldTables, knTables(prevGot)) {
			t.Fatalf("seed %d, step %d (change of kind %d): the translation changed the Output before it (%s)", seed, step, kind, d)
		}
		if mem.Incremental() && kind <= 9 {
			deltas++
		}
		if changed := got.Knative.Changed; changed != nil {
			listed := map[types.NamespacedName]bool{}
			for _, k := range changed {
				listed[k] = true
			}
			a, b := maps.Collect(prevWant.Knative.Ingresses.All()), maps.Collect(want.Knative.Ingresses.All())
			for _, m := range []map[types.NamespacedName]KIngressResult{a, b} {
				for key := range m {
					ra, inA := a[key]
					rb, inB := b[key]
					if !listed[key] && (inA != inB || diff(reflect.ValueOf(ra), reflect.ValueOf(rb), "") != "") {
						t.Fatalf("seed %d, step %d (change of kind %d): the result of %s changed but is not listed as changed", seed, step, kind, key)
					}
				}
			}
			if handedOver(before, w.res, a, b) {
				handovers++
			}
		}
		prevGot, prevWant = got, want
	}
	return deltas, handovers
}

// knTables are the hosts of each Knative port's table, to tell that a
// later translation left them as they were.
func knTables(out Output) [][]config.OrderedHost {
	var tables [][]config.OrderedHost
	for _, p := range out.Config.Ports {
		tables = append(tables, p.All.At(0).Routes.OrderedHosts())
	}
	for _, h := range tables {
		slices.SortFunc(h, func(x, y config.OrderedHost) int { return cmp.Compare(x.Hostname, y.Hostname) })
	}
	return tables
}

// handedOver reports whether a KIngress that is the same object in both
// snapshots changed conflict between the results a and b.
func handedOver(before, after *snapshot.Resources, a, b map[types.NamespacedName]KIngressResult) bool {
	same := map[*knative.Ingress]bool{}
	for _, ing := range before.KIngresses {
		same[ing] = true
	}
	for _, ing := range after.KIngresses {
		key := nn(ing.Namespace, ing.Name)
		if same[ing] && a[key].Conflict != b[key].Conflict {
			return true
		}
	}
	return false
}

// TestKnativeIncrementalMatchesFull applies random sequences of creates,
// updates and deletes of KIngresses, Secrets and Services (and now and then
// of kinds translated in full) and compares the incremental translation
// with a full one after every step.
func TestKnativeIncrementalMatchesFull(t *testing.T) {
	steps, deltas, handovers := 0, 0, 0
	for seed := range uint64(150) {
		r := rand.New(rand.NewPCG(seed, 11))
		kinds := make([]int, 60)
		for i := range kinds {
			kinds[i] = r.IntN(11)
			if r.IntN(30) == 0 {
				kinds[i] = 11 + r.IntN(3)
			}
		}
		d, h := runKnativeIncremental(t, seed, kinds)
		deltas, handovers, steps = deltas+d, handovers+h, steps+len(kinds)
	}
	// The comparison means something only if deltas were taken, hosts
	// among them handed over.
	if deltas < steps/2 || handovers < 50 {
		t.Fatalf("%d of %d steps were deltas, %d handed a host over", deltas, steps, handovers)
	}
	t.Logf("%d of %d steps were deltas, %d handed a host over", deltas, steps, handovers)
}

// FuzzKnativeIncremental does what TestKnativeIncrementalMatchesFull does
// with the seed and the sequence of changes from the fuzzer.
func FuzzKnativeIncremental(f *testing.F) {
	f.Add(uint64(1), []byte{0, 1, 4, 5, 6, 7, 8, 9, 10, 2, 3})
	f.Add(uint64(2), []byte{0, 0, 0, 5, 5, 4, 11, 6, 12, 0, 12, 13})
	f.Fuzz(func(t *testing.T, seed uint64, ops []byte) {
		if len(ops) > 200 {
			return
		}
		kinds := make([]int, len(ops))
		for i, op := range ops {
			kinds[i] = int(op) % 14
		}
		runKnativeIncremental(t, seed, kinds)
	})
}
