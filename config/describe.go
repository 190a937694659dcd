package config

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	yaml "go.yaml.in/yaml/v3"

	"portico.dev/portico/sni"
)

// Probes are names a Description looks the configuration up with: the
// data plane keeps lookup tables, not lists of what they were built from,
// so what a port, listener or route table serves is shown by asking it.
type Probes struct {
	// RouteHostnames are the hostnames of every HTTPRoute and GRPCRoute.
	RouteHostnames []string
	// TLSHostnames are the hostnames of every TLSRoute.
	TLSHostnames []string
}

// Describe renders cfg as a document a person reads: its ports sorted by
// address and number (the data plane sorts them itself), each with its
// lookups (Host header and SNI server name to listener) and its listeners
// in the Config's order with the certificates of their SNI entry, their
// client certificate check and their route table; then the endpoints, and
// the backend TLS settings rules refer to by ID. Route tables are listed
// per hostname pattern as Table.Tries gives them: the matches in the order
// the data plane tries them, each naming its rule ("namespace/route
// #index"), and the patterns tried after them ("then"). Rules, backends,
// filters and matches are rendered from their exported fields; a field at
// its zero value is left out, but for weights. Lookups are made for probe
// names derived from the listener hostnames: an exact name itself,
// "golden-probe.example.com" for "*.example.com", and "unknown.invalid",
// which only a listener without hostname serves; the SNI lookup "" is a
// ClientHello without SNI.
func Describe(cfg *Config, p Probes) Description {
	d := &describer{backendTLS: map[string]*yaml.Node{}, routeHostnames: p.RouteHostnames}
	for _, h := range p.TLSHostnames {
		d.tlsHostnames = append(d.tlsHostnames, probeName(h))
	}
	return d.dataPlane(cfg)
}

// Dump is Describe as YAML.
func Dump(cfg *Config, p Probes) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(Describe(cfg, p)); err != nil {
		return nil, fmt.Errorf("describe configuration %d: %w", cfg.Generation, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("describe configuration %d: %w", cfg.Generation, err)
	}
	return b.Bytes(), nil
}

// Description is what Describe renders.
type Description struct {
	Ports []portDescription `yaml:"ports,omitempty"`
	// Endpoints are by "namespace/service:port".
	Endpoints map[string][]string `yaml:"endpoints,omitempty"`
	// BackendTLS are the settings routes and mirrors refer to, by ID.
	BackendTLS           map[string]*yaml.Node `yaml:"backendTLS,omitempty"`
	BackendTLSIDs        []string              `yaml:"backendTLSIDs,omitempty"`
	BackendClientCertIDs []string              `yaml:"backendClientCertIDs,omitempty"`
	// HealthChecks are "backend: check ID" for each backend an active
	// health check probes.
	HealthChecks []string `yaml:"healthChecks,omitempty"`
}

type portDescription struct {
	Port     string `yaml:"port"` // "address:number", ":number" for Portico's own address
	Protocol string `yaml:"protocol"`
	// Lookups are by probe name: the listener a Host header and an SNI
	// server name select ("none" when nothing matches).
	Lookups   map[string]lookupDescription `yaml:"lookups"`
	Listeners []listenerDescription        `yaml:"listeners"`
	// Streams: a TLS listener is on the port (unknown names are refused
	// by closing the connection).
	Streams bool `yaml:"streams,omitempty"`
	// ProxyProtocol is the port's PROXY protocol, when it reads one.
	ProxyProtocol *yaml.Node `yaml:"proxyProtocol,omitempty"`
	// Cleartext are the connection settings of a cleartext connection
	// before its first request names a listener.
	Cleartext *yaml.Node `yaml:"cleartext,omitempty"`
}

type lookupDescription struct {
	Host string `yaml:"host,omitempty"`
	SNI  string `yaml:"sni,omitempty"`
}

// MarshalYAML puts a lookup on one line.
func (l lookupDescription) MarshalYAML() (any, error) {
	type plain lookupDescription
	n := scalar(plain(l))
	n.Style = yaml.FlowStyle
	return n, nil
}

