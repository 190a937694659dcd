package listeners

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newGateway(ns, name string, from gwv1.FromNamespaces, listeners ...gwv1.Listener) *gwv1.Gateway {
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1},
		Spec:       gwv1.GatewaySpec{GatewayClassName: "portico", Listeners: listeners},
	}
	if from != "" {
		gw.Spec.AllowedListeners = &gwv1.AllowedListeners{Namespaces: &gwv1.ListenerNamespaces{From: &from}}
	}
	return gw
}

func newListenerSet(ns, name string, created time.Time, parent *gwv1.Gateway, listeners ...gwv1.ListenerEntry) *gwv1.ListenerSet {
	pns := gwv1.Namespace(parent.Namespace)
	return &gwv1.ListenerSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1, CreationTimestamp: metav1.NewTime(created)},
		Spec: gwv1.ListenerSetSpec{
			ParentRef: gwv1.ParentGatewayReference{Name: gwv1.ObjectName(parent.Name), Namespace: &pns},
			Listeners: listeners,
		},
	}
}

func httpListener(name, host string, port gwv1.PortNumber) gwv1.Listener {
	l := gwv1.Listener{Name: gwv1.SectionName(name), Port: port, Protocol: gwv1.HTTPProtocolType}
	if host != "" {
		h := gwv1.Hostname(host)
		l.Hostname = &h
	}
	return l
}

// httpsListener refers to the Secret secret ("ns/name" or "name").
func httpsListener(name, host, secret string) gwv1.Listener {
	l := httpListener(name, host, 443)
	l.Protocol = gwv1.HTTPSProtocolType
	ref := gwv1.SecretObjectReference{Name: gwv1.ObjectName(secret)}
	if ns, n, ok := strings.Cut(secret, "/"); ok {
		rns := gwv1.Namespace(ns)
		ref.Namespace, ref.Name = &rns, gwv1.ObjectName(n)
	}
	l.TLS = &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{ref}}
	return l
}

func entry(l gwv1.Listener) gwv1.ListenerEntry { return gwv1.ListenerEntry(l) }

// allCertificates accepts every Secret except those named "missing*".
func allCertificates(_, name string) error {
	if strings.HasPrefix(name, "missing") {
		return errors.New("not found")
	}
	return nil
}

func run(t *testing.T, in Input) Result {
	t.Helper()
	res := Merge(in)
	checkInvariants(t, in, &res)
	return res
}

func setStatus(t *testing.T, res Result, ns, name string) gwv1.ListenerSetStatus {
	t.Helper()
	st, ok := res.ListenerSets[types.NamespacedName{Namespace: ns, Name: name}]
	if !ok {
		t.Fatalf("no status for ListenerSet %s/%s", ns, name)
	}
	return st
}

func entryConds(t *testing.T, st gwv1.ListenerSetStatus, listener string) []metav1.Condition {
	t.Helper()
	for _, l := range st.Listeners {
		if string(l.Name) == listener {
			return l.Conditions
		}
	}
	t.Fatalf("no status for listener %s in %+v", listener, st.Listeners)
	return nil
}

// serving lists "namespace/object/listener" of the listeners that serve,
// in merged order.
func serving(res Result) []string {
	var out []string
	for _, l := range res.Listeners {
		if l.Serves() {
			out = append(out, l.Source.Namespace+"/"+l.Source.Name+"/"+string(l.Name))
		}
	}
	return out
}

func TestPrecedenceByCreationTime(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("default", "", 80))
	// Alphabetically first, but created later: loses.
	newer := newListenerSet("a", "first", epoch.Add(time.Second), gw, entry(httpListener("web", "shop.example.com", 80)))
	older := newListenerSet("z", "last", epoch, gw, entry(httpListener("web", "shop.example.com", 80)))
	res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{newer, older}})

	want{"Accepted", metav1.ConditionTrue, "Accepted"}.check(t, "z/last", setStatus(t, res, "z", "last").Conditions)
	want{"Accepted", metav1.ConditionFalse, "ListenersNotValid"}.check(t, "a/first", setStatus(t, res, "a", "first").Conditions)
	for _, w := range hostnameConflicted {
		w.check(t, "a/first web", entryConds(t, setStatus(t, res, "a", "first"), "web"))
	}
	if got, want := serving(res), []string{"infra/gw/default", "z/last/web"}; !slices.Equal(got, want) {
		t.Errorf("serving %v, want %v", got, want)
	}
}

