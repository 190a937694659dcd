package conformance

import (
	"strings"
	"testing"
	"testing/fstest"

	upstream "sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/conformance/tests"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"

	"portico.dev/portico/conformance/kubelet"
)

var echoOnly = kubelet.Images{"registry.k8s.io/gateway-api/conformance/echo-basic": "/bin/echo-basic"}

// The suite's base manifests keep every echo backend: with echo-basic mapped,
// nothing is left out.
func TestBaseManifestsOfTheSuite(t *testing.T) {
	before, err := upstream.Manifests.ReadFile(upstreamBase)
	if err != nil {
		t.Fatal(err)
	}
	got, left, err := baseManifests(upstream.Manifests, echoOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("left out %+v, want nothing", left)
	}
	wantEcho := strings.Count(string(before), "image: registry.k8s.io/gateway-api/conformance/echo-basic")
	if n := strings.Count(string(got), "image: registry.k8s.io/gateway-api/conformance/echo-basic"); n != wantEcho || n == 0 {
		t.Errorf("echo-basic workloads: %d, want all %d", n, wantEcho)
	}
	for _, keep := range []string{"name: same-namespace", "name: gateway-conformance-web-backend"} {
		if !strings.Contains(string(got), keep) {
			t.Errorf("filtered manifests lost %q", keep)
		}
	}
	docs, err := splitDocuments(got)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := splitDocuments(before)
	if len(docs) != len(all) {
		t.Errorf("%d documents, want all %d", len(docs), len(all))
	}
}

func TestSplitDocuments(t *testing.T) {
	in := "# header comment\n---\na: 1\n---  \n\n---\n# only a comment\n---\nb: |\n  x\n  ---not a separator\n"
	docs, err := splitDocuments([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || string(docs[0]) != "a: 1\n" || !strings.Contains(string(docs[1]), "---not a separator") {
		t.Errorf("docs = %q", docs)
	}
}

func TestImageSkips(t *testing.T) {
	fsys := fstest.MapFS{
		"tests/a.yaml": {Data: []byte("kind: Pod\nmetadata: {name: p, namespace: n}\nspec:\n  containers:\n  - image: other/image:v1\n")},
		"tests/b.yaml": {Data: []byte("kind: Deployment\nmetadata: {name: d, namespace: n}\nspec:\n  template:\n    spec:\n      containers:\n      - image: registry.k8s.io/gateway-api/conformance/echo-basic:v1\n")},
		"tests/c.yaml": {Data: []byte("kind: Deployment\nmetadata: {name: d, namespace: n}\nspec:\n  template:\n    spec:\n      initContainers:\n      - image: busybox\n      containers:\n      - image: registry.k8s.io/gateway-api/conformance/echo-basic:v1\n")},
		"tests/d.yaml": {Data: []byte("kind: ConfigMap\nmetadata: {name: c}\ndata: {image: other}\n")},
	}
	skips, err := imageSkips(fsys, []suite.ConformanceTest{
		{ShortName: "A", Manifests: []string{"tests/a.yaml"}},
		{ShortName: "B", Manifests: []string{"tests/b.yaml", "tests/d.yaml"}},
		{ShortName: "C", Manifests: []string{"tests/c.yaml"}},
	}, echoOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(skips) != 2 || !strings.Contains(skips["A"], "other/image:v1") || !strings.Contains(skips["C"], "busybox") {
		t.Errorf("skips = %v, want A (other/image) and C (busybox)", skips)
	}
}

// With echo-basic mapped, every test of the suite can run: no test is
// skipped for an image. Without it, the tests with workloads of their own are
// found.
func TestSuiteNeedsOnlyEchoBasic(t *testing.T) {
	skips, err := imageSkips(upstream.Manifests, tests.ConformanceTests, echoOnly)
	if err != nil {
		t.Fatal(err)
	}
	if len(skips) != 0 {
		t.Errorf("tests skipped with echo-basic mapped: %v", skips)
	}
	skips, err = imageSkips(upstream.Manifests, tests.ConformanceTests, kubelet.Images{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(skips["TCPRouteWeightedRouting"], "registry.k8s.io/gateway-api/conformance/echo-basic") {
		t.Errorf("TCPRouteWeightedRouting runs echo-basic pods of its own; skips = %v", skips)
	}
	if _, ok := skips["HTTPRouteSimpleSameNamespace"]; ok {
		t.Error("HTTPRouteSimpleSameNamespace has no workload of its own but was skipped")
	}
}
