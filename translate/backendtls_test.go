package translate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/testkit/snitest"
)

// backendTLSYAML has one Gateway, a route per Service, and policies that
// cover each outcome. Objects are older the earlier they come.
func backendTLSYAML(caPEM string) string {
	svc := func(name, appProtocol string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: %s, namespace: apps}
spec:
  ports:
  - {name: https, port: 443%s}
  - {name: alt, port: 8443}
---
`, name, appProtocolField(appProtocol))
	}
	route := func(name string) string {
		return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: %[1]s, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  hostnames: [%[1]s.example.com]
  rules:
  - backendRefs: [{name: %[1]s, port: 443}]
  - matches: [{path: {value: /alt}}]
    backendRefs: [{name: %[1]s, port: 8443}]
---
`, name)
	}
	policy := func(name, target, section, validation string) string {
		sec := ""
		if section != "" {
			sec = ", sectionName: " + section
		}
		return fmt.Sprintf(`apiVersion: gateway.networking.k8s.io/v1
kind: BackendTLSPolicy
metadata: {name: %s, namespace: apps}
spec:
  targetRefs: [{group: "", kind: Service, name: %s%s}]
  validation:
%s
---
`, name, target, sec, validation)
	}
	const ca = `    caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]
    hostname: abc.example.com`
	var b strings.Builder
	b.WriteString(gatewayYAML + "  - {name: http, port: 80, protocol: HTTP}\n---\n")
	b.WriteString(caConfigMapYAML("ca", []byte(caPEM)))
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: garbage, namespace: apps}\ndata:\n  ca.crt: not a certificate\n---\n")
	for _, name := range []string{"whole", "conflict", "kind", "missing", "garbage", "wellknown", "system", "plain"} {
		svc0 := "HTTPS"
		if name == "plain" {
			svc0 = "https" // no policy: the route cannot use it
		}
		b.WriteString(svc(name, svc0))
		b.WriteString(route(name))
	}
	b.WriteString(svc("unrouted", ""))
	// Reached only through a ListenerSet, only through a mirror, and by a
	// policy with two targets, one of them already taken.
	for _, name := range []string{"vials", "mirrored", "multi"} {
		b.WriteString(svc(name, ""))
	}
	b.WriteString(`apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: ls, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners: [{name: extra, port: 8080, protocol: HTTP, hostname: ls.example.com}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: vials, namespace: apps}
spec:
  parentRefs: [{kind: ListenerSet, name: ls}]
  rules: [{backendRefs: [{name: vials, port: 443}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirroring, namespace: apps}
spec:
  parentRefs: [{name: gw}]
  hostnames: [mirroring.example.com]
  rules:
  - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: mirrored, port: 443}}}]
    backendRefs: [{name: plain, port: 8443}]
  - matches: [{path: {value: /multi}}]
    backendRefs: [{name: multi, port: 443}]
---
`)
	b.WriteString(policy("whole", "whole", "", ca))
	b.WriteString(policy("whole-alt", "whole", "alt", `    caCertificateRefs: [{group: "", kind: ConfigMap, name: ca}]
    hostname: alt.example.com
    subjectAltNames: [{type: Hostname, hostname: san.example.com}, {type: URI, uri: "spiffe://cluster/ns/apps/sa/alt"}]`))
	b.WriteString(policy("conflict-1", "conflict", "", ca))
	b.WriteString(policy("conflict-2", "conflict", "", ca))
	b.WriteString(policy("kind", "kind", "", `    caCertificateRefs: [{group: "", kind: Secret, name: ca}]
    hostname: abc.example.com`))
	b.WriteString(policy("missing", "missing", "", `    caCertificateRefs: [{group: "", kind: ConfigMap, name: nonexistent}]
    hostname: abc.example.com`))
	b.WriteString(policy("garbage", "garbage", "", `    caCertificateRefs: [{group: "", kind: ConfigMap, name: garbage}]
    hostname: abc.example.com`))
	b.WriteString(policy("wellknown", "wellknown", "", `    wellKnownCACertificates: example.com/bundle
    hostname: abc.example.com`))
	b.WriteString(policy("system", "system", "", `    wellKnownCACertificates: System
    hostname: abc.example.com`))
	b.WriteString(policy("unrouted", "unrouted", "", ca))
	b.WriteString(policy("vials", "vials", "", ca))
	b.WriteString(policy("mirrored", "mirrored", "", ca))
	b.WriteString(strings.Replace(policy("multi", "multi", "", ca), "targetRefs: [", `targetRefs: [{group: "", kind: Service, name: conflict}, `, 1))
	return b.String()
}