func TestPrecedenceByNamespaceName(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("default", "", 80))
	host := "same.example.com"
	// Equal creation times. "team-b/x" sorts before "team/y" as a joined
	// string ('-' < '/'), although namespace "team" sorts before "team-b".
	sets := []*gwv1.ListenerSet{
		newListenerSet("team", "y", epoch, gw, entry(httpListener("l", host, 80))),
		newListenerSet("team-b", "x", epoch, gw, entry(httpListener("l", host, 80))),
		newListenerSet("team", "a", epoch, gw, entry(httpListener("other", "other.example.com", 80))),
	}
	in := Input{Gateway: gw, ClassAccepted: true, ListenerSets: sets}
	res := run(t, in)
	want{"Accepted", metav1.ConditionTrue, ""}.check(t, "team-b/x", setStatus(t, res, "team-b", "x").Conditions)
	want{"Accepted", metav1.ConditionFalse, "ListenersNotValid"}.check(t, "team/y", setStatus(t, res, "team", "y").Conditions)
	if got, want := serving(res), []string{"infra/gw/default", "team-b/x/l", "team/a/other"}; !slices.Equal(got, want) {
		t.Errorf("serving %v, want %v", got, want)
	}

	// The input order must not matter.
	for _, perm := range [][]int{{1, 2, 0}, {2, 0, 1}, {2, 1, 0}} {
		shuffled := in
		shuffled.ListenerSets = []*gwv1.ListenerSet{sets[perm[0]], sets[perm[1]], sets[perm[2]]}
		if again := Merge(shuffled); !reflect.DeepEqual(again, res) {
			t.Errorf("order %v gives a different result", perm)
		}
	}
}

func TestRemovingWinnerAcceptsLoser(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpsListener("apex", "www.example.com", "gw-cert"))
	winner := newListenerSet("a", "winner", epoch, gw, entry(httpsListener("app", "app.example.com", "cert")))
	loser := newListenerSet("b", "loser", epoch.Add(time.Minute), gw,
		entry(httpsListener("app", "app.example.com", "cert")),
		entry(httpsListener("www", "www.example.com", "cert")))
	in := Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{winner, loser}, Certificates: allCertificates}

	res := run(t, in)
	for _, name := range []string{"app", "www"} {
		for _, w := range hostnameConflicted {
			w.check(t, "b/loser "+name, entryConds(t, setStatus(t, res, "b", "loser"), name))
		}
	}
	if got, want := serving(res), []string{"infra/gw/apex", "a/winner/app"}; !slices.Equal(got, want) {
		t.Errorf("before: serving %v, want %v", got, want)
	}

	// The winning ListenerSet is deleted: its listener disappears and the
	// loser's takes over.
	in.ListenerSets = []*gwv1.ListenerSet{loser}
	res = run(t, in)
	for _, w := range acceptedListener {
		w.check(t, "b/loser app", entryConds(t, setStatus(t, res, "b", "loser"), "app"))
	}
	for _, w := range hostnameConflicted {
		w.check(t, "b/loser www", entryConds(t, setStatus(t, res, "b", "loser"), "www"))
	}
	if got, want := serving(res), []string{"infra/gw/apex", "b/loser/app"}; !slices.Equal(got, want) {
		t.Errorf("after delete: serving %v, want %v", got, want)
	}

	// The Gateway gives up the hostname: the loser's second listener serves.
	gw2 := gw.DeepCopy()
	gw2.Generation = 2
	gw2.Spec.Listeners[0] = httpsListener("apex", "apex.example.com", "gw-cert")
	in.Gateway = gw2
	res = run(t, in)
	if got, want := serving(res), []string{"infra/gw/apex", "b/loser/app", "b/loser/www"}; !slices.Equal(got, want) {
		t.Errorf("after Gateway change: serving %v, want %v", got, want)
	}
}

