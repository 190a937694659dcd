package routing

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/conditions"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/internal/shared/slab"
)

// Compile attaches every route to the listeners its parentRefs select and
// compiles, per listener, the attached rules into a Table. It is a pure
// function of its input: same input, same output.
//
// Rules that cannot be served as written are handled per the spec's
// "drop rule" approach, failing closed: a rule whose matches cannot be
// compiled is left out of the tables; a rule whose filters, timeouts or
// retry use unsupported values stays in with Rule.Invalid set (500). Either
// way the route reports PartiallyInvalid, or Accepted=False
// (UnsupportedValue / IncompatibleFilters) when no rule is left, in which
// case it attaches nowhere. Reference problems (backends, mirrors,
// ExtensionRef filters) leave the route Accepted and set ResolvedRefs=False.
func Compile(in Input) Output {
	c := &compiler{
		in:          in,
		ls:          make([]listenerInfo, len(in.Listeners)),
		parents:     make(map[Parent]*parentInfo, len(in.Parents)),
		admission:   NewAdmission(in.NamespaceLabels),
		backendRefs: NewBackendRefs(in.Services, in.ReferenceGrants),
		anyHost:     []string{""},
	}
	infos := make([]parentInfo, 0, len(in.Parents))
	for p, accepted := range in.Parents {
		infos = append(infos, parentInfo{accepted: accepted})
		c.parents[p] = &infos[len(infos)-1]
	}
	ours := 0
	for i := range in.Listeners {
		l := &in.Listeners[i]
		li := &c.ls[i]
		li.Listener, li.slot = l, i
		li.hostname = listenerHostname(l)
		// Routes only attach through parentRefs to our parents; listeners
		// of other parents are never looked at.
		if li.parent = c.parents[l.Parent]; li.parent != nil {
			li.parent.n++
			ours++
		}
	}
	// Every parent's listeners are a piece of one slice, in input order.
	all := make([]*listenerInfo, 0, ours)
	for i := range infos {
		pi := &infos[i]
		pi.listeners = all[len(all) : len(all) : len(all)+pi.n]
		all = all[:len(all)+pi.n]
	}
	for i := range c.ls {
		if pi := c.ls[i].parent; pi != nil {
			pi.listeners = append(pi.listeners, &c.ls[i])
		}
	}
	for i := range infos {
		if pi := &infos[i]; len(pi.listeners) > indexedListeners {
			pi.index()
		}
	}
	return c.run()
}

type compiler struct {
	in Input
	// ls holds what Compile works out once per listener, in the order of
	// in.Listeners; the position there is the listener's slot.
	ls          []listenerInfo
	parents     map[Parent]*parentInfo // in.Parents with their listeners
	admission   Admission              // allowedRoutes, shared with tlsrouting
	backendRefs BackendRefs            // backendRef checks, shared with tlsrouting
	// grpc holds the GRPCRoutes rewritten as HTTPRoutes (grpc.go).
	grpc map[*gwv1.HTTPRoute]*grpcRoute
	// hostsByKind[slot] are the hostnames each kind of route serves on the
	// listener so far; nil when there are no GRPCRoutes.
	hostsByKind []kindHosts

	// Scratch space reused from one route to the next.
	refs     []parentRef
	selected []*listenerInfo
	hits     []hit
	// attachedBy[slot] is 1 + the order of the last route attached to the
	// listener, so a route that reaches a listener through two parentRefs
	// counts there once.
	attachedBy []int
	cr         compiledRoute
	anyHost    []string // {""}, the hostnames of a route without any

	// What compiled routes are made of, cut from a few large allocations.
	conds     slab.Slab[metav1.Condition]
	pairs     conditions.Shared[[2]metav1.Condition] // equal pairs of conds, one slice each
	rules     slab.Slab[config.Rule]
	matches   slab.Slab[config.Match]
	matchPtrs slab.Slab[*config.Match]
	backends  slab.Slab[config.Backend]
}

// parentInfo is one of our parents and its listeners.
type parentInfo struct {
	accepted  bool
	n         int             // number of listeners, while counting them
	listeners []*listenerInfo // in input order
	// bySection and byHost, built for a parent with many listeners, spare
	// a scan of every listener when a parentRef names a section, or when
	// the route's hostnames are exact names: a Gateway may carry
	// thousands of listeners.
	bySection map[gwv1.SectionName]*listenerInfo
	byHost    map[hostKey][]*listenerInfo
}

// indexedListeners is the number of listeners of one parent above which
// the parent's listeners are indexed by section name and hostname.
const indexedListeners = 8

func (pi *parentInfo) index() {
	pi.bySection = make(map[gwv1.SectionName]*listenerInfo, len(pi.listeners))
	pi.byHost = make(map[hostKey][]*listenerInfo, len(pi.listeners))
	for _, li := range pi.listeners {
		pi.bySection[li.Name] = li
		h := hostKey{hostname: li.hostname}
		if hostname.IsWildcard(li.hostname) {
			h.wildcard, h.hostname = true, li.hostname[2:]
		}
		pi.byHost[h] = append(pi.byHost[h], li)
	}
}

// section returns the listener named name; the last one should a name
// repeat.
func (pi *parentInfo) section(name gwv1.SectionName) *listenerInfo {
	if pi.bySection != nil {
		return pi.bySection[name]
	}
	for i := len(pi.listeners) - 1; i >= 0; i-- {
		if pi.listeners[i].Name == name {
			return pi.listeners[i]
		}
	}
	return nil
}