type listenerDescription struct {
	Key      string `yaml:"key"`
	Hostname string `yaml:"hostname,omitempty"`
	// Certificates and ClientAuthID are those of the SNI entry its
	// hostname selects, when that entry is this listener's.
	Certificates      []certDescription       `yaml:"certificates,omitempty"`
	SNIClientAuth     string                  `yaml:"sniClientAuth,omitempty"`
	ClientAuth        *clientAuthDescription  `yaml:"clientAuth,omitempty"`
	BackendClientCert *clientCertDescription  `yaml:"backendClientCert,omitempty"`
	Routes            []hostRoutesDescription `yaml:"routes,omitempty"`
	// Stream and Streams are a TLS listener's mode and the TLSRoute each
	// probe name picks: "namespace/name -> backend (weight N)[ invalid: why], ...".
	Stream  string            `yaml:"stream,omitempty"`
	Streams map[string]string `yaml:"streams,omitempty"`
	// TCP is a TCP listener's route, in the form of Streams' values.
	TCP string `yaml:"tcp,omitempty"`
	// UDP is a UDP listener's route, in the same form.
	UDP   string                `yaml:"udp,omitempty"`
	Rules map[string]*yaml.Node `yaml:"rules,omitempty"`
	// Client is what ClientTrafficPolicies set for the listener.
	Client *yaml.Node `yaml:"client,omitempty"`
	// Tracing is what an XTelemetryPolicy sets for the listener.
	Tracing *yaml.Node `yaml:"tracing,omitempty"`
	// RequestFilters are the listener's pre-routing checks, in order.
	RequestFilters *yaml.Node `yaml:"requestFilters,omitempty"`
}

type certDescription struct {
	Subject  string   `yaml:"subject"`
	DNSNames []string `yaml:"dnsNames,omitempty,flow"`
	Serial   string   `yaml:"serial"`
	Issuer   string   `yaml:"issuer"`
	NotAfter string   `yaml:"notAfter"`
}

type clientAuthDescription struct {
	ID       string   `yaml:"id"`
	Optional bool     `yaml:"optional,omitempty"`
	CAs      []string `yaml:"cas"`
}

type clientCertDescription struct {
	ID          string          `yaml:"id"`
	Certificate certDescription `yaml:"certificate"`
}

type hostRoutesDescription struct {
	Hostname string       `yaml:"hostname"` // "" for any
	Matches  []*yaml.Node `yaml:"matches"`
	Then     []string     `yaml:"then,omitempty"`
}

// describer renders the data plane config; it collects the backend TLS
// settings rules refer to by ID.
type describer struct {
	backendTLS     map[string]*yaml.Node
	routeHostnames []string // of every HTTPRoute of the snapshot
	tlsHostnames   []string // probes for every TLSRoute hostname
}

func (d *describer) dataPlane(cfg *Config) Description {
	out := Description{Endpoints: map[string][]string{}, BackendTLS: d.backendTLS}
	// The data plane sorts ports itself: their order here means nothing.
	ports := slices.Clone(cfg.Ports)
	slices.SortFunc(ports, func(a, b *Port) int {
		return cmp.Or(cmp.Compare(a.Address, b.Address), cmp.Compare(a.Number, b.Number))
	})
	for _, p := range ports {
		out.Ports = append(out.Ports, d.port(p))
	}
	for k, e := range cfg.Endpoints.All() {
		addrs := []string{}
		if e != nil {
			addrs = append(addrs, e.Addrs...)
		}
		out.Endpoints[k.String()] = addrs
	}
	out.BackendTLSIDs = slices.Sorted(maps.Keys(cfg.BackendTLSIDs))
	out.BackendClientCertIDs = slices.Sorted(maps.Keys(cfg.BackendClientCertIDs))
	for _, hc := range cfg.HealthChecks {
		out.HealthChecks = append(out.HealthChecks, hc.Backend.String()+": "+hc.Check.ID)
	}
	return out
}

// probeName turns a listener hostname into a name its pattern matches.
func probeName(h string) string {
	switch {
	case h == "":
		return "unknown.invalid"
	case strings.HasPrefix(h, "*."):
		return "golden-probe" + h[1:]
	}
	return h
}

