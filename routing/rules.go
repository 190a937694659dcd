package routing

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// compiledFilters is the outcome of compiling one filter list.
type compiledFilters struct {
	filters     []config.Filter
	unsupported *problem
	// extensionRef, when set, says why requests through these filters must
	// fail: an ExtensionRef Portico cannot resolve must not be skipped.
	extensionRef string
	redirect     bool
}

// fail records p as the reason the filters cannot be used, unless an
// earlier problem already is: the first one found is the one reported.
func (out *compiledFilters) fail(p *problem) {
	if out.unsupported == nil && p != nil {
		out.unsupported = p
	}
}

// compileFilters compiles a rule's or a backendRef's filters. prefixOK says
// whether the rule has the single PathPrefix match a ReplacePrefixMatch
// needs. Mirror backends that do not resolve are dropped and reported in
// cr.refs, as the spec asks.
func (c *compiler) compileFilters(cr *compiledRoute, routeNS string, specs []gwv1.HTTPRouteFilter, prefixOK bool) compiledFilters {
	var out compiledFilters
	out.fail(combinationProblem(specs))
	for i := range specs {
		f := &specs[i]
		if !configured(f) {
			out.fail(unsupportedf("filter %s has no configuration", f.Type))
			continue
		}
		switch f.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			hm, p := compileHeaderModifier(f.RequestHeaderModifier)
			out.fail(p)
			out.filters = append(out.filters, config.Filter{Type: config.FilterType(f.Type), RequestHeaders: hm})
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			hm, p := compileHeaderModifier(f.ResponseHeaderModifier)
			out.fail(p)
			out.filters = append(out.filters, config.Filter{Type: config.FilterType(f.Type), ResponseHeaders: hm})
		case gwv1.HTTPRouteFilterRequestRedirect:
			rd, p := compileRedirect(f.RequestRedirect, prefixOK)
			out.fail(p)
			out.filters = append(out.filters, config.Filter{Type: config.FilterType(f.Type), Redirect: rd})
			out.redirect = true
		case gwv1.HTTPRouteFilterURLRewrite:
			rw, p := compileRewrite(f.URLRewrite, prefixOK)
			out.fail(p)
			out.filters = append(out.filters, config.Filter{Type: config.FilterType(f.Type), Rewrite: rw})
		case gwv1.HTTPRouteFilterRequestMirror:
			mr, p := c.compileMirror(cr, routeNS, f.RequestMirror)
			out.fail(p)
			if mr != nil {
				out.filters = append(out.filters, config.Filter{Type: config.FilterType(f.Type), Mirror: mr})
			}
		case gwv1.HTTPRouteFilterCORS:
			cors, p := compileCORS(f.CORS)
			out.fail(p)
			out.filters = append(out.filters, config.Filter{Type: config.FilterType(f.Type), CORS: cors})
		case gwv1.HTTPRouteFilterExternalAuth:
			e, p, unresolved := c.compileExternalAuth(cr, routeNS, f.ExternalAuth)
			out.fail(p)
			switch {
			case e != nil:
				out.filters = append(out.filters, config.Filter{Type: config.FilterExternalAuth, ExtAuth: e})
			case unresolved != "" && out.extensionRef == "":
				// Its service cannot be asked: the rule fails closed
				// (500), as ResolvedRefs says.
				out.extensionRef = unresolved
			}
		case gwv1.HTTPRouteFilterExtensionRef:
			msg := extensionRefProblem(f.ExtensionRef)
			cr.refs = append(cr.refs, problem{gwv1.RouteReasonInvalidKind, msg})
			if out.extensionRef == "" {
				out.extensionRef = msg
			}
		default:
			out.fail(unsupportedf("unsupported filter type %q", f.Type))
		}
	}
	return out
}

// combinationProblem returns the first reason specs cannot be combined:
// a filter type repeated where only mirrors and extensions may be, or a
// redirect together with a rewrite.
func combinationProblem(specs []gwv1.HTTPRouteFilter) *problem {
	seen := map[gwv1.HTTPRouteFilterType]int{}
	for _, f := range specs {
		seen[f.Type]++
		if seen[f.Type] == 2 && f.Type != gwv1.HTTPRouteFilterRequestMirror && f.Type != gwv1.HTTPRouteFilterExtensionRef {
			return incompatiblef("filter %s is repeated", f.Type)
		}
	}
	if seen[gwv1.HTTPRouteFilterRequestRedirect] > 0 && seen[gwv1.HTTPRouteFilterURLRewrite] > 0 {
		return incompatiblef("RequestRedirect and URLRewrite filters cannot be combined")
	}
	return nil
}

