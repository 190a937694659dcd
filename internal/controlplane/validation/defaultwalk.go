// Schema defaults, applied by a walk compiled once per kind.
//
// The library's defaulting.Default visits every node of an object and, for
// each property of each node it visits, copies the property's schema (a
// large struct) to the heap: at 10,000 objects that was a quarter of the
// bytes allocated by decoding them. The defaulter does what it does, in
// the same order, over the nodes below which a schema has a default, the
// only ones where it changes anything (TestDefaulterMatchesTheLibrary,
// FuzzSchemaWalk).

package validation

import (
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/runtime"
)

// defaulter is the defaulting of one schema node; nil where neither the
// node nor anything below it has a default.
type defaulter struct {
	def      any  // the node's own default (nil: none)
	nullable bool // a null value of the node stays null
	// props are the properties with a defaulter; names all the
	// properties of the node's schema, when additional is set (a property
	// without a default is no additional property).
	props      map[string]*defaulter
	names      map[string]bool
	additional *defaulter
	items      *defaulter
}

// newDefaulter compiles the defaulting of s.
func newDefaulter(s *schema.Structural) *defaulter {
	if s == nil {
		return nil
	}
	d := &defaulter{def: s.Default.Object, nullable: s.Nullable}
	for name, p := range s.Properties {
		if pd := newDefaulter(&p); pd != nil {
			if d.props == nil {
				d.props = map[string]*defaulter{}
			}
			d.props[name] = pd
		}
	}
	if s.AdditionalProperties != nil {
		d.additional = newDefaulter(s.AdditionalProperties.Structural)
	}
	if d.additional != nil {
		d.names = map[string]bool{}
		for name := range s.Properties {
			d.names[name] = true
		}
	}
	d.items = newDefaulter(s.Items)
	if d.def == nil && d.props == nil && d.additional == nil && d.items == nil {
		return nil
	}
	return d
}

// apply gives x, a value of d's node, the defaults below it in place, as
// defaulting.Default does.
func (d *defaulter) apply(x any) {
	if d == nil {
		return
	}
	switch x := x.(type) {
	case map[string]any:
		for name, p := range d.props {
			if p.def == nil {
				continue
			}
			if v, found := x[name]; !found || v == nil && !p.nullable {
				x[name] = runtime.DeepCopyJSONValue(p.def)
			}
		}
		for k, v := range x {
			if p, ok := d.props[k]; ok {
				p.apply(v)
				continue
			}
			if d.additional == nil || d.names[k] {
				continue
			}
			if v == nil && !d.additional.nullable && d.additional.def != nil {
				v = runtime.DeepCopyJSONValue(d.additional.def)
				x[k] = v
			}
			d.additional.apply(v)
		}
	case []any:
		if d.items == nil {
			return
		}
		for i, v := range x {
			if v == nil && !d.items.nullable && d.items.def != nil {
				v = runtime.DeepCopyJSONValue(d.items.def)
				x[i] = v
			}
			d.items.apply(v)
		}
	}
}
