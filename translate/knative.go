package translate

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/shared/chunked"
	"portico.dev/portico/internal/shared/hostname"
	"portico.dev/portico/sni"
)

// KnativeSettings say which KIngresses Portico serves and where: an
// external gateway (plain HTTP and HTTPS ports) and a cluster-local one
// (plain HTTP, and HTTPS when a cluster-local host has a certificate), each
// a Service in front of Portico's replicas.
type KnativeSettings struct {
	// IngressClass selects KIngresses by their
	// networking.knative.dev/ingress.class annotation;
	// knative.DefaultIngressClass when empty.
	IngressClass string
	// CertificateClass selects Certificates by their
	// networking.knative.dev/certificate.class annotation;
	// knative.DefaultCertificateClass when empty. They are ordered over
	// ACME HTTP-01, answered on the external gateway.
	CertificateClass string
	// The gateways' ports on Portico's bind address.
	ExternalHTTPPort, ExternalHTTPSPort int32
	LocalHTTPPort, LocalHTTPSPort       int32
	// LocalService is the cluster-local gateway's Service: an ExternalName
	// backend that names it is served in process. ClusterDomain is the
	// cluster's DNS suffix ("cluster.local" when empty).
	LocalService  types.NamespacedName
	ClusterDomain string
}

func (s *KnativeSettings) class() string {
	return cmp.Or(s.IngressClass, knative.DefaultIngressClass)
}

// KnativeOutput is what translate says of Knative's objects of Portico's
// classes.
type KnativeOutput struct {
	Ingresses    map[types.NamespacedName]KIngressResult
	Certificates map[types.NamespacedName]KCertificateResult
}

// KIngressResult is what translate says of one KIngress of Portico's class.
type KIngressResult struct {
	Generation int64
	// Hash is the version of the KIngress the configuration serves, the
	// one a probe gets back.
	Hash string
	// External and Local are the hosts to probe on each gateway, sorted;
	// none when the KIngress is not served (Conflict).
	External, Local []string
	// Conflict, when set, says which host another, older KIngress owns:
	// this one serves nothing.
	Conflict string
	// Problems are the Secrets and backends that do not resolve, sorted.
	Problems []string
}

// Listener keys of the gateways' ports.
const (
	KnativeExternalKey = "KIngress/external"
	KnativeLocalKey    = "KIngress/local"
)

// knativeGateway collects what one gateway serves.
type knativeGateway struct {
	hosts   []config.OrderedHost
	at      map[string]int // host -> index in hosts
	certs   []*sni.Entry
	certFor map[string]bool
	// size is the number of hosts expected, to size the maps once.
	size int
}

func (g *knativeGateway) add(host string, entries []config.OrderedEntry) {
	if g.at == nil {
		g.at = make(map[string]int, g.size)
	}
	if i, ok := g.at[host]; ok {
		// Another rule of the same KIngress with the same host: its paths
		// come after those of the first.
		g.hosts[i].Entries = append(g.hosts[i].Entries, entries...)
		return
	}
	g.at[host] = len(g.hosts)
	g.hosts = append(g.hosts, config.OrderedHost{Hostname: host, Entries: slices.Clip(entries)})
}

func (g *knativeGateway) addCert(host string, cert *tls.Certificate) {
	if g.certFor == nil {
		g.certFor = map[string]bool{}
	}
	if g.certFor[host] {
		return
	}
	g.certFor[host] = true
	g.certs = append(g.certs, &sni.Entry{Hostname: host, Certificates: []*tls.Certificate{cert}})
}

// knativeTranslation is the state of the knative step.
type knativeTranslation struct {
	t        *translation
	s        *KnativeSettings
	prev     map[*knative.Ingress]string
	hashes   map[*knative.Ingress]string
	results  map[types.NamespacedName]KIngressResult
	services map[types.NamespacedName]*corev1.Service
	external knativeGateway
	// externalPlain is the external gateway's plain HTTP: the same routes
	// but for hosts Redirected to HTTPS, which are answered 301.
	externalPlain knativeGateway
	local         knativeGateway
	matches       config.PrefixMatcher
}