// parentRef is a parentRef of the route being compiled that names one of
// our parents.
type parentRef struct {
	ref    *gwv1.ParentReference
	parent Parent
	info   *parentInfo
}

// listenerInfo is a listener with what route attachment needs of it
// worked out once.
type listenerInfo struct {
	*Listener
	slot     int
	parent   *parentInfo // nil when the listener's parent is not ours
	hostname string      // normalized; "" for any
}

// hit is a listener that takes a route, with the hostnames the route
// serves there.
type hit struct {
	l     *listenerInfo
	hosts []string
}

// hostKey finds the listeners of a parent by normalized hostname. A
// wildcard is keyed by its suffix after "*.", so the patterns that cover
// a name are looked up with pieces of the name, without building strings.
type hostKey struct {
	wildcard bool
	hostname string
}

// problem is one reason a rule, backend or filter cannot be used as written.
type problem struct {
	reason gwv1.RouteConditionReason
	msg    string
}

type compiledRoute struct {
	nn        types.NamespacedName
	kind      RouteKind
	grpc      *grpcRoute // set for a GRPCRoute
	hostnames []string   // normalized, deduplicated; empty means any
	rules     []compiledRule
	// usable is false when every rule has an unsupported value; the route
	// is then not accepted anywhere and rejected says why.
	usable   bool
	rejected problem
	dropped  []string // PartiallyInvalid details
	refs     []problem
}

type compiledRule struct {
	rule    *config.Rule
	matches []*config.Match // nil when the rule's matches cannot be compiled
	// perListener is set when filters carry listener details (redirects),
	// so each listener gets its own copy of the rule.
	perListener bool
}

// placed is a candidate on its way to the table of listener slot.
type placed struct {
	slot int
	config.HostCandidate
}

func (c *compiler) run() Output {
	// The scratch slices of run are made here, not in the steps that fill
	// them, so that small ones can stay on the stack.
	routes := c.routesInOrder(make([]*gwv1.HTTPRoute, 0, len(c.in.Routes)+len(c.in.GRPCRoutes)))
	c.reset(len(routes))
	out := Output{
		AttachedRoutes:   make(map[int]int32, len(c.in.Listeners)),
		RouteParents:     make(map[types.NamespacedName][]gwv1.RouteParentStatus, len(routes)-len(c.grpc)),
		GRPCRouteParents: make(map[types.NamespacedName][]gwv1.RouteParentStatus, len(c.grpc)),
	}
	attached := make([]int32, len(c.ls))
	hasTable := make([]bool, len(c.ls))
	all := make([]placed, 0, len(routes)) // most routes have one match on one listener
	for order, route := range routes {
		if c.refs = c.ourRefs(route, c.refs[:0]); len(c.refs) == 0 {
			continue
		}
		cr := c.compileRoute(route)
		statuses := c.attachRoute(route, cr)
		if len(statuses) > 0 {
			parents := out.RouteParents
			if cr.kind == KindGRPCRoute {
				parents = out.GRPCRouteParents
			}
			parents[cr.nn] = statuses
		}
		for _, h := range c.hits {
			if c.hostsByKind != nil {
				kh := &c.hostsByKind[h.l.slot]
				kh[cr.kind] = append(kh[cr.kind], h.hosts...)
			}
			if c.attachedBy[h.l.slot] == order+1 {
				continue // the same listener through another parentRef
			}
			c.attachedBy[h.l.slot] = order + 1
			attached[h.l.slot]++
			hasTable[h.l.slot] = true
			all = addCandidates(all, cr, h, order, c.in.Traffic, c.in.Security)
		}
	}

	grouped, start := make([]config.HostCandidate, len(all)), make([]int, len(c.ls)+1)
	groupBySlot(all, grouped, start)
	tables := 0
	for i := range c.ls {
		if hasTable[i] {
			tables++
		}
	}
	out.Tables = make(map[int]*config.Table, tables)
	b := config.NewTableBuilder(tables, sortHostGroups(grouped, start), len(all))
	for i := range c.ls {
		id := c.ls[i].ID
		out.AttachedRoutes[id] = attached[i]
		if hasTable[i] {
			out.Tables[id] = b.Build(grouped[start[i]:start[i+1]])
		}
	}
	if c.in.Traffic != nil {
		out.HealthChecks = healthChecks(all)
	}
	return out
}

// healthChecks are the backends of the placed rules that an active
// health check probes: the backend's own (its Service's policy), else
// its rule's. Backends that do not go to endpoints are not probed.
func healthChecks(all []placed) []config.HealthCheckTarget {
	type key struct {
		b  config.BackendKey
		id string
	}
	seen := map[*config.Rule]bool{}
	found := map[key]config.HealthCheckTarget{}
	for i := range all {
		rule := all[i].Candidate.Rule
		if seen[rule] {
			continue
		}
		seen[rule] = true
		for j := range rule.Backends {
			b := &rule.Backends[j]
			hc := cmp.Or(b.Active, rule.Active)
			if hc == nil || b.Invalid != "" || b.Address != "" || b.Dispatch != 0 {
				continue
			}
			found[key{b.Key, hc.ID}] = config.HealthCheckTarget{Backend: b.Key, Check: hc}
		}
	}
	out := slices.Collect(maps.Values(found))
	slices.SortFunc(out, func(a, b config.HealthCheckTarget) int {
		return cmp.Or(cmp.Compare(a.Backend.String(), b.Backend.String()), cmp.Compare(a.Check.ID, b.Check.ID))
	})
	return out
}

