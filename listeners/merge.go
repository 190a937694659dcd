package listeners

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/conditions"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/shared/slab"
)

const (
	kindGateway     = "Gateway"
	kindListenerSet = "ListenerSet"
)

// Merge builds the merged listener list of in.Gateway and its ListenerSets
// and every status that follows from it.
//
// Rules that are not spelled out by the API and that Merge applies:
//   - The Gateway's Accepted and Programmed conditions summarize its own
//     listeners only (GEP-1713: they "reflect the status of the local
//     configuration"). Problems of ListenerSet listeners show on the
//     ListenerSet.
//   - A listener claims its port (for its protocol) and its hostname on that
//     port when it is valid enough to be served once its references resolve;
//     a later listener that collides is Conflicted. A listener whose
//     certificate is missing therefore still holds its hostname: ownership
//     does not flap while a Secret is being (re)issued. Listeners with an
//     unsupported protocol or TLS mode claim nothing.
//   - A ListenerSet is Accepted when at least one of its listeners can be
//     served (accepted, not conflicted, references resolved).
//   - When in.Gateway is nil (the parentRef names no Gateway we know), every
//     ListenerSet gets ParentNotAccepted.
func Merge(in Input) Result {
	m := newMerger(&in)
	m.sets = sortedListenerSets(in.ListenerSets)
	res := Result{ListenerSets: make(map[types.NamespacedName]gwv1.ListenerSetStatus, len(in.ListenerSets))}

	gwAccepted := false
	if gw := in.Gateway; gw != nil {
		res.Listeners = make([]Listener, 0, m.capacity)
		gwAccepted = m.mergeGateway(&res)
	}

	var attached int32
	for i, ls := range m.sets {
		nn := types.NamespacedName{Namespace: ls.Namespace, Name: ls.Name}
		if _, dup := res.ListenerSets[nn]; dup {
			continue // the same object twice in the input: keep the first
		}
		status, ok := m.mergeListenerSet(&res, i+1, ls, gwAccepted)
		res.ListenerSets[nn] = status
		if ok {
			attached++
		}
	}
	if in.Gateway != nil {
		res.Gateway.AttachedListenerSets = &attached
	}
	return res
}

// merger holds the state of one Merge call.
type merger struct {
	in   *Input
	sets []*gwv1.ListenerSet // in precedence order

	// ports maps a port to the first listener (in precedence order) that
	// claimed it; hosts does the same for hostnames on a port. Both are
	// filled in precedence order, so a lookup tells whether an earlier
	// listener already owns the slot: O(1) per listener.
	ports map[gwv1.PortNumber]portClaim
	hosts map[hostKey]claim

	// capacity is the number of listeners declared by the Gateway and all
	// ListenerSets, used to size maps and slices once.
	capacity int

	// Backing store for the small slices of the result.
	condSlab slab.Slab[metav1.Condition]
	// listenerConds and pairs share equal condition lists (see
	// conditions.Shared).
	listenerConds conditions.Shared[[4]metav1.Condition]
	pairs         conditions.Shared[[2]metav1.Condition]
	entrySlab     slab.Slab[gwv1.ListenerEntryStatus]
	certSlab      slab.Slab[types.NamespacedName]

	// grants indexes ReferenceGrants by namespace, built on first use.
	grants map[string][]*gwv1.ReferenceGrant
	// frontends caches the client certificate validation of each port.
	frontends map[gwv1.PortNumber]*frontendVerdict

	// Shared, read-only values handed out to many listeners of one result.
	gatewayGroup      *gwv1.Group
	httpKinds         []gwv1.RouteGroupKind
	tlsKinds          []gwv1.RouteGroupKind
	tcpKinds          []gwv1.RouteGroupKind
	sameNamespaces    *gwv1.RouteNamespaces
	listenerSelector  labels.Selector
	listenerSelectErr error
}

// claim identifies a listener by the object that declares it (0 is the
// Gateway, n is the n-th ListenerSet in precedence order) and its index in
// that object's spec.
type claim struct {
	object   int
	listener int
}