func TestManyHostnamesThroughListenerSets(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("http", "", 80))
	const sets = 100
	var in []*gwv1.ListenerSet
	var want []string
	for i := range sets {
		ns := fmt.Sprintf("tenant-%03d", i)
		in = append(in, newListenerSet(ns, "ls", epoch.Add(time.Duration(sets-i)*time.Second), gw,
			entry(httpsListener("a", fmt.Sprintf("a%d.example.com", i), "cert")),
			entry(httpsListener("b", fmt.Sprintf("b%d.example.com", i), "cert"))))
	}
	// Newest first in the input; precedence is oldest first.
	for i := sets - 1; i >= 0; i-- {
		ns := fmt.Sprintf("tenant-%03d", i)
		want = append(want, ns+"/ls/a", ns+"/ls/b")
	}
	res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: in, Certificates: allCertificates})
	if got := *res.Gateway.AttachedListenerSets; got != sets {
		t.Errorf("attachedListenerSets = %d, want %d", got, sets)
	}
	if got := serving(res); !slices.Equal(got[1:], want) {
		t.Errorf("serving %d listeners %v..., want %d", len(got), got[:min(4, len(got))], len(want)+1)
	}
	for _, l := range res.Listeners[1:] {
		if len(l.Certificates) != 1 || l.Certificates[0].Namespace != l.Source.Namespace || l.Certificates[0].Name != "cert" {
			t.Fatalf("listener %v/%s: certificates %v", l.Source, l.Name, l.Certificates)
		}
	}
}

// TestStatusDoesNotLeak checks that no ListenerSet status mentions the
// names of the parent's or a sibling's listeners, Secrets, or a sibling's
// name and namespace, even when it conflicts with them.
func TestStatusDoesNotLeak(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll,
		httpsListener("gwlistenerone", "shared.example.com", "gwsecretone"),
		httpListener("gwlistenertwo", "plain.example.com", 8080))
	sibling := newListenerSet("siblingns", "siblingset", epoch, gw,
		entry(httpsListener("siblinglistener", "sibling.example.com", "siblingsecret")),
		entry(httpListener("siblingplain", "", 9090)))
	mine6 := httpsListener("mine-6", "y.example.com", "mysecret")
	mine6.Port = 8080
	subject := newListenerSet("subjectns", "subjectset", epoch.Add(time.Hour), gw,
		entry(httpsListener("mine-1", "shared.example.com", "mysecret")),    // hostname taken by the Gateway
		entry(httpsListener("mine-2", "sibling.example.com", "mysecret")),   // hostname taken by the sibling
		entry(httpsListener("mine-3", "own.example.com", "missing-secret")), // unresolved
		entry(httpsListener("mine-4", "x.example.com", "other/mysecret")),   // no grant
		entry(httpListener("mine-5", "", 9090)),                             // no hostname, like the sibling's
		entry(mine6),                                                        // protocol conflict with the Gateway
	)
	in := Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{subject, sibling}, Certificates: allCertificates}
	res := run(t, in)

	st := setStatus(t, res, "subjectns", "subjectset")
	for i, reason := range []string{"HostnameConflict", "HostnameConflict", "", "", "HostnameConflict", "ProtocolConflict"} {
		name := fmt.Sprintf("mine-%d", i+1)
		if reason != "" {
			want{"Conflicted", metav1.ConditionTrue, reason}.check(t, name, entryConds(t, st, name))
		}
	}
	want{"ResolvedRefs", metav1.ConditionFalse, "InvalidCertificateRef"}.check(t, "mine-3", entryConds(t, st, "mine-3"))
	want{"ResolvedRefs", metav1.ConditionFalse, "RefNotPermitted"}.check(t, "mine-4", entryConds(t, st, "mine-4"))

	secrets := map[*gwv1.ListenerSet][]string{sibling: {"siblingsecret"}, subject: {"mysecret", "missing-secret"}}
	for _, ls := range []*gwv1.ListenerSet{subject, sibling} {
		raw, err := json.Marshal(res.ListenerSets[types.NamespacedName{Namespace: ls.Namespace, Name: ls.Name}])
		if err != nil {
			t.Fatal(err)
		}
		forbidden := []string{"gwlistenerone", "gwlistenertwo", "gwsecretone"}
		for _, other := range []*gwv1.ListenerSet{subject, sibling} {
			if other == ls {
				continue
			}
			forbidden = append(forbidden, other.Name, other.Namespace)
			forbidden = append(forbidden, secrets[other]...)
			for _, l := range other.Spec.Listeners {
				forbidden = append(forbidden, string(l.Name))
			}
		}
		for _, s := range forbidden {
			if strings.Contains(string(raw), s) {
				t.Errorf("status of %s/%s mentions %q: %s", ls.Namespace, ls.Name, s, raw)
			}
		}
	}
}

