// The OpenAPI schema, walked over the fields an object has.
//
// The library's SchemaValidator builds a validator for every field of
// every object it checks: at 10,000 hostnames that was the largest part of
// a standalone start. Almost every object is valid, so a walk that can
// only vouch for an object does most of the work: schemaWalk is compiled
// once per kind from the structural schema, visits the fields present and
// says "valid" only when every check it knows passes and it met nothing it
// does not know (a string format the library's registry lacks, a nullable or untyped node, allOf, oneOf,
// anyOf, not, uniqueItems, multipleOf, exclusive bounds, enums of other
// than strings, a null value). Anything else goes to the library's
// validator, whose verdict and messages stand: the walk decides nothing
// against an object, it spares the library the objects it vouches for
// (TestSchemaWalkVouchesOnlyForValidObjects holds it to that).

package validation

import (
	"math"
	"regexp"
	"unicode/utf8"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
)

// schemaWalk is one schema node, compiled.
type schemaWalk struct {
	typ string
	// unsure: a value at this node is left to the library.
	unsure               bool
	maxLength, minLength int64 // -1: no bound
	pattern              *regexp.Regexp
	format               string          // of a string: checked by the library's own registry
	enum                 map[string]bool // nil: no enum
	minimum, maximum     *float64
	maxItems, minItems   int64 // -1: no bound
	maxProperties        int64 // -1: no bound
	required             []string
	properties           map[string]*schemaWalk
	additional           *schemaWalk // nil: other properties are not looked at
	items                *schemaWalk
}

// newSchemaWalk compiles s.
func newSchemaWalk(s *schema.Structural) *schemaWalk {
	w := &schemaWalk{typ: s.Type, maxLength: -1, minLength: -1, maxItems: -1, minItems: -1, maxProperties: -1}
	switch {
	case s.Type == "", s.Type == "number", s.Nullable,
		s.XPreserveUnknownFields, s.XEmbeddedResource, s.XIntOrString:
		w.unsure = true
		return w
	}
	if vv := s.ValueValidation; vv != nil {
		if vv.Format != "" && s.Type == "string" && !strfmt.Default.ContainsName(vv.Format) ||
			vv.ExclusiveMaximum || vv.ExclusiveMinimum || vv.UniqueItems || vv.MultipleOf != nil || vv.MinProperties != nil ||
			len(vv.AllOf) > 0 || len(vv.OneOf) > 0 || len(vv.AnyOf) > 0 || vv.Not != nil {
			w.unsure = true
			return w
		}
		if s.Type == "string" {
			w.format = vv.Format
		}
		if vv.MaxLength != nil {
			w.maxLength = *vv.MaxLength
		}
		if vv.MinLength != nil {
			w.minLength = *vv.MinLength
		}
		if vv.Pattern != "" {
			re, err := regexp.Compile(vv.Pattern)
			if err != nil {
				w.unsure = true
				return w
			}
			w.pattern = re
		}
		if len(vv.Enum) > 0 {
			if s.Type != "string" {
				w.unsure = true
				return w
			}
			w.enum = make(map[string]bool, len(vv.Enum))
			for _, e := range vv.Enum {
				str, ok := e.Object.(string)
				if !ok {
					w.unsure = true
					return w
				}
				w.enum[str] = true
			}
		}
		w.minimum, w.maximum = vv.Minimum, vv.Maximum
		if vv.MaxItems != nil {
			w.maxItems = *vv.MaxItems
		}
		if vv.MinItems != nil {
			w.minItems = *vv.MinItems
		}
		if vv.MaxProperties != nil {
			w.maxProperties = *vv.MaxProperties
		}
		w.required = vv.Required
	}
	if len(s.Properties) > 0 {
		w.properties = make(map[string]*schemaWalk, len(s.Properties))
		for name, prop := range s.Properties {
			w.properties[name] = newSchemaWalk(&prop)
		}
	}
	if ap := s.AdditionalProperties; ap != nil {
		switch {
		case ap.Structural != nil:
			w.additional = newSchemaWalk(ap.Structural)
		case !ap.Bool:
			w.unsure = true
		}
	}
	if s.Items != nil {
		w.items = newSchemaWalk(s.Items)
	}
	return w
}

// maxExactInteger bounds the integers whose comparison with a float64
// bound is exact.
const maxExactInteger = 1 << 53

// vouches reports whether v certainly passes the schema: false when it
// does not, or when the walk cannot tell.
func (w *schemaWalk) vouches(v any) bool {
	if w.unsure {
		return false
	}
	switch w.typ {
	case "string":
		s, ok := v.(string)
		if !ok {
			return false
		}
		if w.maxLength >= 0 || w.minLength >= 0 {
			n := int64(utf8.RuneCountInString(s))
			if w.maxLength >= 0 && n > w.maxLength || w.minLength >= 0 && n < w.minLength {
				return false
			}
		}
		if w.enum != nil && !w.enum[s] {
			return false
		}
		if w.format != "" && !strfmt.Default.Validates(w.format, s) {
			return false
		}
		return w.pattern == nil || w.pattern.MatchString(s)
	case "integer":
		i, ok := v.(int64)
		if !ok || i > maxExactInteger || i < -maxExactInteger {
			return false
		}
		f := float64(i)
		return (w.minimum == nil || f >= *w.minimum) && (w.maximum == nil || f <= *w.maximum) && !math.IsNaN(f)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "array":
		l, ok := v.([]any)
		if !ok {
			return false
		}
		n := int64(len(l))
		if w.maxItems >= 0 && n > w.maxItems || w.minItems >= 0 && n < w.minItems {
			return false
		}
		if w.items != nil {
			for _, e := range l {
				if !w.items.vouches(e) {
					return false
				}
			}
		}
		return true
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		if w.maxProperties >= 0 && int64(len(m)) > w.maxProperties {
			return false
		}
		for _, r := range w.required {
			if _, ok := m[r]; !ok {
				return false
			}
		}
		for k, e := range m {
			if p, ok := w.properties[k]; ok {
				if !p.vouches(e) {
					return false
				}
				continue
			}
			if w.additional != nil && !w.additional.vouches(e) {
				return false
			}
		}
		return true
	}
	return false
}