// routesInOrder appends to routes those of the input in precedence order,
// without the nil entries.
func (c *compiler) routesInOrder(routes []*gwv1.HTTPRoute) []*gwv1.HTTPRoute {
	for _, r := range c.in.Routes {
		if r != nil {
			routes = append(routes, r)
		}
	}
	if len(c.in.GRPCRoutes) > 0 {
		c.grpc = make(map[*gwv1.HTTPRoute]*grpcRoute, len(c.in.GRPCRoutes))
		c.hostsByKind = make([]kindHosts, len(c.ls))
	}
	for _, g := range c.in.GRPCRoutes {
		if g != nil {
			r, info := httpRouteOf(g)
			c.grpc[r] = info
			routes = append(routes, r)
		}
	}
	// The kinds share one order: the spec breaks ties between an HTTPRoute
	// and a GRPCRoute as it does between two routes of one kind.
	slices.SortStableFunc(routes, compareRoutes)
	return routes
}

// reset sizes the per-run state for n routes. The slabs are cut for the
// common route (one rule, one match, one backend, two conditions); a
// larger one makes them allocate again.
func (c *compiler) reset(n int) {
	c.attachedBy = make([]int, len(c.ls))
	// Routes' conditions are mostly equal pairs, one slice each (pairs):
	// the slab grows as it is used instead.
	c.conds = slab.New[metav1.Condition](min(2*n, 64))
	c.pairs = conditions.Shared[[2]metav1.Condition]{}
	c.rules = slab.New[config.Rule](n)
	c.matches = slab.New[config.Match](n)
	c.matchPtrs = slab.New[*config.Match](n)
	c.backends = slab.New[config.Backend](n)
}

// groupBySlot gathers the candidates of each listener slot into one
// stretch of grouped, keeping their order: slot i's are
// grouped[start[i]:start[i+1]]. grouped has len(all) elements and start
// one per slot and one more, all zero. A counting sort, because the
// candidates of every listener together can number in the hundreds of
// thousands.
func groupBySlot(all []placed, grouped []config.HostCandidate, start []int) {
	slots := len(start) - 1
	for _, p := range all {
		start[p.slot+1]++
	}
	for i := range slots {
		start[i+1] += start[i]
	}
	next := slices.Clone(start[:slots])
	for _, p := range all {
		grouped[next[p.slot]] = p.HostCandidate
		next[p.slot]++
	}
}

// sortHostGroups sorts each slot's candidates by hostname and precedence
// and returns how many (slot, hostname) groups there are, which sizes the
// table builder.
func sortHostGroups(grouped []config.HostCandidate, start []int) int {
	hostGroups := 0
	for i := range len(start) - 1 {
		cs := grouped[start[i]:start[i+1]]
		if len(cs) > 1 {
			slices.SortFunc(cs, config.CompareHostCandidates)
		}
		for j := range cs {
			if j == 0 || cs[j].Host != cs[j-1].Host {
				hostGroups++
			}
		}
	}
	return hostGroups
}

// attachRoute evaluates each parentRef in c.refs. It returns the statuses
// and leaves in c.hits the listeners the route attaches to, with the
// hostnames it serves on each.
func (c *compiler) attachRoute(route *gwv1.HTTPRoute, cr *compiledRoute) []gwv1.RouteParentStatus {
	statuses := make([]gwv1.RouteParentStatus, len(c.refs))
	c.hits = c.hits[:0]
	for i, r := range c.refs {
		mark := len(c.hits)
		rejected := c.attach(cr, route.Namespace, r)
		if rejected == nil && !cr.usable {
			rejected = &cr.rejected
		}
		if rejected == nil && c.hostsByKind != nil {
			rejected = c.dropMixedKinds(cr, mark)
		}
		if rejected != nil {
			c.hits = c.hits[:mark]
		}
		st := &statuses[i]
		r.ref.DeepCopyInto(&st.ParentRef)
		st.ControllerName = c.in.ControllerName
		st.Conditions = c.conditions(route.Generation, rejected, cr)
	}
	return statuses
}

// dropMixedKinds removes from c.hits[mark:] the listeners where the route
// would share a hostname with a route of the other kind, and returns why
// when it removed them all.
func (c *compiler) dropMixedKinds(cr *compiledRoute, mark int) *problem {
	var first *problem
	kept := c.hits[:mark]
	for _, h := range c.hits[mark:] {
		host, mixed := c.hostsByKind[h.l.slot].mixedKinds(cr.kind, h.hosts)
		if !mixed {
			kept = append(kept, h)
		} else if first == nil {
			first = mixedKindsProblem(cr.kind, h.l, host)
		}
	}
	c.hits = kept
	if len(kept) > mark {
		return nil
	}
	return first
}

// addCandidates adds every match of a route's servable rules, under each
// hostname it serves on the listener of h.
func addCandidates(all []placed, cr *compiledRoute, h hit, order int, traffic trafficFunc, security securityFunc) []placed {
	for _, cru := range cr.rules {
		if cru.matches == nil {
			continue
		}
		rule := cru.forListener(h.l.Listener, cr, traffic, security)
		for _, host := range h.hosts {
			for mi, m := range cru.matches {
				all = append(all, placed{slot: h.l.slot, HostCandidate: config.HostCandidate{
					Host:      host,
					Candidate: config.Candidate{Rule: rule, Match: m, RouteOrder: order, MatchIndex: mi},
				}})
			}
		}
	}
	return all
}