func TestReferenceGrantsAreNotInherited(t *testing.T) {
	grant := func(fromKind string) *gwv1.ReferenceGrant {
		return &gwv1.ReferenceGrant{
			ObjectMeta: metav1.ObjectMeta{Namespace: "certs", Name: "g"},
			Spec: gwv1.ReferenceGrantSpec{
				From: []gwv1.ReferenceGrantFrom{{Group: gwv1.GroupName, Kind: gwv1.Kind(fromKind), Namespace: "infra"}},
				To:   []gwv1.ReferenceGrantTo{{Group: "", Kind: "Secret"}},
			},
		}
	}
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpsListener("gw", "gw.example.com", "certs/shared"))
	same := newListenerSet("infra", "same-ns", epoch, gw, entry(httpsListener("ls", "ls.example.com", "certs/shared")))
	own := newListenerSet("tenant", "own", epoch, gw, entry(httpsListener("ls", "own.example.com", "local")))
	in := Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{same, own}, Certificates: allCertificates}

	cases := []struct {
		grant          string
		gateway, lsSet metav1.ConditionStatus
	}{
		{"Gateway", metav1.ConditionTrue, metav1.ConditionFalse},
		{"ListenerSet", metav1.ConditionFalse, metav1.ConditionTrue},
	}
	for _, tc := range cases {
		t.Run("grant from "+tc.grant, func(t *testing.T) {
			in.ReferenceGrants = []*gwv1.ReferenceGrant{grant(tc.grant)}
			res := run(t, in)
			reason := func(s metav1.ConditionStatus) string {
				if s == metav1.ConditionTrue {
					return "ResolvedRefs"
				}
				return "RefNotPermitted"
			}
			want{"ResolvedRefs", tc.gateway, reason(tc.gateway)}.check(t, "Gateway listener", res.Gateway.Listeners[0].Conditions)
			want{"ResolvedRefs", tc.lsSet, reason(tc.lsSet)}.check(t, "ListenerSet listener", entryConds(t, setStatus(t, res, "infra", "same-ns"), "ls"))
			// A ListenerSet uses Secrets of its own namespace without a grant.
			want{"ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs"}.check(t, "own namespace", entryConds(t, setStatus(t, res, "tenant", "own"), "ls"))
			for _, l := range res.Listeners {
				if l.Source.Name == "own" && !slices.Equal(l.Certificates, []types.NamespacedName{{Namespace: "tenant", Name: "local"}}) {
					t.Errorf("own-namespace certificates = %v", l.Certificates)
				}
			}
		})
	}
}

