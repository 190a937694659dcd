package routing

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"portico.dev/portico/hostname"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
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
		in:        in,
		byID:      map[int]*Listener{},
		byParent:  map[Parent][]*Listener{},
		bySection: map[sectionKey]*Listener{},
		byHost:    map[hostKey][]*Listener{},
		selectors: map[int]labels.Selector{},
		grants:    map[string][]*gwv1.ReferenceGrant{},
	}
	for i := range in.Listeners {
		l := &in.Listeners[i]
		c.byID[l.ID] = l
		c.byParent[l.Parent] = append(c.byParent[l.Parent], l)
		c.bySection[sectionKey{l.Parent, l.Name}] = l
		h := hostKey{l.Parent, listenerHostname(l)}
		c.byHost[h] = append(c.byHost[h], l)
	}
	for _, g := range in.ReferenceGrants {
		if g != nil {
			c.grants[g.Namespace] = append(c.grants[g.Namespace], g)
		}
	}
	return c.run()
}

type compiler struct {
	in       Input
	byID     map[int]*Listener
	byParent map[Parent][]*Listener // in input order
	// bySection and byHost spare a scan of every listener of a parent
	// when a parentRef names a section, or when the route's hostnames are
	// exact names: a Gateway may carry thousands of listeners.
	bySection map[sectionKey]*Listener
	byHost    map[hostKey][]*Listener
	selectors map[int]labels.Selector // listener ID -> compiled namespace selector
	grants    map[string][]*gwv1.ReferenceGrant
}

type sectionKey struct {
	parent Parent
	name   gwv1.SectionName
}

type hostKey struct {
	parent   Parent
	hostname string // normalized listener hostname
}

// problem is one reason a rule, backend or filter cannot be used as written.
type problem struct {
	reason gwv1.RouteConditionReason
	msg    string
}

type compiledRoute struct {
	nn        types.NamespacedName
	hostnames []string // normalized, deduplicated; empty means any
	rules     []compiledRule
	// usable is false when every rule has an unsupported value; the route
	// is then not accepted anywhere and rejected says why.
	usable   bool
	rejected problem
	dropped  []string // PartiallyInvalid details
	refs     []problem
}

type compiledRule struct {
	rule    *Rule
	matches []*Match // nil when the rule's matches cannot be compiled
	// perListener is set when filters carry listener details (redirects),
	// so each listener gets its own copy of the rule.
	perListener bool
}

func (c *compiler) run() Output {
	out := Output{
		Tables:         map[int]*Table{},
		AttachedRoutes: map[int]int32{},
		RouteParents:   map[types.NamespacedName][]gwv1.RouteParentStatus{},
	}
	for i := range c.in.Listeners {
		out.AttachedRoutes[c.in.Listeners[i].ID] = 0
	}
	routes := make([]*gwv1.HTTPRoute, 0, len(c.in.Routes))
	for _, r := range c.in.Routes {
		if r != nil {
			routes = append(routes, r)
		}
	}
	slices.SortStableFunc(routes, compareRoutes)

	byListener := map[int]map[string][]candidate{}
	for order, route := range routes {
		if !c.namesOurParent(route) {
			continue
		}
		cr := c.compileRoute(route)
		statuses, attached := c.attachRoute(route, cr)
		if len(statuses) > 0 {
			out.RouteParents[cr.nn] = statuses
		}
		ids := make([]int, 0, len(attached))
		for id := range attached {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			out.AttachedRoutes[id]++
			byHost := byListener[id]
			if byHost == nil {
				byHost = map[string][]candidate{}
				byListener[id] = byHost
			}
			addCandidates(byHost, cr, c.byID[id], attached[id], order)
		}
	}
	for id, byHost := range byListener {
		out.Tables[id] = buildTable(byHost)
	}
	return out
}

