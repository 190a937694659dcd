package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"k8s.io/apimachinery/pkg/api/meta"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func TestCheckPrintsStatusesOfGatewayAndListenerSets(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", "../../examples/standalone"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	docs := strings.Split(out.String(), "\n---\n")
	kinds := map[string]int{}
	for _, d := range docs {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct{ Name, Namespace string }
		}
		if err := yaml.Unmarshal([]byte(d), &head); err != nil {
			t.Fatalf("document is not YAML: %v\n%s", err, d)
		}
		if head.APIVersion != "gateway.networking.k8s.io/v1" {
			t.Errorf("apiVersion %q", head.APIVersion)
		}
		kinds[head.Kind]++
		switch head.Kind {
		case "Gateway":
			var gw gwv1.Gateway
			mustUnmarshal(t, d, &gw)
			for _, c := range []string{"Accepted", "Programmed"} {
				if !meta.IsStatusConditionTrue(gw.Status.Conditions, c) {
					t.Errorf("Gateway %s not %s: %+v", gw.Name, c, gw.Status.Conditions)
				}
			}
			if gw.Status.AttachedListenerSets == nil || *gw.Status.AttachedListenerSets != 2 {
				t.Errorf("attachedListenerSets = %v, want 2", gw.Status.AttachedListenerSets)
			}
			if len(gw.Status.Listeners) != 1 || gw.Status.Listeners[0].Name != "http" || gw.Status.Listeners[0].AttachedRoutes != 1 {
				t.Errorf("Gateway listeners status: %+v", gw.Status.Listeners)
			}
			for _, c := range gw.Status.Conditions {
				if c.LastTransitionTime.IsZero() {
					t.Errorf("condition %s has no lastTransitionTime", c.Type)
				}
			}
		case "ListenerSet":
			var ls gwv1.ListenerSet
			mustUnmarshal(t, d, &ls)
			for _, c := range []string{"Accepted", "Programmed"} {
				if !meta.IsStatusConditionTrue(ls.Status.Conditions, c) {
					t.Errorf("ListenerSet %s not %s: %+v", ls.Name, c, ls.Status.Conditions)
				}
			}
			if len(ls.Status.Listeners) != 1 || ls.Status.Listeners[0].AttachedRoutes != 1 {
				t.Errorf("ListenerSet %s listeners status: %+v", ls.Name, ls.Status.Listeners)
			}
		case "HTTPRoute":
			var r gwv1.HTTPRoute
			mustUnmarshal(t, d, &r)
			// app names the Gateway's http listener and its ListenerSet; shop its ListenerSet.
			if want := map[string]int{"app": 2, "shop": 1}[r.Name]; len(r.Status.Parents) != want {
				t.Errorf("HTTPRoute %s: %d parent statuses, want %d", r.Name, len(r.Status.Parents), want)
			}
			for _, p := range r.Status.Parents {
				if !meta.IsStatusConditionTrue(p.Conditions, "Accepted") || !meta.IsStatusConditionTrue(p.Conditions, "ResolvedRefs") {
					t.Errorf("HTTPRoute %s parent %s: %+v", r.Name, p.ParentRef.Name, p.Conditions)
				}
			}
		}
	}
	if kinds["Gateway"] != 1 || kinds["ListenerSet"] != 2 || kinds["HTTPRoute"] != 2 {
		t.Errorf("printed kinds %v", kinds)
	}
}

func mustUnmarshal(t *testing.T, doc string, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
}

// TestCheckPrintsConfig: -o config prints the data plane's configuration
// of the example: its port, the listeners on it with the Host each serves,
// their routes, and the endpoints they send to.
func TestCheckPrintsConfig(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", "../../examples/standalone", "-o", "config"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var doc struct {
		Ports []struct {
			Port      string
			Protocol  string
			Listeners []struct {
				Key    string
				Routes []struct{ Hostname string }
			}
		}
		Endpoints map[string][]string
	}
	if err := yaml.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if len(doc.Ports) == 0 || len(doc.Endpoints) == 0 {
		t.Fatalf("no ports or no endpoints:\n%s", out.String())
	}
	routes := 0
	for _, p := range doc.Ports {
		for _, l := range p.Listeners {
			if !strings.HasPrefix(l.Key, "Gateway/") && !strings.HasPrefix(l.Key, "ListenerSet/") {
				t.Errorf("listener key %q", l.Key)
			}
			routes += len(l.Routes)
		}
	}
	if routes == 0 {
		t.Errorf("no route table printed:\n%s", out.String())
	}
}

func TestCheckErrorsNameFileAndDocument(t *testing.T) {
	cases := map[string]struct {
		content string
		want    []string
	}{
		"unknown kind":  {"apiVersion: v1\nkind: Service\nmetadata: {name: a}\n---\napiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n", []string{"bad.yaml", "document 2", `unsupported kind "Widget"`}},
		"bad yaml":      {"apiVersion: v1\nkind: Service\nmetadata: {name: a\n", []string{"bad.yaml", "document 1"}},
		"unknown field": {"apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: g}\nspec: {gatewayClassName: x, listners: []}\n", []string{"bad.yaml", "document 1", "listners"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errOut bytes.Buffer
			if code := run([]string{"check", "--config", dir}, &out, &errOut); code != 1 {
				t.Fatalf("exit %d, want 1; stderr: %s", code, errOut.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("error %q does not mention %q", errOut.String(), w)
				}
			}
		})
	}
}
