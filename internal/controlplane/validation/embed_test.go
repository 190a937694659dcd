package validation

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite crds.json.gz from the gateway-api module in go.mod")

// TestEmbeddedSchemasMatchModule keeps the embedded schemas in step with
// the gateway-api module Portico is compiled against: after the module
// moves, this fails until `go test ./admission -update` rewrites them.
func TestEmbeddedSchemasMatchModule(t *testing.T) {
	want, err := schemasFromModule()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(want)
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile("crds.json.gz", buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	zr, err := gzip.NewReader(bytes.NewReader(embedded))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("crds.json.gz is not the schemas of the gateway-api module in go.mod: run go test ./admission -update")
	}
}

// schemasFromModule reads the experimental channel's CRDs of the
// gateway-api module and keeps what validation needs.
func schemasFromModule() ([]byte, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "experimental")
	paths, err := filepath.Glob(filepath.Join(dir, "gateway.networking.k8s.io_*.yaml"))
	if err != nil || len(paths) == 0 {
		return nil, errors.Join(errors.New("no CRDs in "+dir), err)
	}
	// Of the experimental group's kinds, the one Portico serves.
	paths = append(paths, filepath.Join(dir, "gateway.networking.x-k8s.io_xbackendtrafficpolicies.yaml"))
	slices.Sort(paths)
	var crds []apiextensionsv1.CustomResourceDefinition
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, err
			}
			var crd apiextensionsv1.CustomResourceDefinition
			if err := yaml.Unmarshal(doc, &crd); err != nil {
				return nil, err
			}
			if crd.Kind != "CustomResourceDefinition" {
				continue // e.g. a ValidatingAdmissionPolicy
			}
			crds = append(crds, stripped(crd))
		}
	}
	return json.Marshal(crds)
}

func stripped(crd apiextensionsv1.CustomResourceDefinition) apiextensionsv1.CustomResourceDefinition {
	out := apiextensionsv1.CustomResourceDefinition{}
	out.Name = crd.Name
	out.Spec.Group = crd.Spec.Group
	out.Spec.Names.Kind = crd.Spec.Names.Kind
	out.Spec.Scope = crd.Spec.Scope
	for _, v := range crd.Spec.Versions {
		if v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
			dropDescriptions(v.Schema.OpenAPIV3Schema)
		}
		out.Spec.Versions = append(out.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v.Name, Served: v.Served, Storage: v.Storage, Schema: v.Schema,
		})
	}
	return out
}

func dropDescriptions(p *apiextensionsv1.JSONSchemaProps) {
	if p == nil {
		return
	}
	p.Description = ""
	for k, c := range p.Properties {
		dropDescriptions(&c)
		p.Properties[k] = c
	}
	if p.Items != nil {
		dropDescriptions(p.Items.Schema)
		for i := range p.Items.JSONSchemas {
			dropDescriptions(&p.Items.JSONSchemas[i])
		}
	}
	if p.AdditionalProperties != nil {
		dropDescriptions(p.AdditionalProperties.Schema)
	}
	for _, list := range [][]apiextensionsv1.JSONSchemaProps{p.AllOf, p.AnyOf, p.OneOf} {
		for i := range list {
			dropDescriptions(&list[i])
		}
	}
	dropDescriptions(p.Not)
}
