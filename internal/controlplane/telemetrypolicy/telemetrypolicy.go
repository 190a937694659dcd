// Package telemetrypolicy is what Portico makes of XTelemetryPolicy
// (gateway.networking.x-k8s.io/v1alpha1, experimental): a Direct policy
// whose targetRefs name Gateways, and whose tracing block gives the
// Gateway's requests a collector, sampling, names and attributes of
// their own. It checks the rules of the kind's CRD again (for objects
// that reach translate without an API server) and those its comments
// give implementations (a fraction's numerator is at most its
// denominator), and compiles a valid policy into config.Tracing; which
// policy wins a Gateway is translate's.
package telemetrypolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/textproto"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	xv1a1 "sigs.k8s.io/gateway-api/apisx/v1alpha1"

	"portico.dev/portico/config"
)

// XTelemetryPolicy is the upstream type.
type XTelemetryPolicy = xv1a1.XTelemetryPolicy

// Group, Version and Kind of XTelemetryPolicy.
const (
	Group   = "gateway.networking.x-k8s.io"
	Version = "v1alpha1"
	Kind    = "XTelemetryPolicy"
	// APIVersion is Group/Version.
	APIVersion = Group + "/" + Version
	// Resource is its plural, as the API serves it.
	Resource = "xtelemetrypolicies"
)

// The patterns of the CRD's schema.
var (
	namePattern    = regexp.MustCompile(`^[a-zA-Z0-9_.:/-]+$`)
	spanPattern    = regexp.MustCompile(`^[a-zA-Z0-9_.:/-]+( [a-zA-Z0-9_.:/-]+)*$`)
	attrKeyPattern = regexp.MustCompile(`^[a-z0-9_.-]+$`)
	headerPattern  = regexp.MustCompile(`^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$`)
)

// Validate says what is wrong with p's spec: the CRD's rules, and those
// the schema cannot state (fractions, distinct targets, an attribute
// Portico has to copy).
func Validate(p *XTelemetryPolicy) error {
	var errs []error
	s := &p.Spec
	switch n := len(s.TargetRefs); {
	case n == 0:
		errs = append(errs, errors.New("spec.targetRefs: at least one target is required"))
	case n > 16:
		errs = append(errs, fmt.Errorf("spec.targetRefs: %d targets, at most 16", n))
	}
	for i, r := range s.TargetRefs {
		for _, o := range s.TargetRefs[:i] {
			if o == r {
				errs = append(errs, fmt.Errorf("spec.targetRefs[%d]: %s %s is named twice; targetRefs must be distinct", i, r.Kind, r.Name))
			}
		}
	}
	errs = append(errs, validateTracing(&s.Tracing)...)
	return errors.Join(errs...)
}