// configured reports whether f carries the configuration its type needs.
// An ExtensionRef without one, or a type Portico does not know, is
// reported for what it is rather than as missing configuration.
func configured(f *gwv1.HTTPRouteFilter) bool {
	switch f.Type {
	case gwv1.HTTPRouteFilterRequestHeaderModifier:
		return f.RequestHeaderModifier != nil
	case gwv1.HTTPRouteFilterResponseHeaderModifier:
		return f.ResponseHeaderModifier != nil
	case gwv1.HTTPRouteFilterRequestRedirect:
		return f.RequestRedirect != nil
	case gwv1.HTTPRouteFilterURLRewrite:
		return f.URLRewrite != nil
	case gwv1.HTTPRouteFilterRequestMirror:
		return f.RequestMirror != nil
	case gwv1.HTTPRouteFilterCORS:
		return f.CORS != nil
	case gwv1.HTTPRouteFilterExternalAuth:
		return f.ExternalAuth != nil
	}
	return true
}

// compileExternalAuth compiles an ExternalAuth filter. A backendRef that
// does not resolve is reported in cr.refs (ResolvedRefs=False with the
// backend's reason) and returned as unresolved, with neither a check nor
// a problem; a spec that cannot be served gives a problem.
func (c *compiler) compileExternalAuth(cr *compiledRoute, routeNS string, spec *gwv1.HTTPExternalAuthFilter) (e *config.ExtAuth, p *problem, unresolved string) {
	r := c.backendRefs.Resolve(c.cr.kind, routeNS, spec.BackendRef)
	if r.Reason != "" {
		msg := "ExternalAuth filter: " + r.Message
		cr.refs = append(cr.refs, problem{r.Reason, msg})
		return nil, nil, msg
	}
	if r.TLS != nil && r.TLS.Invalid != "" {
		msg := fmt.Sprintf("ExternalAuth filter: BackendTLSPolicy %s of its backend: %s", r.TLS.Policy, r.TLS.Invalid)
		return nil, nil, msg
	}
	e, err := CompileExternalAuth(spec, r, "ExternalAuth filter")
	if err != nil {
		return nil, unsupportedf("ExternalAuth filter: %v", err), ""
	}
	return e, nil, ""
}

func compileRewrite(spec *gwv1.HTTPURLRewriteFilter, prefixOK bool) (*config.Rewrite, *problem) {
	rw := &config.Rewrite{}
	if spec.Hostname != nil {
		rw.Hostname = string(*spec.Hostname)
	}
	if spec.Path == nil {
		return rw, nil
	}
	pm, p := compilePathModifier(spec.Path, prefixOK)
	rw.Path = pm
	return rw, p
}

// compileMirror returns the mirror spec asks for, or nil with the reason
// it is unusable. A mirror whose backend does not resolve is dropped, not
// a problem with the filters: its reason goes to cr.refs. One whose
// backend is invalid is dropped silently: a mirror that cannot be trusted
// is not sent.
func (c *compiler) compileMirror(cr *compiledRoute, routeNS string, spec *gwv1.HTTPRequestMirrorFilter) (*config.Mirror, *problem) {
	mr, p := compileMirrorShare(spec)
	if p != nil {
		return nil, p
	}
	b, rp := c.resolveBackend(routeNS, spec.BackendRef)
	if rp != nil {
		rp.msg = "mirror: " + rp.msg
		cr.refs = append(cr.refs, *rp)
		return nil, nil
	}
	if b.Invalid != "" {
		return nil, nil
	}
	mr.Backend, mr.AppProtocol, mr.TLS = b.Key, b.AppProtocol, b.TLS
	return mr, nil
}

// extensionRefProblem says that the ExtensionRef filter naming e is not
// supported, naming it when it can.
func extensionRefProblem(e *gwv1.LocalObjectReference) string {
	what := "ExtensionRef filter"
	if e != nil {
		what = fmt.Sprintf("ExtensionRef filter %s/%s %q", e.Group, e.Kind, e.Name)
	}
	return what + " is not supported"
}

