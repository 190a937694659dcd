package filesource

import (
	"encoding/json"
	"fmt"
	"testing"
)

// scanCases are documents whose apiVersion and kind the line scan reads
// right, reads wrong, or cannot read.
var scanCases = []struct {
	name, doc string
	scanned   bool // typeMeta reads them off the lines
}{
	{"block", "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: a}\nspec: {controllerName: x.dev/y}\n", true},
	{"quoted and commented", "apiVersion: 'v1' # core\nkind: \"Namespace\"\nmetadata: {name: apps}\n", true},
	{"crlf and tab", "apiVersion:\tv1\r\nkind: Namespace\r\nmetadata: {name: apps}\r\n", true},
	{"flow", "{apiVersion: v1, kind: Namespace, metadata: {name: apps}}\n", false},
	{"no kind", "apiVersion: v1\nmetadata: {name: apps}\n", false},
	{"duplicate kind", "apiVersion: v1\nkind: Namespace\nkind: Namespace\nmetadata: {name: apps}\n", false},
	{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", true},
	{"kind of another version", "apiVersion: gateway.networking.k8s.io/v9\nkind: Gateway\nmetadata: {name: g}\n", true},
	{"anchored", "apiVersion: &v v1\nkind: Namespace\nmetadata: {name: apps}\n", false},
	{"unknown field", "apiVersion: v1\nkind: Namespace\nmetadata: {name: apps}\nspec: {bogus: 1}\n", true},
	{"no name", "apiVersion: v1\nkind: Namespace\nmetadata: {labels: {a: b}}\n", true},
	{"refused by admission", "apiVersion: v1\nkind: Namespace\nmetadata: {name: Apps}\n", true},
	{"refused by the CRD's rules", "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r}\n" +
		"spec: {rules: [{matches: [{path: {type: Exact, value: 'no-slash'}}]}]}\n", true},
	// The line "kind: Namespace" continues a quoted scalar: it only looks
	// like a top-level key.
	{"key inside a quoted scalar", "apiVersion: v1\nnote: \"x\nkind: Namespace\n\"\nkind: ConfigMap\nmetadata: {name: c}\n", false},
	{"kind inside a quoted scalar only", "apiVersion: v1\nnote: \"x\nkind: Namespace\n\"\nmetadata: {name: c}\n", true},
	{"real kind quoted, another in a scalar", "apiVersion: v1\n\"kind\": ConfigMap\nmetadata: {name: c, annotations: {a: \"x\nkind: Namespace\n\"}}\n", true},
}

// TestTypeMetaScan: the line scan reads apiVersion and kind where a
// document is in plain block style and declines otherwise.
func TestTypeMetaScan(t *testing.T) {
	for _, c := range scanCases {
		if _, ok := typeMeta([]byte(c.doc)); ok != c.scanned {
			t.Errorf("%s: scanned %v, want %v", c.name, ok, c.scanned)
		}
	}
	tm, _ := typeMeta([]byte(scanCases[1].doc))
	if tm.APIVersion != "v1" || tm.Kind != "Namespace" {
		t.Errorf("quoted and commented: read %+v", tm)
	}
}

// TestDecodeOneMatchesParsedDecoding: decoding with the scanned apiVersion
// and kind gives the same object, or the same error, as decoding with them
// read by the YAML parser, whatever the scan made of the document.
func TestDecodeOneMatchesParsedDecoding(t *testing.T) {
	admit := mustAdmission(t)
	for _, c := range scanCases {
		got, gotErr := decodeOne([]byte(c.doc), admit, newJSONPlans())
		want, wantErr := decodeParsed([]byte(c.doc), admit)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("%s: error %v, want %v", c.name, gotErr, wantErr)
			continue
		}
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(want)
		if string(gotJSON) != string(wantJSON) {
			t.Errorf("%s: decoded %s, want %s", c.name, gotJSON, wantJSON)
		}
	}
}
