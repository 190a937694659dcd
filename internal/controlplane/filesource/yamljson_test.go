package filesource

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/testkit/testyaml"
)

// decodedKinds are the apiVersion and kind of every type Decode accepts.
var decodedKinds = [][2]string{
	{"gateway.networking.k8s.io/v1", "GatewayClass"},
	{"gateway.networking.k8s.io/v1", "Gateway"},
	{"gateway.networking.k8s.io/v1", "ListenerSet"},
	{"gateway.networking.k8s.io/v1", "HTTPRoute"},
	{"gateway.networking.k8s.io/v1", "GRPCRoute"},
	{"gateway.networking.k8s.io/v1", "TLSRoute"},
	{"gateway.networking.k8s.io/v1", "ReferenceGrant"},
	{"gateway.networking.k8s.io/v1", "BackendTLSPolicy"},
	{"v1", "ConfigMap"},
	{"v1", "Namespace"},
	{"v1", "Secret"},
	{"v1", "Service"},
	{"discovery.k8s.io/v1", "EndpointSlice"},
	{parameters.APIVersion, parameters.Kind},
}

// yamlSpecifics are documents of what YAML has and JSON has not: anchors
// and merge keys, tags, YAML 1.1's octal numbers and yes/no, numbers and
// booleans where strings go and the other way round, keys that are not
// strings or differ from the field's name in case, given twice, nulls.
var yamlSpecifics = []string{
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: {mode: 0755, on: yes, off: no, n: 12, big: 18446744073709551615, f: 1.5, e: 1e3}}\ndata: {a: 0755, b: yes, c: ~, d: 0x1F, e: -7}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: !!str 0755, b: !!int '12'}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: &m {name: c}\nbinaryData: {x: !!binary aGVsbG8=}\n",
	"apiVersion: v1\nkind: Namespace\nmetadata: &m {name: apps, labels: &l {a: b}}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, labels: &l {a: b}, annotations: *l}\n",
	"apiVersion: v1\nkind: ConfigMap\nbase: &b {name: c}\nmetadata: {<<: *b, labels: {x: y}}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {<<: {name: c}, labels: {x: y}}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {1: one, true: t, 1.5: f}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b, a: c}\n",
	"apiVersion: v1\nkind: ConfigMap\nMetadata: {name: c}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, Name: d}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: null\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 12}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: true, generation: '3'}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, generation: 3, creationTimestamp: 2024-01-02T03:04:05Z}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, creationTimestamp: 2024-01-02}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \"\\xff\"}\n",
	"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: \"caf\\u00e9 \\\"<&>\\t\"}\n",
	"apiVersion: 1\nkind: ConfigMap\nmetadata: {name: c}\n",
	"apiVersion: v1\nkind: [ConfigMap]\nmetadata: {name: c}\n",
	"apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 80, targetPort: 8080}, {port: '81', targetPort: http}], clusterIP: 10}\n",
	"apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {ports: [{port: 1.0}]}\n",
	"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: aGVsbG8=, b: 12}\nstringData: {c: 0755, d: no}\n",
	"apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec: {gatewayClassName: 12, listeners: [{name: on, port: '80', protocol: HTTP, hostname: 1}]}\n",
	"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec: {rules: [{timeouts: {request: 10s}, backendRefs: [{name: b, port: 80, weight: 0x10}]}]}\n",
	"apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\nspec: {rules: [{backendRefs: [{name: b, port: 80, weight: 1.5}]}]}\n",
	"- a\n- b\n",
	"just a string\n",
	"",
	"~\n",
	"{}\n",
}

// corpusDocuments are the documents of the gateway-api module's examples
// and conformance manifests, Portico's examples, the refusal messages'
// files, the sites of the benchmarks and yamlSpecifics.
// The first handwritten of them are Portico's own.
func corpusDocuments(t testing.TB) (docs [][]byte, handwritten int) {
	add := func(stream string) {
		split, _ := splitDocuments([]byte(stream))
		for _, d := range split {
			docs = append(docs, d.raw)
		}
	}
	add(testyaml.Site("site-1", "site-1.example.com", 443, "cert", "key"))
	add(testyaml.Gateway + "  - {name: http, port: 8080, protocol: HTTP}\n---\n" + testyaml.Backend("127.0.0.1:9000", 80))
	add(string(sitesYAMLWith(3, "    cert\n", "    key\n")))
	for _, c := range messageCases {
		add(c.yaml)
	}
	for _, c := range scanCases {
		add(c.doc)
	}
	for _, s := range yamlSpecifics {
		docs = append(docs, []byte(s))
	}
	handwritten = len(docs)
	var roots []string
	for _, mod := range []struct{ dir, path string }{{".", "sigs.k8s.io/gateway-api"}, {"../../../conformance", "sigs.k8s.io/gateway-api/conformance"}} {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod.path)
		cmd.Dir = mod.dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", mod.path, err)
		}
		roots = append(roots, strings.TrimSpace(string(out)))
	}
	roots = append(roots, "../../../examples")
	for _, root := range roots {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
				return nil
			}
			raw, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			add(string(raw))
			return nil
		})
	}
	return docs, handwritten
}

