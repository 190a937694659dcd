package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"portico.dev/portico/internal/controlplane/telemetrypolicy"
	"portico.dev/portico/internal/testkit/freeport"
	"portico.dev/portico/internal/testkit/kubetest"
	"portico.dev/portico/internal/testkit/tracingtest"
	"portico.dev/portico/kube/source"
)

// TestServeTracesWithTelemetryPolicy: "portico serve --config" with an
// XTelemetryPolicy on its Gateway exports the Gateway's spans to the
// policy's collector, a Service of the files whose endpoint is a real
// OTLP/HTTP receiver, with the policy's names, attribute and header,
// though the process's tracing flags point at another receiver. Removing
// the policy from the files hands the Gateway back to the flags.
func TestServeTracesWithTelemetryPolicy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	collector, flags := tracingtest.StartHTTP(t), tracingtest.StartHTTP(t)
	_, cport, _ := net.SplitHostPort(collector.Endpoint)
	listen := freeport.Port(t)
	dir := t.TempDir()
	writeWebFiles(t, dir, listen, port, []string{"127.0.0.1"})
	policy := fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: otel}
spec: {ports: [{name: otlp-http, port: 4318, targetPort: %[1]s}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: otel-1, labels: {kubernetes.io/service-name: otel}}
addressType: IPv4
ports: [{name: otlp-http, port: %[1]s}]
endpoints: [{addresses: [127.0.0.1], conditions: {ready: true}}]
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XTelemetryPolicy
metadata: {name: traces}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  tracing:
    mode: Enabled
    provider:
      backendRef: {name: otel, port: 4318}
      headers: [{name: X-Collector-Token, value: s3cret}]
    samplingRate: {numerator: 1, denominator: 1}
    serviceName: edge
    spanName: gateway gw
    attributes: [{name: tenant, sourceType: Header, headerName: X-Tenant}]
`, cport)
	policyFile := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policyFile, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	serveInTest(t, "--config", dir, "--bind-address", "127.0.0.1",
		"--tracing-endpoint", flags.Endpoint, "--tracing-protocol", "http", "--tracing-insecure", "--tracing-sample-ratio", "1")
	url := fmt.Sprintf("http://127.0.0.1:%d/", listen)
	c := &http.Client{Timeout: 5 * time.Second}
	get := func() error {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Tenant", "acme")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	waitUntil(t, "served", get)
	s := collector.Wait(t, 1, 10*time.Second)[0]
	if s.Name != "gateway gw" || s.Service != "edge" || s.Attributes["tenant"] != "acme" {
		t.Errorf("span %q service %q tenant %q; want the policy's names and attribute", s.Name, s.Service, s.Attributes["tenant"])
	}
	if got := collector.Headers().Get("X-Collector-Token"); got != "s3cret" {
		t.Errorf("export header %q, want the policy's", got)
	}
	if n := len(flags.Spans()); n != 0 {
		t.Errorf("the flags' receiver got %d spans of a Gateway with a policy", n)
	}

	if err := os.Remove(policyFile); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the flags' tracing back", func() error {
		if err := get(); err != nil {
			return err
		}
		if len(flags.Spans()) == 0 {
			return fmt.Errorf("no span at the flags' receiver yet")
		}
		return nil
	})
}

// TestCheckRefusesInvalidTelemetryPolicy: the experimental CRD's schema
// admits standalone files: a policy whose tracing is Enabled without a
// provider is refused with the CRD's message, and one copying an
// attribute Portico's spans do not carry is Accepted=False Invalid.
func TestCheckRefusesInvalidTelemetryPolicy(t *testing.T) {
	dir := t.TempDir()
	writeWebFiles(t, dir, 8080, 9090, []string{"10.0.0.1"}, `apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XTelemetryPolicy
metadata: {name: noprovider}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  tracing: {mode: Enabled}
`)
	var out, errOut bytes.Buffer
	if code := run([]string{"check", "--config", dir}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "provider is required when mode is Enabled") {
		t.Errorf("exit %d, stderr %q; want 1 and the CRD's message", code, errOut.String())
	}
	writeWebFiles(t, dir, 8080, 9090, []string{"10.0.0.1"}, `apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XTelemetryPolicy
metadata: {name: badattr}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  tracing: {mode: Disabled}
---
apiVersion: gateway.networking.x-k8s.io/v1alpha1
kind: XTelemetryPolicy
metadata: {name: badattr2}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
  tracing:
    mode: Enabled
    provider: {backendRef: {name: web, port: 80}}
    attributes: [{name: size, sourceType: Attribute, attributeKey: http.request.body.size}]
`)
	out.Reset()
	errOut.Reset()
	code := run([]string{"check", "--config", dir}, &out, &errOut)
	if code != 3 || !strings.Contains(strings.Join(strings.Fields(out.String()), " "), "is not an attribute Portico's spans carry") {
		t.Errorf("exit %d, output %s; want 3 and badattr2 Invalid", code, out.String())
	}
}

// TestServeGatewayModeTracesWithTelemetryPolicy: in per-Gateway mode the
// data plane of a Gateway with an XTelemetryPolicy receives the policy
// and its collector's Service and endpoints from the controller, and
// exports its requests' spans to that collector (a real OTLP/HTTP
// receiver in a network namespace, as a cluster's Pod would be) under
// the policy's service name.
func TestServeGatewayModeTracesWithTelemetryPolicy(t *testing.T) {
	netns := kubetest.NewNetns(t, "otel")
	ln, err := netns.Listen("tcp", netns.AddrPort(0))
	if err != nil {
		t.Fatal(err)
	}
	collector := tracingtest.ServeHTTP(t, ln)
	cport := int32(ln.Addr().(*net.TCPAddr).Port)
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		t.Fatal(err)
	}
	crd := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "experimental", "gateway.networking.x-k8s.io_xtelemetrypolicies.yaml")
	port := runGatewayMode(t, []string{crd}, func(env *kubetest.Env, dyn dynamic.Interface) {
		ctx := t.Context()
		kc, _ := apiClients(t, env)
		if _, err := kc.CoreV1().Services("apps").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "otel"},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "otlp-http", Port: 4318, TargetPort: intstr.FromInt32(cport)}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kc.DiscoveryV1().EndpointSlices("apps").Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "apps", Name: "otel-1", Labels: map[string]string{discoveryv1.LabelServiceName: "otel"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("otlp-http"), Port: ptr.To(cport)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{netns.Addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		policy := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": telemetrypolicy.APIVersion, "kind": telemetrypolicy.Kind,
			"metadata": map[string]any{"name": "traces", "namespace": "apps"},
			"spec": map[string]any{
				"targetRefs": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "web"}},
				"tracing": map[string]any{"mode": "Enabled", "serviceName": "web-data-plane",
					"provider":     map[string]any{"backendRef": map[string]any{"name": "otel", "port": int64(4318)}},
					"samplingRate": map[string]any{"numerator": int64(1), "denominator": int64(1)}},
			},
		}}
		if _, err := dyn.Resource(source.TelemetryPolicyResource).Namespace("apps").Create(ctx, policy, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	waitUntil(t, "a span of the data plane at the policy's collector", func() error {
		if code, _, err := httpGet("http://127.0.0.1:"+strconv.Itoa(port)+"/", "nothing.example.com"); err != nil || code != 404 {
			return fmt.Errorf("data plane: %d %v", code, err)
		}
		for _, s := range collector.Spans() {
			if s.Service == "web-data-plane" {
				return nil
			}
		}
		return fmt.Errorf("%d spans, none of service web-data-plane", len(collector.Spans()))
	})
}