// knative serves the KIngresses of Portico's class: oldest first, each
// claims its hosts (a host claimed already is a DomainConflict), its paths
// become ordered routes on the gateways of their visibility, and the
// gateways become four ports of the Config.
func (t *translation) knative(prevHashes map[*knative.Ingress]string) {
	s := t.settings.Knative
	if s == nil {
		return
	}
	k := &knativeTranslation{t: t, s: s, prev: prevHashes,
		hashes:   map[*knative.Ingress]string{},
		results:  map[types.NamespacedName]KIngressResult{},
		services: make(map[types.NamespacedName]*corev1.Service, len(t.res.Services)),
	}
	for _, svc := range t.res.Services {
		k.services[nn(svc.Namespace, svc.Name)] = svc
	}
	// Serving writes one external and three cluster-local hosts per
	// KIngress: sizing the maps for that saves growing them.
	n := len(t.res.KIngresses)
	k.external.size, k.externalPlain.size, k.local.size = n, n, 4*n
	owners := make(map[gatewayHost]*knative.Ingress, 5*n)
	for _, ing := range snapshot.SortedByAge(ours(t.res.KIngresses, s.class())) {
		spec := knative.Defaulted(&ing.Spec)
		r := KIngressResult{Generation: ing.Generation, Hash: k.hash(ing)}
		if r.Conflict = claim(owners, ing, &spec); r.Conflict == "" {
			r.External, r.Local, r.Problems = k.serve(ing, &spec, r.Hash)
		}
		k.results[nn(ing.Namespace, ing.Name)] = r
	}
	problems := k.ports()
	if len(problems) > 0 {
		for key, r := range k.results {
			r.Problems = append(slices.Clone(r.Problems), problems...)
			k.results[key] = r
		}
	}
	t.kingresses, t.kingressHashes = k.results, k.hashes
}

// ours returns the KIngresses of class.
func ours(all []*knative.Ingress, class string) []*knative.Ingress {
	var out []*knative.Ingress
	for _, ing := range all {
		if ing.Annotations[knative.IngressClassAnnotation] == class {
			out = append(out, ing)
		}
	}
	return out
}

// hash returns the probe hash of ing, computed again only for a new object.
func (k *knativeTranslation) hash(ing *knative.Ingress) string {
	h, ok := k.prev[ing]
	if !ok {
		// Encoding these plain types cannot fail.
		h, _ = knative.Hash(ing)
	}
	k.hashes[ing] = h
	return h
}

// onGateway reports whether a rule's hosts are served on gateway:
// cluster-local hosts only on the cluster-local gateway, external ones on
// both (clients in the cluster reach external hosts through the
// cluster-local Service).
func onGateway(v knative.Visibility, gateway string) bool {
	return gateway == "local" || v != knative.VisibilityClusterLocal
}

// gatewayHost is a host on one of the two gateways.
type gatewayHost struct {
	gateway, host string
}

// claim gives ing every (gateway, host) of its rules unless one is owned
// already; it returns why not, and then claims nothing.
func claim(owners map[gatewayHost]*knative.Ingress, ing *knative.Ingress, spec *knative.IngressSpec) string {
	var buf [8]gatewayHost
	keys := buf[:0]
	for _, rule := range spec.Rules {
		for _, gw := range [...]string{"external", "local"} {
			if !onGateway(rule.Visibility, gw) {
				continue
			}
			for _, h := range rule.Hosts {
				key := gatewayHost{gw, strings.ToLower(h)}
				if o := owners[key]; o != nil && o != ing {
					return fmt.Sprintf("host %s is already served for KIngress %s/%s", h, o.Namespace, o.Name)
				}
				keys = append(keys, key)
			}
		}
	}
	for _, key := range keys {
		owners[key] = ing
	}
	return ""
}

// serve adds the routes and certificates of ing to the gateways; it
// returns the hosts to probe on each and what does not resolve.
func (k *knativeTranslation) serve(ing *knative.Ingress, spec *knative.IngressSpec, hash string) (external, local, problems []string) {
	certs, problems := k.certificates(ing, spec)
	probe := k.probeEntry(ing, hash)
	for ri, rule := range spec.Rules {
		entries := []config.OrderedEntry{probe}
		if rule.HTTP != nil {
			for pi := range rule.HTTP.Paths {
				e, p := k.path(ing, ri, pi, &rule.HTTP.Paths[pi], hash)
				entries = append(entries, e)
				problems = append(problems, p...)
			}
		}
		redirect := []config.OrderedEntry{probe, k.redirectEntry(ing, ri, hash)}
		for _, h := range rule.Hosts {
			h = strings.ToLower(h)
			k.local.add(h, entries)
			if rule.Visibility == knative.VisibilityClusterLocal {
				local = append(local, h)
				if c := certs[h]; c != nil {
					k.local.addCert(h, c)
				}
				continue
			}
			external = append(external, h)
			c := certs[h]
			if c != nil {
				k.external.addCert(h, c)
			}
			if c != nil && spec.HTTPOption == knative.HTTPOptionRedirected {
				k.externalPlain.add(h, redirect)
			} else {
				k.externalPlain.add(h, entries)
			}
			k.external.add(h, entries)
		}
	}
	slices.Sort(external)
	slices.Sort(local)
	slices.Sort(problems)
	return slices.Compact(external), slices.Compact(local), slices.Compact(problems)
}