func TestParentNotAccepted(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("http", "", 80))
	ls := newListenerSet("infra", "ls", epoch, gw, entry(httpListener("l", "a.example.com", 80)))

	t.Run("class not accepted", func(t *testing.T) {
		res := run(t, Input{Gateway: gw, ClassAccepted: false, ListenerSets: []*gwv1.ListenerSet{ls}})
		want{"Accepted", metav1.ConditionFalse, "Invalid"}.check(t, "Gateway", res.Gateway.Conditions)
		want{"Programmed", metav1.ConditionFalse, "Invalid"}.check(t, "Gateway", res.Gateway.Conditions)
		want{"Programmed", metav1.ConditionFalse, "Invalid"}.check(t, "Gateway listener", res.Gateway.Listeners[0].Conditions)
		for _, w := range setWants("ParentNotAccepted") {
			w.check(t, "ListenerSet", setStatus(t, res, "infra", "ls").Conditions)
		}
		if len(res.Listeners) != 1 || res.Listeners[0].Accepted || res.Listeners[0].Serves() {
			t.Errorf("listeners of a Gateway that is not accepted: %+v", res.Listeners)
		}
	})
	t.Run("no valid Gateway listener", func(t *testing.T) {
		bad := gw.DeepCopy()
		bad.Spec.Listeners[0].Protocol = gwv1.UDPProtocolType
		res := run(t, Input{Gateway: bad, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{ls}})
		want{"Accepted", metav1.ConditionFalse, "ListenersNotValid"}.check(t, "Gateway", res.Gateway.Conditions)
		for _, w := range setWants("ParentNotAccepted") {
			w.check(t, "ListenerSet", setStatus(t, res, "infra", "ls").Conditions)
		}
	})
	t.Run("unknown Gateway", func(t *testing.T) {
		res := run(t, Input{ListenerSets: []*gwv1.ListenerSet{ls}})
		for _, w := range setWants("ParentNotAccepted") {
			w.check(t, "ListenerSet", setStatus(t, res, "infra", "ls").Conditions)
		}
		if len(res.Listeners) != 0 || res.Gateway.Conditions != nil {
			t.Errorf("result for no Gateway: %+v", res)
		}
	})
	t.Run("parent is a ListenerSet", func(t *testing.T) {
		nested := ls.DeepCopy()
		kind := gwv1.Kind("ListenerSet")
		nested.Spec.ParentRef.Kind = &kind
		res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{nested}})
		for _, w := range setWants("NotAllowed") {
			w.check(t, "ListenerSet", setStatus(t, res, "infra", "ls").Conditions)
		}
	})
}

func TestAllowedListenersSelector(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromSelector, httpListener("http", "", 80))
	labels := map[string]map[string]string{"yes": {"env": "prod"}, "no": {"env": "dev"}}
	sets := []*gwv1.ListenerSet{
		newListenerSet("yes", "ls", epoch, gw, entry(httpListener("l", "yes.example.com", 80))),
		newListenerSet("no", "ls", epoch, gw, entry(httpListener("l", "no.example.com", 80))),
		newListenerSet("unknown", "ls", epoch, gw, entry(httpListener("l", "unknown.example.com", 80))),
	}
	accepted := func(res Result) []string {
		var out []string
		for _, ls := range sets {
			if findCond(setStatus(t, res, ls.Namespace, ls.Name).Conditions, "Accepted").Status == metav1.ConditionTrue {
				out = append(out, ls.Namespace)
			}
		}
		return out
	}

	// No selector selects nothing.
	res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: sets, NamespaceLabels: labels})
	if got := accepted(res); len(got) != 0 {
		t.Errorf("without selector: accepted %v", got)
	}
	gw.Spec.AllowedListeners.Namespaces.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	res = run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: sets, NamespaceLabels: labels})
	if got := accepted(res); !slices.Equal(got, []string{"yes"}) {
		t.Errorf("env=prod: accepted %v", got)
	}
	for _, w := range setWants("NotAllowed") {
		w.check(t, "no/ls", setStatus(t, res, "no", "ls").Conditions)
	}
	gw.Spec.AllowedListeners.Namespaces.Selector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Bogus"}}}
	res = run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: sets, NamespaceLabels: labels})
	if got := accepted(res); len(got) != 0 {
		t.Errorf("invalid selector: accepted %v", got)
	}
}

