package telemetrypolicy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	xv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/config"
)

func policy(tracing xv1a1.TracingConfig) *XTelemetryPolicy {
	return &XTelemetryPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "p"}, Spec: xv1a1.TelemetryPolicySpec{
		TargetRefs: []gwv1.LocalObjectReference{{Group: gwv1.GroupName, Kind: "Gateway", Name: "gw"}},
		Tracing:    tracing,
	}}
}

func enabled(port int32) xv1a1.TracingConfig {
	return xv1a1.TracingConfig{Mode: xv1a1.TracingModeEnabled,
		Provider: xv1a1.TracingProvider{BackendRef: gwv1.BackendObjectReference{Name: "otel", Port: ptr.To(gwv1.PortNumber(port))}}}
}

// TestValidate: what the CRD's schema says, for files without an API
// server, and what it cannot say (fractions, an attribute to copy that
// Portico's spans do not carry, targets named twice).
func TestValidate(t *testing.T) {
	frac := func(n, d int32) *gwv1.Fraction { return &gwv1.Fraction{Numerator: n, Denominator: ptr.To(d)} }
	for _, c := range []struct {
		name string
		edit func(p *XTelemetryPolicy)
		want string // "" valid
	}{
		{"enabled", func(*XTelemetryPolicy) {}, ""},
		{"no provider", func(p *XTelemetryPolicy) { p.Spec.Tracing.Provider = xv1a1.TracingProvider{} }, "provider is required"},
		{"disabled with rate", func(p *XTelemetryPolicy) {
			p.Spec.Tracing = xv1a1.TracingConfig{Mode: xv1a1.TracingModeDisabled, SamplingRate: frac(1, 2)}
		}, "samplingRate can only be set when mode is Enabled"},
		{"numerator above denominator", func(p *XTelemetryPolicy) { p.Spec.Tracing.SamplingRate = frac(3, 2) }, "numerator 3, want 0 to the denominator 2"},
		{"zero denominator", func(p *XTelemetryPolicy) { p.Spec.Tracing.SamplingRate = frac(0, 0) }, "denominator 0"},
		{"parent rate without Enabled", func(p *XTelemetryPolicy) {
			p.Spec.Tracing.ParentBasedSampling = xv1a1.ParentBasedSampling{SamplingRate: frac(1, 2)}
		}, "parentBasedSampling: samplingRate can only be set"},
		{"unknown attribute", func(p *XTelemetryPolicy) {
			p.Spec.Tracing.Attributes = []xv1a1.Attribute{{Name: "x", SourceType: xv1a1.AttributeSourceAttribute, AttributeKey: "http.request.body.size"}}
		}, "is not an attribute Portico's spans carry"},
		{"header attribute without header", func(p *XTelemetryPolicy) {
			p.Spec.Tracing.Attributes = []xv1a1.Attribute{{Name: "x", SourceType: xv1a1.AttributeSourceHeader}}
		}, "headerName is required"},
		{"target twice", func(p *XTelemetryPolicy) { p.Spec.TargetRefs = append(p.Spec.TargetRefs, p.Spec.TargetRefs[0]) }, "named twice"},
		{"header with a line break", func(p *XTelemetryPolicy) {
			p.Spec.Tracing.Provider.Headers = []gwv1.HTTPHeader{{Name: "X-Token", Value: "a\r\nb"}}
		}, "line break"},
	} {
		p := policy(enabled(4318))
		c.edit(p)
		err := Validate(p)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
}

// TestCompile: the collector's Service port decides the transport; a
// reference the policy may not use, or that does not exist, is a
// RefProblem with the reason the type names; sampling fields become
// ratios.
func TestCompile(t *testing.T) {
	svcs := map[types.NamespacedName]*corev1.Service{
		{Namespace: "apps", Name: "otel"}: {Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "otlp-http", Port: 4318}, {Port: 4317}, {Name: "x", Port: 9000, AppProtocol: ptr.To("grpc")}, {Name: "otlp-grpc", Port: 9001}}}},
		{Namespace: "obs", Name: "otel"}: {Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 4318}}}},
	}
	services := func(k types.NamespacedName) *corev1.Service { return svcs[k] }
	for port, grpc := range map[int32]bool{4318: false, 4317: true, 9000: true, 9001: true} {
		tr, prob := Compile(policy(enabled(port)), nil, services)
		if prob != nil || tr.GRPC != grpc || tr.Collector.Port != port {
			t.Errorf("port %d: %+v %v; want grpc %v", port, tr, prob, grpc)
		}
	}
	tc := enabled(4318)
	tc.SamplingRate = &gwv1.Fraction{Numerator: 1, Denominator: ptr.To(int32(4))}
	tc.ParentBasedSampling = xv1a1.ParentBasedSampling{Mode: xv1a1.ParentBasedSamplingModeEnabled, SamplingRate: &gwv1.Fraction{Numerator: 50}}
	tr, _ := Compile(policy(tc), nil, services)
	if *tr.SampleRatio != 0.25 || tr.ParentRatio != 0.5 || tr.Parent != config.ParentRespect {
		t.Errorf("sampling %v parent %v %v; want 0.25, respect at 0.5 (denominator 100 by default)", *tr.SampleRatio, tr.Parent, tr.ParentRatio)
	}
	tc = enabled(4318)
	tc.Provider.BackendRef.Namespace = ptr.To(gwv1.Namespace("obs"))
	if _, prob := Compile(policy(tc), nil, services); prob == nil || prob.Reason != ReasonRefNotPermitted {
		t.Errorf("another namespace without a grant: %+v", prob)
	}
	grant := &gwv1.ReferenceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: "obs"}, Spec: gwv1.ReferenceGrantSpec{
		From: []gwv1.ReferenceGrantFrom{{Group: Group, Kind: Kind, Namespace: "apps"}},
		To:   []gwv1.ReferenceGrantTo{{Kind: "Service"}}}}
	if _, prob := Compile(policy(tc), []*gwv1.ReferenceGrant{grant}, services); prob != nil {
		t.Errorf("granted: %+v", prob)
	}
	if _, prob := Compile(policy(enabled(1234)), nil, services); prob == nil || prob.Reason != ReasonBackendNotFound {
		t.Errorf("missing port: %+v", prob)
	}
	tc = enabled(4318)
	tc.Provider.BackendRef.Kind = ptr.To(gwv1.Kind("ConfigMap"))
	if _, prob := Compile(policy(tc), nil, services); prob == nil || prob.Reason != ReasonInvalidKind {
		t.Errorf("ConfigMap: %+v", prob)
	}
	if tr, prob := Compile(policy(xv1a1.TracingConfig{Mode: xv1a1.TracingModeImplementationDefault}), nil, services); tr != nil || prob != nil {
		t.Errorf("ImplementationDefault: %+v %+v, want nothing (the process's tracing)", tr, prob)
	}
	a, _ := Compile(policy(enabled(4318)), nil, services)
	b := enabled(4318)
	b.ServiceName = "other"
	bb, _ := Compile(policy(b), nil, services)
	if a.ID == bb.ID {
		t.Errorf("two settings share ID %s", a.ID)
	}
}
