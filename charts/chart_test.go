// Tests of the Helm chart in portico/: what it renders for several value
// sets, what its schema refuses, and that with default values it installs
// exactly what the kustomize base in deploy/ does.
package charts_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"portico.dev/portico/charts/charttest"
)

const chartDir = "portico"

var release = charttest.Release{Name: "portico", Namespace: "portico-system"}

func render(t *testing.T, values string) []*unstructured.Unstructured {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(values), &v); err != nil {
		t.Fatal(err)
	}
	objs, err := charttest.Render(chartDir, release, v)
	if err != nil {
		t.Fatalf("render with %s: %v", values, err)
	}
	return objs
}

// helmOnlyLabels are the labels the chart adds for Helm's bookkeeping;
// deploy/ has no release to name.
var helmOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// withoutHelmLabels returns a copy of o without helmOnlyLabels in any map
// (labels, selectors, label selectors).
func withoutHelmLabels(o *unstructured.Unstructured) map[string]any {
	var strip func(v any) any
	strip = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range v {
				if !contains(helmOnlyLabels, k) {
					out[k] = strip(e)
				}
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, e := range v {
				out[i] = strip(e)
			}
			return out
		}
		return v
	}
	return strip(o.DeepCopy().Object).(map[string]any)
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// normalized makes numbers of both sources compare equal (YAML decoding
// gives int64 in one and float64 in the other).
func normalized(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChartMatchesKustomizeBase is what keeps the chart and deploy/ from
// drifting apart: with default values (and namespace.create, which
// deploy/ always does) the chart renders the same objects, field for
// field, apart from Helm's own labels.
func TestChartMatchesKustomizeBase(t *testing.T) {
	base, err := charttest.Kustomize("../deploy")
	if err != nil {
		t.Fatal(err)
	}
	chart := render(t, "namespace: {create: true}")
	keys := func(objs []*unstructured.Unstructured) []string {
		var out []string
		for _, o := range objs {
			out = append(out, charttest.Key(o))
		}
		return out
	}
	if !reflect.DeepEqual(keys(base), keys(chart)) {
		t.Fatalf("objects differ:\ndeploy/: %v\nchart:   %v", keys(base), keys(chart))
	}
	for i := range base {
		b, c := normalized(t, base[i].Object), normalized(t, withoutHelmLabels(chart[i]))
		if !reflect.DeepEqual(b, c) {
			by, _ := yaml.Marshal(b)
			cy, _ := yaml.Marshal(c)
			t.Errorf("%s differs:\n--- deploy/\n%s\n--- chart\n%s", charttest.Key(base[i]), by, cy)
		}
	}
	// Without namespace.create (the default, for helm install
	// --create-namespace) the Namespace is the one object left out.
	defaults := render(t, "")
	if len(defaults) != len(chart)-1 || charttest.Find(defaults, "Namespace", "portico-system") != nil {
		t.Errorf("default values render %v", keys(defaults))
	}
}
