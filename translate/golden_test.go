package translate

// Golden tests of translate: testdata/golden/<case>.in.yaml goes through
// translate and the result must equal testdata/golden/<case>.out.yaml byte
// for byte. A behaviour change shows as a diff of a golden file; run
//
//	go test ./translate/ -run TestGolden -update
//
// to rewrite the .out.yaml files, and read every changed line.
//
// Input: a multi-document YAML stream of the objects standalone mode reads,
// loaded by the file source exactly as standalone mode loads a file: strict
// decoding (an unknown field fails the case), namespace "default" when
// none is given, creation times in document order (an explicit
// metadata.creationTimestamp wins), generation 1, Namespaces created for
// every namespace used, Secret stringData folded into data.
//
// The first document may instead hold the translate Settings, also
// decoded strictly; it is not an object and the file source never sees it:
//
//	kind: GoldenOptions
//	controllerName: example.com/other  # default: DefaultControllerName
//	addressPool: [192.0.2.1, 192.0.2.2] # Settings.AddressPool
//	shared:                             # Settings.Shared; absent: nil
//	  addresses: [{type: IPAddress, value: 192.0.2.10}]
//	  service: portico-system/portico   # "namespace/name"
//	acmeErrors: {app.example.com: connection refused} # Resources.ACMEErrors
//
// Output: one YAML document of every status translate computes, each
// condition on one line without its time ("Type=Status Reason (generation
// N): message"), the ACME certificates it wants, and the data plane
// Config: its ports sorted by address and number (the data plane sorts
// them itself), each with its lookups (Host header and SNI server name to
// listener) and its listeners in the Config's order with the certificates
// of their SNI entry, their client certificate check and their route
// table; then the endpoints, and the backend TLS settings rules refer to
// by ID. Route tables are listed per hostname pattern as
// routing.Table.Tries gives them: the matches in the order the data plane
// tries them (Exact matches, of which one path at most applies, by path),
// each naming its rule ("namespace/route #index"), and the patterns tried
// after them ("then"). Rules, backends, filters and matches are dumped
// from their exported fields; a field at its zero value is left out, but
// for weights. Lookups are made for probe names derived from the listener
// hostnames: an exact name itself, "golden-probe.example.com" for
// "*.example.com", and "unknown.invalid", which only a listener without
// hostname serves; the SNI lookup "" is a ClientHello without SNI.
//
// translateGolden is the only function that calls translate.

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"go.uber.org/zap"
	yaml "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"portico.dev/portico/config"
	"portico.dev/portico/filesource"
	"portico.dev/portico/resources"
	"portico.dev/portico/sni"
)

// goldenDir holds the cases. The -update flag (update) is declared with
// the older golden test in translate_test.go. Besides it, this file uses
// only the exported API of the package: translateGolden (Translate),
// loadGolden (filesource) and dumpGolden (Output).
const goldenDir = "testdata/golden"

// goldenOptions is the optional first document of a case.
type goldenOptions struct {
	Kind           string            `json:"kind"`
	ControllerName string            `json:"controllerName,omitempty"`
	AddressPool    []string          `json:"addressPool,omitempty"`
	Shared         *goldenShared     `json:"shared,omitempty"`
	ACMEErrors     map[string]string `json:"acmeErrors,omitempty"`
	// Gateway ("namespace/name") translates for that Gateway's own data
	// plane (Settings.Gateway).
	Gateway string `json:"gateway,omitempty"`
}

type goldenShared struct {
	Addresses []gwv1.GatewayStatusAddress `json:"addresses,omitempty"`
	Service   string                      `json:"service,omitempty"`
}

const goldenOptionsKind = "GoldenOptions"

