// The Gateway API CRDs' rules. The schemas are those of the experimental
// channel of the gateway-api module in go.mod (a superset of the standard
// channel, so that every field Portico's Go types know can be written),
// the X-kinds of gateway.networking.x-k8s.io included, descriptions
// removed. They are embedded (crds.json.gz) and kept in step
// with the module by TestEmbeddedSchemasMatchModule; `go test ./admission
// -update` rewrites them after the module moves.

package validation

import (
	"bytes"
	"compress/gzip"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiservercel "k8s.io/apiserver/pkg/apis/cel"
)

//go:embed crds.json.gz
var embedded []byte

// Schemas validates objects of the embedded CRDs. Each kind's validators
// are compiled on first use (CEL compilation is the slow part), and are safe
// for concurrent use after that.
type Schemas struct {
	versions map[string]*version // by apiVersion + "/" + kind
}

type version struct {
	props      *apiextensions.JSONSchemaProps
	namespaced bool

	once      sync.Once
	err       error
	openapi   validation.SchemaValidator
	walk      *schemaWalk // vouches for the objects it can, before openapi
	defaults  *defaulter  // the schema's defaults
	lists     *listWalk   // the list types' checks
	structure *schema.Structural
	rules     *ruleTree      // the CEL rules, when walkable
	cel       *cel.Validator // the CEL rules otherwise
}

// Load parses the embedded CRDs.
func Load() (*Schemas, error) {
	crds, err := decodeEmbedded(embedded)
	if err != nil {
		return nil, err
	}
	s := &Schemas{versions: map[string]*version{}}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			props := &apiextensions.JSONSchemaProps{}
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, props, nil); err != nil {
				return nil, fmt.Errorf("crd schema %s %s: %w", crd.Name, v.Name, err)
			}
			key := crd.Spec.Group + "/" + v.Name + "/" + crd.Spec.Names.Kind
			s.versions[key] = &version{props: props, namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped}
		}
	}
	return s, nil
}

func decodeEmbedded(data []byte) ([]apiextensionsv1.CustomResourceDefinition, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("crd schemas: %w", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("crd schemas: %w", err)
	}
	var crds []apiextensionsv1.CustomResourceDefinition
	if err := json.Unmarshal(raw, &crds); err != nil {
		return nil, fmt.Errorf("crd schemas: %w", err)
	}
	return crds, nil
}

// Knows reports whether apiVersion/kind is a kind of the embedded CRDs, and
// whether its objects are namespaced.
func (s *Schemas) Knows(apiVersion, kind string) (namespaced, ok bool) {
	v, ok := s.versions[apiVersion+"/"+kind]
	return ok && v.namespaced, ok
}

// Default applies the schema's defaults to obj in place, as the API server
// does when it decodes an object, before validation: the CEL rules assume
// the defaults are there.
func (s *Schemas) Default(apiVersion, kind string, obj map[string]any) error {
	v, ok := s.versions[apiVersion+"/"+kind]
	if !ok {
		return nil
	}
	v.once.Do(v.compile)
	if v.err != nil {
		return v.err
	}
	v.defaults.apply(obj)
	return nil
}

// Validate checks obj, an object of apiVersion/kind as decoded from JSON
// (integers as int64, see k8s.io/apimachinery/pkg/util/json) and defaulted,
// as the API server would on create. Kinds it does not know pass unchecked. The
// returned list is empty when obj is valid.
func (s *Schemas) Validate(apiVersion, kind string, obj map[string]any) field.ErrorList {
	v, ok := s.versions[apiVersion+"/"+kind]
	if !ok {
		return nil
	}
	v.once.Do(v.compile)
	if v.err != nil {
		return field.ErrorList{field.InternalError(nil, v.err)}
	}
	var errs field.ErrorList
	if !v.walk.vouches(obj) {
		errs = validation.ValidateCustomResource(nil, obj, v.openapi)
	}
	errs = append(errs, v.lists.check(nil, obj)...)
	if len(errs) > 0 {
		// The API server runs CEL rules only on objects that pass the
		// schema: rules may assume its types and bounds.
		return errs
	}
	var celErrs field.ErrorList
	if v.cel != nil {
		celErrs, _ = v.cel.Validate(context.Background(), nil, v.structure, obj, nil, apiservercel.RuntimeCELCostBudget)
	} else {
		celErrs, _ = v.rules.validate(context.Background(), nil, obj, apiservercel.RuntimeCELCostBudget)
	}
	return append(errs, celErrs...)
}

func (v *version) compile() {
	var err error
	if v.structure, err = schema.NewStructural(v.props); err != nil {
		v.err = fmt.Errorf("structural schema: %w", err)
		return
	}
	if v.openapi, _, err = validation.NewSchemaValidator(v.props); err != nil {
		v.err = fmt.Errorf("schema validator: %w", err)
		return
	}
	v.walk = newSchemaWalk(v.structure)
	v.defaults = newDefaulter(v.structure)
	v.lists = newListWalk(v.structure)
	if walkable(v.structure) {
		v.rules = newRuleTree(v.structure, apiservercel.PerCallLimit)
	} else {
		v.cel = cel.NewValidator(v.structure, true, apiservercel.PerCallLimit)
	}
}