type portClaim struct {
	claim
	protocol gwv1.ProtocolType
}

type hostKey struct {
	port     gwv1.PortNumber
	hostname string
}

func newMerger(in *Input) *merger {
	group := gwv1.Group(gwv1.GroupName)
	from := gwv1.NamespacesFromSame
	m := &merger{
		in:             in,
		gatewayGroup:   &group,
		sameNamespaces: &gwv1.RouteNamespaces{From: &from},
	}
	// HTTP and HTTPS listeners take GRPCRoutes too: both serve HTTP/2
	// with prior knowledge (h2c) and over ALPN, as GRPCRoute requires.
	m.httpKinds = []gwv1.RouteGroupKind{{Group: m.gatewayGroup, Kind: "HTTPRoute"}, {Group: m.gatewayGroup, Kind: "GRPCRoute"}}
	m.tlsKinds = []gwv1.RouteGroupKind{{Group: m.gatewayGroup, Kind: "TLSRoute"}}
	m.tcpKinds = []gwv1.RouteGroupKind{{Group: m.gatewayGroup, Kind: "TCPRoute"}}
	if in.Gateway != nil {
		m.capacity = len(in.Gateway.Spec.Listeners)
	}
	for _, ls := range in.ListenerSets {
		if ls != nil {
			m.capacity += len(ls.Spec.Listeners)
		}
	}
	// Most listeners' and ListenerSets' conditions are equal lists, one
	// slice each (conditionsOf, pair): the slab grows as it is used.
	m.condSlab = slab.New[metav1.Condition](min(4*m.capacity+2*len(in.ListenerSets), 64))
	m.entrySlab = slab.New[gwv1.ListenerEntryStatus](m.capacity)
	m.certSlab = slab.New[types.NamespacedName](m.capacity)
	m.ports = make(map[gwv1.PortNumber]portClaim, 4)
	m.hosts = make(map[hostKey]claim, m.capacity)
	return m
}