// translateGolden is the only code here that calls translate: it
// translates each snapshot in turn, each with the Memory of the one
// before, from an empty Memory, and returns the last result.
func translateGolden(opts goldenOptions, snapshots ...*resources.Resources) Output {
	s := Settings{ControllerName: gwv1.GatewayController(opts.ControllerName), AddressPool: opts.AddressPool}
	if ns, name, ok := strings.Cut(opts.Gateway, "/"); ok {
		s.Gateway = &types.NamespacedName{Namespace: ns, Name: name}
	}
	if sh := opts.Shared; sh != nil {
		s.Shared = &SharedAddresses{Addresses: sh.Addresses}
		if ns, name, ok := strings.Cut(sh.Service, "/"); ok {
			s.Shared.Service = types.NamespacedName{Namespace: ns, Name: name}
		}
	}
	var out Output
	var mem Memory
	for _, res := range snapshots {
		out, mem = Translate(s, res, mem)
	}
	return out
}

// loadGolden reads a case: its options and its objects.
func loadGolden(t *testing.T, path string) (goldenOptions, *resources.Resources) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opts, objects, err := splitOptions(raw)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// The file source reads files: the objects go to a copy of the case.
	tmp := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(tmp, objects, 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := filesource.New(tmp, zap.NewNop()).Snapshot()
	if err != nil {
		msg := strings.ReplaceAll(err.Error(), tmp, path)
		if opts.Kind != "" {
			msg += " (documents are counted without the " + goldenOptionsKind + " one)"
		}
		t.Fatal(msg)
	}
	res.ACMEErrors = opts.ACMEErrors
	return opts, res
}

// splitOptions decodes the options document, if the stream starts with
// one, and returns the stream with its lines commented out, so that line
// numbers in errors still point into the case.
func splitOptions(raw []byte) (goldenOptions, []byte, error) {
	var opts goldenOptions
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return opts, raw, nil
		}
		if err != nil {
			return opts, nil, err
		}
		if goldenBlank(doc) {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := sigsyaml.Unmarshal(doc, &head); err != nil || head.Kind != goldenOptionsKind {
			return opts, raw, nil // not options; the file source reports bad YAML
		}
		if err := sigsyaml.UnmarshalStrict(doc, &opts); err != nil {
			return opts, nil, fmt.Errorf("%s: %w", goldenOptionsKind, err)
		}
		i := bytes.Index(raw, doc)
		if i < 0 {
			return opts, nil, errors.New("options document not found in the stream")
		}
		var out bytes.Buffer
		out.Write(raw[:i])
		for line := range bytes.Lines(doc) {
			out.WriteString("# ")
			out.Write(line)
		}
		out.Write(raw[i+len(doc):])
		return opts, out.Bytes(), nil
	}
}

// goldenBlank reports whether a YAML document holds nothing but comments
// and blank lines.
func goldenBlank(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			return false
		}
	}
	return true
}

// TestGolden runs every case of testdata/golden.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(goldenDir, "*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatalf("no cases in %s", goldenDir)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			opts, res := loadGolden(t, in)
			got := dumpGolden(t, res, translateGolden(opts, res))
			out := strings.TrimSuffix(in, ".in.yaml") + ".out.yaml"
			if *update {
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(out)
			if errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s is missing: run go test ./translate/ -run 'TestGolden/%s$' -update, then read it", out, name)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("translate output differs from %s (- golden file, + output; run with -update and review the diff):\n%s", out, goldenDiff(string(want), string(got)))
			}
		})
	}
}

// TestGoldenDeterministic translates every case again: with fresh
// translators, with every slice of the snapshot shuffled and every object
// and map copied (so map iteration and snapshot order differ), and twice
// with one translator (full translations, and the reuse when nothing
// changed). Every time the dump must be the same bytes.
func TestGoldenDeterministic(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join(goldenDir, "*.in.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.yaml")
		t.Run(name, func(t *testing.T) {
			opts, res := loadGolden(t, in)
			dump := func(snapshots ...*resources.Resources) []byte {
				return dumpGolden(t, res, translateGolden(opts, snapshots...))
			}
			want := dump(res)
			check := func(what string, got []byte) {
				t.Helper()
				if !bytes.Equal(got, want) {
					t.Errorf("%s: output differs (- first translation, + this one):\n%s", what, goldenDiff(string(want), string(got)))
				}
			}
			check("fresh translator", dump(res))
			for seed := range uint64(3) {
				shuffled := shuffledCopy(res, seed)
				check(fmt.Sprintf("shuffled snapshot (seed %d)", seed), dump(shuffled))
				check(fmt.Sprintf("after a translation of another order (seed %d)", seed), dump(res, shuffled))
			}
			check("same snapshot twice", dump(res, res))
		})
	}
}

