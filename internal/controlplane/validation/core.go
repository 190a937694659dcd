package validation

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API server's size limits for the data of a Secret or ConfigMap, and
// for the endpoints, addresses and ports of an EndpointSlice.
const (
	maxDataSize          = 1 << 20
	maxSliceEndpoints    = 1000
	maxEndpointAddresses = 100
	maxSlicePorts        = 100
)

// nameRule is how a kind's metadata.name is checked.
type nameRule func(name string, prefix bool) []string

// validateMetadata checks what the API server checks of every object's
// metadata: the kind's name rule, a namespace only on namespaced kinds
// (absent is fine: the file source gives "default"), labels and
// annotations.
func validateMetadata(obj metav1.Object, name nameRule, namespaced bool) field.ErrorList {
	path := field.NewPath("metadata")
	var errs field.ErrorList
	if obj.GetName() == "" {
		errs = append(errs, field.Required(path.Child("name"), ""))
	} else {
		for _, msg := range name(obj.GetName(), false) {
			errs = append(errs, field.Invalid(path.Child("name"), obj.GetName(), msg))
		}
	}
	switch ns := obj.GetNamespace(); {
	case !namespaced && ns != "":
		errs = append(errs, field.Forbidden(path.Child("namespace"), "not allowed on a cluster-scoped kind"))
	case ns != "":
		for _, msg := range apivalidation.ValidateNamespaceName(ns, false) {
			errs = append(errs, field.Invalid(path.Child("namespace"), ns, msg))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(obj.GetLabels(), path.Child("labels"))...)
	return append(errs, apivalidation.ValidateAnnotations(obj.GetAnnotations(), path.Child("annotations"))...)
}

// validateCore applies the API server's rules for the fields Portico reads
// of the core kinds.
func validateCore(obj metav1.Object) field.ErrorList {
	switch o := obj.(type) {
	case *corev1.Service:
		return append(validateMetadata(o, apivalidation.NameIsDNS1035Label, true), validateServiceSpec(&o.Spec)...)
	case *discoveryv1.EndpointSlice:
		return append(validateMetadata(o, apivalidation.NameIsDNSSubdomain, true), validateEndpointSlice(o)...)
	case *corev1.Secret:
		errs := validateMetadata(o, apivalidation.NameIsDNSSubdomain, true)
		return append(errs, validateSecret(o)...)
	case *corev1.ConfigMap:
		errs := validateMetadata(o, apivalidation.NameIsDNSSubdomain, true)
		keys := make(map[string]int, len(o.Data)+len(o.BinaryData))
		for k, v := range o.Data {
			keys[k] += len(v)
		}
		for k, v := range o.BinaryData {
			if _, dup := keys[k]; dup {
				errs = append(errs, field.Invalid(field.NewPath("binaryData").Key(k), k, "duplicate of a key in data"))
			}
			keys[k] += len(v)
		}
		return append(errs, validateData(field.NewPath("data"), keys)...)
	case *corev1.Namespace:
		return validateMetadata(o, apivalidation.ValidateNamespaceName, false)
	case *certv1.ClusterTrustBundle:
		return validateTrustBundle(o)
	}
	return nil
}

func validateServiceSpec(spec *corev1.ServiceSpec) field.ErrorList {
	path := field.NewPath("spec")
	var errs field.ErrorList
	switch spec.Type {
	case "", corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName:
	default:
		errs = append(errs, field.NotSupported(path.Child("type"), spec.Type,
			[]corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName}))
	}
	names := map[string]bool{}
	type portProto struct {
		port  int32
		proto corev1.Protocol
	}
	seen := map[portProto]bool{}
	for i, p := range spec.Ports {
		pp := path.Child("ports").Index(i)
		switch {
		case p.Name == "" && len(spec.Ports) > 1:
			errs = append(errs, field.Required(pp.Child("name"), "required when a Service has more than one port"))
		case p.Name != "":
			errs = appendMsgs(errs, pp.Child("name"), p.Name, validation.IsDNS1123Label(p.Name))
			if names[p.Name] {
				errs = append(errs, field.Duplicate(pp.Child("name"), p.Name))
			}
			names[p.Name] = true
		}
		errs = appendMsgs(errs, pp.Child("port"), p.Port, validation.IsValidPortNum(int(p.Port)))
		errs = append(errs, validateProtocol(pp.Child("protocol"), p.Protocol)...)
		key := portProto{p.Port, cmpOr(p.Protocol, corev1.ProtocolTCP)}
		if seen[key] {
			errs = append(errs, field.Duplicate(pp, key))
		}
		seen[key] = true
		errs = append(errs, validateTargetPort(pp.Child("targetPort"), p.TargetPort)...)
		if p.AppProtocol != nil {
			errs = appendMsgs(errs, pp.Child("appProtocol"), *p.AppProtocol, validation.IsQualifiedName(*p.AppProtocol))
		}
	}
	return errs
}