// mergeGateway validates the Gateway's own listeners, appends them to
// res.Listeners and fills res.Gateway. It reports whether the Gateway is
// accepted.
func (m *merger) mergeGateway(res *Result) bool {
	gw := m.in.Gateway
	gen := gw.Generation
	src := Source{Kind: kindGateway, Namespace: gw.Namespace, Name: gw.Name}
	gwNN := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}

	statuses := make([]gwv1.ListenerStatus, 0, len(gw.Spec.Listeners))
	first := len(res.Listeners)
	anyAccepted := false
	var invalid []string
	names := make(map[gwv1.SectionName]struct{}, len(gw.Spec.Listeners))
	for i := range gw.Spec.Listeners {
		spec := &gw.Spec.Listeners[i]
		if _, dup := names[spec.Name]; dup {
			// Names are unique by CRD validation; a duplicate cannot get a
			// status entry of its own (status.listeners is keyed by name),
			// so it is left out entirely.
			continue
		}
		names[spec.Name] = struct{}{}
		l, v := m.evaluate(claim{object: 0, listener: i}, src, spec)
		l.Gateway = gwNN
		l.statusIndex = len(statuses)
		if l.Accepted {
			anyAccepted = true
		}
		if !l.Serves() {
			invalid = append(invalid, string(spec.Name))
		}
		res.Listeners = append(res.Listeners, l)
		statuses = append(statuses, gwv1.ListenerStatus{
			Name:           spec.Name,
			SupportedKinds: l.SupportedKinds,
			Conditions:     m.conditionsOf(&v, gen),
		})
	}

	accepted := m.in.ClassAccepted && m.in.InvalidParameters == "" && m.in.UnsupportedAddress == "" && (anyAccepted || len(gw.Spec.Listeners) == 0)
	var acc, prog metav1.Condition
	switch {
	case !m.in.ClassAccepted:
		acc = cond(gwv1.GatewayConditionAccepted, false, gwv1.GatewayReasonInvalid,
			fmt.Sprintf("GatewayClass %q is not accepted by this controller", gw.Spec.GatewayClassName), gen)
	case m.in.InvalidParameters != "":
		acc = cond(gwv1.GatewayConditionAccepted, false, gwv1.GatewayReasonInvalidParameters, m.in.InvalidParameters, gen)
	case m.in.UnsupportedAddress != "":
		acc = cond(gwv1.GatewayConditionAccepted, false, gwv1.GatewayReasonUnsupportedAddress, m.in.UnsupportedAddress, gen)
	case !accepted:
		acc = cond(gwv1.GatewayConditionAccepted, false, gwv1.GatewayReasonListenersNotValid,
			"No listener is valid: "+strings.Join(invalid, ", "), gen)
	case len(invalid) > 0:
		acc = cond(gwv1.GatewayConditionAccepted, true, gwv1.GatewayReasonListenersNotValid,
			fmt.Sprintf("%d of %d listeners are not valid: %s", len(invalid), len(statuses), strings.Join(invalid, ", ")), gen)
	default:
		acc = cond(gwv1.GatewayConditionAccepted, true, gwv1.GatewayReasonAccepted, "Gateway is accepted", gen)
	}
	if accepted {
		prog = cond(gwv1.GatewayConditionProgrammed, true, gwv1.GatewayReasonProgrammed, "Gateway is programmed", gen)
	} else {
		prog = cond(gwv1.GatewayConditionProgrammed, false, gwv1.GatewayReasonInvalid, "Gateway is not accepted", gen)
		// Nothing of a Gateway that is not accepted may serve or take routes.
		for i := first; i < len(res.Listeners); i++ {
			res.Listeners[i].Accepted = false
			st := &statuses[res.Listeners[i].statusIndex]
			st.Conditions = conditions.Set(st.Conditions, gwv1.ListenerConditionProgrammed, metav1.ConditionFalse,
				gwv1.ListenerReasonInvalid, "The Gateway is not accepted")
		}
	}
	res.Gateway.Conditions = []metav1.Condition{acc, prog, m.gatewayResolvedRefs(res, statuses, gen)}
	if c, ok := insecureFrontendCondition(gw); ok {
		res.Gateway.Conditions = append(res.Gateway.Conditions, c)
	}
	res.Gateway.Listeners = statuses
	return accepted
}

// gatewayResolvedRefs resolves the Gateway's own references (the client
// certificate it presents to TLS backends) and sums up its listeners'
// ResolvedRefs, as the Gateway's ResolvedRefs condition. It does not change
// whether the Gateway is accepted or programmed.
func (m *merger) gatewayResolvedRefs(res *Result, statuses []gwv1.ListenerStatus, gen int64) metav1.Condition {
	gw := m.in.Gateway
	if gw.Spec.TLS != nil && gw.Spec.TLS.Backend != nil && gw.Spec.TLS.Backend.ClientCertificateRef != nil {
		src := Source{Kind: kindGateway, Namespace: gw.Namespace, Name: gw.Name}
		nn, reason, msg, previous := m.certificate(src, gw.Spec.TLS.Backend.ClientCertificateRef)
		if reason == "" || previous {
			// A broken update leaves the previous key pair presented.
			res.BackendClientCertificate = &nn
		}
		switch reason {
		case "":
		case gwv1.ListenerReasonRefNotPermitted:
			return cond(gwv1.GatewayConditionResolvedRefs, false, gwv1.GatewayReasonRefNotPermitted, "Backend client certificate: "+msg, gen)
		default:
			return cond(gwv1.GatewayConditionResolvedRefs, false, gwv1.GatewayReasonInvalidClientCertificateRef, "Backend client certificate: "+msg, gen)
		}
	}
	var unresolved []string
	for _, st := range statuses {
		for _, c := range st.Conditions {
			if c.Type == string(gwv1.ListenerConditionResolvedRefs) && c.Status != metav1.ConditionTrue {
				unresolved = append(unresolved, string(st.Name))
			}
		}
	}
	if len(unresolved) > 0 {
		return cond(gwv1.GatewayConditionResolvedRefs, false, gwv1.GatewayReasonListenersNotResolved,
			"Listeners with unresolved references: "+strings.Join(unresolved, ", "), gen)
	}
	return cond(gwv1.GatewayConditionResolvedRefs, true, gwv1.GatewayReasonResolvedRefs, "All references are resolved", gen)
}

