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
	"portico.dev/portico/internal/shared/pmap"
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
// classes. Like every Output, never changed once returned: a delta shares
// the results of the KIngresses it did not touch with the Output before.
type KnativeOutput struct {
	Ingresses    pmap.Map[types.NamespacedName, KIngressResult]
	Certificates map[types.NamespacedName]KCertificateResult
	// Changed names, after a translation that reused the one before it,
	// the KIngresses whose results may differ from that one's (deleted
	// ones included); nil after a full translation, when any may.
	Changed []types.NamespacedName
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

// knativeGateway is what one KIngress puts on one gateway: its hosts
// with their entries, and their certificates.
type knativeGateway struct {
	hosts []config.OrderedHost
	certs []*sni.Entry
}

// add appends entries to host's, or adds host: another rule of the same
// KIngress with the same host has its paths after those of the first.
// A KIngress has a few hosts: a scan costs less than a map.
func (g *knativeGateway) add(host string, entries []config.OrderedEntry) {
	for i := range g.hosts {
		if g.hosts[i].Hostname == host {
			g.hosts[i].Entries = append(g.hosts[i].Entries, entries...)
			return
		}
	}
	g.hosts = append(g.hosts, config.OrderedHost{Hostname: host, Entries: slices.Clip(entries)})
}

func (g *knativeGateway) addCert(host string, cert *tls.Certificate) {
	for _, e := range g.certs {
		if e.Hostname == host {
			return
		}
	}
	g.certs = append(g.certs, &sni.Entry{Hostname: host, Certificates: []*tls.Certificate{cert}})
}

// hostnames are g's hosts and the hosts of its certificates.
func (g *knativeGateway) hostnames() (hosts, certs []string) {
	for _, h := range g.hosts {
		hosts = append(hosts, h.Hostname)
	}
	for _, e := range g.certs {
		certs = append(certs, e.Hostname)
	}
	return hosts, certs
}

// kCompiled is what one KIngress of Portico's class comes to: its result,
// the (gateway, host) pairs it claims and, when it is served, what it puts
// on each gateway. Never changed once a translation returned it: a delta
// (knativedelta.go) compiles a changed KIngress anew.
type kCompiled struct {
	key  types.NamespacedName
	ing  *knative.Ingress
	spec knative.IngressSpec // defaulted
	// keys are the pairs it claims, each once, in the order claim looks at
	// them; keyHosts the hosts as the rules write them, for the
	// conflict's message.
	keys     []gatewayHost
	keyHosts []string
	// secrets and services are the objects its TLS entries and splits
	// name.
	secrets, services []types.NamespacedName
	result            KIngressResult
	// external (HTTPS), externalPlain (HTTP) and local (HTTP and HTTPS)
	// are what it puts on the gateways when it is served.
	external, externalPlain, local knativeGateway
}

func (c *kCompiled) served() bool { return c.result.Conflict == "" }

// knativeTranslation is the state of the knative step.
type knativeTranslation struct {
	t       *translation
	s       *KnativeSettings
	prev    map[*knative.Ingress]string
	prevKn  *knativeState
	hashes  map[*knative.Ingress]string
	service func(types.NamespacedName) *corev1.Service
	matches config.PrefixMatcher
}

// knative serves the KIngresses of Portico's class: oldest first, each
// claims its hosts (a host claimed already is a DomainConflict), its paths
// become ordered routes on the gateways of their visibility, and the
// gateways become four ports of the Config.
func (t *translation) knative(mem Memory) {
	s := t.settings.Knative
	if s == nil {
		return
	}
	services := make(map[types.NamespacedName]*corev1.Service, len(t.res.Services))
	for _, svc := range t.res.Services {
		services[nn(svc.Namespace, svc.Name)] = svc
	}
	k := &knativeTranslation{t: t, s: s, prev: mem.kingressHashes, prevKn: mem.kn, hashes: map[*knative.Ingress]string{},
		service: func(key types.NamespacedName) *corev1.Service { return services[key] }}
	n := len(t.res.KIngresses)
	results := make(map[types.NamespacedName]KIngressResult, n)
	compiled := make(map[types.NamespacedName]*kCompiled, n)
	// Serving writes one external and three cluster-local hosts per
	// KIngress: sizing the map for that saves growing it.
	owners := make(map[gatewayHost]*kCompiled, 5*n)
	var plain, external, local []config.OrderedHost
	var externalCerts, localCerts []*sni.Entry
	for _, ing := range snapshot.SortedByAge(ours(t.res.KIngresses, s.class())) {
		c := k.compile(ing)
		if conflict := claim(owners, c); conflict != "" {
			c.result.Conflict = conflict
		} else {
			k.serve(c)
			plain, external, local = append(plain, c.externalPlain.hosts...), append(external, c.external.hosts...), append(local, c.local.hosts...)
			externalCerts, localCerts = append(externalCerts, c.external.certs...), append(localCerts, c.local.certs...)
		}
		compiled[c.key] = c
		results[c.key] = c.result
	}
	ports := knativePorts{plain: config.NewOrderedTable(plain), external: config.NewOrderedTable(external), local: config.NewOrderedTable(local),
		externalSNIListener: sniListenerFor(KnativeExternalKey, s.ExternalHTTPSPort), localSNIListener: sniListenerFor(KnativeLocalKey, s.LocalHTTPSPort),
		at: [4]int{-1, -1, -1, -1}}
	ports.externalSNI, ports.localSNI = sniTable(ports.externalSNIListener, externalCerts), sniTable(ports.localSNIListener, localCerts)
	problems := k.ports(&ports, len(localCerts) > 0)
	if len(problems) > 0 {
		for key, r := range results {
			r.Problems = append(slices.Clone(r.Problems), problems...)
			results[key] = r
		}
	}
	t.kingresses, t.kingressHashes = pmap.Of(results), k.hashes
	t.knativeCompiled, t.knativeOwners, t.knativePorts, t.knativeLocalCerts = compiled, owners, &ports, len(localCerts)
	t.knativeProblems = len(problems) > 0
}

// ours returns the KIngresses of class.
func ours(all []*knative.Ingress, class string) []*knative.Ingress {
	var out []*knative.Ingress
	for _, ing := range all {
		if isOurs(ing, class) {
			out = append(out, ing)
		}
	}
	return out
}

func isOurs(ing *knative.Ingress, class string) bool {
	return ing != nil && ing.Annotations[knative.IngressClassAnnotation] == class
}

// hash returns the probe hash of ing, computed again only for a new object.
func (k *knativeTranslation) hash(ing *knative.Ingress) string {
	h, ok := k.prev[ing]
	if !ok && k.prevKn != nil {
		if c, found := k.prevKn.compiled.Get(nn(ing.Namespace, ing.Name)); found && c.ing == ing {
			h, ok = c.result.Hash, true
		}
	}
	if !ok {
		// Encoding these plain types cannot fail.
		h, _ = knative.Hash(ing)
	}
	if k.hashes != nil {
		k.hashes[ing] = h
	}
	return h
}

// compile is what ing claims and names, and its result before claims.
func (k *knativeTranslation) compile(ing *knative.Ingress) *kCompiled {
	c := &kCompiled{key: nn(ing.Namespace, ing.Name), ing: ing, spec: knative.Defaulted(&ing.Spec),
		result: KIngressResult{Generation: ing.Generation, Hash: k.hash(ing)}}
	for _, rule := range c.spec.Rules {
		for _, gw := range [...]string{"external", "local"} {
			if !onGateway(rule.Visibility, gw) {
				continue
			}
			for _, h := range rule.Hosts {
				key := gatewayHost{gw, knativeHost(h)}
				if !slices.Contains(c.keys, key) {
					c.keys, c.keyHosts = append(c.keys, key), append(c.keyHosts, h)
				}
			}
		}
		if rule.HTTP == nil {
			continue
		}
		for _, p := range rule.HTTP.Paths {
			for _, split := range p.Splits {
				svc := nn(cmp.Or(split.ServiceNamespace, ing.Namespace), split.ServiceName)
				if !slices.Contains(c.services, svc) {
					c.services = append(c.services, svc)
				}
			}
		}
	}
	for _, e := range c.spec.TLS {
		s := nn(cmp.Or(e.SecretNamespace, ing.Namespace), e.SecretName)
		if !slices.Contains(c.secrets, s) {
			c.secrets = append(c.secrets, s)
		}
	}
	return c
}

// knativeHost is a host as the gateways' tables hold it: lowercase,
// without a trailing dot.
func knativeHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

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

// claim gives c every (gateway, host) of its rules unless one is owned
// already; it returns why not, and then claims nothing.
func claim(owners map[gatewayHost]*kCompiled, c *kCompiled) string {
	for i, key := range c.keys {
		if o := owners[key]; o != nil && o != c {
			return conflictMessage(c.keyHosts[i], o.ing)
		}
	}
	for _, key := range c.keys {
		owners[key] = c
	}
	return ""
}

func conflictMessage(host string, owner *knative.Ingress) string {
	return fmt.Sprintf("host %s is already served for KIngress %s/%s", host, owner.Namespace, owner.Name)
}

// serve compiles the routes and certificates c puts on the gateways, and
// the hosts to probe on each and what does not resolve into its result.
func (k *knativeTranslation) serve(c *kCompiled) {
	ing, spec, hash := c.ing, &c.spec, c.result.Hash
	certs, problems := k.certificates(ing, spec)
	probe := k.probeEntry(ing, hash)
	var external, local []string
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
			host := knativeHost(h)
			c.local.add(host, entries)
			if rule.Visibility == knative.VisibilityClusterLocal {
				local = append(local, h)
				if cert := certs[h]; cert != nil {
					c.local.addCert(host, cert)
				}
				continue
			}
			external = append(external, h)
			cert := certs[h]
			if cert != nil {
				c.external.addCert(host, cert)
			}
			if cert != nil && spec.HTTPOption == knative.HTTPOptionRedirected {
				c.externalPlain.add(host, redirect)
			} else {
				c.externalPlain.add(host, entries)
			}
			c.external.add(host, entries)
		}
	}
	slices.Sort(external)
	slices.Sort(local)
	slices.Sort(problems)
	c.result.External, c.result.Local, c.result.Problems = slices.Compact(external), slices.Compact(local), slices.Compact(problems)
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
	svc := k.service(key)
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