func TestProtocolsAndPorts(t *testing.T) {
	udp := httpListener("udp", "", 9000)
	udp.Protocol = gwv1.UDPProtocolType
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("http", "", 80), udp)
	passthrough := httpsListener("pass", "pass.example.com", "cert")
	mode := gwv1.TLSModePassthrough
	passthrough.TLS.Mode = &mode
	noTLS := httpsListener("notls", "notls.example.com", "cert")
	noTLS.TLS = nil
	twoRefs := httpsListener("tworefs", "two.example.com", "cert")
	twoRefs.TLS.CertificateRefs = append(twoRefs.TLS.CertificateRefs, gwv1.SecretObjectReference{Name: "missing-second"})
	tlsOn8443 := httpsListener("tls-8443", "c.example.com", "cert")
	tlsOn8443.Port = 8443
	httpsOn80 := httpsListener("https-on-80", "a.example.com", "cert")
	httpsOn80.Port = 80
	ls := newListenerSet("team", "ls", epoch, gw,
		entry(httpsOn80),
		entry(httpListener("http-on-9000", "b.example.com", 9000)),
		entry(passthrough), entry(noTLS), entry(twoRefs),
		entry(httpListener("default-host", "", 80)),
		entry(httpListener("plain-8443", "c.example.com", 8443)), entry(tlsOn8443))
	res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{ls}, Certificates: allCertificates})

	want{"Accepted", metav1.ConditionTrue, "ListenersNotValid"}.check(t, "Gateway", res.Gateway.Conditions)
	want{"Accepted", metav1.ConditionFalse, "UnsupportedProtocol"}.check(t, "Gateway udp", res.Gateway.Listeners[1].Conditions)
	st := setStatus(t, res, "team", "ls")
	for _, w := range protocolConflicted {
		w.check(t, "https-on-80", entryConds(t, st, "https-on-80"))
	}
	// An unsupported listener claims nothing: the port stays free for HTTP.
	for _, w := range acceptedListener {
		w.check(t, "http-on-9000", entryConds(t, st, "http-on-9000"))
	}
	want{"Accepted", metav1.ConditionFalse, "UnsupportedValue"}.check(t, "pass", entryConds(t, st, "pass"))
	want{"Accepted", metav1.ConditionTrue, "Accepted"}.check(t, "notls", entryConds(t, st, "notls"))
	want{"ResolvedRefs", metav1.ConditionFalse, "InvalidCertificateRef"}.check(t, "notls", entryConds(t, st, "notls"))
	want{"ResolvedRefs", metav1.ConditionFalse, "InvalidCertificateRef"}.check(t, "tworefs", entryConds(t, st, "tworefs"))
	want{"Programmed", metav1.ConditionFalse, "Invalid"}.check(t, "tworefs", entryConds(t, st, "tworefs"))
	// Two listeners without hostname on one port conflict.
	for _, w := range hostnameConflicted {
		w.check(t, "default-host", entryConds(t, st, "default-host"))
	}
	// Within one object the winner may be named.
	conflict := findCond(entryConds(t, st, "tls-8443"), "Conflicted")
	if conflict.Reason != "ProtocolConflict" || !strings.Contains(conflict.Message, `listener "plain-8443" of this ListenerSet`) {
		t.Errorf("tls-8443: Conflicted = %+v", conflict)
	}
	for _, l := range res.Listeners {
		if l.Name == "tworefs" && (l.Certificates != nil || !l.Accepted || l.Serves()) {
			t.Errorf("listener with one unresolved ref: %+v", l)
		}
	}
	if got, want := serving(res), []string{"infra/gw/http", "team/ls/http-on-9000", "team/ls/plain-8443"}; !slices.Equal(got, want) {
		t.Errorf("serving %v, want %v", got, want)
	}
}

// An older listener whose certificate is missing keeps its hostname: a
// newer ListenerSet cannot take it over while the Secret is being issued.
func TestUnresolvedListenerHoldsHostname(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("http", "", 80))
	older := newListenerSet("a", "older", epoch, gw, entry(httpsListener("l", "app.example.com", "missing-cert")))
	newer := newListenerSet("b", "newer", epoch.Add(time.Hour), gw, entry(httpsListener("l", "app.example.com", "cert")))
	res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{newer, older}, Certificates: allCertificates})
	want{"Accepted", metav1.ConditionFalse, "ListenersNotValid"}.check(t, "older", setStatus(t, res, "a", "older").Conditions)
	want{"ResolvedRefs", metav1.ConditionFalse, "InvalidCertificateRef"}.check(t, "older l", entryConds(t, setStatus(t, res, "a", "older"), "l"))
	want{"Conflicted", metav1.ConditionTrue, "HostnameConflict"}.check(t, "newer l", entryConds(t, setStatus(t, res, "b", "newer"), "l"))
}

