package filesource

import (
	"encoding"
	"encoding/json"
	"encoding/json/jsontext"
	jsonv2 "encoding/json/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// unmarshalStrict is yaml.UnmarshalStrict into obj, a pointer to a typed
// object, with a shorter way from the YAML to the JSON the strict decoding
// reads. The library parses the YAML into a tree, copies that tree into
// JSON-shaped maps (turning numbers and booleans into strings where the
// target field is a string), encodes those maps with reflection, and
// decodes the JSON into obj. yamlJSON writes the JSON from the parsed tree
// directly, with the same tokens in the same order, for the documents it
// understands; for any other, and for any error, the library decodes the
// document again, so its verdict and error messages stand
// (TestUnmarshalStrictMatchesTheLibrary, FuzzUnmarshalStrict).
func unmarshalStrict(raw []byte, obj any, plans *jsonPlans) error {
	js, ok := yamlJSON(raw, reflect.TypeOf(obj), plans)
	if ok {
		if err := unmarshalStrictJSON(js, obj); err == nil {
			return nil
		}
		// obj may hold part of the document: the library starts from a
		// new value, as it did before this path was taken.
		v := reflect.ValueOf(obj).Elem()
		v.Set(reflect.Zero(v.Type()))
	}
	return yaml.UnmarshalStrict(raw, obj)
}

// unmarshalStrictJSON decodes js into obj as the library decodes the JSON
// it made: the library's json.Decoder with unknown fields disallowed reads
// one value and unmarshals it with these options; js is one value, so
// without the decoder's buffering.
func unmarshalStrictJSON(js []byte, obj any) error {
	return jsonv2.Unmarshal(js, &obj, json.DefaultOptionsV1(), jsonv2.RejectUnknownMembers(true))
}

// yamlJSON is the JSON sigs.k8s.io/yaml makes of raw for a target of type
// t. ok is false when raw does not parse, or holds what this conversion
// leaves to the library: keys that are not strings, floating-point
// numbers, strings that are not UTF-8, values of other types.
//
// Where the library turns an integer or a boolean into a string (its
// target field is of a string kind), yamlJSON does so only where it can
// tell the same from the types alone (plans.target); elsewhere it writes
// the number as it is, which the strict decoding of a string field
// refuses, and the library's decoding then has the last word. It never
// writes a string where the library writes a number.
func yamlJSON(raw []byte, t reflect.Type, plans *jsonPlans) ([]byte, bool) {
	tree, ok := scanYAML(raw)
	if !ok {
		if err := yamlv2.UnmarshalStrict(raw, &tree); err != nil {
			return nil, false
		}
	}
	w := jsonWriter{plans: plans, buf: make([]byte, 0, len(raw)+len(raw)/4)}
	if !w.value(tree, plans.target(t)) {
		return nil, false
	}
	return w.buf, true
}

type jsonWriter struct {
	plans *jsonPlans
	buf   []byte
	keys  []string
}

// value writes v for a target of type t (nil: no type known, so no
// integer or boolean turns into a string).
func (w *jsonWriter) value(v any, t reflect.Type) bool {
	switch v := v.(type) {
	case nil:
		w.buf = append(w.buf, "null"...)
	case string:
		var err error
		if w.buf, err = jsontext.AppendQuote(w.buf, v); err != nil {
			return false
		}
	case bool:
		w.scalar(strconv.FormatBool(v), t)
	case int:
		w.scalar(strconv.FormatInt(int64(v), 10), t)
	case int64:
		w.scalar(strconv.FormatInt(v, 10), t)
	case uint64:
		w.scalar(strconv.FormatUint(v, 10), t)
	case []any:
		var elem reflect.Type
		if t != nil && t.Kind() == reflect.Slice {
			elem = w.plans.target(t.Elem())
		}
		w.buf = append(w.buf, '[')
		for i, e := range v {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			if !w.value(e, elem) {
				return false
			}
		}
		w.buf = append(w.buf, ']')
	case map[any]any:
		return w.object(v, t)
	default:
		return false
	}
	return true
}

// scalar writes an integer's or boolean's text, quoted where the target
// is a string.
func (w *jsonWriter) scalar(text string, t reflect.Type) {
	if t != nil && t.Kind() == reflect.String {
		w.buf = append(w.buf, '"')
		w.buf = append(w.buf, text...)
		w.buf = append(w.buf, '"')
		return
	}
	w.buf = append(w.buf, text...)
}

// object writes a mapping with its keys sorted, as encoding a map does.
func (w *jsonWriter) object(m map[any]any, t reflect.Type) bool {
	start := len(w.keys)
	for k := range m {
		s, ok := k.(string)
		if !ok {
			return false
		}
		w.keys = append(w.keys, s)
	}
	keys := w.keys[start:]
	slices.Sort(keys)
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = w.plans.fields(t)
		case reflect.Map:
			// The library takes a value of the map's element type that
			// has no address, unlike a struct field's, and finds fewer
			// decoders of their own there: only elements where that
			// makes no difference go this way (labels, a Secret's data).
			e := t.Elem()
			if e.NumMethod() != 0 || e.Kind() != reflect.String && (e.Kind() != reflect.Slice || e.Elem().Kind() != reflect.Uint8 || e.Elem().NumMethod() != 0) {
				return false
			}
			elem = e
		}
	}
	w.buf = append(w.buf, '{')
	for i, k := range keys {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		var err error
		if w.buf, err = jsontext.AppendQuote(w.buf, k); err != nil {
			return false
		}
		w.buf = append(w.buf, ':')
		ft := elem
		if fields != nil {
			var known bool
			if ft, known = fields[k]; !known {
				// An unknown field, or one the decoding matches
				// without regard to case: the library's business.
				return false
			}
		}
		if !w.value(m[k], ft) {
			return false
		}
	}
	w.buf = append(w.buf, '}')
	w.keys = w.keys[:start]
	return true
}