// shuffledCopy deep-copies every object of res into shuffled slices.
func shuffledCopy(res *resources.Resources, seed uint64) *resources.Resources {
	rnd := rand.New(rand.NewPCG(seed, 0x901de7))
	out := &resources.Resources{
		GatewayClasses:     shuffle(rnd, res.GatewayClasses),
		Gateways:           shuffle(rnd, res.Gateways),
		ListenerSets:       shuffle(rnd, res.ListenerSets),
		HTTPRoutes:         shuffle(rnd, res.HTTPRoutes),
		GRPCRoutes:         shuffle(rnd, res.GRPCRoutes),
		TLSRoutes:          shuffle(rnd, res.TLSRoutes),
		ReferenceGrants:    shuffle(rnd, res.ReferenceGrants),
		BackendTLSPolicies: shuffle(rnd, res.BackendTLSPolicies),
		ConfigMaps:         shuffle(rnd, res.ConfigMaps),
		Namespaces:         shuffle(rnd, res.Namespaces),
		Secrets:            shuffle(rnd, res.Secrets),
		Services:           shuffle(rnd, res.Services),
		EndpointSlices:     shuffle(rnd, res.EndpointSlices),
		Parameters:         shuffle(rnd, res.Parameters),
		Deployments:        shuffle(rnd, res.Deployments),
	}
	if res.ACMEErrors != nil {
		out.ACMEErrors = maps.Clone(res.ACMEErrors)
	}
	return out
}