func validateTargetPort(path *field.Path, tp intstr.IntOrString) field.ErrorList {
	switch {
	case tp.Type == intstr.String:
		return appendMsgs(nil, path, tp.StrVal, validation.IsValidPortName(tp.StrVal))
	case tp.IntVal != 0: // unset: the API server defaults it to the port
		return appendMsgs(nil, path, tp.IntVal, validation.IsValidPortNum(int(tp.IntVal)))
	}
	return nil
}

func validateEndpointSlice(es *discoveryv1.EndpointSlice) field.ErrorList {
	var errs field.ErrorList
	var addressOK func(string) []string
	switch es.AddressType {
	case discoveryv1.AddressTypeIPv4:
		addressOK = ipv4Only
	case discoveryv1.AddressTypeIPv6:
		addressOK = ipv6Only
	case discoveryv1.AddressTypeFQDN:
		addressOK = func(a string) []string { return errMsgs(validation.IsFullyQualifiedDomainName(nil, a)) }
	default:
		errs = append(errs, field.NotSupported(field.NewPath("addressType"), es.AddressType,
			[]discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN}))
	}
	if len(es.Endpoints) > maxSliceEndpoints {
		errs = append(errs, field.TooMany(field.NewPath("endpoints"), len(es.Endpoints), maxSliceEndpoints))
	}
	for i, ep := range es.Endpoints {
		ap := field.NewPath("endpoints").Index(i).Child("addresses")
		if len(ep.Addresses) == 0 || len(ep.Addresses) > maxEndpointAddresses {
			errs = append(errs, field.Invalid(ap, len(ep.Addresses), "must hold between 1 and 100 addresses"))
		}
		for j, a := range ep.Addresses {
			if addressOK != nil {
				errs = appendMsgs(errs, ap.Index(j), a, addressOK(a))
			}
		}
	}
	if len(es.Ports) > maxSlicePorts {
		errs = append(errs, field.TooMany(field.NewPath("ports"), len(es.Ports), maxSlicePorts))
	}
	names := map[string]bool{}
	for i, p := range es.Ports {
		pp := field.NewPath("ports").Index(i)
		name := ptrValue(p.Name)
		if name != "" {
			errs = appendMsgs(errs, pp.Child("name"), name, validation.IsDNS1123Label(name))
		}
		if names[name] {
			errs = append(errs, field.Duplicate(pp.Child("name"), name))
		}
		names[name] = true
		if p.Port != nil {
			errs = appendMsgs(errs, pp.Child("port"), *p.Port, validation.IsValidPortNum(int(*p.Port)))
		}
		if p.Protocol != nil {
			errs = append(errs, validateProtocol(pp.Child("protocol"), *p.Protocol)...)
		}
		if p.AppProtocol != nil {
			errs = appendMsgs(errs, pp.Child("appProtocol"), *p.AppProtocol, validation.IsQualifiedName(*p.AppProtocol))
		}
	}
	return errs
}

func validateSecret(s *corev1.Secret) field.ErrorList {
	keys := make(map[string]int, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		keys[k] += len(v)
	}
	for k, v := range s.StringData {
		keys[k] += len(v)
	}
	errs := validateData(field.NewPath("data"), keys)
	if s.Type == corev1.SecretTypeTLS {
		// The API server requires both keys of a TLS Secret, even empty.
		for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
			if _, ok := keys[k]; !ok {
				errs = append(errs, field.Required(field.NewPath("data").Key(k), "a kubernetes.io/tls Secret holds "+k))
			}
		}
	}
	return errs
}

// validateData checks the keys of a Secret or ConfigMap and the total size
// of their values.
func validateData(path *field.Path, sizes map[string]int) field.ErrorList {
	var errs field.ErrorList
	total := 0
	keys := make([]string, 0, len(sizes))
	for k := range sizes {
		keys = append(keys, k)
	}
	slices.Sort(keys) // errors in a stable order
	for _, k := range keys {
		errs = appendMsgs(errs, path.Key(k), k, validation.IsConfigMapKey(k))
		total += sizes[k]
	}
	if total > maxDataSize {
		errs = append(errs, field.TooLong(path, "", maxDataSize))
	}
	return errs
}