func validateTracing(t *xv1a1.TracingConfig) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	mode := t.Mode
	if mode == "" {
		mode = xv1a1.TracingModeImplementationDefault
	}
	switch mode {
	case xv1a1.TracingModeEnabled, xv1a1.TracingModeDisabled, xv1a1.TracingModeImplementationDefault:
	default:
		bad("spec.tracing.mode %q: want Enabled, Disabled or ImplementationDefault", t.Mode)
		return errs
	}
	enabled := mode == xv1a1.TracingModeEnabled
	hasProvider := t.Provider.BackendRef.Name != "" || len(t.Provider.Headers) > 0
	if enabled != hasProvider {
		bad("spec.tracing: provider is required when mode is Enabled, and must be empty otherwise")
	}
	if !enabled {
		for _, f := range []struct {
			set  bool
			name string
		}{{t.SamplingRate != nil, "samplingRate"}, {t.ParentBasedSampling != (xv1a1.ParentBasedSampling{}), "parentBasedSampling"},
			{t.ServiceName != "", "serviceName"}, {t.SpanName != "", "spanName"}, {len(t.Attributes) > 0, "attributes"}} {
			if f.set {
				bad("spec.tracing: %s can only be set when mode is Enabled", f.name)
			}
		}
		return errs
	}
	ref := t.Provider.BackendRef
	switch {
	case ptr.Deref(ref.Group, "") != "" || ptr.Deref(ref.Kind, "Service") != "Service":
		// An unsupported kind is a ResolvedRefs problem (InvalidKind), not
		// an invalid spec.
	case ref.Port == nil:
		bad("spec.tracing.provider.backendRef: a Service needs a port")
	}
	if n := len(t.Provider.Headers); n > 16 {
		bad("spec.tracing.provider.headers: %d headers, at most 16", n)
	}
	seen := map[string]bool{}
	for i, h := range t.Provider.Headers {
		name := textproto.CanonicalMIMEHeaderKey(string(h.Name))
		switch {
		case !headerPattern.MatchString(string(h.Name)):
			bad("spec.tracing.provider.headers[%d].name %q is not a header name", i, h.Name)
		case seen[name]:
			bad("spec.tracing.provider.headers[%d].name %q is listed twice", i, h.Name)
		case strings.ContainsAny(h.Value, "\r\n\x00"):
			bad("spec.tracing.provider.headers[%d].value holds a line break or NUL", i)
		}
		seen[name] = true
	}
	errs = append(errs, fraction("spec.tracing.samplingRate", t.SamplingRate)...)
	pb := t.ParentBasedSampling
	switch pb.Mode {
	case "", xv1a1.ParentBasedSamplingModeEnabled, xv1a1.ParentBasedSamplingModeDisabled, xv1a1.ParentBasedSamplingModeImplementationDefault:
	default:
		bad("spec.tracing.parentBasedSampling.mode %q: want Enabled, Disabled or ImplementationDefault", pb.Mode)
	}
	if pb.SamplingRate != nil && pb.Mode != xv1a1.ParentBasedSamplingModeEnabled {
		bad("spec.tracing.parentBasedSampling: samplingRate can only be set when mode is Enabled")
	}
	errs = append(errs, fraction("spec.tracing.parentBasedSampling.samplingRate", pb.SamplingRate)...)
	if n := t.ServiceName; n != "" && (len(n) > 253 || !namePattern.MatchString(n)) {
		bad("spec.tracing.serviceName %q: 1 to 253 of letters, digits and _.:/-", n)
	}
	if n := t.SpanName; n != "" && (len(n) > 256 || !spanPattern.MatchString(n)) {
		bad("spec.tracing.spanName %q: up to 256 of words of letters, digits and _.:/- separated by single spaces", n)
	}
	names := map[xv1a1.AttributeName]bool{}
	for i, a := range t.Attributes {
		at := fmt.Sprintf("spec.tracing.attributes[%d]", i)
		if len(a.Name) > 256 || !namePattern.MatchString(string(a.Name)) {
			bad("%s.name %q: 1 to 256 of letters, digits and _.:/-", at, a.Name)
		}
		if names[a.Name] {
			bad("%s.name %q is listed twice", at, a.Name)
		}
		names[a.Name] = true
		if (a.SourceType == xv1a1.AttributeSourceHeader) != (a.HeaderName != "") {
			bad("%s: headerName is required when sourceType is Header, and must be empty otherwise", at)
		}
		if (a.SourceType == xv1a1.AttributeSourceLiteral) != (a.LiteralValue != "") {
			bad("%s: literalValue is required when sourceType is Literal, and must be empty otherwise", at)
		}
		if (a.SourceType == xv1a1.AttributeSourceAttribute) != (a.AttributeKey != "") {
			bad("%s: attributeKey is required when sourceType is Attribute, and must be empty otherwise", at)
		}
		switch a.SourceType {
		case xv1a1.AttributeSourceHeader:
			if !headerPattern.MatchString(string(a.HeaderName)) {
				bad("%s.headerName %q is not a header name", at, a.HeaderName)
			}
		case xv1a1.AttributeSourceLiteral:
			if len(a.LiteralValue) > 1024 {
				bad("%s.literalValue: %d bytes, at most 1024", at, len(a.LiteralValue))
			}
		case xv1a1.AttributeSourceAttribute:
			switch {
			case len(a.AttributeKey) > 256 || !attrKeyPattern.MatchString(a.AttributeKey):
				bad("%s.attributeKey %q: lower-case letters, digits and _.-", at, a.AttributeKey)
			case !slices.Contains(config.TracingAttributeKeys(), a.AttributeKey):
				bad("%s.attributeKey %q is not an attribute Portico's spans carry (%s)", at, a.AttributeKey, strings.Join(config.TracingAttributeKeys(), ", "))
			}
		default:
			bad("%s.sourceType %q: want Header, Literal or Attribute", at, a.SourceType)
		}
	}
	return errs
}

