package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// exampleWith copies the bundled example to a directory of its own, with
// each edit (file, old, new) made.
func exampleWith(t *testing.T, edits ...[3]string) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../../examples/standalone/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range edits {
			if filepath.Base(f) == e[0] {
				raw = bytes.ReplaceAll(raw, []byte(e[1]), []byte(e[2]))
			}
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The exit codes of check: 0 when every object serves, exitNotServing
// with a summary naming each object and condition when the files are
// valid but something does not serve, exitFailed when they are refused.
func TestCheckExitCodes(t *testing.T) {
	empty := t.TempDir()
	refused := t.TempDir()
	if err := os.WriteFile(filepath.Join(refused, "bad.yaml"), []byte("apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec: {gatewayClassName: x, listeners: [{name: h, port: 0, protocol: HTTP}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		config string
		code   int
		// summary holds what stderr must say, each on one line.
		summary [][]string
	}{
		{"serves", "../../examples/standalone", exitOK, [][]string{{"every one is accepted and programmed"}}},
		{"every kind", "testdata/check/every-kind.yaml", exitOK, [][]string{{"14 objects checked"}}},
		{"misnamed Secret", exampleWith(t, [3]string{"gateway.yaml", "name: app-example-com", "name: app-example-cmo"}), exitNotServing, [][]string{
			{"2 of 6 objects do not fully serve"},
			{"ListenerSet", "demo/app (listener https)", "ResolvedRefs", "InvalidCertificateRef", "app-example-cmo"},
			{"HTTPRoute", "demo/app (parent ListenerSet app)", "Accepted"},
		}},
		{"no such Service port", exampleWith(t, [3]string{"routes.yaml", "port: 80\n", "port: 81\n"}), exitNotServing, [][]string{
			{"HTTPRoute", "demo/app", "ResolvedRefs", "BackendNotFound"},
		}},
		{"empty directory", empty, exitNotServing, [][]string{{"Gateway", "NoGateway", "serve nothing"}}},
		{"refused", refused, exitFailed, [][]string{{"bad.yaml", "port"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run([]string{"check", "--config", c.config}, &out, &errOut); code != c.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, c.code, errOut.String())
			}
			for _, want := range c.summary {
				if !hasLineWith(errOut.String(), want...) {
					t.Errorf("stderr has no line with %q:\n%s", want, errOut.String())
				}
			}
		})
	}
}

func hasLineWith(text string, parts ...string) bool {
	for line := range strings.Lines(text) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// A GatewayClass naming another controller is named in a warning, printed
// with its status, and its Gateway is summarised as not served; no
// condition shows the CRD default's 1970 transition time.
func TestCheckWarnsOfAnotherControllerName(t *testing.T) {
	dir := exampleWith(t, [3]string{"gateway.yaml", "controllerName: portico.dev/gateway-controller", "controllerName: example.com/gateway-controller"})
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", dir}, &out, &errOut); code != exitNotServing {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitNotServing, errOut.String())
	}
	if !hasLineWith(errOut.String(), "warning", `GatewayClass "portico"`, `"example.com/gateway-controller"`, `"portico.dev/gateway-controller"`) {
		t.Errorf("no warning naming the class and both controllers:\n%s", errOut.String())
	}
	if !hasLineWith(errOut.String(), "Gateway", "demo/web", "NotServed", "example.com/gateway-controller") {
		t.Errorf("the Gateway is not summarised as not served:\n%s", errOut.String())
	}
	if !strings.Contains(out.String(), "kind: GatewayClass\n") {
		t.Errorf("GatewayClass not printed:\n%s", out.String())
	}
	if strings.Contains(out.String(), "1970-01-01") {
		t.Errorf("a lastTransitionTime of 1970 is printed:\n%s", out.String())
	}
}

// check prints every kind whose status Portico computes, in YAML and in
// JSON, each once, with Portico's conditions.
func TestCheckPrintsEveryComputedKind(t *testing.T) {
	for _, format := range []string{"yaml", "json"} {
		var out, errOut bytes.Buffer
		if code := run([]string{"check", "--config", "testdata/check/every-kind.yaml", "-o", format}, &out, &errOut); code != 0 {
			t.Fatalf("-o %s: exit %d: %s", format, code, errOut.String())
		}
		var items []map[string]any
		if format == "json" {
			var list struct{ Items []map[string]any }
			if err := json.Unmarshal(out.Bytes(), &list); err != nil {
				t.Fatal(err)
			}
			items = list.Items
		} else {
			for d := range strings.SplitSeq(out.String(), "\n---\n") {
				var m map[string]any
				if err := yaml.Unmarshal([]byte(d), &m); err != nil {
					t.Fatal(err)
				}
				items = append(items, m)
			}
		}
		var kinds []string
		for _, it := range items {
			kinds = append(kinds, it["kind"].(string))
			if !strings.Contains(string(must(json.Marshal(it["status"]))), `"status":"True"`) {
				t.Errorf("-o %s: %s has no True condition: %v", format, it["kind"], it["status"])
			}
		}
		if got, want := strings.Join(kinds, ","), strings.Join(checkedKinds, ","); got != want {
			t.Errorf("-o %s printed %s, want %s", format, got, want)
		}
	}
}

// The usage text, check's help and README.md name the kinds check prints,
// all of them.
func TestCheckKindsDocumented(t *testing.T) {
	list := strings.Join(checkedKinds[:len(checkedKinds)-1], ", ") + " and " + checkedKinds[len(checkedKinds)-1]
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"usage": usage, "help check": commandHelp["check"], "README.md": string(readme)} {
		if !strings.Contains(strings.Join(strings.Fields(text), " "), list) {
			t.Errorf("%s does not list %q", name, list)
		}
	}
}

// Check names each listener whose pre-routing filters cannot run and
// each HTTPRoute whose ExternalAuth filter names no Service, with the
// condition and reason of each.
func TestCheckReportsListenerAndRouteFilters(t *testing.T) {
	dir := t.TempDir()
	objects := `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: portico}
spec: {controllerName: portico.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  gatewayClassName: portico
  listeners:
  - name: ext
    port: 8080
    protocol: HTTP
    hostname: ext.example.com
    filters: {requests: [{type: ExtensionRef, extensionRef: {group: example.com, kind: Projector, name: p}}]}
  - name: missing
    port: 8080
    protocol: HTTP
    hostname: missing.example.com
    filters: {requests: [{type: ExternalAuth, externalAuth: {protocol: GRPC, backendRef: {name: nosuch, port: 9000}, grpc: {}}}]}
  - {name: plain, port: 8080, protocol: HTTP, hostname: plain.example.com}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web}
spec:
  parentRefs: [{name: gw, sectionName: plain}]
  rules:
  - filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: authz, port: 9000}, http: {}}}]
    backendRefs: [{name: web, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
`
	if err := os.WriteFile(filepath.Join(dir, "objects.yaml"), []byte(objects), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", dir}, &out, &errOut); code != exitNotServing {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitNotServing, errOut.String())
	}
	for _, want := range [][]string{
		{"Gateway", "listener ext", "Accepted", "UnsupportedValue", "ExtensionRef"},
		{"Gateway", "listener missing", "ResolvedRefs", "InvalidListenerFilterRef", "nosuch"},
		{"HTTPRoute", "default/web", "ResolvedRefs", "BackendNotFound", "ExternalAuth"},
	} {
		if !hasLineWith(errOut.String(), want...) {
			t.Errorf("stderr has no line with %q:\n%s", want, errOut.String())
		}
	}
}
