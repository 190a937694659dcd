package listeners

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
)

// Reasons of the listener conditions of pre-routing filters
// (Listener.filters.requests, GEP-5224), which gwv1 names in comments
// only.
const (
	// ReasonInvalidListenerFilterRef: ResolvedRefs=False, an ExternalAuth
	// backendRef that names no Service port, or a kind other than Service.
	ReasonInvalidListenerFilterRef gwv1.ListenerConditionReason = "InvalidListenerFilterRef"
	// ReasonInvalidListenerFilterOrder: Accepted=False, filters an
	// implementation cannot run in their order. Portico runs any list in
	// its order, so it never sets it.
	ReasonInvalidListenerFilterOrder gwv1.ListenerConditionReason = "InvalidListenerFilterOrder"
)

// MaxListenerFilters is the schema's bound on filters.requests, checked
// here too for YAML that no API server admitted.
const MaxListenerFilters = 16

// filterVerdict is what a listener's filters.requests say of it: why it
// cannot be accepted (Accepted=False, UnsupportedValue), or why a
// reference does not resolve (ResolvedRefs=False with refReason).
type filterVerdict struct {
	unsupported string
	refReason   gwv1.ListenerConditionReason
	refMsg      string
}

// filters checks the pre-routing filters of a listener of src. Every
// filter Portico cannot run takes the listener out (the GEP: a listener
// must be rejected rather than have a filter of its list skipped), and so
// does an ExternalAuth filter whose service cannot be named: its
// requests are never served unchecked.
func (m *merger) filters(src Source, spec *gwv1.Listener) filterVerdict {
	var fv filterVerdict
	if spec.Filters == nil || len(spec.Filters.Requests) == 0 {
		return fv
	}
	reqs := spec.Filters.Requests
	switch {
	case spec.Protocol != gwv1.HTTPProtocolType && spec.Protocol != gwv1.HTTPSProtocolType:
		fv.unsupported = fmt.Sprintf("filters.requests: pre-routing filters run on HTTP and HTTPS listeners only, not %s", spec.Protocol)
		return fv
	case len(reqs) > MaxListenerFilters:
		fv.unsupported = fmt.Sprintf("filters.requests: at most %d filters, not %d", MaxListenerFilters, len(reqs))
		return fv
	}
	for i := range reqs {
		f := &reqs[i]
		at := fmt.Sprintf("filters.requests[%d]", i)
		switch f.Type {
		case gwv1.ListenerFilterExternalAuth:
			if f.ExternalAuth == nil {
				fv.unsupported = at + ": type ExternalAuth without externalAuth"
				return fv
			}
			if h := f.ExternalAuth.HTTPAuthConfig; h != nil {
				if _, err := config.ExtAuthPathPrefix(h.Path); err != nil {
					fv.unsupported = at + ": ExternalAuth " + err.Error()
					return fv
				}
			}
			if p := f.ExternalAuth.ExternalAuthProtocol; p != gwv1.HTTPRouteExternalAuthHTTPProtocol && p != gwv1.HTTPRouteExternalAuthGRPCProtocol {
				fv.unsupported = fmt.Sprintf("%s: ExternalAuth protocol %q is not HTTP or GRPC", at, p)
				return fv
			}
			if fv.refReason == "" {
				fv.refReason, fv.refMsg = m.externalAuthRef(src, at, &f.ExternalAuth.BackendRef)
			}
		case gwv1.ListenerFilterExtensionRef:
			what := "ExtensionRef filter"
			if e := f.ExtensionRef; e != nil {
				what = fmt.Sprintf("ExtensionRef filter %s/%s %q", e.Group, e.Kind, e.Name)
			}
			fv.unsupported = at + ": " + what + " is not supported: Portico has no pre-routing extension; use an ExternalAuth filter"
			return fv
		default:
			fv.unsupported = fmt.Sprintf("%s: filter type %q is not supported", at, f.Type)
			return fv
		}
	}
	return fv
}

// externalAuthRef checks the backendRef of the ExternalAuth filter at: a
// port of a Service that exists, in the listener's namespace or another
// whose ReferenceGrant lets src's kind use it.
func (m *merger) externalAuthRef(src Source, at string, ref *gwv1.BackendObjectReference) (gwv1.ListenerConditionReason, string) {
	group, kind := "", "Service"
	if ref.Group != nil {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	ns := src.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	svc := types.NamespacedName{Namespace: ns, Name: string(ref.Name)}
	if group != "" || kind != "Service" {
		return ReasonInvalidListenerFilterRef, fmt.Sprintf("%s: ExternalAuth.backendRef %s: unsupported kind %s.%s; only Services", at, ref.Name, kind, group)
	}
	if ns != src.Namespace && !m.granted(src, "Service", svc) {
		return gwv1.ListenerReasonRefNotPermitted, fmt.Sprintf("%s: ExternalAuth.backendRef: no ReferenceGrant in %s allows %ss of %s to use Service %s", at, ns, src.Kind, src.Namespace, svc)
	}
	if ref.Port == nil {
		return ReasonInvalidListenerFilterRef, fmt.Sprintf("%s: ExternalAuth.backendRef to Service %s has no port", at, svc)
	}
	if m.in.ServicePorts == nil {
		return ReasonInvalidListenerFilterRef, fmt.Sprintf("%s: ExternalAuth.backendRef refers to Service %s which does not exist", at, svc)
	}
	ports, ok := m.in.ServicePorts(ns, string(ref.Name))
	switch {
	case !ok:
		return ReasonInvalidListenerFilterRef, fmt.Sprintf("%s: ExternalAuth.backendRef refers to Service %s which does not exist", at, svc)
	case !slices.Contains(ports, int32(*ref.Port)):
		return ReasonInvalidListenerFilterRef, fmt.Sprintf("%s: ExternalAuth.backendRef: Service %s has no port %d", at, svc, *ref.Port)
	}
	return "", ""
}