func compileHeaderModifier(spec *gwv1.HTTPHeaderFilter) (*config.HeaderModifier, *problem) {
	hm := &config.HeaderModifier{}
	actions := map[string]string{}
	var conflict *problem
	claim := func(name, action string) bool {
		if prev, ok := actions[name]; ok {
			if prev != action && conflict == nil {
				conflict = unsupportedf("header %s is both in %s and in %s", name, prev, action)
			}
			return false // a repeated name: the first entry counts
		}
		actions[name] = action
		return true
	}
	for _, h := range spec.Set {
		if name := http.CanonicalHeaderKey(string(h.Name)); claim(name, "set") {
			hm.Set = append(hm.Set, config.Header{Name: name, Value: h.Value})
		}
	}
	for _, h := range spec.Add {
		if name := http.CanonicalHeaderKey(string(h.Name)); claim(name, "add") {
			hm.Add = append(hm.Add, config.Header{Name: name, Value: h.Value})
		}
	}
	for _, h := range spec.Remove {
		if name := http.CanonicalHeaderKey(h); claim(name, "remove") {
			hm.Remove = append(hm.Remove, name)
		}
	}
	return hm, conflict
}

func compileRedirect(spec *gwv1.HTTPRequestRedirectFilter, prefixOK bool) (*config.Redirect, *problem) {
	rd := &config.Redirect{StatusCode: http.StatusFound}
	if spec.Scheme != nil {
		switch *spec.Scheme {
		case "http", "https":
			rd.Scheme = *spec.Scheme
		default:
			return rd, unsupportedf("unsupported redirect scheme %q", *spec.Scheme)
		}
	}
	if spec.Hostname != nil {
		rd.Hostname = string(*spec.Hostname)
	}
	if spec.Port != nil {
		if *spec.Port < 1 || *spec.Port > 65535 {
			return rd, unsupportedf("redirect port %d out of range", *spec.Port)
		}
		rd.Port = *spec.Port
	}
	if spec.StatusCode != nil {
		switch *spec.StatusCode {
		case 301, 302, 303, 307, 308:
			rd.StatusCode = *spec.StatusCode
		default:
			return rd, unsupportedf("unsupported redirect status code %d", *spec.StatusCode)
		}
	}
	if spec.Path != nil {
		pm, p := compilePathModifier(spec.Path, prefixOK)
		if p != nil {
			return rd, p
		}
		rd.Path = pm
	}
	return rd, nil
}

func compilePathModifier(spec *gwv1.HTTPPathModifier, prefixOK bool) (*config.PathModifier, *problem) {
	pm := &config.PathModifier{Type: config.PathModifierType(spec.Type)}
	var value *string
	switch spec.Type {
	case gwv1.FullPathHTTPPathModifier:
		value = spec.ReplaceFullPath
	case gwv1.PrefixMatchHTTPPathModifier:
		if !prefixOK {
			return nil, incompatiblef("ReplacePrefixMatch needs a rule with exactly one PathPrefix match")
		}
		value = spec.ReplacePrefixMatch
	default:
		return nil, unsupportedf("unsupported path modifier type %q", spec.Type)
	}
	if value == nil {
		return nil, unsupportedf("path modifier %s has no value", spec.Type)
	}
	dec, err := config.CanonicalPathValue(*value)
	if err != nil {
		return nil, unsupportedf("path modifier value %q: %v", *value, err)
	}
	if spec.Type == gwv1.PrefixMatchHTTPPathModifier {
		dec = config.NormalizePrefix(dec)
	} else if !strings.HasPrefix(dec, "/") {
		dec = "/" + dec
	}
	pm.Value = dec
	return pm, nil
}

func compileMirrorShare(spec *gwv1.HTTPRequestMirrorFilter) (*config.Mirror, *problem) {
	mr := &config.Mirror{Numerator: 1, Denominator: 1}
	switch {
	case spec.Percent != nil && spec.Fraction != nil:
		return nil, unsupportedf("mirror sets both percent and fraction")
	case spec.Percent != nil:
		if *spec.Percent < 0 || *spec.Percent > 100 {
			return nil, unsupportedf("mirror percent %d out of range", *spec.Percent)
		}
		mr.Numerator, mr.Denominator = *spec.Percent, 100
	case spec.Fraction != nil:
		den := int32(100)
		if spec.Fraction.Denominator != nil {
			den = *spec.Fraction.Denominator
		}
		num := spec.Fraction.Numerator
		if den < 1 || num < 0 || num > den {
			return nil, unsupportedf("mirror fraction %d/%d is invalid", num, den)
		}
		mr.Numerator, mr.Denominator = num, den
	}
	return mr, nil
}