func TestUnresolvedGatewayListenerTakesRoutes(t *testing.T) {
	gw := newGateway("infra", "gw", "", httpsListener("tls", "", "missing-cert"))
	res := run(t, Input{Gateway: gw, ClassAccepted: true, Certificates: allCertificates})
	l := res.Listeners[0]
	if !l.Accepted || l.ResolvedRefs || l.Serves() {
		t.Errorf("unresolved listener: Accepted=%v ResolvedRefs=%v Serves=%v", l.Accepted, l.ResolvedRefs, l.Serves())
	}
	want{"Accepted", metav1.ConditionTrue, "ListenersNotValid"}.check(t, "Gateway", res.Gateway.Conditions)
	want{"Programmed", metav1.ConditionTrue, "Programmed"}.check(t, "Gateway", res.Gateway.Conditions)
}

func TestDuplicateListenerNames(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("http", "", 80), httpListener("http", "dup.example.com", 80))
	ls := newListenerSet("team", "ls", epoch, gw,
		entry(httpListener("l", "a.example.com", 80)), entry(httpListener("l", "b.example.com", 80)))
	res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{ls}})
	if n := len(res.Gateway.Listeners); n != 1 {
		t.Errorf("%d Gateway listener statuses, want 1", n)
	}
	if n := len(setStatus(t, res, "team", "ls").Listeners); n != 1 {
		t.Errorf("%d ListenerSet listener statuses, want 1", n)
	}
	if got, want := serving(res), []string{"infra/gw/http", "team/ls/l"}; !slices.Equal(got, want) {
		t.Errorf("serving %v, want %v", got, want)
	}
	if h := res.Listeners[1].Hostname; h != "a.example.com" {
		t.Errorf("the first of two same-named listeners must win, got %s", h)
	}
}

func TestAllowedRoutesDefaults(t *testing.T) {
	sel := httpListener("sel", "sel.example.com", 80)
	from := gwv1.NamespacesFromSelector
	sel.AllowedRoutes = &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{From: &from, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}}}
	empty := httpListener("empty", "empty.example.com", 80)
	empty.AllowedRoutes = &gwv1.AllowedRoutes{Namespaces: &gwv1.RouteNamespaces{}}
	gw := newGateway("infra", "gw", "", httpListener("plain", "", 80), sel, empty)
	res := run(t, Input{Gateway: gw, ClassAccepted: true})
	for _, l := range res.Listeners {
		ns := l.AllowedRoutes.Namespaces
		wantFrom := gwv1.NamespacesFromSame
		if l.Name == "sel" {
			wantFrom = gwv1.NamespacesFromSelector
			if ns.Selector == nil || ns.Selector.MatchLabels["a"] != "b" {
				t.Errorf("%s: selector lost: %+v", l.Name, ns)
			}
		}
		if ns == nil || ns.From == nil || *ns.From != wantFrom {
			t.Errorf("%s: namespaces %+v, want from %s", l.Name, ns, wantFrom)
		}
		if len(l.AllowedRoutes.Kinds) != 2 || l.AllowedRoutes.Kinds[0].Kind != "HTTPRoute" || l.AllowedRoutes.Kinds[1].Kind != "GRPCRoute" ||
			*l.AllowedRoutes.Kinds[0].Group != gwv1.GroupName {
			t.Errorf("%s: kinds %+v", l.Name, l.AllowedRoutes.Kinds)
		}
	}
}

func TestModifyListeners(t *testing.T) {
	f := loadFixture(t, "gateway-modify-listeners.yaml")
	m := mergeFixture(t, f)
	m.check(t, gatewayListener("gateway-add-listener", "https", httpRouteKind, acceptedListener...))

	add := f.gateways[0]
	add.Generation++
	add.Spec.Listeners = append(add.Spec.Listeners, httpListener("http", "data.test.com", 80))
	remove := f.gateways[1]
	remove.Generation++
	remove.Spec.Listeners = remove.Spec.Listeners[1:]
	m = mergeFixture(t, f)
	m.check(t, gateway("gateway-add-listener", want{"Accepted", metav1.ConditionTrue, "Accepted"}, want{"Programmed", metav1.ConditionTrue, ""}))
	m.check(t, gatewayListener("gateway-add-listener", "https", httpRouteKind, acceptedListener...))
	m.check(t, gatewayListener("gateway-add-listener", "http", httpRouteKind, acceptedListener...))
	res := m.gateways[types.NamespacedName{Namespace: infra, Name: "gateway-remove-listener"}]
	if len(res.Gateway.Listeners) != 1 || res.Gateway.Listeners[0].Name != "http" {
		t.Errorf("after removal: %+v", res.Gateway.Listeners)
	}
	m.check(t, gatewayListener("gateway-remove-listener", "http", httpRouteKind, acceptedListener...))
}