func validateProtocol(path *field.Path, p corev1.Protocol) field.ErrorList {
	switch p {
	case "", corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		return nil
	}
	return field.ErrorList{field.NotSupported(path, p, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP})}
}

func ipv4Only(a string) []string {
	if ip, err := netip.ParseAddr(a); err != nil || !ip.Is4() {
		return []string{"must be an IPv4 address"}
	}
	return nil
}

func ipv6Only(a string) []string {
	if ip, err := netip.ParseAddr(a); err != nil || !ip.Is6() || ip.Is4In6() || ip.Zone() != "" {
		return []string{"must be an IPv6 address"}
	}
	return nil
}

func errMsgs(errs field.ErrorList) []string {
	out := make([]string, len(errs))
	for i, e := range errs {
		out[i] = strings.TrimPrefix(e.Detail, "<nil>: ")
	}
	return out
}

func appendMsgs(errs field.ErrorList, path *field.Path, value any, msgs []string) field.ErrorList {
	for _, m := range msgs {
		errs = append(errs, field.Invalid(path, value, m))
	}
	return errs
}

func cmpOr[T comparable](v, fallback T) T {
	var zero T
	if v == zero {
		return fallback
	}
	return v
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// maxTrustBundleSize is the API server's limit on a ClusterTrustBundle's
// spec.trustBundle.
const maxTrustBundleSize = 1 << 20

// validateTrustBundle applies the API server's rules for a
// ClusterTrustBundle: a name with no ':' without a signer, else the
// signer's name (its '/' as ':') and a ':' as prefix; a signer name of
// the form domain/path; a trust bundle of PEM CERTIFICATE blocks without
// headers, each a CA certificate, none twice, at least one.
func validateTrustBundle(b *certv1.ClusterTrustBundle) field.ErrorList {
	errs := validateMetadata(b, func(name string, _ bool) []string {
		signer := b.Spec.SignerName
		if signer == "" {
			if strings.Contains(name, ":") {
				return []string{"a ClusterTrustBundle without signerName must not have ':' in its name"}
			}
			return apivalidation.NameIsDNSSubdomain(name, false)
		}
		prefix := strings.ReplaceAll(signer, "/", ":") + ":"
		if !strings.HasPrefix(name, prefix) {
			return []string{fmt.Sprintf("a ClusterTrustBundle of signerName %s must be named with the prefix %s", signer, prefix)}
		}
		return apivalidation.NameIsDNSSubdomain(strings.TrimPrefix(name, prefix), false)
	}, false)
	path := field.NewPath("spec")
	if s := b.Spec.SignerName; s != "" {
		domain, rest, ok := strings.Cut(s, "/")
		switch {
		case !ok || rest == "":
			errs = append(errs, field.Invalid(path.Child("signerName"), s, "must be a domain and a path: <domain>/<path>"))
		default:
			errs = appendMsgs(errs, path.Child("signerName"), s, validation.IsDNS1123Subdomain(domain))
		}
	}
	bundle := path.Child("trustBundle")
	if len(b.Spec.TrustBundle) > maxTrustBundleSize {
		return append(errs, field.TooLong(bundle, "", maxTrustBundleSize))
	}
	seen := map[string]bool{}
	rest, n, bad := []byte(b.Spec.TrustBundle), 0, false
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		i := n
		n++
		var msg string
		switch cert, err := x509.ParseCertificate(block.Bytes); {
		case block.Type != "CERTIFICATE":
			msg = fmt.Sprintf("entry %d has bad block type: %s", i, block.Type)
		case len(block.Headers) != 0:
			msg = fmt.Sprintf("entry %d has PEM block headers", i)
		case err != nil:
			msg = fmt.Sprintf("entry %d does not parse as X.509", i)
		case !cert.IsCA:
			msg = fmt.Sprintf("entry %d does not have the CA bit set", i)
		case !cert.BasicConstraintsValid:
			msg = fmt.Sprintf("entry %d has invalid basic constraints", i)
		case seen[string(block.Bytes)]:
			msg = fmt.Sprintf("entry %d is a duplicate", i)
		}
		if msg != "" {
			errs = append(errs, field.Invalid(bundle, "<value omitted>", msg))
			bad = true
		}
		seen[string(block.Bytes)] = true
	}
	if n == 0 && !bad {
		errs = append(errs, field.Invalid(bundle, "<value omitted>", "at least one trust anchor must be provided"))
	}
	return errs
}