// TestBackendTLSPolicyTranslate covers what translate makes of policies:
// their conditions, reported once per Gateway routing to their Services;
// precedence (oldest first, a port-specific policy over a whole-Service
// one); the settings each Service port gets; and routes to ports whose
// policy is unusable or missing.
func TestBackendTLSPolicyTranslate(t *testing.T) {
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tls.yaml")
	if err := os.WriteFile(path, []byte(backendTLSYAML(string(ca.CertPEM))), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)
	tr := newTranslator()
	cfg, st := tr.Translate(res)

	cases := []struct {
		policy             string
		accepted, resolved string // reasons
		message            string // in one of the two messages
	}{
		{"whole", "Accepted", "ResolvedRefs", ""},
		{"whole-alt", "Accepted", "ResolvedRefs", ""},
		{"conflict-1", "Accepted", "ResolvedRefs", ""},
		{"conflict-2", "Conflicted", "ResolvedRefs", "already the target of the older BackendTLSPolicy conflict-1"},
		{"kind", "NoValidCACertificate", "InvalidKind", "kind Secret is not supported"},
		{"missing", "NoValidCACertificate", "InvalidCACertificateRef", `ConfigMap "nonexistent" does not exist`},
		{"garbage", "NoValidCACertificate", "InvalidCACertificateRef", "holds no PEM certificate"},
		{"wellknown", "Invalid", "ResolvedRefs", `wellKnownCACertificates "example.com/bundle" is not supported`},
		{"system", "Accepted", "ResolvedRefs", ""},
		{"vials", "Accepted", "ResolvedRefs", ""},
		{"mirrored", "Accepted", "ResolvedRefs", ""},
		{"multi", "Conflicted", "ResolvedRefs", "Service conflict is already the target of the older BackendTLSPolicy conflict-1"},
	}
	for _, c := range cases {
		entries := st.BackendTLSPolicies.At(types.NamespacedName{Namespace: "apps", Name: c.policy})
		if len(entries) != 1 {
			t.Errorf("%s: %d ancestor entries, want 1 (the Gateway): %+v", c.policy, len(entries), entries)
			continue
		}
		e := entries[0]
		if ptr.Deref(e.AncestorRef.Kind, "") != "Gateway" || e.AncestorRef.Name != "gw" || ptr.Deref(e.AncestorRef.Namespace, "") != "apps" || e.ControllerName != wellknown.ControllerName {
			t.Errorf("%s: ancestor %+v by %s", c.policy, e.AncestorRef, e.ControllerName)
		}
		acc := meta.FindStatusCondition(e.Conditions, "Accepted")
		res := meta.FindStatusCondition(e.Conditions, "ResolvedRefs")
		if acc == nil || acc.Reason != c.accepted || (acc.Status == "True") != (c.accepted == "Accepted") || acc.ObservedGeneration != 1 {
			t.Errorf("%s: Accepted = %+v, want reason %s", c.policy, acc, c.accepted)
		}
		if res == nil || res.Reason != c.resolved || (res.Status == "True") != (c.resolved == "ResolvedRefs") {
			t.Errorf("%s: ResolvedRefs = %+v, want reason %s", c.policy, res, c.resolved)
		}
		if c.message != "" && !strings.Contains(acc.Message+" "+res.Message, c.message) {
			t.Errorf("%s: messages %q / %q, want %q", c.policy, acc.Message, res.Message, c.message)
		}
	}
	if e, ok := st.BackendTLSPolicies.Get(types.NamespacedName{Namespace: "apps", Name: "unrouted"}); ok {
		t.Errorf("a policy no route reaches has ancestors: %+v", e)
	}

	// The settings of each port.
	tls := resolveBackendTLS(res, newCASource(res, nil))
	svc := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "apps", Name: name} }
	whole, alt := tls.forPort(svc("whole"), "https"), tls.forPort(svc("whole"), "alt")
	switch {
	case whole == nil || whole.ServerName != "abc.example.com" || whole.RootCAs == nil || whole.Invalid != "":
		t.Errorf("whole/https: %+v", whole)
	case alt == nil || alt.ServerName != "alt.example.com" || len(alt.SANHostnames) != 1 || alt.SANURIs[0] != "spiffe://cluster/ns/apps/sa/alt":
		t.Errorf("whole/alt, the port-specific policy: %+v", alt)
	case alt.ID == whole.ID:
		t.Error("two identity checks share an ID")
	}
	if c := tls.forPort(svc("conflict"), "https"); c == nil || c.Policy != "apps/conflict-1" {
		t.Errorf("conflict: settings of %+v, want the older policy's", c)
	}
	if c := tls.forPort(svc("system"), "https"); c == nil || c.RootCAs != nil || c.Invalid != "" {
		t.Errorf("system: %+v, want the system roots", c)
	}
	for _, name := range []string{"kind", "missing", "garbage", "wellknown"} {
		if c := tls.forPort(svc(name), "https"); c == nil || c.Invalid == "" {
			t.Errorf("%s: %+v, want settings that fail every request", name, c)
		}
	}
	if c := tls.forPort(svc("plain"), "https"); c != nil {
		t.Errorf("plain has settings %+v", c)
	}
	// A policy that lost one target applies to none, the one listed twice
	// in it included.
	if c := tls.forPort(svc("multi"), "https"); c != nil {
		t.Errorf("multi, whose policy lost its other target: settings %+v", c)
	}
	// The same settings in the next translation have the same ID; the
	// data plane keeps only the pools of usable ones.
	again := resolveBackendTLS(res, newCASource(res, nil))
	if a := again.forPort(svc("whole"), "https"); a.ID != whole.ID {
		t.Errorf("ID changed between translations: %s, %s", whole.ID, a.ID)
	}
	// whole, conflict-1 and unrouted ask for the same check: one ID.
	if _, ok := cfg.BackendTLSIDs[whole.ID]; !ok || len(cfg.BackendTLSIDs) != 3 {
		t.Errorf("BackendTLSIDs %v, want the 3 usable checks (whole, whole-alt, system)", cfg.BackendTLSIDs)
	}

	// Routes: appProtocol HTTPS is fine with a policy and refused without.
	for name, want := range map[string]string{"whole": "ResolvedRefs", "kind": "ResolvedRefs", "plain": "UnsupportedProtocol"} {
		parents := st.HTTPRoutes.At(svc(name))
		if len(parents) != 1 {
			t.Fatalf("route %s: %+v", name, parents)
		}
		if c := meta.FindStatusCondition(parents[0].Conditions, "ResolvedRefs"); c == nil || c.Reason != want {
			t.Errorf("route %s: ResolvedRefs %+v, want %s", name, c, want)
		}
	}
}