// mergeListenerSet decides whether ls may attach, validates its listeners
// against everything merged so far and returns its status. It reports
// whether ls is attached (allowed and accepted).
func (m *merger) mergeListenerSet(res *Result, object int, ls *gwv1.ListenerSet, gwAccepted bool) (gwv1.ListenerSetStatus, bool) {
	gen := ls.Generation
	if reason, msg := m.attachment(ls, gwAccepted); reason != "" {
		conds := m.pair(cond(gwv1.ListenerSetConditionAccepted, false, reason, msg, gen),
			cond(gwv1.ListenerSetConditionProgrammed, false, reason, msg, gen))
		return gwv1.ListenerSetStatus{Conditions: conds}, false
	}

	gw := m.in.Gateway
	gwNN := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
	src := Source{Kind: kindListenerSet, Namespace: ls.Namespace, Name: ls.Name}
	statuses := m.entrySlab.Take(len(ls.Spec.Listeners))[:0]
	mark := len(res.Listeners)
	valid := 0
	var names map[gwv1.SectionName]struct{}
	if len(ls.Spec.Listeners) > 1 {
		names = make(map[gwv1.SectionName]struct{}, len(ls.Spec.Listeners))
	}
	for i := range ls.Spec.Listeners {
		spec := gwv1.Listener(ls.Spec.Listeners[i])
		if names != nil {
			if _, dup := names[spec.Name]; dup {
				continue // see mergeGateway
			}
			names[spec.Name] = struct{}{}
		}
		l, v := m.evaluate(claim{object: object, listener: i}, src, &spec)
		l.Gateway = gwNN
		l.statusIndex = len(statuses)
		if l.Serves() {
			valid++
		}
		statuses = append(statuses, gwv1.ListenerEntryStatus{
			Name:           spec.Name,
			SupportedKinds: l.SupportedKinds,
			Conditions:     m.conditionsOf(&v, gen),
		})
		// statuses never grows past its capacity, so the entry stays put.
		l.attachedRoutes = &statuses[len(statuses)-1].AttachedRoutes
		res.Listeners = append(res.Listeners, l)
	}

	status := gwv1.ListenerSetStatus{Listeners: statuses}
	if valid == 0 {
		// Its listeners keep the slots they claimed (see Merge) but are not
		// part of the merged list.
		res.Listeners = res.Listeners[:mark]
		msg := "No listener is valid; see status.listeners"
		status.Conditions = m.pair(cond(gwv1.ListenerSetConditionAccepted, false, gwv1.ListenerSetReasonListenersNotValid, msg, gen),
			cond(gwv1.ListenerSetConditionProgrammed, false, gwv1.ListenerSetReasonListenersNotValid, msg, gen))
		return status, false
	}
	accMsg := "ListenerSet is accepted"
	if valid < len(statuses) {
		accMsg = fmt.Sprintf("ListenerSet is accepted; %d of %d listeners are not valid, see status.listeners", len(statuses)-valid, len(statuses))
	}
	status.Conditions = m.pair(cond(gwv1.ListenerSetConditionAccepted, true, gwv1.ListenerSetReasonAccepted, accMsg, gen),
		cond(gwv1.ListenerSetConditionProgrammed, true, gwv1.ListenerSetReasonProgrammed, "ListenerSet is programmed", gen))
	return status, true
}

// conditionsOf is a listener's conditions, the slice of an equal list
// already made if any.
func (m *merger) conditionsOf(v *verdict, gen int64) []metav1.Condition {
	var conds [4]metav1.Condition
	v.conditions(conds[:], gen)
	if out, ok := m.listenerConds.Get(conds); ok {
		return out
	}
	out := m.condSlab.Take(4)
	copy(out, conds[:])
	m.listenerConds.Put(conds, out)
	return out
}