// compareRoutes orders routes by precedence: oldest first, then
// alphabetically by "{namespace}/{name}".
func compareRoutes(a, b *gwv1.HTTPRoute) int {
	ta, tb := a.CreationTimestamp.Time, b.CreationTimestamp.Time
	if !ta.Equal(tb) {
		if ta.Before(tb) {
			return -1
		}
		return 1
	}
	return snapshot.CompareNames(a.Namespace, a.Name, b.Namespace, b.Name)
}

// ourRefs appends to refs the parentRefs of route that name one of our
// parents, in order.
func (c *compiler) ourRefs(route *gwv1.HTTPRoute, refs []parentRef) []parentRef {
	for i := range route.Spec.ParentRefs {
		ref := &route.Spec.ParentRefs[i]
		if p, ok := ParentOf(*ref, route.Namespace); ok {
			if pi := c.parents[p]; pi != nil {
				refs = append(refs, parentRef{ref: ref, parent: p, info: pi})
			}
		}
	}
	return refs
}

// Problem is why a route of a kind attached to one protocol's listeners
// (TLSRoute, TCPRoute) is not accepted by a parent, or a backendRef of it
// not resolved: a reason of the spec and a message.
type Problem struct {
	Reason gwv1.RouteConditionReason
	Msg    string
}

// RouteConditions are Accepted and ResolvedRefs of one parent entry of
// such a route: rejected, when set, is why it is not accepted; refs are
// its backendRefs' problems, the first one's reason standing for all.
func RouteConditions(gen int64, rejected *Problem, refs []Problem) []metav1.Condition {
	accepted := metav1.Condition{Type: string(gwv1.RouteConditionAccepted), Status: metav1.ConditionTrue,
		Reason: string(gwv1.RouteReasonAccepted), Message: "Route is accepted", ObservedGeneration: gen}
	if rejected != nil {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, string(rejected.Reason), rejected.Msg
	}
	resolved := metav1.Condition{Type: string(gwv1.RouteConditionResolvedRefs), Status: metav1.ConditionTrue,
		Reason: string(gwv1.RouteReasonResolvedRefs), Message: "All references are resolved", ObservedGeneration: gen}
	if len(refs) > 0 {
		msgs := make([]string, len(refs))
		for i, p := range refs {
			msgs[i] = p.Msg
		}
		resolved.Status, resolved.Reason, resolved.Message = metav1.ConditionFalse, string(refs[0].Reason), strings.Join(msgs, "; ")
	}
	return []metav1.Condition{accepted, resolved}
}

// SelectedBy is the listeners of ls (a parent's) that ref selects by its
// sectionName and port, for the route kinds of one protocol (TLSRoute,
// TCPRoute) that attach without hostnames of their own.
func SelectedBy(ls []*Listener, ref *gwv1.ParentReference) []*Listener {
	var selected []*Listener
	for _, l := range ls {
		if ref.SectionName != nil && *ref.SectionName != "" && l.Name != *ref.SectionName {
			continue
		}
		if ref.Port != nil && *ref.Port != 0 && l.Port != *ref.Port {
			continue
		}
		selected = append(selected, l)
	}
	return selected
}

// SelectionProblem is why a route of kind, whose listeners are those of
// protocol that carries tells, attaches to none of the listeners
// selected of parent p (accepted: whether p itself is), in the order
// the spec's reasons go; "" when it may attach to some.
func SelectionProblem(p Parent, selected []*Listener, accepted bool, carries func(*Listener) bool, kind, protocol string) (gwv1.RouteConditionReason, string) {
	notAccepted := p.Kind + " " + p.Namespace + "/" + p.Name + " is not accepted"
	switch {
	case len(selected) == 0 && !accepted:
		return gwv1.RouteReasonNoMatchingParent, notAccepted
	case len(selected) == 0:
		return gwv1.RouteReasonNoMatchingParent, fmt.Sprintf("%s %s/%s has no listener that ref selects", p.Kind, p.Namespace, p.Name)
	case !slices.ContainsFunc(selected, carries):
		return gwv1.RouteReasonNotAllowedByListeners, fmt.Sprintf("no selected listener takes %ss (protocol %s)", kind, protocol)
	case !accepted:
		return gwv1.RouteReasonNoMatchingParent, notAccepted
	}
	return "", ""
}

// ParentOf resolves a parentRef to the Parent it names, if it names a
// Gateway or ListenerSet at all.
func ParentOf(ref gwv1.ParentReference, routeNS string) (Parent, bool) {
	if ref.Group != nil && *ref.Group != gwv1.GroupName {
		return Parent{}, false
	}
	kind := "Gateway"
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	if kind != "Gateway" && kind != "ListenerSet" {
		return Parent{}, false
	}
	ns := routeNS
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return Parent{Kind: kind, Namespace: ns, Name: string(ref.Name)}, true
}