func (d *describer) port(p *Port) portDescription {
	out := portDescription{
		Port:     p.Address + ":" + strconv.Itoa(int(p.Number)),
		Protocol: p.Protocol.String(),
		Lookups:  map[string]lookupDescription{},
	}
	if p.Address != "" && strings.Contains(p.Address, ":") {
		out.Port = "[" + p.Address + "]:" + strconv.Itoa(int(p.Number))
	}
	keyOf := func(l *Listener, ok bool) string {
		if !ok || l == nil {
			return "none"
		}
		return l.Key
	}
	probes := []string{"unknown.invalid"}
	for l := range p.All.Values() {
		probes = append(probes, probeName(l.Hostname))
	}
	for _, name := range probes {
		lk := lookupDescription{Host: keyOf(p.Listeners.Lookup(name))}
		if p.SNI != nil {
			lk.SNI = keyOf(sniListener(p.SNI.Lookup(name)))
		}
		out.Lookups[name] = lk
	}
	if p.SNI != nil {
		out.Lookups[""] = lookupDescription{SNI: keyOf(sniListener(p.SNI.Lookup("")))}
	}
	for l := range p.All.Values() {
		out.Listeners = append(out.Listeners, d.listener(p, l))
	}
	out.Streams = p.Streams
	if p.ProxyProtocol != nil {
		out.ProxyProtocol = d.value(reflect.ValueOf(p.ProxyProtocol))
	}
	if p.Cleartext != nil {
		out.Cleartext = d.value(reflect.ValueOf(p.Cleartext))
	}
	return out
}

func sniListener(e *sni.Entry) (*Listener, bool) {
	if e == nil {
		return nil, false
	}
	l, ok := e.Value.(*Listener)
	return l, ok
}

func (d *describer) listener(p *Port, l *Listener) listenerDescription {
	out := listenerDescription{Key: l.Key, Hostname: l.Hostname}
	if p.SNI != nil {
		if e := p.SNI.Lookup(probeName(l.Hostname)); e != nil && e.Value == l {
			for _, c := range e.Certificates {
				out.Certificates = append(out.Certificates, describeCertificate(c))
			}
			if e.ClientAuth != nil {
				out.SNIClientAuth = e.ClientAuth.ID
			}
		}
	}
	if a := l.ClientAuth; a != nil {
		out.ClientAuth = &clientAuthDescription{ID: a.ID, Optional: a.Optional, CAs: poolSubjects(a.CAs)}
	}
	if c := l.BackendClientCert; c != nil {
		out.BackendClientCert = &clientCertDescription{ID: c.ID, Certificate: describeCertificate(c.Cert)}
	}
	out.Routes, out.Rules = d.routes(l)
	out.Stream, out.Streams = d.streams(l)
	if l.Stream == StreamTCP {
		out.TCP = describeStreamRoute(l.TCP)
	}
	if l.Client != nil {
		out.Client = d.value(reflect.ValueOf(l.Client))
	}
	if l.Tracing != nil {
		// Export headers are credentials, often: their names only.
		tr := *l.Tracing
		tr.Headers = make([]TracingHeader, len(l.Tracing.Headers))
		for i, h := range l.Tracing.Headers {
			tr.Headers[i] = TracingHeader{Name: h.Name, Value: "(hidden)"}
		}
		out.Tracing = d.value(reflect.ValueOf(&tr))
	}
	if l.Stream == StreamUDP {
		out.UDP = describeStreamRoute(l.UDP)
	}
	if len(l.RequestFilters) > 0 {
		out.RequestFilters = d.value(reflect.ValueOf(l.RequestFilters))
	}
	return out
}

// streams lists the TLSRoute a TLS listener picks for every TLSRoute
// hostname of the snapshot and an unknown name.
func (d *describer) streams(l *Listener) (string, map[string]string) {
	mode := map[StreamMode]string{StreamPassthrough: "passthrough", StreamTerminate: "terminate", StreamTCP: "tcp", StreamUDP: "udp"}[l.Stream]
	if l.Streams == nil {
		return mode, nil
	}
	out := map[string]string{}
	for _, name := range append([]string{"unknown.invalid"}, d.tlsHostnames...) {
		out[name] = describeStreamRoute(l.Streams.Lookup(name))
	}
	return mode, out
}

// describeStreamRoute is "namespace/name -> backend (weight N)[ tls ID][
// proxy-protocol vN (policy)][ invalid: why], ...", or "none".
func describeStreamRoute(r *StreamRoute) string {
	if r == nil {
		return "none"
	}
	var bs []string
	for _, b := range r.Backends {
		s := fmt.Sprintf("%s (weight %d)", b.Key.String(), b.Weight)
		if b.TLS != nil {
			s += " tls " + b.TLS.ID
		}
		if pp := b.ProxyProtocol; pp != nil {
			s += fmt.Sprintf(" proxy-protocol v%d (%s)", pp.Version, pp.Policy)
		}
		if b.Invalid != "" {
			s += " invalid: " + b.Invalid
		}
		bs = append(bs, s)
	}
	return r.Name + " -> " + strings.Join(bs, ", ")
}

