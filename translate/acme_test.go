package translate

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

const acmeFixture = classYAML + `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata:
  name: gw
  namespace: apps
  annotations: {portico.dev/acme: http-01}
spec:
  gatewayClassName: portico
  allowedListeners: {namespaces: {from: Same}}
  listeners:
  - {name: http, port: 80, protocol: HTTP}
  - name: own
    hostname: gw.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: gw-tls}]}
  - name: wild
    hostname: "*.wild.portico.test"
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: wild-tls}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata:
  name: acme-ls
  namespace: apps
  annotations: {portico.dev/acme: http-01}
spec:
  parentRef: {name: gw}
  listeners:
  - name: app
    hostname: app.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: app-tls}]}
  - name: theirs
    hostname: theirs.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: their-tls}]}
  - name: managed
    hostname: managed.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: managed-tls}]}
  - name: renamed
    hostname: renamed.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: stale-tls}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata:
  name: conflict-ls
  namespace: apps
  annotations: {portico.dev/acme: http-01}
spec:
  parentRef: {name: gw}
  listeners:
  - name: app
    hostname: app.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: conflict-tls}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata:
  name: solo-ls
  namespace: apps
  annotations: {portico.dev/acme: http-01}
spec:
  parentRef: {name: gw}
  listeners:
  - name: solo
    hostname: solo.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: solo-tls}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata:
  name: foreign-ls
  namespace: elsewhere
  annotations: {portico.dev/acme: http-01}
spec:
  parentRef: {name: gw, namespace: apps}
  listeners:
  - name: foreign
    hostname: foreign.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: foreign-tls}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: ListenerSet
metadata: {name: plain-ls, namespace: apps}
spec:
  parentRef: {name: gw}
  listeners:
  - name: plain
    hostname: plain.portico.test
    port: 443
    protocol: HTTPS
    tls: {certificateRefs: [{name: plain-tls}]}
---
%s
---
%s
---
%s
`

// managedSecretYAML is a kubernetes.io/tls Secret labelled as Portico's.
func managedSecretYAML(ns, name string, c testCert) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: %s
  namespace: %s
  labels: {app.kubernetes.io/managed-by: portico}
type: kubernetes.io/tls
stringData:
  tls.crt: |
%s
  tls.key: |
%s
`, name, ns, indent(4, c.certPEM), indent(4, c.keyPEM))
}

func TestTranslateACMEListeners(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acme.yaml")
	theirs := newTestCert(t, "theirs.portico.test")
	managed := newTestCert(t, "managed.portico.test")
	// stale-tls holds the certificate of the hostname its listener had before.
	stale := strings.Replace(managedSecretYAML("apps", "stale-tls", newTestCert(t, "old.portico.test")),
		"  labels:", "  annotations: {portico.dev/acme-hostname: old.portico.test}\n  labels:", 1)
	yaml := fmt.Sprintf(acmeFixture, secretYAML("apps", "their-tls", theirs), managedSecretYAML("apps", "managed-tls", managed), stale)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	res := loadFixture(t, path)
	tr := newTranslator()
	cfg, st := tr.Translate(res)

	// Only opted-in, qualifying, accepted, non-conflicted listeners whose
	// Secret is missing or Portico's are ordered: not the wildcard, not
	// the listener of the ListenerSet that did not opt in, not the one
	// whose Secret belongs to someone else, not the conflicted one, not
	// the one of a ListenerSet the Gateway does not allow. A ListenerSet
	// whose only listener waits for its certificate is not Accepted, yet
	// its listener is, and is ordered.
	want := []ACMECertificate{
		{Hostname: "app.portico.test", Secret: nn("apps", "app-tls")},
		{Hostname: "gw.portico.test", Secret: nn("apps", "gw-tls")},
		{Hostname: "managed.portico.test", Secret: nn("apps", "managed-tls")},
		{Hostname: "renamed.portico.test", Secret: nn("apps", "stale-tls")},
		{Hostname: "solo.portico.test", Secret: nn("apps", "solo-tls")},
	}
	if !slices.Equal(tr.acme, want) {
		t.Errorf("ACME certificates = %v, want %v", tr.acme, want)
	}

	ls := st.ListenerSets.At(nn("apps", "acme-ls"))
	resolved := func(ls gwv1.ListenerSetStatus, name string) *metav1.Condition {
		t.Helper()
		for _, l := range ls.Listeners {
			if string(l.Name) == name {
				return meta.FindStatusCondition(l.Conditions, string(gwv1.ListenerConditionResolvedRefs))
			}
		}
		t.Fatalf("no status for listener %s", name)
		return nil
	}
	if c := resolved(ls, "app"); c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.ListenerReasonInvalidCertificateRef) ||
		!strings.Contains(c.Message, "waiting for an ACME certificate for app.portico.test") {
		t.Errorf("pending listener: ResolvedRefs %s/%s %q, want False/InvalidCertificateRef waiting for its certificate", c.Status, c.Reason, c.Message)
	}
	if c := resolved(ls, "renamed"); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "waiting for an ACME certificate for renamed.portico.test") {
		t.Errorf("listener whose managed Secret holds another hostname's certificate: ResolvedRefs %s %q, want False waiting", c.Status, c.Message)
	}
	for _, name := range []string{"theirs", "managed"} {
		if c := resolved(ls, name); c.Status != metav1.ConditionTrue {
			t.Errorf("listener %s: ResolvedRefs %s %q, want True", name, c.Status, c.Message)
		}
	}
	if c := resolved(st.ListenerSets.At(nn("apps", "plain-ls")), "plain"); strings.Contains(c.Message, "ACME") {
		t.Errorf("listener that did not opt in mentions ACME: %q", c.Message)
	}
	served := map[string]bool{}
	for _, p := range cfg.Ports {
		for l := range p.All.Values() {
			served[l.Hostname] = true
		}
	}
	if !served["theirs.portico.test"] || !served["managed.portico.test"] || served["app.portico.test"] {
		t.Errorf("served hostnames %v: want theirs and managed, not app (no certificate yet)", served)
	}

	// The manager's last error reaches the condition, even though no
	// object changed.
	res2 := *res
	res2.ACMEErrors = map[string]string{"app.portico.test": "connection refused"}
	_, st2 := tr.Translate(&res2)
	if c := resolved(st2.ListenerSets.At(nn("apps", "acme-ls")), "app"); !strings.Contains(c.Message, "connection refused") {
		t.Errorf("failing listener: ResolvedRefs message %q, want the last error", c.Message)
	}
}