// attach appends to c.hits the listeners of parent p that ref selects and
// that accept the route, each with the hostnames the route serves there,
// or returns the reason there are none.
func (c *compiler) attach(cr *compiledRoute, routeNS string, r parentRef) *problem {
	ref, pi := r.ref, r.info
	selected := c.selected[:0]
	defer func() { c.selected = selected[:0] }()
	switch {
	case ref.SectionName != nil && *ref.SectionName != "":
		if l := pi.section(*ref.SectionName); l != nil && onPort(ref, l) {
			selected = append(selected, l)
		}
	case pi.accepted && pi.byHost != nil && exactNames(cr.hostnames):
		// When none of the listeners that could take the route does, the
		// full scan below finds out why. (A parent with few listeners is
		// scanned right away: the listeners that take the route are the
		// same either way.)
		selected = byRouteHostnames(selected, pi, ref, cr.hostnames)
		if c.accepting(selected, cr, routeNS) > 0 {
			return nil
		}
		selected = selected[:0]
		fallthrough
	default:
		for _, l := range pi.listeners {
			if onPort(ref, l) {
				selected = append(selected, l)
			}
		}
	}
	return c.attachSelected(selected, cr, routeNS, r)
}

// onPort reports whether l is on the port ref names, if it names one.
func onPort(ref *gwv1.ParentReference, l *listenerInfo) bool {
	return ref.Port == nil || *ref.Port == 0 || l.Port == *ref.Port
}

// byRouteHostnames appends to selected the listeners of pi on ref's port
// that could take a route with the exact names hosts: those whose hostname
// is one of them, a wildcard covering one, or empty. It looks them up in
// pi.byHost rather than scanning every listener.
func byRouteHostnames(selected []*listenerInfo, pi *parentInfo, ref *gwv1.ParentReference, hosts []string) []*listenerInfo {
	add := func(k hostKey) {
		for _, l := range pi.byHost[k] {
			if onPort(ref, l) && !slices.Contains(selected, l) {
				selected = append(selected, l)
			}
		}
	}
	for _, h := range hosts {
		// The wildcards covering h, most specific first, then the
		// catch-all, then h itself.
		for rest := h; ; {
			i := strings.IndexByte(rest, '.')
			if i < 0 {
				break
			}
			rest = rest[i+1:]
			add(hostKey{wildcard: true, hostname: rest})
		}
		add(hostKey{})
		add(hostKey{hostname: h})
	}
	return selected
}

// attachSelected appends to c.hits the listeners among selected that
// accept the route, or returns the reason there are none. A parent that
// is not accepted takes no route; the reason says so unless the listeners
// ref selects could not take an HTTPRoute anyway (a Gateway whose only
// listener is for TLSRoutes, say), which is the more useful thing to know.
func (c *compiler) attachSelected(selected []*listenerInfo, cr *compiledRoute, routeNS string, r parentRef) *problem {
	if len(selected) == 0 {
		if !r.info.accepted {
			return notAccepted(r.parent)
		}
		return noListener(r.parent, r.ref)
	}
	if !slices.ContainsFunc(selected, func(l *listenerInfo) bool { return Carries(l.Listener, cr.kind) }) {
		return &problem{gwv1.RouteReasonNotAllowedByListeners, "no selected listener takes " + cr.kind.String() + "s"}
	}
	if !r.info.accepted {
		return notAccepted(r.parent)
	}
	if c.accepting(selected, cr, routeNS) > 0 {
		return nil
	}
	if !slices.ContainsFunc(selected, func(l *listenerInfo) bool { return c.admission.Allows(l.Listener, cr.kind, routeNS) }) {
		return &problem{gwv1.RouteReasonNotAllowedByListeners, "no selected listener allows " + cr.kind.String() + "s from namespace " + routeNS}
	}
	return &problem{gwv1.RouteReasonNoMatchingListenerHostname, "no selected listener has a hostname in common with the route"}
}

func notAccepted(p Parent) *problem {
	return &problem{gwv1.RouteReasonNoMatchingParent, p.Kind + " " + p.Namespace + "/" + p.Name + " is not accepted"}
}

// noListener says which listener ref names that p lacks.
func noListener(p Parent, ref *gwv1.ParentReference) *problem {
	what := "no listeners"
	switch {
	case ref.SectionName != nil && *ref.SectionName != "" && ref.Port != nil && *ref.Port != 0:
		what = fmt.Sprintf("no listener named %q on port %d", *ref.SectionName, *ref.Port)
	case ref.SectionName != nil && *ref.SectionName != "":
		what = fmt.Sprintf("no listener named %q", *ref.SectionName)
	case ref.Port != nil && *ref.Port != 0:
		what = fmt.Sprintf("no listener on port %d", *ref.Port)
	}
	return &problem{gwv1.RouteReasonNoMatchingParent, fmt.Sprintf("%s %s/%s has %s", p.Kind, p.Namespace, p.Name, what)}
}

// accepting appends to c.hits the listeners among ls that allow the route
// and share a hostname with it, each with the hostnames the route serves
// there, and returns how many it appended.
func (c *compiler) accepting(ls []*listenerInfo, cr *compiledRoute, routeNS string) int {
	n := 0
	for _, l := range ls {
		if !c.admission.Allows(l.Listener, cr.kind, routeNS) {
			continue
		}
		if hosts := tableHosts(l.hostname, cr.hostnames, c.anyHost); len(hosts) > 0 {
			c.hits = append(c.hits, hit{l: l, hosts: hosts})
			n++
		}
	}
	return n
}