func compileCORS(spec *gwv1.HTTPCORSFilter) (*config.CORS, *problem) {
	c := &config.CORS{MaxAge: spec.MaxAge}
	if c.MaxAge <= 0 {
		c.MaxAge = 5
	}
	if spec.AllowCredentials != nil {
		c.AllowCredentials = *spec.AllowCredentials
	}
	for _, o := range spec.AllowOrigins {
		s := strings.ToLower(string(o))
		if s == "*" {
			c.AllowAllOrigins = true
			continue
		}
		if !config.ValidOrigin(s) {
			return c, unsupportedf("CORS origin %q is invalid", o)
		}
		c.AllowOrigins = append(c.AllowOrigins, s)
	}
	for _, m := range spec.AllowMethods {
		if m == "*" {
			c.AllowAllMethods = true
			continue
		}
		c.AllowMethods = append(c.AllowMethods, string(m))
	}
	for _, h := range spec.AllowHeaders {
		if h == "*" {
			c.AllowAllHeaders = true
			continue
		}
		c.AllowHeaders = append(c.AllowHeaders, string(h))
	}
	for _, h := range spec.ExposeHeaders {
		if h == "*" {
			c.ExposeAllHeaders = true
			continue
		}
		c.ExposeHeaders = append(c.ExposeHeaders, string(h))
	}
	c.Prepare()
	return c, nil
}

// resolveBackend checks a backend reference of the route being compiled
// (BackendRefs.Resolve) and makes it the data plane's.
func (c *compiler) resolveBackend(routeNS string, ref gwv1.BackendObjectReference) (config.Backend, *problem) {
	r := c.backendRefs.Resolve(c.cr.kind, routeNS, ref)
	b := config.Backend{Key: r.Key, AppProtocol: r.AppProtocol, TLS: r.TLS, LB: r.LB, Outlier: r.Outlier, Active: r.Active, Breaker: r.Breaker, Conn: r.Conn,
		Session: r.Session, Budget: r.Budget}
	if b.Active != nil && b.TLS != nil {
		b.Active = b.Active.OverTLS(b.TLS)
	}
	if r.Reason != "" {
		return b, &problem{r.Reason, r.Message}
	}
	if b.TLS != nil && b.TLS.Invalid != "" {
		// The route is fine; its requests to this backend fail, as the
		// policy's status explains.
		b.Invalid = fmt.Sprintf("BackendTLSPolicy %s: %s", b.TLS.Policy, b.TLS.Invalid)
	}
	return b, nil
}

// NoTimeout marks a timeout the route disabled explicitly ("0s").
const NoTimeout time.Duration = -1

func compileTimeouts(rule *config.Rule, spec *gwv1.HTTPRouteTimeouts) *problem {
	if spec == nil {
		return nil
	}
	var req, be time.Duration
	var err error
	if spec.Request != nil {
		if req, err = parseDuration(string(*spec.Request)); err != nil {
			return unsupportedf("timeouts.request: %v", err)
		}
		rule.RequestTimeout = orNoTimeout(req)
	}
	if spec.BackendRequest != nil {
		if be, err = parseDuration(string(*spec.BackendRequest)); err != nil {
			return unsupportedf("timeouts.backendRequest: %v", err)
		}
		rule.BackendRequestTimeout = orNoTimeout(be)
	}
	if spec.Request != nil && spec.BackendRequest != nil && req != 0 && be > req {
		return unsupportedf("timeouts.backendRequest %s is longer than timeouts.request %s", be, req)
	}
	return nil
}

func orNoTimeout(d time.Duration) time.Duration {
	if d == 0 {
		return NoTimeout
	}
	return d
}

func compileRetry(rule *config.Rule, spec *gwv1.HTTPRouteRetry) *problem {
	if spec == nil {
		return nil
	}
	// One retry unless the route says otherwise: the API's default, which
	// objects created before v1.7's CRDs (or without admission) lack.
	rt := &config.Retry{Attempts: 1}
	for _, code := range spec.Codes {
		if code < 400 || code > 599 {
			return unsupportedf("retry code %d is outside 400-599", code)
		}
		rt.Codes = append(rt.Codes, int(code))
	}
	if spec.Attempts != nil {
		if *spec.Attempts < 0 {
			return unsupportedf("retry attempts %d is negative", *spec.Attempts)
		}
		rt.Attempts = *spec.Attempts
	}
	if spec.Backoff != nil {
		d, err := parseDuration(string(*spec.Backoff))
		if err != nil {
			return unsupportedf("retry.backoff: %v", err)
		}
		rt.Backoff = d
	}
	rule.Retry = rt
	return nil
}