// knativePorts are the gateways' tables and where their ports are in the
// Config. The two HTTP ports and the two HTTPS ports share tables: plain
// for the external HTTP port (Redirected hosts answer 301), external for
// the external HTTPS one, local for both cluster-local ports.
type knativePorts struct {
	plain, external, local *config.Table
	externalSNI, localSNI  *sni.Table
	// sniListener is the listener the SNI entries of each HTTPS gateway
	// name: one with the key of the port's listener and nothing else, so
	// that an entry outlives the listeners a change replaces (the data
	// plane compares listeners by key; certificates and client checks are
	// the same for every host of a gateway).
	externalSNIListener, localSNIListener *config.Listener
	// at is the index in Config.Ports of the external HTTP and HTTPS and
	// the cluster-local HTTP and HTTPS ports, -1 for one not served.
	at [4]int
}

// sniTable is the SNI table of a gateway's HTTPS port, its entries naming
// a listener of the port's key.
func sniTable(l *config.Listener, certs []*sni.Entry) *sni.Table {
	entries := make([]*sni.Entry, len(certs))
	for i, e := range certs {
		entries[i] = withSNIListener(e, l)
	}
	return sni.NewTable(entries)
}

func sniListenerFor(key string, number int32) *config.Listener {
	return &config.Listener{Key: key + "/" + strconv.Itoa(int(number))}
}