// attachRoute evaluates each parentRef of a route that names one of our
// parents: its status, and the listeners it attaches the route to (listener
// ID -> the hostnames the route serves there).
func (c *compiler) attachRoute(route *gwv1.HTTPRoute, cr *compiledRoute) ([]gwv1.RouteParentStatus, map[int][]string) {
	var statuses []gwv1.RouteParentStatus
	attached := map[int][]string{}
	for _, ref := range route.Spec.ParentRefs {
		p, ok := parentOf(ref, route.Namespace)
		if !ok {
			continue
		}
		parentAccepted, ours := c.in.Parents[p]
		if !ours {
			continue
		}
		hits, rejected := c.attach(cr, route.Namespace, ref, p, parentAccepted)
		if rejected == nil && !cr.usable {
			rejected = &cr.rejected
		}
		if rejected == nil {
			for id, hosts := range hits {
				attached[id] = hosts
			}
		}
		statuses = append(statuses, gwv1.RouteParentStatus{
			ParentRef:      *ref.DeepCopy(),
			ControllerName: c.in.ControllerName,
			Conditions:     conditions(route.Generation, rejected, cr),
		})
	}
	return statuses, attached
}

// addCandidates adds every match of a route's servable rules, under each
// hostname it serves on listener l.
func addCandidates(byHost map[string][]candidate, cr *compiledRoute, l *Listener, hosts []string, order int) {
	for _, cru := range cr.rules {
		if cru.matches == nil {
			continue
		}
		rule := cru.forListener(l)
		for _, h := range hosts {
			for mi, m := range cru.matches {
				byHost[h] = append(byHost[h], candidate{rule: rule, match: m, routeOrder: order, matchIndex: mi})
			}
		}
	}
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
	return compareJoined(a.Namespace, a.Name, b.Namespace, b.Name)
}

// compareJoined compares aNS+"/"+aName with bNS+"/"+bName without building
// them. The joined form is what the spec orders by, and it differs from
// comparing namespaces first: '-' sorts before '/', so "a-b/x" comes
// before "a/x".
func compareJoined(aNS, aName, bNS, bName string) int {
	if aNS == bNS {
		return strings.Compare(aName, bName)
	}
	n := min(len(aNS), len(bNS))
	if c := strings.Compare(aNS[:n], bNS[:n]); c != 0 {
		return c
	}
	// One namespace is a prefix of the other; the shorter one goes on
	// with the '/'.
	if len(aNS) < len(bNS) {
		return cmp.Compare('/', bNS[n])
	}
	return cmp.Compare(aNS[n], '/')
}

func (c *compiler) namesOurParent(route *gwv1.HTTPRoute) bool {
	for _, ref := range route.Spec.ParentRefs {
		if p, ok := parentOf(ref, route.Namespace); ok {
			if _, ours := c.in.Parents[p]; ours {
				return true
			}
		}
	}
	return false
}

