package listeners

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Client certificate validation (Gateway spec.tls.frontend): the CA
// certificates of a port's configuration (perPort, else default) apply to
// every HTTPS listener of the Gateway on that port, its ListenerSets'
// included. A reference that does not resolve makes those listeners'
// ResolvedRefs False; when none resolves, they are not accepted, since
// serving them without the check would let every client in.

// frontendVerdict is the validation of one port.
type frontendVerdict struct {
	// validation is nil when no CA certificate could be loaded.
	validation *ClientValidation
	// reason and msg describe the references that did not resolve.
	reason gwv1.ListenerConditionReason
	msg    string
}

// frontend returns the verdict for port, or nil when the Gateway does not
// validate client certificates there. It is computed once per port.
func (m *merger) frontend(port gwv1.PortNumber) *frontendVerdict {
	cfg := frontendConfig(m.in.Gateway, port)
	if cfg == nil || cfg.Validation == nil {
		return nil
	}
	if v, ok := m.frontends[port]; ok {
		return v
	}
	if m.frontends == nil {
		m.frontends = map[gwv1.PortNumber]*frontendVerdict{}
	}
	v := m.evaluateFrontend(cfg.Validation)
	m.frontends[port] = v
	return v
}

// frontendConfig is the Gateway's client validation configuration for a
// port: its perPort entry, else the default.
func frontendConfig(gw *gwv1.Gateway, port gwv1.PortNumber) *gwv1.TLSConfig {
	if gw == nil || gw.Spec.TLS == nil || gw.Spec.TLS.Frontend == nil {
		return nil
	}
	f := gw.Spec.TLS.Frontend
	for i := range f.PerPort {
		if f.PerPort[i].Port == port {
			return &f.PerPort[i].TLS
		}
	}
	return &f.Default
}

func (m *merger) evaluateFrontend(val *gwv1.FrontendTLSValidation) *frontendVerdict {
	gw := m.in.Gateway
	src := Source{Kind: kindGateway, Namespace: gw.Namespace, Name: gw.Name}
	v := &frontendVerdict{}
	var certs []*x509.Certificate
	var msgs []string
	fail := func(reason gwv1.ListenerConditionReason, msg string) {
		if v.reason == "" {
			v.reason = reason
		}
		msgs = append(msgs, msg)
	}
	for _, ref := range val.CACertificateRefs {
		target := types.NamespacedName{Namespace: gw.Namespace, Name: string(ref.Name)}
		if ref.Namespace != nil && *ref.Namespace != "" {
			target.Namespace = string(*ref.Namespace)
		}
		switch {
		case ref.Group == "certificates.k8s.io" && ref.Kind == "ClusterTrustBundle":
			// Cluster-scoped: no namespace and no ReferenceGrant. The
			// experimental CRD refuses a namespace; one that got past
			// it is not guessed at.
			if ref.Namespace != nil && *ref.Namespace != "" {
				fail(gwv1.ListenerReasonInvalidCACertificateRef, fmt.Sprintf(
					"ClusterTrustBundle %q is cluster-scoped: the reference must not set a namespace (it sets %q)", ref.Name, *ref.Namespace))
				continue
			}
			if m.in.TrustBundles == nil {
				fail(gwv1.ListenerReasonInvalidCACertificateRef, fmt.Sprintf("ClusterTrustBundle %q not found", ref.Name))
				continue
			}
			c, err := m.in.TrustBundles(string(ref.Name))
			if err != nil {
				fail(gwv1.ListenerReasonInvalidCACertificateRef, fmt.Sprintf("ClusterTrustBundle %q: %v", ref.Name, err))
				continue
			}
			certs = append(certs, c...)
		case ref.Group != "" || ref.Kind != "ConfigMap":
			kind := string(ref.Kind)
			if ref.Group != "" {
				kind += "." + string(ref.Group)
			}
			fail(gwv1.ListenerReasonInvalidCACertificateKind, fmt.Sprintf(
				"client CA certificate reference %q is of kind %s; only ConfigMaps (key ca.crt) and "+
					"ClusterTrustBundles (group certificates.k8s.io) are supported", ref.Name, kind))
		case target.Namespace != gw.Namespace && !m.granted(src, "ConfigMap", target):
			fail(gwv1.ListenerReasonRefNotPermitted, fmt.Sprintf(
				"ConfigMap %s is in another namespace and no ReferenceGrant there allows this Gateway to use it", target))
		case m.in.CACertificates == nil:
			fail(gwv1.ListenerReasonInvalidCACertificateRef, fmt.Sprintf("ConfigMap %s not found", target))
		default:
			c, err := m.in.CACertificates(target.Namespace, target.Name)
			if err != nil {
				fail(gwv1.ListenerReasonInvalidCACertificateRef, fmt.Sprintf("ConfigMap %s: %v", target, err))
				continue
			}
			certs = append(certs, c...)
		}
	}
	v.msg = strings.Join(msgs, "; ")
	if len(certs) > 0 {
		pool := x509.NewCertPool()
		sums := make([]string, len(certs))
		for i, c := range certs {
			pool.AddCert(c)
			sum := sha256.Sum256(c.Raw)
			sums[i] = string(sum[:])
		}
		optional := val.Mode == gwv1.AllowInsecureFallback
		slices.Sort(sums)
		h := sha256.New()
		for _, s := range sums {
			h.Write([]byte(s))
		}
		if optional {
			h.Write([]byte("optional"))
		}
		v.validation = &ClientValidation{ID: hex.EncodeToString(h.Sum(nil)[:12]), CAs: pool, Optional: optional}
	}
	return v
}

// insecureFrontendCondition is the Gateway's InsecureFrontendValidationMode
// condition, present while some port lets clients through without a valid
// certificate.
func insecureFrontendCondition(gw *gwv1.Gateway) (metav1.Condition, bool) {
	if gw.Spec.TLS == nil || gw.Spec.TLS.Frontend == nil {
		return metav1.Condition{}, false
	}
	f := gw.Spec.TLS.Frontend
	var where []string
	insecure := func(c *gwv1.TLSConfig) bool {
		return c.Validation != nil && c.Validation.Mode == gwv1.AllowInsecureFallback
	}
	if insecure(&f.Default) {
		where = append(where, "by default")
	}
	for _, p := range f.PerPort {
		if insecure(&p.TLS) {
			where = append(where, "on port "+strconv.Itoa(int(p.Port)))
		}
	}
	if len(where) == 0 {
		return metav1.Condition{}, false
	}
	return cond(gwv1.GatewayConditionInsecureFrontendValidationMode, true, gwv1.GatewayReasonConfigurationChanged,
		"Clients without a valid certificate are let through (AllowInsecureFallback) "+strings.Join(where, ", "), gw.Generation), true
}