// pair is the conditions a and b, the slice of an equal pair already made
// if any.
func (m *merger) pair(a, b metav1.Condition) []metav1.Condition {
	conds := [2]metav1.Condition{a, b}
	if out, ok := m.pairs.Get(conds); ok {
		return out
	}
	out := m.condSlab.Take(2)
	copy(out, conds[:])
	m.pairs.Put(conds, out)
	return out
}

// attachment returns the reason and message why ls may not attach to the
// Gateway, or "" when it may.
func (m *merger) attachment(ls *gwv1.ListenerSet, gwAccepted bool) (gwv1.ListenerSetConditionReason, string) {
	ref := ls.Spec.ParentRef
	if (ref.Group != nil && *ref.Group != gwv1.GroupName) || (ref.Kind != nil && *ref.Kind != kindGateway) {
		return gwv1.ListenerSetReasonNotAllowed, "parentRef must refer to a Gateway (group gateway.networking.k8s.io, kind Gateway); ListenerSets cannot be nested"
	}
	ns := ls.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	gw := m.in.Gateway
	if gw == nil || gw.Namespace != ns || gw.Name != string(ref.Name) {
		return gwv1.ListenerSetReasonParentNotAccepted, fmt.Sprintf("Gateway %s/%s is not known to this controller", ns, ref.Name)
	}
	if !gwAccepted {
		return gwv1.ListenerSetReasonParentNotAccepted, "The parent Gateway is not accepted"
	}
	if !m.allowed(ls.Namespace) {
		return gwv1.ListenerSetReasonNotAllowed, "The parent Gateway does not allow ListenerSets from this namespace"
	}
	return "", ""
}

// allowed applies the Gateway's spec.allowedListeners to a ListenerSet
// namespace.
func (m *merger) allowed(ns string) bool {
	gw := m.in.Gateway
	al := gw.Spec.AllowedListeners
	if al == nil || al.Namespaces == nil || al.Namespaces.From == nil {
		return false // the default is None
	}
	switch *al.Namespaces.From {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSame:
		return ns == gw.Namespace
	case gwv1.NamespacesFromSelector:
		if m.listenerSelector == nil && m.listenerSelectErr == nil {
			// A nil selector selects nothing, an empty one everything.
			m.listenerSelector, m.listenerSelectErr = metav1.LabelSelectorAsSelector(al.Namespaces.Selector)
		}
		if m.listenerSelectErr != nil {
			return false
		}
		return m.listenerSelector.Matches(labels.Set(m.in.NamespaceLabels[ns]))
	default:
		return false
	}
}

// sortedListenerSets returns the ListenerSets in precedence order: oldest
// first, then alphabetically by "{namespace}/{name}". The input is not
// modified; the same object listed twice keeps its input order, which only
// matters for picking the copy that Merge keeps.
func sortedListenerSets(in []*gwv1.ListenerSet) []*gwv1.ListenerSet {
	type item struct {
		ls   *gwv1.ListenerSet
		sec  int64
		nsec int
		pos  int
	}
	items := make([]item, 0, len(in))
	for i, ls := range in {
		if ls != nil {
			t := ls.CreationTimestamp.Time
			items = append(items, item{ls: ls, sec: t.Unix(), nsec: t.Nanosecond(), pos: i})
		}
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := cmp.Compare(a.sec, b.sec); c != 0 {
			return c
		}
		if c := cmp.Compare(a.nsec, b.nsec); c != 0 {
			return c
		}
		if c := snapshot.CompareNames(a.ls.Namespace, a.ls.Name, b.ls.Namespace, b.ls.Name); c != 0 {
			return c
		}
		return a.pos - b.pos
	})
	out := make([]*gwv1.ListenerSet, len(items))
	for i, it := range items {
		out[i] = it.ls
	}
	return out
}