func describeCertificate(c *tls.Certificate) certDescription {
	leaf := c.Leaf
	if leaf == nil && len(c.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	if leaf == nil {
		return certDescription{Subject: "unparsable"}
	}
	return certDescription{
		Subject:  leaf.Subject.String(),
		DNSNames: leaf.DNSNames,
		Serial:   leaf.SerialNumber.String(),
		Issuer:   leaf.Issuer.String(),
		NotAfter: leaf.NotAfter.UTC().Format(time.RFC3339),
	}
}

// poolSubjects lists the subjects of a pool's certificates, sorted.
func poolSubjects(pool *x509.CertPool) []string {
	if pool == nil {
		return nil
	}
	var out []string
	for _, raw := range pool.Subjects() { // deprecated for system pools only; these come from ConfigMaps
		var seq pkix.RDNSequence
		if _, err := asn1.Unmarshal(raw, &seq); err != nil {
			out = append(out, "unparsable subject")
			continue
		}
		var name pkix.Name
		name.FillFromRDNSequence(&seq)
		out = append(out, name.String())
	}
	slices.Sort(out)
	return out
}

// routes lists a listener's route table per hostname pattern, probing it
// with every hostname the table can hold, and its rules by ID.
func (d *describer) routes(l *Listener) ([]hostRoutesDescription, map[string]*yaml.Node) {
	if l.Routes == nil {
		return nil, nil
	}
	rules := map[string]*yaml.Node{}
	ruleIDs := map[*Rule]string{}
	ruleID := func(r *Rule) string {
		if id, ok := ruleIDs[r]; ok {
			return id
		}
		id := r.RouteName + " #" + strconv.Itoa(r.Index)
		// A rule compiled twice for one listener shows as two rules.
		for n := 2; rules[id] != nil; n++ {
			id = r.RouteName + " #" + strconv.Itoa(r.Index) + " (copy " + strconv.Itoa(n) + ")"
		}
		ruleIDs[r] = id
		rules[id] = d.value(reflect.ValueOf(*r))
		return id
	}
	type level = []RuleMatch
	own := map[string]level{}
	chains := map[string][]level{}
	for _, probe := range d.tableProbes(l) {
		pattern, levels, ok := l.Routes.Tries(probe)
		if !ok {
			continue
		}
		own[pattern] = levels[0]
		chains[pattern] = levels[1:]
	}
	var out []hostRoutesDescription
	for _, pattern := range slices.Sorted(maps.Keys(own)) {
		hr := hostRoutesDescription{Hostname: pattern}
		for _, rm := range own[pattern] {
			m := d.value(reflect.ValueOf(*rm.Match))
			if m == nil {
				m = &yaml.Node{Kind: yaml.MappingNode}
			}
			m.Style = yaml.FlowStyle
			m.Content = append([]*yaml.Node{scalar("rule"), scalar(ruleID(rm.Rule))}, m.Content...)
			hr.Matches = append(hr.Matches, m)
		}
		// The lists only say which matches a level holds; its pattern is
		// the most specific unused pattern covering this one whose own
		// matches they are.
		var covering []string
		for p := range own {
			if p != pattern && covers(p, pattern) {
				covering = append(covering, p)
			}
		}
		slices.SortFunc(covering, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), cmp.Compare(a, b)) })
		used := map[string]bool{}
		for _, lv := range chains[pattern] {
			name := "unknown pattern"
			for _, p := range covering {
				if !used[p] && slices.Equal(own[p], lv) {
					name, used[p] = p, true
					break
				}
			}
			hr.Then = append(hr.Then, name)
		}
		out = append(out, hr)
	}
	return out, rules
}

// covers reports whether listener-style pattern p covers pattern q:
// "" covers everything, "*.example.com" every name and wildcard below
// example.com.
func covers(p, q string) bool {
	return p == "" || strings.HasPrefix(p, "*.") && len(q) > len(p)-1 && strings.HasSuffix(q, p[1:])
}

// tableProbes are names that select every hostname pattern a listener's
// table can have, which are intersections of the listener's hostname and
// route hostnames: the probe of each of those, and a name only a
// catch-all serves.
func (d *describer) tableProbes(l *Listener) []string {
	probes := []string{probeName(l.Hostname), probeName("")}
	for _, h := range d.routeHostnames {
		probes = append(probes, probeName(h))
	}
	return probes
}

