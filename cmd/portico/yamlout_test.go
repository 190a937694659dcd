package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"sigs.k8s.io/yaml"
)

// marshalCases are values whose JSON holds what the YAML parser resolves
// in its own way: numbers of every form, strings that would be other
// scalars unquoted, escapes, empty collections.
var marshalCases = []any{
	map[string]any{"a": json.Number("0"), "b": json.Number("-0"), "c": json.Number("12"), "d": json.Number("-7"),
		"e": json.Number("9223372036854775807"), "f": json.Number("9223372036854775808"), "g": json.Number("18446744073709551616"),
		"h": json.Number("1.5"), "i": json.Number("1e3"), "j": json.Number("-2.5E-3"), "k": json.Number("1e400"), "l": json.Number("1.0")},
	map[string]any{"yes": "yes", "no": "no", "on": "ON", "null": "null", "~": "~", "": "", "0755": "0755", "1e3": "1e3",
		"t": "2024-01-02T03:04:05Z", "html": "<a & b>", "u": "café \u2028 \u2029 ☃", "ctl": "a\tb\nc\r\x01\x7f", "q": `"'\`,
		"colon": "a: b", "hash": "a #b", "lead": " a", "trail": "a ", "dash": "- a", "multi": "line1\nline2\n"},
	map[string]any{"empty map": map[string]any{}, "empty list": []any{}, "nil": nil, "t": true, "f": false,
		"nested": []any{map[string]any{"x": []any{json.Number("1"), "2", nil, true}}}},
	checkDocument{APIVersion: "gateway.networking.k8s.io/v1", Kind: "Gateway", Metadata: checkMetadata{Name: "g", Namespace: "apps", Generation: 3},
		Status: map[string]any{"conditions": []any{map[string]any{"type": "Accepted", "status": "True", "observedGeneration": int64(3)}}}},
	map[string]any{"nel\u0085": "bom\ufeff", "ff": "\uffff", "c1": "\u0090", "astral": "\U0001F600", "sep": "\u2028"},
	"just a string",
	json.Number("42"),
	nil,
}

// TestMarshalYAMLMatchesTheLibrary: marshalYAML prints what yaml.Marshal
// prints, for the cases above and for every object `portico check` prints
// of a configuration of every kind.
func TestMarshalYAMLMatchesTheLibrary(t *testing.T) {
	values := append([]any{}, marshalCases...)
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", "testdata/check/every-kind.yaml", "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var list struct{ Items []map[string]any }
	d := json.NewDecoder(&out)
	d.UseNumber()
	if err := d.Decode(&list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < 5 {
		t.Fatalf("only %d objects printed", len(list.Items))
	}
	for _, it := range list.Items {
		values = append(values, it)
	}
	for _, v := range values {
		sameYAML(t, v)
	}
}

func sameYAML(t *testing.T, v any) {
	t.Helper()
	got, gotErr := marshalYAML(v)
	want, wantErr := yaml.Marshal(v)
	if (gotErr != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
		t.Errorf("%#v:\n got %q (%v)\nwant %q (%v)", v, got, gotErr, want, wantErr)
	}
}

// FuzzMarshalYAML: for any JSON value, marshalYAML prints what
// yaml.Marshal prints.
func FuzzMarshalYAML(f *testing.F) {
	for _, v := range marshalCases {
		js, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(js)
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		d := json.NewDecoder(bytes.NewReader(js))
		d.UseNumber()
		var v any
		if d.Decode(&v) != nil {
			return
		}
		sameYAML(t, v)
	})
}
