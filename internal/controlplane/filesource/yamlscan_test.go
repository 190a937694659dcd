package filesource

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	yamlv2 "go.yaml.in/yaml/v2"
)

// scanCasesYAML are documents at the edges of what scanYAML takes: every
// construct it reads, each next to a variant it must leave to the parser.
var scanCasesYAML = []string{
	"a: b\n",
	"a: b",
	"a:\n",
	"a:\nb: c\n",
	"a: 'it''s'\nb: \"x y\"\nc: ''\nd: \"\"\n",
	"a: \"x\\ty\"\n",
	"a: 'x\n  y'\n",
	"a: b # c\nd: e#f\n# g\n   # h\n\n",
	"a: b #c\n#d\n",
	"a: 'b'#c\n",
	"a: {b: c}#d\n",
	"a: b  c  \n",
	"a: b\n  c\n",
	"a:\n  b\n",
	"a: b: c\n",
	"a: b:c\n",
	"a: b:\n",
	"a: http://x/y?z=1&w\n",
	"a: [b, c, {d: e, f: [g, 'h', \"i\"]}, [], {}]\n",
	"a: [b, c,]\n",
	"a: {b: c,}\n",
	"a: [b c, d  e ]\n",
	"a: [b: c]\n",
	"a: {b:c}\n",
	"a: {b: c, b: d}\n",
	"a: b\na: c\n",
	"a: [b,\n  c]\n",
	"a: {b: [c, {d: [e]}]}\n",
	"a:\n- b\n- c\nd: e\n",
	"a:\n  - b\n  - c\nd: e\n",
	"a:\n- b\n  - c\n",
	"a:\n  - b\n - c\n",
	"a:\n- - b\n",
	"a:\n-\n- b\n-\n  c: d\n",
	"a:\n- b: c\n  d: e\n- f: g\n  h:\n  - i\n  j: k\nl: m\n",
	"a:\n- b: c\n   d: e\n",
	"a:\n  b:\n    c: d\n  e: f\n g: h\n",
	"a:\n  b:\n    c: d\n  e: f\ng: h\n",
	"a: |\n  x\n  y\n\n  z\n\n\nb: c\n",
	"a: |-\n  x\n   y\n\nb: c\n",
	"a: |+\n  x\n\nb: c\n",
	"a: |2\n   x\n",
	"a: >\n  x\n  y\n",
	"a: | # note\n  x\n",
	"a: |\n\n  x\n",
	"a: |\n  x\n    \n  y\n",
	"a: |\n  x\n  \n  y\n",
	"a: |\n  x\n y\n",
	"a: |\nb: c\n",
	"a: |\n  x",
	"a: |\n  x\n  #y\n# z\n",
	"a:\n  b: |\n    x\n  c: |-\n     y\n    z\n",
	"a:\n- |\n  x\n- |-\n   y\n",
	"a:\n  - |\n   x\n",
	"a: 0\nb: 12\nc: 012\nd: 0x1\ne: -1\nf: +1\ng: 1.5\nh: .5\ni: 1_000\nj: 123456789012345678\nk: 1234567890123456789\n",
	"a: 2024-01-02\nb: 1e3\nc: 12ab\n",
	"d: 127.0.0.1\ne: 1.2.e3\nf: 1.2.3e4\ng: 0b1.1.1\nh: 1.2.example.com\nj: 1.2.3:4\nk: 0.0.0.0\n",
	"i: 1.2-3.4\n",
	"a: y\nb: Yes\nc: off\nd: ON\ne: ~\nf: null\ng: NULL\nh: True\ni: tRUE\nj: nO\nk: <<\n",
	"y: a\n",
	"on: a\n",
	"1: a\n",
	"~: a\n",
	"a b: c\n",
	"'a': b\n",
	"a : b\n",
	"<<: {a: b}\n",
	"a: &x b\n",
	"a: *x\n",
	"a: !!str b\n",
	"%YAML 1.1\n---\na: b\n",
	"---\na: b\n",
	"a: b\n...\n",
	"a:\tb\n",
	"a: b\r\n",
	"a: caf\xc3\xa9\n",
	"a: \xff\n",
	" a: b\n c: d\n",
	"- a\n- b\n",
	"just a string\n",
	"",
	"# only a comment\n",
	"{a: b}\n",
	"a: ? b\n",
	"a: -b\n",
	"a: - b\n",
	"a: @b\n",
	"a: `b\n",
	"a: %b\n",
	"a: b]\nc: d}\ne: f,g\n",
	"a: \"b\" c\n",
	"a: [\"b\"c]\n",
	"a: {\"b\": c}\n",
	strings.Repeat("k", 1100) + ": v\n",
	"a: " + strings.Repeat("[", 80) + strings.Repeat("]", 80) + "\n",
	"a:\n  b:\n  - c\n  d: e\n",
	"a:\n  -   b: c\n      d: e\n",
	"a:\n- b\n# c\n- d\n",
	"a:\n - b\n -\n",
	"a: x #\nb: |\n  y\n  z\n# end\n",
}

