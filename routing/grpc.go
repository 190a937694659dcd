package routing

import (
	"fmt"
	"regexp"
	"strings"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/shared/hostname"
)

// A GRPCRoute is compiled into the same tables as HTTPRoutes: a gRPC call
// is an HTTP/2 POST to /{service}/{method}, so a method match is a path
// match, and everything else a GRPCRoute can say (header matches, header
// modifiers, mirrors, weighted backends) is what an HTTPRoute says too.
// Each GRPCRoute is rewritten once per Compile into an equivalent
// HTTPRoute that the compiler handles like any other, remembering its kind
// for attachment, ReferenceGrants and status.
//
// Method matches become paths so that the table's order is GRPCRoute's
// precedence (most characters of service, then of method, then most
// header matches):
//
//   - service and method, Exact: Exact path "/service/method";
//   - service only, Exact: PathPrefix "/service", after every Exact path;
//   - anything with a RegularExpression, or a method without a service:
//     a RegularExpression path, after every prefix;
//   - no method match: the RegularExpression "/.*", shorter than any of
//     the others, so tried after all of them (regular expressions are
//     tried longest first).
//
// Two matches that can both match one call are ordered as GRPCRoute asks,
// except among regular expressions (implementation-specific), which keep
// the HTTPRoute order: longest expression first.

// grpcAppProtocol is what a GRPCRoute's backends speak: HTTP/2, over TLS
// when a BackendTLSPolicy covers the port, cleartext (h2c) otherwise.
const grpcAppProtocol = "kubernetes.io/h2c"

// grpcRoute is a GRPCRoute rewritten as an HTTPRoute, with the reasons
// any of its rules cannot be served as written (by rule index), which
// the rewrite cannot express.
type grpcRoute struct {
	invalid map[int]*problem
}

// httpRouteOf rewrites g as an HTTPRoute (see above). The result shares
// g's metadata, parentRefs, hostnames and filter configurations:
// read-only, like g.
func httpRouteOf(g *gwv1.GRPCRoute) (*gwv1.HTTPRoute, *grpcRoute) {
	h := &gwv1.HTTPRoute{ObjectMeta: g.ObjectMeta}
	h.Spec.ParentRefs = g.Spec.ParentRefs
	h.Spec.Hostnames = g.Spec.Hostnames
	info := &grpcRoute{}
	rules := g.Spec.Rules
	if len(rules) == 0 {
		rules = []gwv1.GRPCRouteRule{{}}
	}
	h.Spec.Rules = make([]gwv1.HTTPRouteRule, len(rules))
	for i := range rules {
		r, hr := &rules[i], &h.Spec.Rules[i]
		hr.Name = r.Name
		matches := r.Matches
		if len(matches) == 0 {
			matches = []gwv1.GRPCRouteMatch{{}}
		}
		hr.Matches = make([]gwv1.HTTPRouteMatch, len(matches))
		for j := range matches {
			if p := grpcMatch(&hr.Matches[j], &matches[j]); p != nil && info.invalid[i] == nil {
				if info.invalid == nil {
					info.invalid = map[int]*problem{}
				}
				info.invalid[i] = p
			}
		}
		hr.Filters = grpcFilters(r.Filters)
		hr.SessionPersistence = r.SessionPersistence
		hr.BackendRefs = make([]gwv1.HTTPBackendRef, len(r.BackendRefs))
		for j := range r.BackendRefs {
			hr.BackendRefs[j] = gwv1.HTTPBackendRef{BackendRef: r.BackendRefs[j].BackendRef, Filters: grpcFilters(r.BackendRefs[j].Filters)}
		}
	}
	return h, info
}

// grpcMatch writes into out the HTTPRouteMatch equivalent to m, or says why
// there is none.
func grpcMatch(out *gwv1.HTTPRouteMatch, m *gwv1.GRPCRouteMatch) *problem {
	for _, hm := range m.Headers {
		typ := gwv1.HeaderMatchExact
		if hm.Type != nil {
			typ = gwv1.HeaderMatchType(*hm.Type)
		}
		out.Headers = append(out.Headers, gwv1.HTTPHeaderMatch{Type: &typ, Name: gwv1.HTTPHeaderName(hm.Name), Value: hm.Value})
	}
	path, p := grpcPath(m.Method)
	out.Path = path
	return p
}

var (
	pathExact  = gwv1.PathMatchExact
	pathPrefix = gwv1.PathMatchPathPrefix
	pathRegex  = gwv1.PathMatchRegularExpression
)

// anyCall is the path expression of a match without a method match.
var anyCall = "/.*"