// value renders the exported fields of a routing value, leaving out those
// at their zero value but for alwaysShown.
func (d *describer) value(v reflect.Value) *yaml.Node {
	switch x := v.Interface().(type) {
	case BackendKey:
		return scalar(x.String())
	case *BackendTLS:
		if x == nil {
			return nil
		}
		if _, ok := d.backendTLS[x.ID]; !ok {
			d.backendTLS[x.ID] = d.value(reflect.ValueOf(*x))
		}
		return scalar(x.ID)
	case *regexp.Regexp:
		if x == nil {
			return nil
		}
		return scalar(x.String())
	case *x509.CertPool:
		if x == nil {
			return nil
		}
		return d.value(reflect.ValueOf(poolSubjects(x)))
	case time.Duration:
		if x == 0 {
			return nil
		}
		return scalar(x.String())
	case NamespacedName:
		return scalar(x.String())
	case []byte:
		if len(x) == 0 {
			return nil
		}
		return scalar(fmt.Sprintf("%q", x))
	case netip.Prefix:
		return scalar(x.String())
	case *sni.Settings:
		if x == nil {
			return nil
		}
		// By name, as a policy says them.
		type settings struct {
			MinVersion, MaxVersion   string
			CipherSuites, NextProtos []string
			SessionTicketsDisabled   bool
		}
		out := settings{NextProtos: x.NextProtos, SessionTicketsDisabled: x.SessionTicketsDisabled}
		if x.MinVersion != 0 {
			out.MinVersion = tls.VersionName(x.MinVersion)
		}
		if x.MaxVersion != 0 {
			out.MaxVersion = tls.VersionName(x.MaxVersion)
		}
		for _, s := range x.CipherSuites {
			out.CipherSuites = append(out.CipherSuites, tls.CipherSuiteName(s))
		}
		return d.value(reflect.ValueOf(out))
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return d.value(v.Elem())
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		typ := v.Type()
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() || shownElsewhere(typ.Name()+"."+f.Name) {
				continue
			}
			c := d.value(v.Field(i))
			if c == nil && alwaysShown(typ.Name()+"."+f.Name) {
				c = scalar(v.Field(i).Interface())
			}
			if c != nil {
				n.Content = append(n.Content, scalar(lowerCamel(f.Name)), c)
			}
		}
		if len(n.Content) == 0 {
			return nil
		}
		return n
	case reflect.Slice, reflect.Array:
		if v.Len() == 0 {
			return nil
		}
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			c := d.value(v.Index(i))
			if c == nil {
				c = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
				if v.Index(i).Kind() == reflect.String {
					c = scalar("")
				}
			}
			n.Content = append(n.Content, c)
		}
		return n
	case reflect.Map:
		if v.Len() == 0 {
			return nil
		}
		n := &yaml.Node{Kind: yaml.MappingNode}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		for _, k := range keys {
			if c := d.value(v.MapIndex(k)); c != nil {
				n.Content = append(n.Content, scalar(fmt.Sprint(k)), c)
			}
		}
		return n
	}
	if v.IsZero() {
		return nil
	}
	return scalar(v.Interface())
}

// alwaysShown tells the fields whose zero value matters to a
// reader: a backend of weight 0 gets no request, a circuit breaker
// with no pending request lets none wait.
func alwaysShown(field string) bool {
	switch field {
	case "Backend.Weight", "Rule.TotalWeight", "CircuitBreaker.MaxPendingRequests", "CircuitBreaker.MaxParallelRetries":
		return true
	}
	return false
}

// shownElsewhere tells the fields the dump shows elsewhere: a rule's
// route and index make its ID; a claim's path is its name, parsed.
func shownElsewhere(field string) bool {
	switch field {
	case "Rule.Route", "Rule.RouteName", "Rule.Index", "RequiredClaim.Path", "ClaimHeader.Path":
		return true
	}
	return false
}

func scalar(v any) *yaml.Node {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		panic(err)
	}
	return &n
}

// lowerCamel turns a Go field name into a YAML key: "TotalWeight" ->
// "totalWeight", "ID" -> "id", "SANHostnames" -> "sanHostnames",
// "SANURIs" -> "sanuris".
func lowerCamel(s string) string {
	r := []rune(s)
	i := 0
	for i < len(r) && unicode.IsUpper(r[i]) {
		i++
	}
	switch {
	case i > 1 && string(r[i:]) == "s":
		i++ // a plural acronym: "IDs" -> "ids"
	case i > 1 && i < len(r):
		i-- // the last capital starts the next word
	}
	for j := range min(i, len(r)) {
		r[j] = unicode.ToLower(r[j])
	}
	return string(r)
}
