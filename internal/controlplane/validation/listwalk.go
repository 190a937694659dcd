// List types (x-kubernetes-list-type set and map), checked by a walk
// compiled once per kind.
//
// The library's listtype.ValidateListSetsAndMaps visits every node of an
// object, copying each property's schema to the heap and making its field
// path on the way: at 10,000 objects it allocated about as much as the
// defaulting did. The listWalk visits, in the same order, only the nodes
// above a list with a type, and has the library check each such list
// itself (TestListWalkMatchesTheLibrary, FuzzSchemaWalk).

package validation

import (
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// listWalk is the list-type checks of one schema node and below; nil
// where no list at or below the node has a type.
type listWalk struct {
	// own, for a list with a type: a schema with the list, without its
	// items' schema, as its one property ownName, for the library to
	// check the list alone.
	own        *schema.Structural
	props      map[string]*listWalk
	additional *listWalk
	items      *listWalk
}

// ownName is the property own holds the list under.
const ownName = "x"

func newListWalk(s *schema.Structural) *listWalk {
	if s == nil {
		return nil
	}
	w := &listWalk{}
	if s.XListType != nil && (*s.XListType == "set" || *s.XListType == "map") {
		alone := *s
		alone.Items = nil
		w.own = &schema.Structural{Properties: map[string]schema.Structural{ownName: alone}}
	}
	for name, p := range s.Properties {
		if pw := newListWalk(&p); pw != nil {
			if w.props == nil {
				w.props = map[string]*listWalk{}
			}
			w.props[name] = pw
		}
	}
	if s.AdditionalProperties != nil {
		w.additional = newListWalk(s.AdditionalProperties.Structural)
	}
	w.items = newListWalk(s.Items)
	if w.own == nil && w.props == nil && w.additional == nil && w.items == nil {
		return nil
	}
	return w
}

// check returns listtype.ValidateListSetsAndMaps's errors for obj, a
// value of w's node at path.
func (w *listWalk) check(path *field.Path, obj any) field.ErrorList {
	if w == nil {
		return nil
	}
	var errs field.ErrorList
	switch obj := obj.(type) {
	case []any:
		if w.own != nil {
			for _, e := range listtype.ValidateListSetsAndMaps(nil, w.own, map[string]any{ownName: obj}) {
				// The library named the list ownName: its path.
				e.Field = path.String() + strings.TrimPrefix(e.Field, ownName)
				errs = append(errs, e)
			}
		}
		if w.items != nil {
			for i, v := range obj {
				errs = append(errs, w.items.check(path.Index(i), v)...)
			}
		}
	case map[string]any:
		if w.additional != nil {
			for k, v := range obj {
				errs = append(errs, w.additional.check(path.Key(k), v)...)
			}
		}
		if w.props != nil {
			for k, v := range obj {
				if p, ok := w.props[k]; ok {
					errs = append(errs, p.check(path.Child(k), v)...)
				}
			}
		}
	}
	return errs
}