// parseDuration parses a Gateway API Duration (GEP-2257): one to four
// groups of one to five digits, each followed by h, m, s or ms.
func parseDuration(s string) (time.Duration, error) {
	groups := 0
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && '0' <= s[j] && s[j] <= '9' {
			j++
		}
		if j == i || j-i > 5 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		switch {
		case strings.HasPrefix(s[j:], "ms"):
			j += 2
		case j < len(s) && (s[j] == 'h' || s[j] == 'm' || s[j] == 's'):
			j++
		default:
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		groups++
		i = j
	}
	if groups == 0 || groups > 4 {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %w", s, err)
	}
	return d, nil
}

// compileSession compiles a rule's sessionPersistence. The CRD's rules
// already refuse a cookie or header block of the other type and a
// Permanent cookie without absoluteTimeout; they are checked again here
// for objects admitted without them.
func compileSession(rule *config.Rule, spec *gwv1.SessionPersistence) *problem {
	if spec == nil {
		return nil
	}
	// A name of the rule's own, the same in every process, so that
	// sessions of two rules never meet.
	name := fmt.Sprintf("portico-session-%08x", uint32(config.HashKey(rule.RouteName+"#"+strconv.Itoa(rule.Index))))
	sp, err := SessionPersistence(spec, name)
	if err != nil {
		return unsupportedf("%v", err)
	}
	rule.Session = sp
	return nil
}

// SessionPersistence compiles a sessionPersistence (of a route rule or an
// XBackendTrafficPolicy); a cookie without a name gets defaultName.
func SessionPersistence(spec *gwv1.SessionPersistence, defaultName string) (*config.SessionPersistence, error) {
	sp := &config.SessionPersistence{Type: config.SessionCookie}
	if spec.Type != nil {
		sp.Type = config.SessionType(*spec.Type)
	}
	if spec.AbsoluteTimeout != nil {
		d, err := parseDuration(string(*spec.AbsoluteTimeout))
		if err != nil {
			return nil, fmt.Errorf("sessionPersistence.absoluteTimeout: %w", err)
		}
		sp.AbsoluteTimeout = d
	}
	switch sp.Type {
	case config.SessionCookie:
		sp.Path = "/"
		if spec.Header != nil {
			return nil, errors.New("sessionPersistence: header must be nil if type is not Header")
		}
		if c := spec.Cookie; c != nil {
			if c.Name != nil {
				sp.Name = string(*c.Name)
			}
			if c.Path != nil && *c.Path != "" {
				sp.Path = *c.Path
			}
			if c.LifetimeType != nil && *c.LifetimeType == gwv1.PermanentCookieLifetimeType {
				if sp.AbsoluteTimeout <= 0 {
					return nil, errors.New("sessionPersistence: absoluteTimeout must be specified when cookie lifetimeType is Permanent")
				}
				sp.Permanent = true
			}
		}
		if sp.Name == "" {
			sp.Name = defaultName
		}
		if !validCookieName(sp.Name) {
			return nil, fmt.Errorf("sessionPersistence.cookie.name %q is not a valid cookie name", sp.Name)
		}
		if strings.ContainsAny(sp.Path, ";\x00\r\n") {
			return nil, fmt.Errorf("sessionPersistence.cookie.path %q is not a valid cookie path", sp.Path)
		}
	case config.SessionHeader:
		if spec.Cookie != nil {
			return nil, errors.New("sessionPersistence: cookie must be nil if type is not Cookie")
		}
		if spec.Header == nil || spec.Header.Name == "" {
			return nil, errors.New("sessionPersistence: header must be specified for Header type")
		}
		sp.Name = http.CanonicalHeaderKey(string(spec.Header.Name))
	default:
		return nil, fmt.Errorf("sessionPersistence.type %q is not Cookie or Header", sp.Type)
	}
	return sp, nil
}

// validCookieName is RFC 6265's token: visible ASCII but separators.
func validCookieName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}