// sameAsTheLibrary decodes raw into a new object of kind k with
// unmarshalStrict and with yaml.UnmarshalStrict and says how they differ;
// fast is whether unmarshalStrict decoded it without the library.
func sameAsTheLibrary(raw []byte, k [2]string, plans *jsonPlans) (fast bool, diff string) {
	got, _ := newObject(k[0], k[1])
	want, _ := newObject(k[0], k[1])
	gotErr := unmarshalStrict(raw, got, plans)
	wantErr := yaml.UnmarshalStrict(raw, want)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		return false, fmt.Sprintf("error %v, the library's %v", gotErr, wantErr)
	}
	// On an error the object is not used, and what the library leaves of
	// it then follows the order of a map's keys: it differs between two
	// of its own calls (testdata/fuzz/FuzzUnmarshalStrict/63f7f0c934217415).
	if gotErr == nil && !reflect.DeepEqual(got, want) {
		return false, fmt.Sprintf("decoded\n%#v\nthe library\n%#v", got, want)
	}
	if js, ok := yamlJSON(raw, reflect.TypeOf(got), plans); ok {
		check, _ := newObject(k[0], k[1])
		fast = unmarshalStrictJSON(js, check) == nil
	}
	return fast, ""
}

// TestUnmarshalStrictMatchesTheLibrary: unmarshalStrict gives the object,
// or the error, yaml.UnmarshalStrict gives, for every document of the
// corpus decoded as its own kind (Portico's own documents as every kind);
// and it decodes the benchmarks' sites and
// the examples without the library.
func TestUnmarshalStrictMatchesTheLibrary(t *testing.T) {
	plans := newJSONPlans()
	docs, handwritten := corpusDocuments(t)
	var compared, fast, accepted int
	for i, raw := range docs {
		var own [2]string
		var tm struct{ APIVersion, Kind string }
		if yaml.Unmarshal(raw, &tm) == nil {
			own = [2]string{tm.APIVersion, tm.Kind}
		}
		kinds := decodedKinds
		if i >= handwritten {
			// The upstream documents as their own kind only, when
			// Portico reads that kind: the handwritten ones try every
			// kind.
			kinds = nil
			if _, err := newObject(own[0], own[1]); err == nil {
				kinds = [][2]string{own}
			}
		}
		for _, k := range kinds {
			f, diff := sameAsTheLibrary(raw, k, plans)
			if diff != "" {
				t.Errorf("%s as %s: %s\n%s", own[1], k[1], diff, raw)
			}
			compared++
			if k == own {
				accepted++
				if f {
					fast++
				}
			}
		}
	}
	t.Logf("%d documents, %d decodings compared; %d of %d documents decoded as their own kind went the short way", len(docs), compared, fast, accepted)
	if len(docs) < 500 {
		t.Errorf("only %d documents", len(docs))
	}
	for _, raw := range corpusSites() {
		var tm struct{ APIVersion, Kind string }
		if err := yaml.Unmarshal(raw, &tm); err != nil {
			t.Fatal(err)
		}
		if f, _ := sameAsTheLibrary(raw, [2]string{tm.APIVersion, tm.Kind}, plans); !f {
			t.Errorf("the library decoded a site's document:\n%s", raw)
		}
	}
}

// corpusSites are the documents of the benchmarks' sites.
func corpusSites() [][]byte {
	var docs [][]byte
	for _, stream := range []string{
		testyaml.Site("site-1", "site-1.example.com", 443, "cert", "key"),
		string(sitesYAMLWith(1, "    cert\n", "    key\n")),
	} {
		split, _ := splitDocuments([]byte(stream))
		for _, d := range split {
			docs = append(docs, d.raw)
		}
	}
	return docs
}

// FuzzUnmarshalStrict: for any YAML and any kind, unmarshalStrict gives
// what yaml.UnmarshalStrict gives.
func FuzzUnmarshalStrict(f *testing.F) {
	docs, _ := corpusDocuments(f)
	for i, raw := range docs {
		if i%5 == 0 || i < 80 {
			f.Add(raw, uint8(i))
		}
	}
	plans := newJSONPlans()
	f.Fuzz(func(t *testing.T, raw []byte, kind uint8) {
		k := decodedKinds[int(kind)%len(decodedKinds)]
		if _, diff := sameAsTheLibrary(raw, k, plans); diff != "" {
			t.Errorf("as %s: %s\n%q", k[1], diff, raw)
		}
	})
}

// sitesYAMLWith is the Gateway, its backend and n sites, each with a
// Secret of certPEM and keyPEM (indented for a block scalar).
func sitesYAMLWith(n int, certPEM, keyPEM string) []byte {
	var s strings.Builder
	s.WriteString(testyaml.Gateway + `  - {name: http, port: 8080, protocol: HTTP}
---
` + testyaml.Backend("127.0.0.1:9000", 80))
	for i := range n {
		host := fmt.Sprintf("site-%d.example.com", i)
		fmt.Fprintf(&s, `---
apiVersion: v1
kind: Secret
metadata: {name: cert-%d, namespace: apps}
type: kubernetes.io/tls
stringData:
  tls.crt: |
%s  tls.key: |
%s---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: site-%d, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - {name: https, hostname: %s, port: 8443, protocol: HTTPS, tls: {certificateRefs: [{name: cert-%d}]}}
  - {name: http, hostname: %s, port: 8080, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: site-%d, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: site-%d}]
  hostnames: [%s]
  rules: [{backendRefs: [{name: backend, port: 80}]}]
`, i, certPEM, keyPEM, i, host, i, host, i, i, host)
	}
	return []byte(s.String())
}