// parentOf resolves a parentRef to the Parent it names, if it names a
// Gateway or ListenerSet at all.
func parentOf(ref gwv1.ParentReference, routeNS string) (Parent, bool) {
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

// attach returns the listeners of parent p that ref selects and that accept
// the route, each with the hostnames the route serves there, or the reason
// there are none. A parent that is not accepted takes no route; the reason
// says so unless the listeners ref selects could not take an HTTPRoute
// anyway (a Gateway whose only listener is for TLSRoutes, say), which is
// the more useful thing to know.
func (c *compiler) attach(cr *compiledRoute, routeNS string, ref gwv1.ParentReference, p Parent, parentAccepted bool) (map[int][]string, *problem) {
	portOK := func(l *Listener) bool { return ref.Port == nil || *ref.Port == 0 || l.Port == *ref.Port }
	var selected []*Listener
	switch {
	case ref.SectionName != nil && *ref.SectionName != "":
		if l := c.bySection[sectionKey{p, *ref.SectionName}]; l != nil && portOK(l) {
			selected = append(selected, l)
		}
	case parentAccepted && exactNames(cr.hostnames):
		// Only listeners whose hostname is one of the route's, a wildcard
		// covering one, or empty can take the route. When none of them
		// does, the full scan below finds out why.
		for _, h := range cr.hostnames {
			for _, lh := range append(coveringPatterns(h), h) {
				for _, l := range c.byHost[hostKey{p, lh}] {
					if portOK(l) && !slices.Contains(selected, l) {
						selected = append(selected, l)
					}
				}
			}
		}
		if hits := c.accepting(selected, cr, routeNS); len(hits) > 0 {
			return hits, nil
		}
		selected = selected[:0]
		fallthrough
	default:
		for _, l := range c.byParent[p] {
			if portOK(l) {
				selected = append(selected, l)
			}
		}
	}
	notAccepted := &problem{gwv1.RouteReasonNoMatchingParent, fmt.Sprintf("%s %s/%s is not accepted", p.Kind, p.Namespace, p.Name)}
	if len(selected) == 0 && !parentAccepted {
		return nil, notAccepted
	}
	if len(selected) == 0 {
		what := "no listeners"
		switch {
		case ref.SectionName != nil && *ref.SectionName != "" && ref.Port != nil && *ref.Port != 0:
			what = fmt.Sprintf("no listener named %q on port %d", *ref.SectionName, *ref.Port)
		case ref.SectionName != nil && *ref.SectionName != "":
			what = fmt.Sprintf("no listener named %q", *ref.SectionName)
		case ref.Port != nil && *ref.Port != 0:
			what = fmt.Sprintf("no listener on port %d", *ref.Port)
		}
		return nil, &problem{gwv1.RouteReasonNoMatchingParent, fmt.Sprintf("%s %s/%s has %s", p.Kind, p.Namespace, p.Name, what)}
	}
	if !slices.ContainsFunc(selected, carriesHTTPRoutes) {
		return nil, &problem{gwv1.RouteReasonNotAllowedByListeners, "no selected listener takes HTTPRoutes"}
	}
	if !parentAccepted {
		return nil, notAccepted
	}
	if hits := c.accepting(selected, cr, routeNS); len(hits) > 0 {
		return hits, nil
	}
	if !slices.ContainsFunc(selected, func(l *Listener) bool { return c.allows(l, routeNS) }) {
		return nil, &problem{gwv1.RouteReasonNotAllowedByListeners, "no selected listener allows HTTPRoutes from namespace " + routeNS}
	}
	return nil, &problem{gwv1.RouteReasonNoMatchingListenerHostname, "no selected listener has a hostname in common with the route"}
}

// accepting returns the listeners among ls that allow the route and share
// a hostname with it, each with the hostnames the route serves there.
func (c *compiler) accepting(ls []*Listener, cr *compiledRoute, routeNS string) map[int][]string {
	var hits map[int][]string
	for _, l := range ls {
		if !c.allows(l, routeNS) {
			continue
		}
		if hosts := intersect(listenerHostname(l), cr.hostnames); len(hosts) > 0 {
			if hits == nil {
				hits = map[int][]string{}
			}
			hits[l.ID] = hosts
		}
	}
	return hits
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

// carriesHTTPRoutes reports whether listener l is of a kind that takes
// HTTPRoutes at all: its protocol and allowed kinds, acceptance aside.
func carriesHTTPRoutes(l *Listener) bool {
	if l.Protocol != gwv1.HTTPProtocolType && l.Protocol != gwv1.HTTPSProtocolType {
		return false
	}
	if len(l.AllowedRoutes.Kinds) > 0 && !hasHTTPRoute(l.AllowedRoutes.Kinds) {
		return false
	}
	return len(l.SupportedKinds) == 0 || hasHTTPRoute(l.SupportedKinds)
}

// allows reports whether listener l accepts HTTPRoutes from namespace ns.
func (c *compiler) allows(l *Listener, ns string) bool {
	if !l.Accepted || !carriesHTTPRoutes(l) {
		return false
	}
	from := gwv1.NamespacesFromSame
	var selector *metav1.LabelSelector
	if rn := l.AllowedRoutes.Namespaces; rn != nil {
		if rn.From != nil {
			from = *rn.From
		}
		selector = rn.Selector
	}
	switch from {
	case gwv1.NamespacesFromAll:
		return true
	case gwv1.NamespacesFromSame:
		own := l.Parent.Namespace
		if own == "" {
			own = l.Gateway.Namespace
		}
		return ns == own
	case gwv1.NamespacesFromSelector:
		if selector == nil {
			return false
		}
		s, ok := c.selectors[l.ID]
		if !ok {
			var err error
			if s, err = metav1.LabelSelectorAsSelector(selector); err != nil {
				s = labels.Nothing()
			}
			c.selectors[l.ID] = s
		}
		return s.Matches(labels.Set(c.in.NamespaceLabels[ns]))
	}
	return false
}

func hasHTTPRoute(kinds []gwv1.RouteGroupKind) bool {
	for _, k := range kinds {
		if k.Kind == "HTTPRoute" && (k.Group == nil || *k.Group == gwv1.GroupName) {
			return true
		}
	}
	return false
}

// intersect returns the hostnames a route serves on a listener: each route
// hostname the listener hostname admits, narrowed to the listener's when
// that is the more specific of the two. An empty route list means the
// listener's hostname ("" for any).
func intersect(listener string, route []string) []string {
	if len(route) == 0 {
		return []string{listener}
	}
	if listener == "" {
		return route
	}
	var out []string
	for _, h := range route {
		var e string
		switch {
		case h == listener, hostname.Match(listener, h):
			e = h
		case hostname.Match(h, listener):
			e = listener
		default:
			continue
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// conditions builds the RouteParentStatus conditions for one parentRef;
// rejected is nil when the route is accepted there.
func conditions(gen int64, rejected *problem, cr *compiledRoute) []metav1.Condition {
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
	out := []metav1.Condition{accepted, resolved}
	if rejected == nil && len(cr.dropped) > 0 {
		out = append(out, metav1.Condition{
			Type:               string(gwv1.RouteConditionPartiallyInvalid),
			Status:             metav1.ConditionTrue,
			Reason:             string(gwv1.RouteReasonUnsupportedValue),
			Message:            "Dropped Rule(s): " + strings.Join(cr.dropped, "; "),
			ObservedGeneration: gen,
		})
	}
	return out
}

// compileRoute compiles the parts of a route that do not depend on the
// listener it attaches to.
func (c *compiler) compileRoute(route *gwv1.HTTPRoute) *compiledRoute {
	cr := &compiledRoute{nn: types.NamespacedName{Namespace: route.Namespace, Name: route.Name}}
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
	rule := &Rule{Route: cr.nn, Index: index}
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
	matches := make([]*Match, 0, len(specMatches))
	for i := range specMatches {
		m, p := compileMatch(&specMatches[i])
		if p != nil {
			fail(p)
			matches = nil
			break
		}
		matches = append(matches, m)
	}
	out.matches = matches
	prefixOK := len(matches) == 1 && matches[0].PathType == gwv1.PathMatchPathPrefix

	fail(compileTimeouts(rule, spec.Timeouts))
	fail(compileRetry(rule, spec.Retry))

	fs := c.compileFilters(cr, routeNS, spec.Filters, prefixOK)
	fail(fs.unsupported)
	if fs.redirect && len(spec.BackendRefs) > 0 {
		fail(incompatiblef("a RequestRedirect rule cannot have backendRefs"))
	}
	rule.Filters = fs.filters
	out.perListener = fs.redirect

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

// forListener returns the rule as served on listener l.
func (cr *compiledRule) forListener(l *Listener) *Rule {
	if !cr.perListener {
		return cr.rule
	}
	r := *cr.rule
	r.Filters = filtersForListener(r.Filters, l)
	r.Backends = slices.Clone(r.Backends)
	for i := range r.Backends {
		r.Backends[i].Filters = filtersForListener(r.Backends[i].Filters, l)
	}
	return &r
}

func filtersForListener(fs []Filter, l *Listener) []Filter {
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

func compileMatch(spec *gwv1.HTTPRouteMatch) (*Match, *problem) {
	m := &Match{PathType: gwv1.PathMatchPathPrefix, Path: "/"}
	if spec.Path != nil {
		if spec.Path.Type != nil {
			m.PathType = *spec.Path.Type
		}
		if spec.Path.Value != nil {
			m.Path = *spec.Path.Value
		}
	}
	switch m.PathType {
	case gwv1.PathMatchExact, gwv1.PathMatchPathPrefix:
		if !strings.HasPrefix(m.Path, "/") {
			return nil, unsupportedf("path %q does not start with '/'", m.Path)
		}
		dec, err := url.PathUnescape(m.Path)
		if err != nil {
			return nil, unsupportedf("path %q: %v", m.Path, err)
		}
		m.path = dec
		if m.PathType == gwv1.PathMatchPathPrefix {
			m.path = normalizePrefix(dec)
		}
	case gwv1.PathMatchRegularExpression:
		re, err := anchored(m.Path)
		if err != nil {
			return nil, unsupportedf("path regular expression %q: %v", m.Path, err)
		}
		m.re = re
	default:
		return nil, unsupportedf("unsupported path match type %q", m.PathType)
	}
	if spec.Method != nil {
		switch *spec.Method {
		case gwv1.HTTPMethodGet, gwv1.HTTPMethodHead, gwv1.HTTPMethodPost, gwv1.HTTPMethodPut,
			gwv1.HTTPMethodDelete, gwv1.HTTPMethodConnect, gwv1.HTTPMethodOptions,
			gwv1.HTTPMethodTrace, gwv1.HTTPMethodPatch:
			m.Method = string(*spec.Method)
		default:
			return nil, unsupportedf("unsupported method %q", *spec.Method)
		}
	}
	for _, h := range spec.Headers {
		name := http.CanonicalHeaderKey(string(h.Name))
		if slices.ContainsFunc(m.Headers, func(x HeaderMatch) bool { return x.Name == name }) {
			continue // the spec says only the first entry for a name counts
		}
		hm := HeaderMatch{Name: name, Value: h.Value}
		typ := gwv1.HeaderMatchExact
		if h.Type != nil {
			typ = *h.Type
		}
		switch typ {
		case gwv1.HeaderMatchExact:
		case gwv1.HeaderMatchRegularExpression:
			re, err := anchored(h.Value)
			if err != nil {
				return nil, unsupportedf("header %s regular expression %q: %v", name, h.Value, err)
			}
			hm.Regexp = re
		default:
			return nil, unsupportedf("unsupported header match type %q", typ)
		}
		m.Headers = append(m.Headers, hm)
	}
	for _, q := range spec.QueryParams {
		name := string(q.Name)
		if slices.ContainsFunc(m.QueryParams, func(x QueryParamMatch) bool { return x.Name == name }) {
			continue
		}
		qm := QueryParamMatch{Name: name, Value: q.Value}
		typ := gwv1.QueryParamMatchExact
		if q.Type != nil {
			typ = *q.Type
		}
		switch typ {
		case gwv1.QueryParamMatchExact:
		case gwv1.QueryParamMatchRegularExpression:
			re, err := anchored(q.Value)
			if err != nil {
				return nil, unsupportedf("query parameter %s regular expression %q: %v", name, q.Value, err)
			}
			qm.Regexp = re
		default:
			return nil, unsupportedf("unsupported query parameter match type %q", typ)
		}
		m.QueryParams = append(m.QueryParams, qm)
	}
	return m, nil
}

func unsupportedf(format string, args ...any) *problem {
	return &problem{gwv1.RouteReasonUnsupportedValue, fmt.Sprintf(format, args...)}
}

func incompatiblef(format string, args ...any) *problem {
	return &problem{gwv1.RouteReasonIncompatibleFilters, fmt.Sprintf(format, args...)}
}