// fraction checks f: a denominator of at least 1, a numerator from 0 to
// it (the type's comment: a numerator above the denominator MUST be
// rejected).
func fraction(at string, f *gwv1.Fraction) []error {
	if f == nil {
		return nil
	}
	d := ptr.Deref(f.Denominator, 100)
	switch {
	case d < 1:
		return []error{fmt.Errorf("%s: denominator %d, want at least 1", at, d)}
	case f.Numerator < 0 || f.Numerator > d:
		return []error{fmt.Errorf("%s: numerator %d, want 0 to the denominator %d", at, f.Numerator, d)}
	}
	return nil
}

// Reasons of ResolvedRefs=False.
const (
	ReasonBackendNotFound = "BackendNotFound"
	ReasonInvalidKind     = "InvalidKind"
	ReasonRefNotPermitted = "RefNotPermitted"
)

// RefProblem is why the collector a policy names cannot be used.
type RefProblem struct {
	Reason, Message string
}

// Collector is the Service an enabled policy's provider names.
func Collector(p *XTelemetryPolicy) (svc types.NamespacedName, port int32, ok bool) {
	t := &p.Spec.Tracing
	if t.Mode != xv1a1.TracingModeEnabled {
		return types.NamespacedName{}, 0, false
	}
	ref := t.Provider.BackendRef
	if ptr.Deref(ref.Group, "") != "" || ptr.Deref(ref.Kind, "Service") != "Service" {
		return types.NamespacedName{}, 0, false
	}
	return types.NamespacedName{Namespace: string(ptr.Deref(ref.Namespace, gwv1.Namespace(p.Namespace))), Name: string(ref.Name)},
		ptr.Deref(ref.Port, 0), true
}

// Granted reports whether a policy of namespace ns may send to Service
// svc: one of its own namespace, or one a ReferenceGrant of the
// Service's namespace lets XTelemetryPolicies of ns use.
func Granted(grants []*gwv1.ReferenceGrant, ns string, svc types.NamespacedName) bool {
	if svc.Namespace == ns {
		return true
	}
	for _, g := range grants {
		if g == nil || g.Namespace != svc.Namespace {
			continue
		}
		from := slices.ContainsFunc(g.Spec.From, func(f gwv1.ReferenceGrantFrom) bool {
			return f.Group == Group && f.Kind == Kind && string(f.Namespace) == ns
		})
		if from && slices.ContainsFunc(g.Spec.To, func(t gwv1.ReferenceGrantTo) bool {
			return t.Group == "" && t.Kind == "Service" && (t.Name == nil || string(*t.Name) == svc.Name)
		}) {
			return true
		}
	}
	return false
}

// Services finds a Service of the snapshot.
type Services func(types.NamespacedName) *corev1.Service