func TestObservedGenerationBump(t *testing.T) {
	f := loadFixture(t, "gateway-observed-generation-bump.yaml")
	gw := f.gateways[0]
	gw.Generation = 7
	gw.Spec.Listeners = append(gw.Spec.Listeners, httpListener("alternate", "foo.com", 80))
	m := mergeFixture(t, f) // the invariants check observedGeneration 7 on every condition
	m.check(t, gateway("gateway-observed-generation-bump", want{"Accepted", metav1.ConditionTrue, "Accepted"}, want{"Programmed", metav1.ConditionTrue, ""}))
	m.check(t, gatewayListener("gateway-observed-generation-bump", "alternate", httpRouteKind, acceptedListener...))
}

func TestSetAttachedRoutes(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("a", "a.example.com", 80), httpListener("b", "b.example.com", 80))
	ls := newListenerSet("team", "ls", epoch, gw, entry(httpListener("x", "x.example.com", 80)), entry(httpListener("y", "y.example.com", 80)))
	res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: []*gwv1.ListenerSet{ls}})
	for i := range res.Listeners {
		res.SetAttachedRoutes(i, int32(10+i))
	}
	var got []int32
	for _, l := range res.Gateway.Listeners {
		got = append(got, l.AttachedRoutes)
	}
	for _, l := range setStatus(t, res, "team", "ls").Listeners {
		got = append(got, l.AttachedRoutes)
	}
	if want := []int32{10, 11, 12, 13}; !slices.Equal(got, want) {
		t.Errorf("attachedRoutes %v, want %v", got, want)
	}
}

// TestEqualConditionsShareOneSlice checks that listeners and ListenerSets
// whose conditions are equal get one slice (at 100,000 hostnames, 100,000
// copies otherwise) and that one whose conditions differ gets its own.
func TestEqualConditionsShareOneSlice(t *testing.T) {
	gw := newGateway("infra", "gw", gwv1.NamespacesFromAll, httpListener("http", "", 80))
	var in []*gwv1.ListenerSet
	for i := range 3 {
		in = append(in, newListenerSet(fmt.Sprintf("tenant-%d", i), "ls", epoch.Add(time.Duration(i)*time.Second), gw,
			entry(httpsListener("a", fmt.Sprintf("a%d.example.com", i), "cert"))))
	}
	// The same hostname and port as tenant-0's, younger: conflicted.
	in = append(in, newListenerSet("tenant-x", "ls", epoch.Add(time.Hour), gw, entry(httpsListener("a", "a0.example.com", "cert"))))
	res := run(t, Input{Gateway: gw, ClassAccepted: true, ListenerSets: in, Certificates: allCertificates})
	first := setStatus(t, res, "tenant-0", "ls")
	for i := 1; i < 3; i++ {
		st := setStatus(t, res, fmt.Sprintf("tenant-%d", i), "ls")
		if &st.Conditions[0] != &first.Conditions[0] || &st.Listeners[0].Conditions[0] != &first.Listeners[0].Conditions[0] {
			t.Errorf("tenant-%d: equal conditions in a slice of their own", i)
		}
	}
	x := setStatus(t, res, "tenant-x", "ls")
	if &x.Listeners[0].Conditions[0] == &first.Listeners[0].Conditions[0] {
		t.Fatal("a conflicted listener shares the conditions of an accepted one")
	}
	if !meta.IsStatusConditionTrue(first.Listeners[0].Conditions, string(gwv1.ListenerConditionProgrammed)) ||
		!meta.IsStatusConditionTrue(x.Listeners[0].Conditions, string(gwv1.ListenerConditionConflicted)) {
		t.Errorf("conditions: accepted %v, conflicted %v", first.Listeners[0].Conditions, x.Listeners[0].Conditions)
	}
}
