// Package charttest renders Portico's Helm chart and its kustomize base the
// way Helm and kustomize do, for tests that check what they install.
package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Release names one installation of the chart.
type Release struct {
	Name      string
	Namespace string
}

// Render renders the chart in dir with values over its defaults, as
// "helm template --include-crds" does: values are checked against
// values.schema.json first, then every template is rendered; the CRDs of
// crds/ (CRDs) come with them, as helm install creates them. It returns
// the objects sorted by kind and name, and an error for values the schema
// or a template refuses.
func Render(dir string, rel Release, values map[string]any) ([]*unstructured.Unstructured, error) {
	files, err := renderFiles(dir, rel, values)
	if err != nil {
		return nil, err
	}
	objs, err := CRDs(dir)
	if err != nil {
		return nil, err
	}
	// Rendered in a fixed order so that errors point at the same file.
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".yaml") {
			continue // NOTES.txt, helpers
		}
		got, err := Decode(strings.NewReader(files[name]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		objs = append(objs, got...)
	}
	Sort(objs)
	return objs, nil
}

// CRDs returns the objects of the chart's crds/ directory, which Helm
// installs before the templates (so that they may create objects of those
// kinds) and never upgrades or deletes.
func CRDs(dir string) ([]*unstructured.Unstructured, error) {
	chrt, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, crd := range chrt.CRDObjects() {
		got, err := Decode(bytes.NewReader(crd.File.Data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", crd.Filename, err)
		}
		objs = append(objs, got...)
	}
	return objs, nil
}

// Notes renders the chart's NOTES.txt, what helm install prints.
func Notes(dir string, rel Release, values map[string]any) (string, error) {
	files, err := renderFiles(dir, rel, values)
	if err != nil {
		return "", err
	}
	for name, text := range files {
		if strings.HasSuffix(name, "/NOTES.txt") {
			return text, nil
		}
	}
	return "", fmt.Errorf("chart %s has no NOTES.txt", dir)
}

func renderFiles(dir string, rel Release, values map[string]any) (map[string]string, error) {
	chrt, err := loader.LoadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("load chart %s: %w", dir, err)
	}
	vals, err := chartutil.ToRenderValues(chrt, values, common.ReleaseOptions{
		Name: rel.Name, Namespace: rel.Namespace, Revision: 1, IsInstall: true,
	}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(chrt, vals)
}

// Kustomize builds the kustomization in dir as "kubectl apply -k" does and
// returns its objects sorted by kind and name.
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	raw, err := rm.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	objs, err := Decode(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	Sort(objs)
	return objs, nil
}

// Decode reads a stream of YAML documents; empty ones are skipped.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// Sort orders objects by kind, then namespace and name.
func Sort(objs []*unstructured.Unstructured) {
	slices.SortFunc(objs, func(a, b *unstructured.Unstructured) int {
		return strings.Compare(Key(a), Key(b))
	})
}

// Key names an object: "Kind namespace/name" (or "Kind name").
func Key(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + " " + o.GetName()
	}
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// Find returns the object of kind and name, or nil.
func Find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}