// jsonPlans remembers, per Go type, what yamlJSON needs of it; one is
// shared by the workers of a decodeAll.
type jsonPlans struct {
	mu      sync.Mutex
	targets map[reflect.Type]reflect.Type
	structs map[reflect.Type]map[string]reflect.Type
}

func newJSONPlans() *jsonPlans {
	return &jsonPlans{
		targets: map[reflect.Type]reflect.Type{},
		structs: map[reflect.Type]map[string]reflect.Type{},
	}
}

var (
	unmarshalsJSON = reflect.TypeFor[json.Unmarshaler]()
	unmarshalsText = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// target is the type the JSON of a value of type t is decoded into, past
// pointers, as far as the library's conversion goes: nil for a type that
// decodes itself (the library turns nothing into a string for it).
func (p *jsonPlans) target(t reflect.Type) reflect.Type {
	p.mu.Lock()
	got, ok := p.targets[t]
	p.mu.Unlock()
	if ok {
		return got
	}
	got = t
	for {
		if got.Implements(unmarshalsJSON) || got.Implements(unmarshalsText) ||
			reflect.PointerTo(got).Implements(unmarshalsJSON) || reflect.PointerTo(got).Implements(unmarshalsText) {
			got = nil
			break
		}
		if got.Kind() != reflect.Pointer {
			break
		}
		got = got.Elem()
	}
	p.mu.Lock()
	p.targets[t] = got
	p.mu.Unlock()
	return got
}

// fields maps the JSON names of the struct t's fields to the library's
// targets: a field's own type, or for a name an embedded struct brings,
// that struct (the library looks no deeper). Names the decoding drops (two
// fields at the same depth) are left out, so are fields that encoding/json
// quotes itself: yamlJSON leaves a key that is not here to the library.
func (p *jsonPlans) fields(t reflect.Type) map[string]reflect.Type {
	p.mu.Lock()
	got, ok := p.structs[t]
	p.mu.Unlock()
	if ok {
		return got
	}
	got = map[string]reflect.Type{}
	direct := map[string]int{}
	promoted := map[string][]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for n := range embeddedNames(f.Type) {
				promoted[n] = append(promoted[n], f.Type)
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		direct[name]++
		if !slices.Contains(strings.Split(opts, ","), "string") {
			got[name] = p.target(f.Type)
		}
	}
	for name, n := range direct {
		if n > 1 {
			delete(got, name)
		}
	}
	for name, from := range promoted {
		if direct[name] == 0 && len(from) == 1 {
			got[name] = p.target(from[0])
		}
	}
	p.mu.Lock()
	p.structs[t] = got
	p.mu.Unlock()
	return got
}

// embeddedNames are the JSON names an embedded struct of type t brings.
func embeddedNames(t reflect.Type) map[string]bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	names := map[string]bool{}
	if t.Kind() != reflect.Struct {
		return names
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for n := range embeddedNames(f.Type) {
				names[n] = true
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names[name] = true
	}
	return names
}