// TestScanYAMLMatchesTheParser: wherever scanYAML takes a document, the
// parser takes it too and makes the same tree, over the corpus of
// TestUnmarshalStrictMatchesTheLibrary and documents at the edges of the
// subset; and the scanner takes every document of the benchmarks' sites.
func TestScanYAMLMatchesTheParser(t *testing.T) {
	docs, _ := corpusDocuments(t)
	for _, c := range scanCasesYAML {
		docs = append(docs, []byte(c))
	}
	var taken int
	for _, raw := range docs {
		ok, diff := scanSameAsTheParser(raw)
		if diff != "" {
			t.Errorf("%s\n%q", diff, raw)
		}
		if ok {
			taken++
		}
	}
	t.Logf("%d documents, %d taken by the scanner", len(docs), taken)
	for _, raw := range corpusSites() {
		if _, ok := scanYAML(raw); !ok {
			t.Errorf("the scanner left a site's document to the parser:\n%s", raw)
		}
	}
	// The scanner must take the constructs it is for, or it is no use.
	for _, c := range []string{
		"a: b # c\nd: e#f\n# g\n   # h\n\n",
		"a:\n- b: c\n  d: e\n- f: g\n  h:\n  - i\n  j: k\nl: m\n",
		"a: |\n  x\n  y\n\n  z\n\n\nb: c\n",
		"a: [b, c, {d: e, f: [g, 'h', \"i\"]}, [], {}]\n",
		"a: y\nb: Yes\nc: off\nd: ON\ne: ~\nf: null\ng: NULL\nh: True\ni: tRUE\nj: nO\n",
	} {
		if _, ok := scanYAML([]byte(c)); !ok {
			t.Errorf("the scanner left to the parser:\n%s", c)
		}
	}
}

// scanSameAsTheParser says how scanYAML's tree of raw differs from the
// parser's; ok is whether the scanner took raw.
func scanSameAsTheParser(raw []byte) (ok bool, diff string) {
	got, ok := scanYAML(raw)
	if !ok {
		return false, ""
	}
	var want any
	if err := yamlv2.UnmarshalStrict(raw, &want); err != nil {
		return true, fmt.Sprintf("scanned %#v, the parser refused it: %v", got, err)
	}
	if !reflect.DeepEqual(got, want) {
		return true, fmt.Sprintf("scanned\n%#v\nthe parser\n%#v", got, want)
	}
	return true, ""
}

// FuzzScanYAML: for any bytes, scanYAML makes the parser's tree or leaves
// them to the parser.
func FuzzScanYAML(f *testing.F) {
	docs, _ := corpusDocuments(f)
	for i, raw := range docs {
		if i%5 == 0 || i < 80 {
			f.Add(raw)
		}
	}
	for _, c := range scanCasesYAML {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if _, diff := scanSameAsTheParser(raw); diff != "" {
			t.Errorf("%s\n%q", diff, raw)
		}
	})
}