// Compile is what valid policy p gives the listeners of the Gateways it
// won: nil for mode ImplementationDefault (the process's tracing), a
// Disabled Tracing, or the policy's exporter and sampling; with a
// RefProblem (and nil) when its collector cannot be used.
func Compile(p *XTelemetryPolicy, grants []*gwv1.ReferenceGrant, services Services) (*config.Tracing, *RefProblem) {
	t := &p.Spec.Tracing
	name := p.Namespace + "/" + p.Name
	switch t.Mode {
	case xv1a1.TracingModeDisabled:
		return &config.Tracing{ID: name + " disabled", Policy: name, Disabled: true}, nil
	case xv1a1.TracingModeEnabled:
	default:
		return nil, nil
	}
	ref := t.Provider.BackendRef
	if g, k := ptr.Deref(ref.Group, ""), ptr.Deref(ref.Kind, "Service"); g != "" || k != "Service" {
		return nil, &RefProblem{ReasonInvalidKind, fmt.Sprintf("provider backendRef: kind %s of group %q is not supported; only a Service", k, g)}
	}
	svcName, port, _ := Collector(p)
	if !Granted(grants, p.Namespace, svcName) {
		return nil, &RefProblem{ReasonRefNotPermitted, fmt.Sprintf("provider Service %s: no ReferenceGrant lets XTelemetryPolicies of namespace %s use it", svcName, p.Namespace)}
	}
	svc := services(svcName)
	if svc == nil {
		return nil, &RefProblem{ReasonBackendNotFound, fmt.Sprintf("provider Service %s does not exist", svcName)}
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Port == port })
	if i < 0 {
		return nil, &RefProblem{ReasonBackendNotFound, fmt.Sprintf("provider Service %s has no port %d", svcName, port)}
	}
	out := &config.Tracing{
		Policy:      name,
		Collector:   config.BackendKey{Service: config.NamespacedName(svcName), Port: port},
		GRPC:        isGRPC(svc.Spec.Ports[i]),
		ServiceName: t.ServiceName,
		SpanName:    t.SpanName,
		ParentRatio: 1,
	}
	for _, h := range t.Provider.Headers {
		out.Headers = append(out.Headers, config.TracingHeader{Name: string(h.Name), Value: h.Value})
	}
	if f := t.SamplingRate; f != nil {
		out.SampleRatio = ptr.To(ratio(f))
	}
	switch pb := t.ParentBasedSampling; pb.Mode {
	case xv1a1.ParentBasedSamplingModeDisabled:
		out.Parent = config.ParentIgnore
	case xv1a1.ParentBasedSamplingModeEnabled:
		if pb.SamplingRate != nil {
			out.ParentRatio = ratio(pb.SamplingRate)
		}
	}
	for _, a := range t.Attributes {
		ca := config.TracingAttribute{Name: string(a.Name)}
		switch a.SourceType {
		case xv1a1.AttributeSourceHeader:
			ca.Header = textproto.CanonicalMIMEHeaderKey(string(a.HeaderName))
		case xv1a1.AttributeSourceLiteral:
			ca.Literal = a.LiteralValue
		case xv1a1.AttributeSourceAttribute:
			ca.From = a.AttributeKey
		}
		out.Attributes = append(out.Attributes, ca)
	}
	out.ID = name + " " + digest(out)
	return out, nil
}

// isGRPC tells whether a collector's Service port speaks OTLP over gRPC:
// its appProtocol says gRPC or h2c, or, without one, its name mentions
// grpc or its number is OTLP/gRPC's 4317. Anything else gets OTLP/HTTP.
func isGRPC(sp corev1.ServicePort) bool {
	if ap := ptr.Deref(sp.AppProtocol, ""); ap != "" {
		return ap == "grpc" || ap == "kubernetes.io/h2c"
	}
	return strings.Contains(strings.ToLower(sp.Name), "grpc") || sp.Port == 4317 && sp.Name == ""
}

func ratio(f *gwv1.Fraction) float64 {
	return float64(f.Numerator) / float64(ptr.Deref(f.Denominator, 100))
}

// digest identifies the settings of t (without its ID): an exporter is
// kept across configurations while they stay the same.
func digest(t *config.Tracing) string {
	b, err := json.Marshal(t)
	if err != nil {
		// A struct of strings, numbers and slices of them always encodes.
		panic(fmt.Sprintf("telemetrypolicy: encode tracing: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