func withSNIListener(e *sni.Entry, l *config.Listener) *sni.Entry {
	return &sni.Entry{Hostname: e.Hostname, Certificates: e.Certificates, Value: l, ClientAuth: e.ClientAuth}
}

// ports adds the gateways' ports to the Config; a port a Gateway already
// uses is left out and reported. The cluster-local HTTPS port is served
// when a cluster-local host has a certificate.
func (k *knativeTranslation) ports(p *knativePorts, localTLS bool) []string {
	var problems []string
	taken := map[int32]bool{}
	for _, port := range k.t.cfg.Ports {
		taken[port.Number] = true
	}
	add := func(at int, number int32, proto config.Protocol, key string, table *config.Table, st *sni.Table) {
		if number == 0 {
			return
		}
		if taken[number] {
			problems = append(problems, fmt.Sprintf("port %d of the %s gateway is used by a Gateway", number, key))
			return
		}
		taken[number] = true
		p.at[at] = len(k.t.cfg.Ports)
		k.t.cfg.Ports = append(k.t.cfg.Ports, knativePort(number, proto, key, table, st))
	}
	add(0, k.s.ExternalHTTPPort, config.HTTP, KnativeExternalKey, p.plain, nil)
	add(1, k.s.ExternalHTTPSPort, config.HTTPS, KnativeExternalKey, p.external, p.externalSNI)
	add(2, k.s.LocalHTTPPort, config.HTTP, KnativeLocalKey, p.local, nil)
	if localTLS {
		add(3, k.s.LocalHTTPSPort, config.HTTPS, KnativeLocalKey, p.local, p.localSNI)
	}
	return problems
}

// knativePort is one gateway port: one listener of every host.
func knativePort(number int32, proto config.Protocol, key string, table *config.Table, st *sni.Table) *config.Port {
	l := &config.Listener{Key: key + "/" + strconv.Itoa(int(number)), Routes: table}
	p := &config.Port{Number: number, Protocol: proto, All: chunked.Of([]*config.Listener{l}),
		Listeners: hostname.NewTable([]string{""}, []*config.Listener{l})}
	if proto == config.HTTPS {
		p.SNI = st
	}
	return p
}

// IngressClassOrDefault is the class of the KIngresses Portico serves.
func (s *KnativeSettings) IngressClassOrDefault() string { return s.class() }

// CertificateClassOrDefault is the class of the Certificates Portico
// issues.
func (s *KnativeSettings) CertificateClassOrDefault() string { return s.certificateClass() }
