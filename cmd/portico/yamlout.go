package main

import (
	"bytes"
	"encoding/json"
	"strconv"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// marshalYAML is yaml.Marshal(v) without its YAML parse. The library
// encodes v as JSON, parses that JSON with the YAML parser into a tree and
// emits the tree; on `portico check` of thousands of objects the parse
// was half of the time spent printing. marshalYAML makes the same tree
// with the JSON decoder, numbers resolved as the YAML parser resolves
// them, and emits it the same way (TestMarshalYAMLMatchesTheLibrary). A
// number it cannot tell the resolution of goes to the library.
func marshalYAML(v any) ([]byte, error) {
	js, err := json.Marshal(v)
	if err != nil {
		return yaml.Marshal(v)
	}
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var decoded any
	if err := d.Decode(&decoded); err != nil {
		return yaml.Marshal(v)
	}
	tree, ok := yamlTree(decoded)
	if !ok {
		return yaml.Marshal(v)
	}
	return yamlv2.Marshal(tree)
}

// yamlTree is the tree the YAML parser makes of the JSON that decoded to
// v: objects as map[any]any, integers as int (uint64 past int64), other
// numbers as float64.
func yamlTree(v any) (any, bool) {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[any]any, len(v))
		for k, e := range v {
			if !readable(k) {
				return nil, false
			}
			t, ok := yamlTree(e)
			if !ok {
				return nil, false
			}
			m[k] = t
		}
		return m, true
	case []any:
		l := make([]any, len(v))
		for i, e := range v {
			t, ok := yamlTree(e)
			if !ok {
				return nil, false
			}
			l[i] = t
		}
		return l, true
	case json.Number:
		s := string(v)
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return int(n), true
		}
		if n, err := strconv.ParseUint(s, 10, 64); err == nil {
			return n, true
		}
		// A JSON number with a fraction or an exponent is a float to
		// the YAML parser when it is finite.
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	case string:
		return v, readable(v)
	case bool, nil:
		return v, true
	}
	return nil, false
}

// readable is whether the YAML parser reads s as the JSON encoder writes
// it: characters under U+0020 are escaped, and so are U+2028 and U+2029;
// the parser refuses other characters than printable ones unescaped (DEL,
// C1 controls, U+FEFF, U+FFFE, U+FFFF) and takes U+0085 for a line break.
func readable(s string) bool {
	for _, r := range s {
		if r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0xfeff || r == 0xfffe || r == 0xffff {
			return false
		}
	}
	return true
}