// listenerHostname is the listener's hostname normalized, "" for any.
func listenerHostname(l *Listener) string {
	if h := hostname.Normalize(l.Hostname); h != "*" {
		return h
	}
	return ""
}

// exactNames reports whether hosts is non-empty and has no wildcard.
func exactNames(hosts []string) bool {
	return len(hosts) > 0 && !slices.ContainsFunc(hosts, hostname.IsWildcard)
}

// tableHosts returns the hostnames under which a route's rules go into
// the table of a listener with hostname listener ("" for any), or nil when
// the listener admits none of the route's. Every route hostname the
// listener admits stays as it is, also one that covers the listener's (a
// wildcard, or "" for a route without hostnames) rather than being narrowed
// to it: every request that reaches the table is within the listener's
// hostname anyway, and so routes that tie on the intersection are tried in
// the order of their own hostnames' specificity, as the table tries
// "abc.example.com", then "*.example.com", then "" (the extended feature
// GatewayRouteHostnameIntersectionPrecedence). any is {""}, shared and
// read-only; the result shares memory with route whenever it can, so
// attaching thousands of routes to thousands of listeners allocates
// nothing here.
func tableHosts(listener string, route, any []string) []string {
	if len(route) == 0 {
		return any
	}
	if listener == "" {
		return route
	}
	admits := func(h string) bool {
		return h == listener || hostname.Match(listener, h) || hostname.Match(h, listener)
	}
	n := 0
	for _, h := range route {
		if admits(h) {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(route):
		return route
	}
	out := make([]string, 0, n)
	for _, h := range route {
		if admits(h) {
			out = append(out, h)
		}
	}
	return out
}

// conditions builds the RouteParentStatus conditions for one parentRef;
// rejected is nil when the route is accepted there.
func (c *compiler) conditions(gen int64, rejected *problem, cr *compiledRoute) []metav1.Condition {
	accepted := metav1.Condition{
		Type:               string(gwv1.RouteConditionAccepted),
		Status:             metav1.ConditionTrue,
		Reason:             string(gwv1.RouteReasonAccepted),
		Message:            "Route is accepted",
		ObservedGeneration: gen,
	}
	if rejected != nil {
		accepted.Status = metav1.ConditionFalse
		accepted.Reason = string(rejected.reason)
		accepted.Message = rejected.msg
	}
	resolved := metav1.Condition{
		Type:               string(gwv1.RouteConditionResolvedRefs),
		Status:             metav1.ConditionTrue,
		Reason:             string(gwv1.RouteReasonResolvedRefs),
		Message:            "All references are resolved",
		ObservedGeneration: gen,
	}
	if len(cr.refs) > 0 {
		msgs := make([]string, len(cr.refs))
		for i, p := range cr.refs {
			msgs[i] = p.msg
		}
		resolved.Status = metav1.ConditionFalse
		resolved.Reason = string(cr.refs[0].reason)
		resolved.Message = strings.Join(msgs, "; ")
	}
	if rejected != nil || len(cr.dropped) == 0 {
		pair := [2]metav1.Condition{accepted, resolved}
		if out, ok := c.pairs.Get(pair); ok {
			return out
		}
		out := c.conds.Take(2)
		out[0], out[1] = accepted, resolved
		c.pairs.Put(pair, out)
		return out
	}
	out := c.conds.Take(3)
	out[0], out[1] = accepted, resolved
	out[2] = metav1.Condition{
		Type:               string(gwv1.RouteConditionPartiallyInvalid),
		Status:             metav1.ConditionTrue,
		Reason:             string(gwv1.RouteReasonUnsupportedValue),
		Message:            "Dropped Rule(s): " + strings.Join(cr.dropped, "; "),
		ObservedGeneration: gen,
	}
	return out
}

// compileRoute compiles the parts of a route that do not depend on the
// listener it attaches to. The compiledRoute is c's own, reused for the
// next route; what the tables keep of it (rules, matches) is never reused.
func (c *compiler) compileRoute(route *gwv1.HTTPRoute) *compiledRoute {
	cr := &c.cr
	*cr = compiledRoute{
		nn:        types.NamespacedName{Namespace: route.Namespace, Name: route.Name},
		grpc:      c.grpc[route],
		hostnames: cr.hostnames[:0],
		rules:     cr.rules[:0],
	}
	if cr.grpc != nil {
		cr.kind = KindGRPCRoute
	}
	for _, h := range route.Spec.Hostnames {
		n := hostname.Normalize(string(h))
		if !slices.Contains(cr.hostnames, n) {
			cr.hostnames = append(cr.hostnames, n)
		}
	}
	rules := route.Spec.Rules
	if len(rules) == 0 {
		// What the API server defaults an absent rules list to.
		rules = []gwv1.HTTPRouteRule{{}}
	}
	for i := range rules {
		cru, unsupported := c.compileRule(cr, route.Namespace, i, &rules[i])
		cr.rules = append(cr.rules, cru)
		if unsupported == nil {
			cr.usable = true
			continue
		}
		if len(cr.dropped) == 0 {
			cr.rejected = *unsupported
		}
		cr.dropped = append(cr.dropped, fmt.Sprintf("%s: %s", ruleLabel(i, rules[i].Name), unsupported.msg))
	}
	if !cr.usable {
		cr.dropped = nil
		if len(rules) > 1 {
			cr.rejected.msg = "no rule can be served; first: " + cr.rejected.msg
		}
	}
	return cr
}

func ruleLabel(i int, name *gwv1.SectionName) string {
	if name != nil && *name != "" {
		return fmt.Sprintf("rule %d (%s)", i, *name)
	}
	return fmt.Sprintf("rule %d", i)
}

// compileRule compiles one rule. It returns the unsupported value that
// keeps the rule from being served, if any; reference problems go to
// cr.refs instead.
func (c *compiler) compileRule(cr *compiledRoute, routeNS string, index int, spec *gwv1.HTTPRouteRule) (compiledRule, *problem) {
	rule := c.rules.One()
	rule.Route, rule.RouteName, rule.Index = config.NamespacedName(cr.nn), cr.nn.String(), index
	if spec.Name != nil {
		rule.Name = string(*spec.Name)
	}
	out := compiledRule{rule: rule}
	var unsupported *problem
	fail := func(p *problem) {
		if unsupported == nil && p != nil {
			unsupported = p
		}
	}

	specMatches := spec.Matches
	if len(specMatches) == 0 {
		specMatches = []gwv1.HTTPRouteMatch{{}}
	}
	matches := c.matchPtrs.Take(len(specMatches))
	if cr.grpc != nil && cr.grpc.invalid[index] != nil {
		fail(cr.grpc.invalid[index])
		specMatches, matches = nil, nil
	}
	for i := range specMatches {
		m := c.matches.One()
		if p := compileMatchInto(m, &specMatches[i]); p != nil {
			fail(p)
			matches = nil
			break
		}
		matches[i] = m
	}
	out.matches = matches
	prefixOK := len(matches) == 1 && matches[0].PathType == config.PathMatchPathPrefix

	fail(compileTimeouts(rule, spec.Timeouts))
	fail(compileRetry(rule, spec.Retry))
	fail(compileSession(rule, spec.SessionPersistence))

	fs := c.compileFilters(cr, routeNS, spec.Filters, prefixOK)
	fail(fs.unsupported)
	if fs.redirect && len(spec.BackendRefs) > 0 {
		fail(incompatiblef("a RequestRedirect rule cannot have backendRefs"))
	}
	rule.Filters = fs.filters
	out.perListener = fs.redirect

	if len(spec.BackendRefs) > 0 {
		rule.Backends = c.backends.Take(len(spec.BackendRefs))[:0]
	}
	for i := range spec.BackendRefs {
		ref := &spec.BackendRefs[i]
		b, p := c.resolveBackend(routeNS, ref.BackendObjectReference)
		if p != nil {
			b.Invalid = p.msg
			cr.refs = append(cr.refs, *p)
		}
		b.Weight = 1
		if ref.Weight != nil {
			b.Weight = *ref.Weight
		}
		bfs := c.compileFilters(cr, routeNS, ref.Filters, prefixOK)
		fail(bfs.unsupported)
		b.Filters = bfs.filters
		if bfs.extensionRef != "" && b.Invalid == "" {
			b.Invalid = bfs.extensionRef
		}
		out.perListener = out.perListener || bfs.redirect
		if b.Weight > 0 {
			rule.TotalWeight += b.Weight
		}
		// A backend's session applies when the rule sets none: the rule's
		// is the more specific.
		rule.BackendSession = rule.BackendSession || b.Session != nil && rule.Session == nil
		rule.Backends = append(rule.Backends, b)
	}

	switch {
	case unsupported != nil:
		rule.Invalid = unsupported.msg
	case fs.extensionRef != "":
		rule.Invalid = fs.extensionRef
	}
	return out, unsupported
}

// trafficFunc is Input.Traffic.
type trafficFunc = func(l *Listener, kind RouteKind, route types.NamespacedName, rule string) config.RuleTraffic

// securityFunc is Input.Security.
type securityFunc = func(l *Listener, kind RouteKind, route types.NamespacedName, rule string) *config.Security

// forListener returns the rule of route as served on listener l: a copy
// of its own when its filters or its traffic policies depend on the
// listener.
func (cr *compiledRule) forListener(l *Listener, route *compiledRoute, traffic trafficFunc, security securityFunc) *config.Rule {
	var tr config.RuleTraffic
	if traffic != nil {
		tr = traffic(l, route.kind, route.nn, cr.rule.Name)
	}
	var sec *config.Security
	if security != nil {
		sec = security(l, route.kind, route.nn, cr.rule.Name)
	}
	if !cr.perListener && tr == (config.RuleTraffic{}) && sec == nil {
		return cr.rule
	}
	r := *cr.rule
	r.LB, r.Outlier, r.Active, r.Breaker, r.Conn = tr.LB, tr.Outlier, tr.Active, tr.Breaker, tr.Conn
	if tr.Conn != nil {
		// The data plane reads a backend's Conn only, when it dials: the
		// rule's goes to each backend without its own (its Service's).
		r.Backends = slices.Clone(r.Backends)
		for i := range r.Backends {
			if r.Backends[i].Conn == nil {
				r.Backends[i].Conn = tr.Conn
			}
		}
	}
	if tr.Active != nil && slices.ContainsFunc(r.Backends, func(b config.Backend) bool { return b.TLS != nil && b.Active == nil }) {
		// A backend reached over TLS is probed over TLS: the rule's check
		// goes to it as a copy of its own (ActiveHealthCheck.OverTLS).
		r.Backends = slices.Clone(r.Backends)
		for i := range r.Backends {
			if b := &r.Backends[i]; b.TLS != nil && b.Active == nil {
				b.Active = tr.Active.OverTLS(b.TLS)
			}
		}
	}
	r.Security = sec
	r.RateLimit = tr.RateLimit
	if tr.RequestTimeout > 0 && r.RequestTimeout == 0 {
		r.RequestTimeout = tr.RequestTimeout
	}
	if !cr.perListener {
		return &r
	}
	r.Filters = filtersForListener(r.Filters, l)
	r.Backends = slices.Clone(r.Backends)
	for i := range r.Backends {
		r.Backends[i].Filters = filtersForListener(r.Backends[i].Filters, l)
	}
	return &r
}

func filtersForListener(fs []config.Filter, l *Listener) []config.Filter {
	if len(fs) == 0 {
		return fs
	}
	out := slices.Clone(fs)
	for i := range out {
		if out[i].Redirect == nil {
			continue
		}
		rd := *out[i].Redirect
		rd.ListenerPort = l.Port
		rd.ListenerScheme = "http"
		if l.Protocol == gwv1.HTTPSProtocolType {
			rd.ListenerScheme = "https"
		}
		out[i].Redirect = &rd
	}
	return out
}

func compileMatch(spec *gwv1.HTTPRouteMatch) (*config.Match, *problem) {
	m := &config.Match{}
	if p := compileMatchInto(m, spec); p != nil {
		return nil, p
	}
	return m, nil
}

// compileMatchInto compiles spec into m, which must be zero.
func compileMatchInto(m *config.Match, spec *gwv1.HTTPRouteMatch) *problem {
	if p := compilePathMatch(m, spec.Path); p != nil {
		return p
	}
	if spec.Method != nil {
		switch *spec.Method {
		case gwv1.HTTPMethodGet, gwv1.HTTPMethodHead, gwv1.HTTPMethodPost, gwv1.HTTPMethodPut,
			gwv1.HTTPMethodDelete, gwv1.HTTPMethodConnect, gwv1.HTTPMethodOptions,
			gwv1.HTTPMethodTrace, gwv1.HTTPMethodPatch:
			m.Method = string(*spec.Method)
		default:
			return unsupportedf("unsupported method %q", *spec.Method)
		}
	}
	if p := compileHeaderMatches(m, spec.Headers); p != nil {
		return p
	}
	return compileQueryParamMatches(m, spec.QueryParams)
}

// compilePathMatch sets m's path match from spec, a prefix match on "/"
// when spec leaves it out.
func compilePathMatch(m *config.Match, spec *gwv1.HTTPPathMatch) *problem {
	typ, value := config.PathMatchPathPrefix, "/"
	if spec != nil {
		if spec.Type != nil {
			typ = config.PathMatchType(*spec.Type)
		}
		if spec.Value != nil {
			value = *spec.Value
		}
	}
	if err := m.SetPath(typ, value); err != nil {
		return unsupportedf("%v", err)
	}
	return nil
}

// compileHeaderMatches appends specs to m.Headers, names canonicalized.
func compileHeaderMatches(m *config.Match, specs []gwv1.HTTPHeaderMatch) *problem {
	for _, h := range specs {
		name := http.CanonicalHeaderKey(string(h.Name))
		if slices.ContainsFunc(m.Headers, func(x config.HeaderMatch) bool { return x.Name == name }) {
			continue // the spec says only the first entry for a name counts
		}
		hm := config.HeaderMatch{Name: name, Value: h.Value}
		typ := gwv1.HeaderMatchExact
		if h.Type != nil {
			typ = *h.Type
		}
		switch typ {
		case gwv1.HeaderMatchExact:
		case gwv1.HeaderMatchRegularExpression:
			re, err := config.Anchored(h.Value)
			if err != nil {
				return unsupportedf("header %s regular expression %q: %v", name, h.Value, err)
			}
			hm.Regexp = re
		default:
			return unsupportedf("unsupported header match type %q", typ)
		}
		m.Headers = append(m.Headers, hm)
	}
	return nil
}

// compileQueryParamMatches appends specs to m.QueryParams.
func compileQueryParamMatches(m *config.Match, specs []gwv1.HTTPQueryParamMatch) *problem {
	for _, q := range specs {
		name := string(q.Name)
		if slices.ContainsFunc(m.QueryParams, func(x config.QueryParamMatch) bool { return x.Name == name }) {
			continue // as for headers, the first entry for a name counts
		}
		qm := config.QueryParamMatch{Name: name, Value: q.Value}
		typ := gwv1.QueryParamMatchExact
		if q.Type != nil {
			typ = *q.Type
		}
		switch typ {
		case gwv1.QueryParamMatchExact:
		case gwv1.QueryParamMatchRegularExpression:
			re, err := config.Anchored(q.Value)
			if err != nil {
				return unsupportedf("query parameter %s regular expression %q: %v", name, q.Value, err)
			}
			qm.Regexp = re
		default:
			return unsupportedf("unsupported query parameter match type %q", typ)
		}
		m.QueryParams = append(m.QueryParams, qm)
	}
	return nil
}

func unsupportedf(format string, args ...any) *problem {
	return &problem{gwv1.RouteReasonUnsupportedValue, fmt.Sprintf(format, args...)}
}

func incompatiblef(format string, args ...any) *problem {
	return &problem{gwv1.RouteReasonIncompatibleFilters, fmt.Sprintf(format, args...)}
}