// TestConfigMapChangesRebuildOnlyWhenNamed: a new copy of a ConfigMap no
// policy names leaves the routing inputs equal (only endpoints would be
// resolved again); a new copy of a named one does not.
func TestConfigMapChangesRebuildOnlyWhenNamed(t *testing.T) {
	ca, err := snitest.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tls.yaml")
	yaml := backendTLSYAML(string(ca.CertPEM)) + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated, namespace: apps}\ndata: {setting: a}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)
	before := routingInputs(res)
	replace := func(name string) {
		for i, cm := range res.ConfigMaps {
			if cm.Name == name {
				res.ConfigMaps[i] = cm.DeepCopy()
				return
			}
		}
		t.Fatalf("no ConfigMap %s", name)
	}
	replace("unrelated")
	if !slices.Equal(before, routingInputs(res)) {
		t.Error("a ConfigMap no policy names changed the routing inputs")
	}
	replace("ca")
	if slices.Equal(before, routingInputs(res)) {
		t.Error("a new copy of a policy's ConfigMap left the routing inputs equal")
	}
}

// appProtocolField is the appProtocol of a port in flow style, none when
// empty (the API server refuses an empty one).
func appProtocolField(p string) string {
	if p == "" {
		return ""
	}
	return fmt.Sprintf(", appProtocol: %q", p)
}