// grpcPath is the path match of a method match; nil matches every call.
func grpcPath(mm *gwv1.GRPCMethodMatch) (*gwv1.HTTPPathMatch, *problem) {
	if mm == nil {
		return &gwv1.HTTPPathMatch{Type: &pathRegex, Value: &anyCall}, nil
	}
	typ := gwv1.GRPCMethodMatchExact
	if mm.Type != nil {
		typ = *mm.Type
	}
	svc, method := "", ""
	if mm.Service != nil {
		svc = *mm.Service
	}
	if mm.Method != nil {
		method = *mm.Method
	}
	if svc == "" && method == "" {
		return nil, unsupportedf("a method match needs a service or a method")
	}
	switch typ {
	case gwv1.GRPCMethodMatchExact:
		if strings.Contains(svc, "/") || strings.Contains(method, "/") {
			return nil, unsupportedf("method match: an Exact service or method cannot contain '/'")
		}
		switch {
		case svc != "" && method != "":
			v := "/" + svc + "/" + method
			return &gwv1.HTTPPathMatch{Type: &pathExact, Value: &v}, nil
		case svc != "":
			v := "/" + svc
			return &gwv1.HTTPPathMatch{Type: &pathPrefix, Value: &v}, nil
		}
		v := "/[^/]+/" + regexp.QuoteMeta(method)
		return &gwv1.HTTPPathMatch{Type: &pathRegex, Value: &v}, nil
	case gwv1.GRPCMethodMatchRegularExpression:
		for _, e := range []struct{ what, expr string }{{"service", svc}, {"method", method}} {
			if _, err := regexp.Compile(e.expr); err != nil {
				return nil, unsupportedf("method match: %s regular expression %q: %v", e.what, e.expr, err)
			}
		}
		v := "/" + grpcPart(svc) + "/" + grpcPart(method)
		return &gwv1.HTTPPathMatch{Type: &pathRegex, Value: &v}, nil
	}
	return nil, unsupportedf("unsupported method match type %q", typ)
}

// grpcPart is the path expression of a service or method expression: any
// one path segment when empty.
func grpcPart(expr string) string {
	if expr == "" {
		return "[^/]+"
	}
	return "(?:" + expr + ")"
}

// grpcFilters rewrites GRPCRoute filters as the HTTPRoute filters of the
// same type. A type HTTPRoute lacks keeps its name, which the filter
// compiler reports as unsupported.
func grpcFilters(fs []gwv1.GRPCRouteFilter) []gwv1.HTTPRouteFilter {
	if len(fs) == 0 {
		return nil
	}
	out := make([]gwv1.HTTPRouteFilter, len(fs))
	for i, f := range fs {
		o := &out[i]
		switch f.Type {
		case gwv1.GRPCRouteFilterRequestHeaderModifier, gwv1.GRPCRouteFilterResponseHeaderModifier,
			gwv1.GRPCRouteFilterRequestMirror, gwv1.GRPCRouteFilterExtensionRef:
			o.Type = gwv1.HTTPRouteFilterType(f.Type)
		default:
			o.Type = gwv1.HTTPRouteFilterType("GRPCRoute " + string(f.Type))
		}
		o.RequestHeaderModifier = f.RequestHeaderModifier
		o.ResponseHeaderModifier = f.ResponseHeaderModifier
		o.RequestMirror = f.RequestMirror
		o.ExtensionRef = f.ExtensionRef
	}
	return out
}

// kindHosts are the hostnames served on one listener by the routes of
// each kind attached so far, by KindHTTPRoute and KindGRPCRoute.
type kindHosts [2][]string

// mixedKinds returns the hostname the route of kind k serving hosts on a
// listener shares with a route of the other kind already attached there
// ("" for any), and whether there is one. The spec lets an implementation
// reject one of an HTTPRoute and a GRPCRoute whose hostnames intersect on
// a listener, the newer one: Portico does, so that no request has to be
// told apart by kind.
func (kh *kindHosts) mixedKinds(k RouteKind, hosts []string) (string, bool) {
	for _, other := range kh[1-k] {
		for _, h := range hosts {
			if hostsIntersect(h, other) {
				return h, true
			}
		}
	}
	return "", false
}

// hostsIntersect reports whether some name is covered by both hostname
// patterns ("" covers every name).
func hostsIntersect(a, b string) bool {
	return a == "" || b == "" || a == b || hostname.Match(a, b) || hostname.Match(b, a)
}

func mixedKindsProblem(k RouteKind, l *listenerInfo, host string) *problem {
	if host == "" {
		host = "any hostname"
	}
	return &problem{gwv1.RouteReasonNotAllowedByListeners, fmt.Sprintf(
		"listener %s already serves an older %s on %s; HTTPRoutes and GRPCRoutes cannot share a hostname", l.Name, 1-k, host)}
}