// certificates loads the key pair of every TLS entry of ing, by host.
func (k *knativeTranslation) certificates(ing *knative.Ingress, spec *knative.IngressSpec) (map[string]*tls.Certificate, []string) {
	if len(spec.TLS) == 0 {
		return nil, nil
	}
	var problems []string
	out := map[string]*tls.Certificate{}
	for _, e := range spec.TLS {
		ns := cmp.Or(e.SecretNamespace, ing.Namespace)
		if err := k.t.ix.certificate(ns, e.SecretName); err != nil {
			problems = append(problems, fmt.Sprintf("Secret %s/%s: %v", ns, e.SecretName, err))
		}
		c := k.t.ix.parsed(nn(ns, e.SecretName))
		if c == nil {
			continue
		}
		for _, h := range e.Hosts {
			out[strings.ToLower(h)] = c
		}
	}
	return out, problems
}

func routeName(ing *knative.Ingress) string { return ing.Namespace + "/" + ing.Name }

// probeEntry catches the probe of Portico's leader on every path of a
// host, whatever header conditions its paths have; the data plane answers
// it with the hash (proxy.answerProbe).
func (k *knativeTranslation) probeEntry(ing *knative.Ingress, hash string) config.OrderedEntry {
	m, _ := k.matches.Match("/", map[string]string{ // valid: "/" and non-empty values
		config.KnativeProbeHeader: config.KnativePorticoProbe, config.KnativeHashHeader: config.KnativeHashOverride})
	return config.OrderedEntry{Match: m, Rule: &config.Rule{
		Route: config.NamespacedName(nn(ing.Namespace, ing.Name)), RouteName: routeName(ing), Index: -1, Name: "probe", NetworkHash: hash}}
}

// redirectEntry answers plain HTTP requests for a host Redirected to HTTPS.
func (k *knativeTranslation) redirectEntry(ing *knative.Ingress, ri int, hash string) config.OrderedEntry {
	m, _ := k.matches.Match("/", nil) // "/" is always valid
	return config.OrderedEntry{Match: m, Rule: &config.Rule{
		Route: config.NamespacedName(nn(ing.Namespace, ing.Name)), RouteName: routeName(ing), Index: ri, NetworkHash: hash,
		Filters: []config.Filter{{Type: config.FilterRequestRedirect,
			Redirect: &config.Redirect{Scheme: "https", StatusCode: http.StatusMovedPermanently}}},
	}}
}

// path compiles one path of a KIngress rule.
func (k *knativeTranslation) path(ing *knative.Ingress, ri, pi int, p *knative.HTTPIngressPath, hash string) (config.OrderedEntry, []string) {
	rule := &config.Rule{Route: config.NamespacedName(nn(ing.Namespace, ing.Name)), RouteName: routeName(ing), Index: pi,
		Name: fmt.Sprintf("rule%d/path%d", ri, pi), NetworkHash: hash}
	var headers map[string]string
	if len(p.Headers) > 0 {
		headers = make(map[string]string, len(p.Headers))
		for name, h := range p.Headers {
			headers[name] = h.Exact
		}
	}
	m, err := k.matches.Match(p.Path, headers)
	if err != nil {
		// Matches nothing: the path is written so that no request has it.
		m, _ = k.matches.Match("/", map[string]string{"K-Portico-Invalid-Path": "never"})
		return config.OrderedEntry{Rule: rule, Match: m}, []string{err.Error()}
	}
	if f := setHeaders(p.AppendHeaders); f != nil {
		rule.Filters = append(rule.Filters, *f)
	}
	if p.RewriteHost != "" {
		rule.Filters = append(rule.Filters, config.Filter{Type: config.FilterURLRewrite,
			Rewrite: &config.Rewrite{Hostname: p.RewriteHost}})
	}
	var problems []string
	for _, split := range p.Splits {
		b, problem := k.backend(ing, &split)
		if problem != "" {
			problems = append(problems, problem)
		}
		rule.Backends = append(rule.Backends, b)
		rule.TotalWeight += b.Weight
	}
	return config.OrderedEntry{Rule: rule, Match: m}, problems
}

// setHeaders is a filter that sets (overwrites) headers, nil for none.
func setHeaders(h map[string]string) *config.Filter {
	if len(h) == 0 {
		return nil
	}
	mod := &config.HeaderModifier{}
	for name, v := range h {
		mod.Set = append(mod.Set, config.Header{Name: http.CanonicalHeaderKey(name), Value: v})
	}
	slices.SortFunc(mod.Set, func(a, b config.Header) int { return strings.Compare(a.Name, b.Name) })
	return &config.Filter{Type: config.FilterRequestHeaderModifier, RequestHeaders: mod}
}