func shuffle[T interface{ DeepCopy() T }](rnd *rand.Rand, in []T) []T {
	out := make([]T, len(in))
	for i, o := range in {
		out[i] = o.DeepCopy()
	}
	rnd.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// The output document. Maps are keyed by "namespace/name" (YAML sorts
// their keys); lists keep the order translate gave them.
type goldenOut struct {
	GatewayClasses     map[string]goldenClass      `yaml:"gatewayClasses,omitempty"`
	Gateways           map[string]goldenGateway    `yaml:"gateways,omitempty"`
	ListenerSets       map[string]goldenLS         `yaml:"listenerSets,omitempty"`
	HTTPRoutes         map[string][]goldenParent   `yaml:"httpRoutes,omitempty"`
	GRPCRoutes         map[string][]goldenParent   `yaml:"grpcRoutes,omitempty"`
	TLSRoutes          map[string][]goldenParent   `yaml:"tlsRoutes,omitempty"`
	BackendTLSPolicies map[string][]goldenAncestor `yaml:"backendTLSPolicies,omitempty"`
	ACME               []string                    `yaml:"acme,omitempty"` // "hostname -> namespace/secret"
	// Provisioned: "namespace/name class accepted|not-accepted ports
	// parameters-as-JSON", one per Gateway with a data plane of its own.
	Provisioned []string        `yaml:"provisioned,omitempty"`
	DataPlane   goldenDataPlane `yaml:"dataPlane"`
}

// goldenCondition is a condition on one line, without its time:
// "Type=Status Reason (generation N): message".
type goldenCondition = string

type goldenClass struct {
	Conditions        []goldenCondition `yaml:"conditions"`
	SupportedFeatures []string          `yaml:"supportedFeatures,omitempty"`
}

type goldenGateway struct {
	Addresses            []string               `yaml:"addresses,omitempty"` // "type value"
	Conditions           []goldenCondition      `yaml:"conditions"`
	AttachedListenerSets *int32                 `yaml:"attachedListenerSets,omitempty"`
	Listeners            []goldenListenerStatus `yaml:"listeners,omitempty"`
}

type goldenLS struct {
	Conditions []goldenCondition      `yaml:"conditions"`
	Listeners  []goldenListenerStatus `yaml:"listeners,omitempty"`
}

type goldenListenerStatus struct {
	Name string `yaml:"name"`
	// SupportedKinds is absent when nil and [] when empty: the API
	// treats the two differently.
	SupportedKinds *goldenFlowList   `yaml:"supportedKinds,omitempty"`
	AttachedRoutes int32             `yaml:"attachedRoutes"`
	Conditions     []goldenCondition `yaml:"conditions"`
}

type goldenParent struct {
	ParentRef      string            `yaml:"parentRef"`
	ControllerName string            `yaml:"controllerName"`
	Conditions     []goldenCondition `yaml:"conditions"`
}

type goldenAncestor struct {
	AncestorRef    string            `yaml:"ancestorRef"`
	ControllerName string            `yaml:"controllerName"`
	Conditions     []goldenCondition `yaml:"conditions"`
}

type goldenDataPlane struct {
	Ports []goldenPortOut `yaml:"ports,omitempty"`
	// Endpoints are by "namespace/service:port".
	Endpoints map[string][]string `yaml:"endpoints,omitempty"`
	// BackendTLS are the settings routes and mirrors refer to, by ID.
	BackendTLS           map[string]*yaml.Node `yaml:"backendTLS,omitempty"`
	BackendTLSIDs        []string              `yaml:"backendTLSIDs,omitempty"`
	BackendClientCertIDs []string              `yaml:"backendClientCertIDs,omitempty"`
}

type goldenPortOut struct {
	Port     string `yaml:"port"` // "address:number", ":number" for Portico's own address
	Protocol string `yaml:"protocol"`
	// Lookups are by probe name: the listener a Host header and an SNI
	// server name select ("none" when nothing matches).
	Lookups   map[string]goldenLookup `yaml:"lookups"`
	Listeners []goldenListenerOut     `yaml:"listeners"`
	// Streams: a TLS listener is on the port (unknown names are refused
	// by closing the connection).
	Streams bool `yaml:"streams,omitempty"`
}

type goldenLookup struct {
	Host string `yaml:"host,omitempty"`
	SNI  string `yaml:"sni,omitempty"`
}

// MarshalYAML puts a lookup on one line.
func (l goldenLookup) MarshalYAML() (any, error) {
	type plain goldenLookup
	n := scalar(plain(l))
	n.Style = yaml.FlowStyle
	return n, nil
}

type goldenListenerOut struct {
	Key      string `yaml:"key"`
	Hostname string `yaml:"hostname,omitempty"`
	// Certificates and ClientAuthID are those of the SNI entry its
	// hostname selects, when that entry is this listener's.
	Certificates      []goldenCert       `yaml:"certificates,omitempty"`
	SNIClientAuth     string             `yaml:"sniClientAuth,omitempty"`
	ClientAuth        *goldenClientAuth  `yaml:"clientAuth,omitempty"`
	BackendClientCert *goldenClientCert  `yaml:"backendClientCert,omitempty"`
	Routes            []goldenHostRoutes `yaml:"routes,omitempty"`
	// Stream and Streams are a TLS listener's mode and the TLSRoute each
	// probe name picks: "namespace/name -> backend (weight N)[ invalid: why], ...".
	Stream  string                `yaml:"stream,omitempty"`
	Streams map[string]string     `yaml:"streams,omitempty"`
	Rules   map[string]*yaml.Node `yaml:"rules,omitempty"`
}

type goldenCert struct {
	Subject  string   `yaml:"subject"`
	DNSNames []string `yaml:"dnsNames,omitempty,flow"`
	Serial   string   `yaml:"serial"`
	Issuer   string   `yaml:"issuer"`
	NotAfter string   `yaml:"notAfter"`
}

type goldenClientAuth struct {
	ID       string   `yaml:"id"`
	Optional bool     `yaml:"optional,omitempty"`
	CAs      []string `yaml:"cas"`
}

type goldenClientCert struct {
	ID          string     `yaml:"id"`
	Certificate goldenCert `yaml:"certificate"`
}

type goldenHostRoutes struct {
	Hostname string       `yaml:"hostname"` // "" for any
	Matches  []*yaml.Node `yaml:"matches"`
	Then     []string     `yaml:"then,omitempty"`
}

// dumpGolden renders a translation of res as the golden document.
func dumpGolden(t *testing.T, res *resources.Resources, translated Output) []byte {
	t.Helper()
	cfg, st := translated.Config, translated.Statuses
	d := &goldenDumper{backendTLS: map[string]*yaml.Node{}}
	for _, r := range res.HTTPRoutes {
		for _, h := range r.Spec.Hostnames {
			d.routeHostnames = append(d.routeHostnames, string(h))
		}
	}
	for _, r := range res.GRPCRoutes {
		for _, h := range r.Spec.Hostnames {
			d.routeHostnames = append(d.routeHostnames, string(h))
		}
	}
	for _, r := range res.TLSRoutes {
		for _, h := range r.Spec.Hostnames {
			d.tlsHostnames = append(d.tlsHostnames, goldenProbe(string(h)))
		}
	}
	out := goldenOut{
		GatewayClasses:     map[string]goldenClass{},
		Gateways:           map[string]goldenGateway{},
		ListenerSets:       map[string]goldenLS{},
		HTTPRoutes:         map[string][]goldenParent{},
		GRPCRoutes:         map[string][]goldenParent{},
		TLSRoutes:          map[string][]goldenParent{},
		BackendTLSPolicies: map[string][]goldenAncestor{},
	}
	for name, s := range st.GatewayClasses {
		c := goldenClass{Conditions: goldenConditions(s.Conditions)}
		for _, f := range s.SupportedFeatures {
			c.SupportedFeatures = append(c.SupportedFeatures, string(f.Name))
		}
		out.GatewayClasses[name] = c
	}
	for key, s := range st.Gateways {
		g := goldenGateway{Conditions: goldenConditions(s.Conditions), AttachedListenerSets: s.AttachedListenerSets}
		for _, a := range s.Addresses {
			typ := "(no type)"
			if a.Type != nil {
				typ = string(*a.Type)
			}
			g.Addresses = append(g.Addresses, typ+" "+a.Value)
		}
		for _, l := range s.Listeners {
			g.Listeners = append(g.Listeners, goldenListenerStatus{Name: string(l.Name), SupportedKinds: goldenKinds(l.SupportedKinds),
				AttachedRoutes: l.AttachedRoutes, Conditions: goldenConditions(l.Conditions)})
		}
		out.Gateways[key.String()] = g
	}
	for key, s := range st.ListenerSets {
		ls := goldenLS{Conditions: goldenConditions(s.Conditions)}
		for _, l := range s.Listeners {
			ls.Listeners = append(ls.Listeners, goldenListenerStatus{Name: string(l.Name), SupportedKinds: goldenKinds(l.SupportedKinds),
				AttachedRoutes: l.AttachedRoutes, Conditions: goldenConditions(l.Conditions)})
		}
		out.ListenerSets[key.String()] = ls
	}
	for key, parents := range st.HTTPRoutes {
		for _, p := range parents {
			out.HTTPRoutes[key.String()] = append(out.HTTPRoutes[key.String()], goldenParent{ParentRef: goldenRef(p.ParentRef),
				ControllerName: string(p.ControllerName), Conditions: goldenConditions(p.Conditions)})
		}
	}
	for key, parents := range st.GRPCRoutes {
		for _, p := range parents {
			out.GRPCRoutes[key.String()] = append(out.GRPCRoutes[key.String()], goldenParent{ParentRef: goldenRef(p.ParentRef),
				ControllerName: string(p.ControllerName), Conditions: goldenConditions(p.Conditions)})
		}
	}
	for key, parents := range st.TLSRoutes {
		for _, p := range parents {
			out.TLSRoutes[key.String()] = append(out.TLSRoutes[key.String()], goldenParent{ParentRef: goldenRef(p.ParentRef),
				ControllerName: string(p.ControllerName), Conditions: goldenConditions(p.Conditions)})
		}
	}
	for key, ancestors := range st.BackendTLSPolicies {
		for _, a := range ancestors {
			out.BackendTLSPolicies[key.String()] = append(out.BackendTLSPolicies[key.String()], goldenAncestor{AncestorRef: goldenRef(a.AncestorRef),
				ControllerName: string(a.ControllerName), Conditions: goldenConditions(a.Conditions)})
		}
	}
	for _, c := range translated.ACME {
		out.ACME = append(out.ACME, c.Hostname+" -> "+c.Secret.String())
	}
	for _, dp := range translated.DataPlanes {
		params, err := json.Marshal(dp.Parameters)
		if err != nil {
			t.Fatal(err)
		}
		acc := "not-accepted"
		if dp.Accepted {
			acc = "accepted"
		}
		var ports []string
		for _, p := range dp.Ports {
			ports = append(ports, fmt.Sprintf("%d/%s", p.Port, p.Protocol))
		}
		out.Provisioned = append(out.Provisioned, fmt.Sprintf("%s/%s %s %s [%s] %s", dp.Gateway.Namespace, dp.Gateway.Name,
			dp.ClassName, acc, strings.Join(ports, " "), params))
	}
	out.DataPlane = d.dataPlane(cfg)

	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(out); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func goldenConditions(conds []metav1.Condition) []goldenCondition {
	out := make([]goldenCondition, len(conds))
	for i, c := range conds {
		out[i] = fmt.Sprintf("%s=%s %s (generation %d): %s", c.Type, c.Status, c.Reason, c.ObservedGeneration, c.Message)
	}
	return out
}

// goldenFlowList is a list on one line.
type goldenFlowList []string

func (l goldenFlowList) MarshalYAML() (any, error) {
	n := scalar([]string(l))
	n.Style = yaml.FlowStyle
	return n, nil
}

func goldenKinds(kinds []gwv1.RouteGroupKind) *goldenFlowList {
	if kinds == nil {
		return nil
	}
	out := make(goldenFlowList, len(kinds))
	for i, k := range kinds {
		out[i] = string(k.Kind)
		if k.Group != nil {
			out[i] = string(*k.Group) + "/" + out[i]
		}
	}
	return &out
}

// goldenRef writes the fields a reference sets, and only those.
func goldenRef(r gwv1.ParentReference) string {
	var parts []string
	add := func(name, value string) { parts = append(parts, name+"="+value) }
	if r.Group != nil {
		add("group", string(*r.Group))
	}
	if r.Kind != nil {
		add("kind", string(*r.Kind))
	}
	if r.Namespace != nil {
		add("namespace", string(*r.Namespace))
	}
	add("name", string(r.Name))
	if r.SectionName != nil {
		add("sectionName", string(*r.SectionName))
	}
	if r.Port != nil {
		add("port", strconv.Itoa(int(*r.Port)))
	}
	return strings.Join(parts, " ")
}

// goldenDumper renders the data plane config; it collects the backend TLS
// settings rules refer to by ID.
type goldenDumper struct {
	backendTLS     map[string]*yaml.Node
	routeHostnames []string // of every HTTPRoute of the snapshot
	tlsHostnames   []string // probes for every TLSRoute hostname
}

func (d *goldenDumper) dataPlane(cfg *config.Config) goldenDataPlane {
	out := goldenDataPlane{Endpoints: map[string][]string{}, BackendTLS: d.backendTLS}
	// The data plane sorts ports itself: their order here means nothing.
	ports := slices.Clone(cfg.Ports)
	slices.SortFunc(ports, func(a, b *config.Port) int {
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
		out.Endpoints[goldenBackendKey(k)] = addrs
	}
	out.BackendTLSIDs = slices.Sorted(maps.Keys(cfg.BackendTLSIDs))
	out.BackendClientCertIDs = slices.Sorted(maps.Keys(cfg.BackendClientCertIDs))
	return out
}

func goldenBackendKey(k config.BackendKey) string {
	return k.Service.String() + ":" + strconv.Itoa(int(k.Port))
}

// goldenProbe turns a listener hostname into a name its pattern matches.
func goldenProbe(h string) string {
	switch {
	case h == "":
		return "unknown.invalid"
	case strings.HasPrefix(h, "*."):
		return "golden-probe" + h[1:]
	}
	return h
}

func (d *goldenDumper) port(p *config.Port) goldenPortOut {
	out := goldenPortOut{
		Port:     p.Address + ":" + strconv.Itoa(int(p.Number)),
		Protocol: p.Protocol.String(),
		Lookups:  map[string]goldenLookup{},
	}
	if p.Address != "" && strings.Contains(p.Address, ":") {
		out.Port = "[" + p.Address + "]:" + strconv.Itoa(int(p.Number))
	}
	keyOf := func(l *config.Listener, ok bool) string {
		if !ok || l == nil {
			return "none"
		}
		return l.Key
	}
	probes := []string{"unknown.invalid"}
	for l := range p.All.Values() {
		probes = append(probes, goldenProbe(l.Hostname))
	}
	for _, name := range probes {
		lk := goldenLookup{Host: keyOf(p.Listeners.Lookup(name))}
		if p.SNI != nil {
			lk.SNI = keyOf(sniListener(p.SNI.Lookup(name)))
		}
		out.Lookups[name] = lk
	}
	if p.SNI != nil {
		out.Lookups[""] = goldenLookup{SNI: keyOf(sniListener(p.SNI.Lookup("")))}
	}
	for l := range p.All.Values() {
		out.Listeners = append(out.Listeners, d.listener(p, l))
	}
	out.Streams = p.Streams
	return out
}

func sniListener(e *sni.Entry) (*config.Listener, bool) {
	if e == nil {
		return nil, false
	}
	l, ok := e.Value.(*config.Listener)
	return l, ok
}

func (d *goldenDumper) listener(p *config.Port, l *config.Listener) goldenListenerOut {
	out := goldenListenerOut{Key: l.Key, Hostname: l.Hostname}
	if p.SNI != nil {
		if e := p.SNI.Lookup(goldenProbe(l.Hostname)); e != nil && e.Value == l {
			for _, c := range e.Certificates {
				out.Certificates = append(out.Certificates, goldenCertificate(c))
			}
			if e.ClientAuth != nil {
				out.SNIClientAuth = e.ClientAuth.ID
			}
		}
	}
	if a := l.ClientAuth; a != nil {
		out.ClientAuth = &goldenClientAuth{ID: a.ID, Optional: a.Optional, CAs: poolSubjects(a.CAs)}
	}
	if c := l.BackendClientCert; c != nil {
		out.BackendClientCert = &goldenClientCert{ID: c.ID, Certificate: goldenCertificate(c.Cert)}
	}
	out.Routes, out.Rules = d.routes(l)
	out.Stream, out.Streams = d.streams(l)
	return out
}

// streams lists the TLSRoute a TLS listener picks for every TLSRoute
// hostname of the snapshot and an unknown name.
func (d *goldenDumper) streams(l *config.Listener) (string, map[string]string) {
	mode := map[config.StreamMode]string{config.StreamPassthrough: "passthrough", config.StreamTerminate: "terminate"}[l.Stream]
	if l.Streams == nil {
		return mode, nil
	}
	out := map[string]string{}
	for _, name := range append([]string{"unknown.invalid"}, d.tlsHostnames...) {
		r := l.Streams.Lookup(name)
		if r == nil {
			out[name] = "none"
			continue
		}
		var bs []string
		for _, b := range r.Backends {
			s := fmt.Sprintf("%s (weight %d)", goldenBackendKey(b.Key), b.Weight)
			if b.TLS != nil {
				s += " tls " + b.TLS.ID
			}
			if b.Invalid != "" {
				s += " invalid: " + b.Invalid
			}
			bs = append(bs, s)
		}
		out[name] = r.Name + " -> " + strings.Join(bs, ", ")
	}
	return mode, out
}

func goldenCertificate(c *tls.Certificate) goldenCert {
	leaf := c.Leaf
	if leaf == nil && len(c.Certificate) > 0 {
		leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	if leaf == nil {
		return goldenCert{Subject: "unparsable"}
	}
	return goldenCert{
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
func (d *goldenDumper) routes(l *config.Listener) ([]goldenHostRoutes, map[string]*yaml.Node) {
	if l.Routes == nil {
		return nil, nil
	}
	rules := map[string]*yaml.Node{}
	ruleIDs := map[*config.Rule]string{}
	ruleID := func(r *config.Rule) string {
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
	type level = []config.RuleMatch
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
	var out []goldenHostRoutes
	for _, pattern := range slices.Sorted(maps.Keys(own)) {
		hr := goldenHostRoutes{Hostname: pattern}
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
			if p != pattern && goldenCovers(p, pattern) {
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

// goldenCovers reports whether listener-style pattern p covers pattern q:
// "" covers everything, "*.example.com" every name and wildcard below
// example.com.
func goldenCovers(p, q string) bool {
	return p == "" || strings.HasPrefix(p, "*.") && len(q) > len(p)-1 && strings.HasSuffix(q, p[1:])
}

// tableProbes are names that select every hostname pattern a listener's
// table can have, which are intersections of the listener's hostname and
// route hostnames: the probe of each of those, and a name only a
// catch-all serves.
func (d *goldenDumper) tableProbes(l *config.Listener) []string {
	probes := []string{goldenProbe(l.Hostname), goldenProbe("")}
	for _, h := range d.routeHostnames {
		probes = append(probes, goldenProbe(h))
	}
	return probes
}

// value renders the exported fields of a routing value, leaving out those
// at their zero value but for goldenAlwaysShown.
func (d *goldenDumper) value(v reflect.Value) *yaml.Node {
	switch x := v.Interface().(type) {
	case config.BackendKey:
		return scalar(goldenBackendKey(x))
	case *config.BackendTLS:
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
	case types.NamespacedName:
		return scalar(x.String())
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
			if !f.IsExported() || goldenShownElsewhere(typ.Name()+"."+f.Name) {
				continue
			}
			c := d.value(v.Field(i))
			if c == nil && goldenAlwaysShown(typ.Name()+"."+f.Name) {
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

// goldenAlwaysShown tells the fields whose zero value matters to a
// reader: a backend of weight 0 gets no request.
func goldenAlwaysShown(field string) bool {
	return field == "Backend.Weight" || field == "Rule.TotalWeight"
}

// goldenShownElsewhere tells the fields the dump shows elsewhere: a rule's
// route and index make its ID.
func goldenShownElsewhere(field string) bool {
	switch field {
	case "Rule.Route", "Rule.RouteName", "Rule.Index":
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

// goldenDiff shows how got differs from want, line by line: lines only in
// want with "-", lines only in got with "+", and two lines of context.
func goldenDiff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	// lcs[i][j] is the length of the longest common subsequence of a[i:]
	// and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte
		text string
	}
	var lines []line
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			lines = append(lines, line{' ', a[i]})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			lines = append(lines, line{'-', a[i]})
			i++
		default:
			lines = append(lines, line{'+', b[j]})
			j++
		}
	}
	const context = 2
	var out strings.Builder
	last := -1 // the last line written
	for k, l := range lines {
		if l.op == ' ' {
			continue
		}
		for c := max(k-context, last+1); c <= min(k+context, len(lines)-1); c++ {
			if c > last+1 && last >= 0 {
				out.WriteString("  ...\n")
			}
			out.WriteString(string(lines[c].op) + " " + lines[c].text + "\n")
			last = c
		}
	}
	return out.String()
}
