package filesource

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// located is an error about a line of a document (1-based, counted from
// the document's first line).
type located struct {
	line int
	err  error
}

func (e *located) Error() string { return e.err.Error() }
func (e *located) Unwrap() error { return e.err }

// describe words the failure of raw's strict decoding into obj (of kind
// tm) as a user reads it: the object, the field path and the line of the
// first field, in document order, that is unknown, given twice or of the
// wrong shape, e.g. `HTTPRoute apps/x: spec.rules[0].matches[0].path:
// unknown field "tpye"`. The JSON decoder's own message names neither the
// object, nor the path, nor the line. It runs only after the decoding
// failed; nil when it finds nothing to say (the decoder's error stands).
func describe(raw []byte, tm *metav1.TypeMeta, obj any) error {
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil || root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return nil
	}
	doc := root.Content[0]
	at, path, problem := locate(doc, reflect.TypeOf(obj), nil)
	if at == nil {
		return nil
	}
	where := ""
	if path != nil {
		where = path.String() + ": "
	}
	return &located{line: at.Line, err: fmt.Errorf("%s %s: %s%s", tm.Kind, objectName(doc, tm.Kind), where, problem)}
}

// objectName is namespace/name of the document's object as its metadata
// says (the namespace defaulted as the API server would), or its name
// alone for a kind without namespace.
func objectName(doc *yaml.Node, kind string) string {
	var name, namespace string
	if md := valueOf(doc, "metadata"); md != nil {
		if n := valueOf(md, "name"); n != nil && n.Kind == yaml.ScalarNode {
			name = n.Value
		}
		if n := valueOf(md, "namespace"); n != nil && n.Kind == yaml.ScalarNode {
			namespace = n.Value
		}
	}
	switch kind {
	case "GatewayClass", "Namespace", "ClusterTrustBundle":
		return name
	}
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + name
}

// valueOf is the value of key in the mapping n; nil when n is no mapping
// or has no such key.
func valueOf(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

var jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()

// locate finds the first node below n, in document order, that a value
// of type t cannot be decoded from; path is n's. A type that decodes
// itself (times, quantities, int-or-string) is taken as it comes.
func locate(n *yaml.Node, t reflect.Type, path *field.Path) (*yaml.Node, *field.Path, string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(jsonUnmarshaler) || t.Kind() == reflect.Interface {
		return nil, nil, ""
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil, ""
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return n, path, "expected an object, got " + shape(n)
		}
		fields := jsonFields(t)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if seen[key.Value] {
				return key, path, fmt.Sprintf("field %q given twice", key.Value)
			}
			seen[key.Value] = true
			ft, ok := fields[key.Value]
			if !ok {
				for name, f := range fields {
					if strings.EqualFold(name, key.Value) {
						ft, ok = f, true
						break
					}
				}
			}
			if !ok {
				return key, path, fmt.Sprintf("unknown field %q", key.Value)
			}
			if at, p, problem := locate(value, ft, childPath(path, key.Value)); at != nil {
				return at, p, problem
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return n, path, "expected an object, got " + shape(n)
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if seen[key.Value] {
				return key, path, fmt.Sprintf("key %q given twice", key.Value)
			}
			seen[key.Value] = true
			if at, p, problem := locate(value, t.Elem(), keyPath(path, key.Value)); at != nil {
				return at, p, problem
			}
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			if n.Kind != yaml.ScalarNode {
				return n, path, "expected base64 data, got " + shape(n)
			}
			break
		}
		if n.Kind != yaml.SequenceNode {
			return n, path, "expected a list, got " + shape(n)
		}
		for i, e := range n.Content {
			if at, p, problem := locate(e, t.Elem(), indexPath(path, i)); at != nil {
				return at, p, problem
			}
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return n, path, "expected a string, got " + shape(n)
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" && !yaml11Bool(n.Value) {
			return n, path, "expected true or false, got " + shape(n)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" && n.Tag != "!!float" {
			return n, path, "expected a number, got " + shape(n)
		}
		if _, err := strconv.ParseFloat(n.Value, 64); err != nil && n.Tag == "!!float" {
			return n, path, "expected a number, got " + shape(n)
		}
	}
	return nil, nil, ""
}

// jsonFields are the fields of struct type t by their JSON names, those of
// inlined structs included.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if name == "" && ft.Kind() == reflect.Struct && (f.Anonymous || strings.Contains(opts, "inline")) {
			for k, v := range jsonFields(ft) {
				if _, ok := fields[k]; !ok {
					fields[k] = v
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// shape names what n is, for messages.
func shape(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "an object"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// yaml11Bool reports whether s is a boolean in YAML 1.1, which the
// decoder reads ("yes", "on", ...), and YAML 1.2 does not.
func yaml11Bool(s string) bool {
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "on", "On", "ON", "off", "Off", "OFF":
		return true
	}
	return false
}

func childPath(p *field.Path, name string) *field.Path {
	if p == nil {
		return field.NewPath(name)
	}
	return p.Child(name)
}

func keyPath(p *field.Path, key string) *field.Path {
	if p == nil {
		return field.NewPath("").Key(key)
	}
	return p.Key(key)
}

func indexPath(p *field.Path, i int) *field.Path {
	if p == nil {
		return field.NewPath("").Index(i)
	}
	return p.Index(i)
}
