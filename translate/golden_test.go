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
//	controllerName: example.com/other  # default: wellknown.ControllerName
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
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	yaml "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/filesource"
	"portico.dev/portico/internal/controlplane/snapshot"
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
func translateGolden(opts goldenOptions, snapshots ...*snapshot.Resources) Output {
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
func loadGolden(t *testing.T, path string) (goldenOptions, *snapshot.Resources) {
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
			dump := func(snapshots ...*snapshot.Resources) []byte {
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
func shuffledCopy(res *snapshot.Resources, seed uint64) *snapshot.Resources {
	rnd := rand.New(rand.NewPCG(seed, 0x901de7))
	out := &snapshot.Resources{
		GatewayClasses:      shuffle(rnd, res.GatewayClasses),
		Gateways:            shuffle(rnd, res.Gateways),
		ListenerSets:        shuffle(rnd, res.ListenerSets),
		HTTPRoutes:          shuffle(rnd, res.HTTPRoutes),
		GRPCRoutes:          shuffle(rnd, res.GRPCRoutes),
		TLSRoutes:           shuffle(rnd, res.TLSRoutes),
		TCPRoutes:           shuffle(rnd, res.TCPRoutes),
		UDPRoutes:           shuffle(rnd, res.UDPRoutes),
		ReferenceGrants:     shuffle(rnd, res.ReferenceGrants),
		BackendTLSPolicies:  shuffle(rnd, res.BackendTLSPolicies),
		ConfigMaps:          shuffle(rnd, res.ConfigMaps),
		ClusterTrustBundles: shuffle(rnd, res.ClusterTrustBundles),
		Namespaces:          shuffle(rnd, res.Namespaces),
		Secrets:             shuffle(rnd, res.Secrets),
		Services:            shuffle(rnd, res.Services),
		EndpointSlices:      shuffle(rnd, res.EndpointSlices),
		Parameters:          shuffle(rnd, res.Parameters),
		Deployments:         shuffle(rnd, res.Deployments),
		TrafficPolicies:     shuffle(rnd, res.TrafficPolicies),
		SecurityPolicies:    shuffle(rnd, res.SecurityPolicies),
		ClientPolicies:      shuffle(rnd, res.ClientPolicies),
		XTrafficPolicies:    shuffle(rnd, res.XTrafficPolicies),
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
	TCPRoutes          map[string][]goldenParent   `yaml:"tcpRoutes,omitempty"`
	UDPRoutes          map[string][]goldenParent   `yaml:"udpRoutes,omitempty"`
	BackendTLSPolicies map[string][]goldenAncestor `yaml:"backendTLSPolicies,omitempty"`
	TrafficPolicies    map[string][]goldenAncestor `yaml:"backendTrafficPolicies,omitempty"`
	SecurityPolicies   map[string][]goldenAncestor `yaml:"securityPolicies,omitempty"`
	ClientPolicies     map[string][]goldenAncestor `yaml:"clientTrafficPolicies,omitempty"`
	XTrafficPolicies   map[string][]goldenAncestor `yaml:"xBackendTrafficPolicies,omitempty"`
	ACME               []string                    `yaml:"acme,omitempty"` // "hostname -> namespace/secret"
	// Provisioned: "namespace/name class accepted|not-accepted ports
	// parameters-as-JSON", one per Gateway with a data plane of its own.
	Provisioned []string           `yaml:"provisioned,omitempty"`
	DataPlane   config.Description `yaml:"dataPlane"`
}

// goldenCondition is a condition on one line, without its time:
// "Type=Status Reason (generation N): message".
type goldenCondition = string

type goldenClass struct {
	Conditions        []goldenCondition `yaml:"conditions"`
	SupportedFeatures []string          `yaml:"supportedFeatures,omitempty"`
}

type goldenGateway struct {
	Addresses            []string               `yaml:"addresses,omitempty"` // "type value routability=..."
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

// dumpGolden renders a translation of res as the golden document.
func dumpGolden(t *testing.T, res *snapshot.Resources, translated Output) []byte {
	t.Helper()
	cfg, st := translated.Config, translated.Statuses
	out := goldenOut{
		GatewayClasses:     map[string]goldenClass{},
		Gateways:           map[string]goldenGateway{},
		ListenerSets:       map[string]goldenLS{},
		HTTPRoutes:         map[string][]goldenParent{},
		GRPCRoutes:         map[string][]goldenParent{},
		TLSRoutes:          map[string][]goldenParent{},
		TCPRoutes:          map[string][]goldenParent{},
		UDPRoutes:          map[string][]goldenParent{},
		BackendTLSPolicies: map[string][]goldenAncestor{},
		TrafficPolicies:    map[string][]goldenAncestor{},
		SecurityPolicies:   map[string][]goldenAncestor{},
		ClientPolicies:     map[string][]goldenAncestor{},
		XTrafficPolicies:   map[string][]goldenAncestor{},
	}
	for name, s := range st.GatewayClasses.All() {
		c := goldenClass{Conditions: goldenConditions(s.Conditions)}
		for _, f := range s.SupportedFeatures {
			c.SupportedFeatures = append(c.SupportedFeatures, string(f.Name))
		}
		out.GatewayClasses[name] = c
	}
	for key, s := range st.Gateways.All() {
		g := goldenGateway{Conditions: goldenConditions(s.Conditions), AttachedListenerSets: s.AttachedListenerSets}
		for _, a := range s.Addresses {
			typ := "(no type)"
			if a.Type != nil {
				typ = string(*a.Type)
			}
			line := typ + " " + a.Value
			if a.Routability != nil {
				line += " routability=" + strconv.Quote(string(*a.Routability))
			}
			g.Addresses = append(g.Addresses, line)
		}
		for _, l := range s.Listeners {
			g.Listeners = append(g.Listeners, goldenListenerStatus{Name: string(l.Name), SupportedKinds: goldenKinds(l.SupportedKinds),
				AttachedRoutes: l.AttachedRoutes, Conditions: goldenConditions(l.Conditions)})
		}
		out.Gateways[key.String()] = g
	}
	for key, s := range st.ListenerSets.All() {
		ls := goldenLS{Conditions: goldenConditions(s.Conditions)}
		for _, l := range s.Listeners {
			ls.Listeners = append(ls.Listeners, goldenListenerStatus{Name: string(l.Name), SupportedKinds: goldenKinds(l.SupportedKinds),
				AttachedRoutes: l.AttachedRoutes, Conditions: goldenConditions(l.Conditions)})
		}
		out.ListenerSets[key.String()] = ls
	}
	for key, parents := range st.HTTPRoutes.All() {
		for _, p := range parents {
			out.HTTPRoutes[key.String()] = append(out.HTTPRoutes[key.String()], goldenParent{ParentRef: goldenRef(p.ParentRef),
				ControllerName: string(p.ControllerName), Conditions: goldenConditions(p.Conditions)})
		}
	}
	for key, parents := range st.GRPCRoutes.All() {
		for _, p := range parents {
			out.GRPCRoutes[key.String()] = append(out.GRPCRoutes[key.String()], goldenParent{ParentRef: goldenRef(p.ParentRef),
				ControllerName: string(p.ControllerName), Conditions: goldenConditions(p.Conditions)})
		}
	}
	for key, parents := range st.TLSRoutes.All() {
		for _, p := range parents {
			out.TLSRoutes[key.String()] = append(out.TLSRoutes[key.String()], goldenParent{ParentRef: goldenRef(p.ParentRef),
				ControllerName: string(p.ControllerName), Conditions: goldenConditions(p.Conditions)})
		}
	}
	for key, parents := range st.TCPRoutes.All() {
		for _, p := range parents {
			out.TCPRoutes[key.String()] = append(out.TCPRoutes[key.String()], goldenParent{ParentRef: goldenRef(p.ParentRef),
				ControllerName: string(p.ControllerName), Conditions: goldenConditions(p.Conditions)})
		}
	}
	for key, parents := range st.UDPRoutes.All() {
		for _, p := range parents {
			out.UDPRoutes[key.String()] = append(out.UDPRoutes[key.String()], goldenParent{ParentRef: goldenRef(p.ParentRef),
				ControllerName: string(p.ControllerName), Conditions: goldenConditions(p.Conditions)})
		}
	}
	for key, ancestors := range st.BackendTLSPolicies.All() {
		for _, a := range ancestors {
			out.BackendTLSPolicies[key.String()] = append(out.BackendTLSPolicies[key.String()], goldenAncestor{AncestorRef: goldenRef(a.AncestorRef),
				ControllerName: string(a.ControllerName), Conditions: goldenConditions(a.Conditions)})
		}
	}
	for key, ancestors := range st.TrafficPolicies.All() {
		for _, a := range ancestors {
			out.TrafficPolicies[key.String()] = append(out.TrafficPolicies[key.String()], goldenAncestor{AncestorRef: goldenRef(a.AncestorRef),
				ControllerName: string(a.ControllerName), Conditions: goldenConditions(a.Conditions)})
		}
	}
	for key, ancestors := range st.SecurityPolicies.All() {
		for _, a := range ancestors {
			out.SecurityPolicies[key.String()] = append(out.SecurityPolicies[key.String()], goldenAncestor{AncestorRef: goldenRef(a.AncestorRef),
				ControllerName: string(a.ControllerName), Conditions: goldenConditions(a.Conditions)})
		}
	}
	for key, ancestors := range st.ClientPolicies.All() {
		for _, a := range ancestors {
			out.ClientPolicies[key.String()] = append(out.ClientPolicies[key.String()], goldenAncestor{AncestorRef: goldenRef(a.AncestorRef),
				ControllerName: string(a.ControllerName), Conditions: goldenConditions(a.Conditions)})
		}
	}
	for key, ancestors := range st.XTrafficPolicies.All() {
		for _, a := range ancestors {
			out.XTrafficPolicies[key.String()] = append(out.XTrafficPolicies[key.String()], goldenAncestor{AncestorRef: goldenRef(a.AncestorRef),
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
	out.DataPlane = config.Describe(cfg, ProbesOf(res))

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
	var n yaml.Node
	if err := n.Encode([]string(l)); err != nil {
		return nil, err
	}
	n.Style = yaml.FlowStyle
	return &n, nil
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
