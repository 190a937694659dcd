package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func TestVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"version"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	text := out.String()
	if !strings.HasPrefix(text, "portico ") || !strings.Contains(text, "\ncommit: ") || !strings.Contains(text, "\ngo: "+runtime.Version()+"\n") {
		t.Errorf("version output:\n%s", text)
	}
	out.Reset()
	if code := run([]string{"version", "-o", "json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var v struct{ Version, Commit, GoVersion string }
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out.String())
	}
	if v.GoVersion != runtime.Version() || v.Version == "" || v.Commit == "" {
		t.Errorf("version JSON %+v", v)
	}
}

// check -o json prints the same objects as the YAML stream, as one List.
func TestCheckJSON(t *testing.T) {
	var yamlOut, jsonOut, errOut bytes.Buffer
	if code := run([]string{"check", "--config", "../../examples/standalone"}, &yamlOut, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if code := run([]string{"check", "--config", "../../examples/standalone", "-o", "json"}, &jsonOut, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var list struct {
		APIVersion, Kind string
		Items            []map[string]any
	}
	if err := json.Unmarshal(jsonOut.Bytes(), &list); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, jsonOut.String())
	}
	if list.APIVersion != "v1" || list.Kind != "List" {
		t.Errorf("apiVersion %q, kind %q", list.APIVersion, list.Kind)
	}
	docs := strings.Split(strings.TrimSpace(yamlOut.String()), "\n---\n")
	if len(list.Items) != len(docs) || len(docs) < 5 {
		t.Fatalf("%d items in JSON, %d documents in YAML", len(list.Items), len(docs))
	}
	for i, d := range docs {
		var fromYAML map[string]any
		if err := yaml.Unmarshal([]byte(d), &fromYAML); err != nil {
			t.Fatal(err)
		}
		// The two runs stamp transition times of their own, which may fall
		// in different seconds.
		a := transitionTimes.ReplaceAll(must(json.Marshal(fromYAML)), nil)
		b := transitionTimes.ReplaceAll(must(json.Marshal(list.Items[i])), nil)
		if !bytes.Equal(a, b) {
			t.Errorf("item %d differs:\nyaml %s\njson %s", i, a, b)
		}
	}
}

// The exit codes README.md documents.
func TestExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{nil, 2},
		{[]string{"frobnicate"}, 2},
		{[]string{"help"}, 0},
		{[]string{"serve", "-h"}, 0},
		{[]string{"version", "-o", "xml"}, 1},
		{[]string{"check"}, 1},
		{[]string{"check", "--config", "../../examples/standalone", "-o", "xml"}, 1},
		{[]string{"check", "--config", "does-not-exist"}, 1},
		{[]string{"serve", "--no-such-flag"}, 1},
	} {
		var out, errOut bytes.Buffer
		if got := run(c.args, &out, &errOut); got != c.code {
			t.Errorf("portico %v: exit %d, want %d (%s)", c.args, got, c.code, errOut.String())
		}
	}
}

var transitionTimes = regexp.MustCompile(`"lastTransitionTime":"[^"]*",?`)

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
