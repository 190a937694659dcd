package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

var update = flag.Bool("update", false, "rewrite testdata/help-serve.golden")

// serve's help goes to standard output, grouped by mode; it is pinned by
// testdata/help-serve.golden (go test ./cmd/portico -run TestServeHelp -update).
func TestServeHelpGolden(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"serve", "-h"}, &out, &errOut); code != 0 || errOut.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
	const golden = "testdata/help-serve.golden"
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("serve -h differs from %s (-update rewrites it):\n%s", golden, out.String())
	}
	for _, g := range []string{"\nStandalone", "\nCluster", "\nPer-Gateway controller", "\nPer-Gateway data plane", "\nKnative", "\nACME", "\nLimits", "\nObservability"} {
		if !strings.Contains(out.String(), g) {
			t.Errorf("no group %q", strings.TrimSpace(g))
		}
	}
	var viaHelp bytes.Buffer
	if code := run([]string{"help", "serve"}, &viaHelp, &errOut); code != 0 || viaHelp.String() != out.String() {
		t.Errorf("help serve: exit %d, and its text differs from serve -h", code)
	}
}

// Every flag of serve is in one group, and every name in a group is a
// flag.
func TestServeHelpGroupsEveryFlag(t *testing.T) {
	fs := newFlagSet("serve", &bytes.Buffer{})
	var f serveFlags
	defineServeFlags(fs, &f)
	in := map[string]int{}
	for _, g := range serveGroups {
		for _, name := range g.flags {
			in[name]++
			if fs.Lookup(name) == nil {
				t.Errorf("group %q names %s, which is not a flag", g.title, name)
			}
		}
	}
	fs.VisitAll(func(fl *flag.Flag) {
		if n := in[fl.Name]; n != 1 && !deprecated(fl) {
			t.Errorf("--%s is in %d groups", fl.Name, n)
		}
	})
}

// An unknown flag gives one line naming the closest flag, not the usage.
func TestUnknownFlagSuggests(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--confg", "x"}, "did you mean --config?"},
		{[]string{"serve", "--acme-emial", "x"}, "did you mean --acme-email?"},
		{[]string{"check", "--controler-name", "x"}, "did you mean --controller-name?"},
		{[]string{"serve", "--frobnicate"}, "unknown flag --frobnicate (portico help serve lists the flags)"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, &out, &errOut); code != exitFailed {
			t.Errorf("%v: exit %d", c.args, code)
		}
		if msg := errOut.String(); strings.Count(msg, "\n") != 1 || !strings.Contains(msg, c.want) {
			t.Errorf("%v: stderr %q, want one line with %q", c.args, msg, c.want)
		}
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"serv"}, &out, &errOut); code != exitUsage || strings.Count(errOut.String(), "\n") != 1 || !strings.Contains(errOut.String(), `did you mean "serve"?`) {
		t.Errorf("serv: exit %d, stderr %q", code, errOut.String())
	}
}

func TestVersionFlagAndHelpCommand(t *testing.T) {
	var a, b, errOut bytes.Buffer
	if run([]string{"--version"}, &a, &errOut) != 0 || run([]string{"version"}, &b, &errOut) != 0 || a.String() != b.String() || a.Len() == 0 {
		t.Errorf("--version %q, version %q", a.String(), b.String())
	}
	for _, cmd := range []string{"check", "echo", "version"} {
		var out bytes.Buffer
		if code := run([]string{"help", cmd}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "Usage: portico "+cmd) || !strings.Contains(out.String(), "\nFlags:\n") {
			t.Errorf("help %s: exit %d\n%s", cmd, code, out.String())
		}
	}
	var out bytes.Buffer
	if code := run([]string{"help", "nope"}, &out, &errOut); code != exitUsage {
		t.Errorf("help nope: exit %d", code)
	}
	out.Reset()
	if code := run([]string{"help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "portico help [COMMAND]") {
		t.Errorf("help: exit %d\n%s", code, out.String())
	}
}

// The old names of renamed flags still work, and say so in the log.
func TestDeprecatedFlagNames(t *testing.T) {
	f, err := parseServeFlags([]string{"--gateway", "apps/web", "--controller", "c:9443"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := parseServeFlags([]string{"--data-plane-controller", "d:9443"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if f.gateway.controller != "c:9443" || cf.cluster.dataPlanes.controller != "d:9443" {
		t.Errorf("--controller set %q, --data-plane-controller %q", f.gateway.controller, cf.cluster.dataPlanes.controller)
	}
	f.deprecated = append(f.deprecated, cf.deprecated...)
	core, logs := observer.New(zap.InfoLevel)
	f.logDeprecated(zap.New(core))
	got := map[string]string{}
	for _, e := range logs.FilterMessage("deprecated flag").All() {
		got[e.ContextMap()["flag"].(string)] = e.ContextMap()["use"].(string)
	}
	if got["--controller"] != "--controller-address" || got["--data-plane-controller"] != "--data-plane-controller-address" || len(got) != 2 {
		t.Errorf("deprecation lines %v", got)
	}
}

// --http1-server is kept one release after Go's HTTP/1 server was removed:
// portico (what it always was by default) is accepted with a deprecation
// line, go is refused in one line that says it was removed.
func TestHTTP1ServerFlagRetired(t *testing.T) {
	f, err := parseServeFlags([]string{"--config", "x", "--http1-server=portico"}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("--http1-server=portico: %v", err)
	}
	core, logs := observer.New(zap.InfoLevel)
	f.logDeprecated(zap.New(core))
	lines := logs.FilterMessage("deprecated flag").All()
	if len(lines) != 1 || lines[0].ContextMap()["flag"] != "--http1-server" || !strings.Contains(fmt.Sprint(lines[0].ContextMap()["why"]), "drop the flag") {
		t.Errorf("deprecation lines %v", lines)
	}
	for _, v := range []string{"go", "net/http"} {
		_, err := parseServeFlags([]string{"--config", "x", "--http1-server", v}, &bytes.Buffer{})
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "--http1-server") {
			t.Errorf("--http1-server %s: %v, want a one-line refusal", v, err)
		}
	}
	if _, err := parseServeFlags([]string{"--config", "x", "--http1-server=go"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "removed") {
		t.Errorf("--http1-server=go: %v, want it said removed", err)
	}
}