// backend resolves one split to a Service port; a backend that does not
// resolve answers 500 and is reported.
func (k *knativeTranslation) backend(ing *knative.Ingress, split *knative.IngressBackendSplit) (config.Backend, string) {
	key := nn(cmp.Or(split.ServiceNamespace, ing.Namespace), split.ServiceName)
	b := config.Backend{Weight: int32(max(split.Percent, 0))}
	if f := setHeaders(split.AppendHeaders); f != nil {
		b.Filters = []config.Filter{*f}
	}
	svc := k.services[key]
	if svc == nil {
		b.Invalid = fmt.Sprintf("Service %s not found", key)
		return b, b.Invalid
	}
	sp, found := servicePort(svc, split.ServicePort)
	if sp.Name == "http2" || sp.Name == "h2c" || ptrValue(sp.AppProtocol) == "kubernetes.io/h2c" {
		b.AppProtocol = "kubernetes.io/h2c"
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if k.isLocalService(svc.Spec.ExternalName) {
			b.Dispatch = k.s.LocalHTTPPort
			return b, ""
		}
		if sp.Port == 0 {
			b.Invalid = fmt.Sprintf("Service %s has no port %s", key, split.ServicePort.String())
			return b, b.Invalid
		}
		b.Address = net.JoinHostPort(strings.TrimSuffix(svc.Spec.ExternalName, "."), strconv.Itoa(int(sp.Port)))
		return b, ""
	}
	if !found {
		b.Invalid = fmt.Sprintf("Service %s has no port %s", key, split.ServicePort.String())
		return b, b.Invalid
	}
	b.Key = config.BackendKey{Service: config.NamespacedName(key), Port: sp.Port}
	return b, ""
}

// servicePort finds a Service's port by number or name. An ExternalName
// Service need not list its ports: a number stands for itself.
func servicePort(svc *corev1.Service, p intstr.IntOrString) (corev1.ServicePort, bool) {
	for _, sp := range svc.Spec.Ports {
		if p.Type == intstr.Int && sp.Port == p.IntVal || p.Type == intstr.String && sp.Name == p.StrVal {
			return sp, true
		}
	}
	if p.Type == intstr.Int {
		return corev1.ServicePort{Port: p.IntVal}, false
	}
	return corev1.ServicePort{}, false
}

func ptrValue(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// isLocalService reports whether an ExternalName names the cluster-local
// gateway's Service.
func (k *knativeTranslation) isLocalService(name string) bool {
	svc := k.s.LocalService
	if svc.Name == "" {
		return false
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	base := svc.Name + "." + svc.Namespace
	domain := cmp.Or(k.s.ClusterDomain, "cluster.local")
	return name == base || name == base+".svc" || name == base+".svc."+domain
}

// ports adds the gateways' ports to the Config; a port a Gateway already
// uses is left out and reported.
func (k *knativeTranslation) ports() []string {
	var problems []string
	taken := map[int32]bool{}
	for _, p := range k.t.cfg.Ports {
		taken[p.Number] = true
	}
	add := func(number int32, proto config.Protocol, key string, hosts []config.OrderedHost, certs []*sni.Entry) {
		if number == 0 {
			return
		}
		if taken[number] {
			problems = append(problems, fmt.Sprintf("port %d of the %s gateway is used by a Gateway", number, key))
			return
		}
		taken[number] = true
		l := &config.Listener{Key: key + "/" + strconv.Itoa(int(number)), Routes: config.NewOrderedTable(hosts)}
		p := &config.Port{Number: number, Protocol: proto, All: chunked.Of([]*config.Listener{l}),
			Listeners: hostname.NewTable([]string{""}, []*config.Listener{l})}
		if proto == config.HTTPS {
			entries := make([]*sni.Entry, len(certs))
			for i, e := range certs {
				c := *e
				c.Value = l
				entries[i] = &c
			}
			p.SNI = sni.NewTable(entries)
		}
		k.t.cfg.Ports = append(k.t.cfg.Ports, p)
	}
	add(k.s.ExternalHTTPPort, config.HTTP, KnativeExternalKey, k.externalPlain.hosts, nil)
	add(k.s.ExternalHTTPSPort, config.HTTPS, KnativeExternalKey, k.external.hosts, k.external.certs)
	add(k.s.LocalHTTPPort, config.HTTP, KnativeLocalKey, k.local.hosts, nil)
	if len(k.local.certs) > 0 {
		add(k.s.LocalHTTPSPort, config.HTTPS, KnativeLocalKey, k.local.hosts, k.local.certs)
	}
	return problems
}

// IngressClassOrDefault is the class of the KIngresses Portico serves.
func (s *KnativeSettings) IngressClassOrDefault() string { return s.class() }

// CertificateClassOrDefault is the class of the Certificates Portico
// issues.
func (s *KnativeSettings) CertificateClassOrDefault() string { return s.certificateClass() }
