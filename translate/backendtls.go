package translate

import (
	"cmp"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
)

// BackendTLSPolicy.
//
// A policy targets a Service, or one port of it by name (sectionName). For
// each port, a policy naming that port wins over one naming the whole
// Service; among policies naming the same thing the oldest wins (then the
// first by namespace/name) and the others are Conflicted. A policy whose
// CA certificates cannot be loaded still wins its targets: requests to them
// fail with a 500 rather than go out without the TLS the policy asks for.
//
// Status goes to every Gateway, as ancestor, that has an accepted route to
// a port the policy targets.

// tlsTarget is what a targetRef selects: a Service, and one port of it by
// name or, with section "", every port.
type tlsTarget struct {
	svc     types.NamespacedName
	section string
}

// backendTLS is what translate makes of the BackendTLSPolicies.
type backendTLS struct {
	// settings of the policy that won each target.
	byTarget map[tlsTarget]*config.BackendTLS
	// verdicts of every policy, by policy, with the targets it asked for.
	verdicts map[types.NamespacedName]*policyVerdict
}

type policyVerdict struct {
	accepted, resolved metav1.Condition
	wants              []tlsTarget
}

// caBundle is one ConfigMap's ca.crt, or one ClusterTrustBundle's
// trustBundle, parsed.
type caBundle struct {
	certs []*x509.Certificate
	pool  *x509.CertPool // nil when it holds no certificate
	sum   string         // of the PEM, for BackendTLS.ID
	err   string
}

// Kinds a CA certificate reference may name.
const (
	kindConfigMap          = "ConfigMap"
	kindClusterTrustBundle = "ClusterTrustBundle"
	groupCertificates      = "certificates.k8s.io"
)

// isTrustBundle reports whether a reference names a ClusterTrustBundle.
func isTrustBundle(group gwv1.Group, kind gwv1.Kind) bool {
	return group == groupCertificates && kind == kindClusterTrustBundle
}

// caIndex finds the objects CA certificates come from: ConfigMaps by
// namespace and name, ClusterTrustBundles (cluster-scoped) by name.
type caIndex struct {
	configMaps map[types.NamespacedName]*corev1.ConfigMap
	bundles    map[string]*certv1.ClusterTrustBundle
}

func newCAIndex(res *snapshot.Resources) caIndex {
	ix := caIndex{
		configMaps: make(map[types.NamespacedName]*corev1.ConfigMap, len(res.ConfigMaps)),
		bundles:    make(map[string]*certv1.ClusterTrustBundle, len(res.ClusterTrustBundles)),
	}
	for _, cm := range res.ConfigMaps {
		ix.configMaps[nn(cm.Namespace, cm.Name)] = cm
	}
	for _, b := range res.ClusterTrustBundles {
		ix.bundles[b.Name] = b
	}
	return ix
}

// caSource looks up CA bundles for one translation: BackendTLSPolicies and
// Gateways' client certificate validation read ConfigMaps and
// ClusterTrustBundles through it. Parsed bundles carry over to the next
// translation, by object (a *corev1.ConfigMap or *certv1.ClusterTrustBundle):
// an informer replaces the object when its content changes, which is how
// a rotated bundle reaches the data plane.
type caSource struct {
	caIndex
	prev, used map[any]caBundle
}

func newCASource(res *snapshot.Resources, prev map[any]caBundle) *caSource {
	return &caSource{caIndex: newCAIndex(res), prev: prev, used: map[any]caBundle{}}
}

// get returns the bundle of a ConfigMap, and false when there is no such
// ConfigMap.
func (c *caSource) get(namespace, name string) (caBundle, bool) {
	cm, ok := c.configMaps[nn(namespace, name)]
	if !ok {
		return caBundle{}, false
	}
	return c.parsed(cm, func() caBundle { return parseCABundle(cm) }), true
}

// getBundle returns the bundle of a ClusterTrustBundle, and false when
// there is no such ClusterTrustBundle.
func (c *caSource) getBundle(name string) (caBundle, bool) {
	b, ok := c.bundles[name]
	if !ok {
		return caBundle{}, false
	}
	return c.parsed(b, func() caBundle { return parseTrustBundle(b) }), true
}

func (c *caSource) parsed(obj any, parse func() caBundle) caBundle {
	if b, ok := c.used[obj]; ok {
		return b
	}
	b, ok := c.prev[obj]
	if !ok {
		b = parse()
	}
	c.used[obj] = b
	return b
}

// certificates is listeners.Input.CACertificates.
func (c *caSource) certificates(namespace, name string) ([]*x509.Certificate, error) {
	b, ok := c.get(namespace, name)
	switch {
	case !ok:
		return nil, errors.New("not found")
	case b.pool == nil:
		return nil, errors.New(b.err)
	}
	return b.certs, nil
}

// trustBundle is listeners.Input.TrustBundles.
func (c *caSource) trustBundle(name string) ([]*x509.Certificate, error) {
	b, ok := c.getBundle(name)
	switch {
	case !ok:
		return nil, errors.New(trustBundleMissing)
	case b.pool == nil:
		return nil, errors.New(b.err)
	}
	return b.certs, nil
}

// trustBundleMissing says why a ClusterTrustBundle is not found: either
// it does not exist, or the cluster does not serve the kind and Portico
// does not watch it.
const trustBundleMissing = "not found (it does not exist, or the cluster does not serve certificates.k8s.io/v1 ClusterTrustBundles)"

// forPort returns the settings for a Service port: those of a policy
// naming the port, else those of one naming the whole Service, else nil.
func (b *backendTLS) forPort(svc types.NamespacedName, portName string) *config.BackendTLS {
	if len(b.byTarget) == 0 {
		return nil
	}
	if portName != "" {
		if s, ok := b.byTarget[tlsTarget{svc, portName}]; ok {
			return s
		}
	}
	return b.byTarget[tlsTarget{svc, ""}]
}

// ids lists the IDs of the settings requests may use, for
// proxy.Config.BackendTLSIDs.
func (b *backendTLS) ids() map[string]struct{} {
	out := make(map[string]struct{}, len(b.byTarget))
	for _, s := range b.byTarget {
		if s.Invalid == "" {
			out[s.ID] = struct{}{}
		}
	}
	return out
}

// backendTLS decides which BackendTLSPolicy applies to each Service port.
func (t *translation) backendTLS() {
	t.tls = resolveBackendTLS(t.res, t.cas)
}

// policyStatuses computes the ancestor entries of every BackendTLSPolicy.
func (t *translation) policyStatuses() {
	t.st.BackendTLSPolicies = policyAncestors(t.res, t.st, t.tls, t.controller)
}

// resolveBackendTLS evaluates every BackendTLSPolicy, oldest first.
func resolveBackendTLS(res *snapshot.Resources, cas *caSource) *backendTLS {
	out := &backendTLS{
		byTarget: map[tlsTarget]*config.BackendTLS{},
		verdicts: make(map[types.NamespacedName]*policyVerdict, len(res.BackendTLSPolicies)),
	}
	if len(res.BackendTLSPolicies) == 0 {
		return out
	}
	winner := map[tlsTarget]types.NamespacedName{}
	for _, p := range snapshot.SortedByAge(res.BackendTLSPolicies) {
		key := nn(p.Namespace, p.Name)
		settings, v := evaluatePolicy(p, cas)
		var conflicts []string
		for _, ref := range p.Spec.TargetRefs {
			if ref.Group != "" || ref.Kind != "Service" {
				continue // reported by evaluatePolicy
			}
			target := tlsTarget{nn(p.Namespace, string(ref.Name)), string(ptr.Deref(ref.SectionName, ""))}
			if slices.Contains(v.wants, target) {
				continue // listed twice
			}
			v.wants = append(v.wants, target)
			if older, taken := winner[target]; taken {
				what := "Service " + target.svc.Name
				if target.section != "" {
					what += " port " + target.section
				}
				conflicts = append(conflicts, fmt.Sprintf("%s is already the target of the older BackendTLSPolicy %s", what, older.Name))
			}
		}
		// A policy that loses one of its targets applies to none of them:
		// its status is one Accepted condition for all.
		if len(conflicts) > 0 {
			v.accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonConflicted, strings.Join(conflicts, "; "), p.Generation)
		} else {
			for _, target := range v.wants {
				winner[target] = key
				out.byTarget[target] = settings
			}
		}
		out.verdicts[key] = v
	}
	return out
}

// evaluatePolicy checks one policy on its own and returns the settings it
// asks for and its conditions.
func evaluatePolicy(p *gwv1.BackendTLSPolicy, cas *caSource) (*config.BackendTLS, *policyVerdict) {
	gen := p.Generation
	val := &p.Spec.Validation
	settings := &config.BackendTLS{
		Policy:     p.Namespace + "/" + p.Name,
		ServerName: strings.ToLower(string(val.Hostname)),
	}
	for _, san := range val.SubjectAltNames {
		switch san.Type {
		case gwv1.HostnameSubjectAltNameType:
			settings.SANHostnames = append(settings.SANHostnames, strings.ToLower(string(san.Hostname)))
		case gwv1.URISubjectAltNameType:
			settings.SANURIs = append(settings.SANURIs, string(san.URI))
		}
	}
	v := &policyVerdict{
		accepted: policyCondition(gwv1.PolicyConditionAccepted, true, gwv1.PolicyReasonAccepted, "Policy is accepted", gen),
		resolved: policyCondition(gwv1.BackendTLSPolicyConditionResolvedRefs, true, gwv1.BackendTLSPolicyReasonResolvedRefs, "All CA certificate references are resolved", gen),
	}
	invalid := func(msg string) {
		v.accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.PolicyReasonInvalid, msg, gen)
		settings.Invalid = msg
	}

	pools, certs, sums, resolved := policyCAs(p, cas)
	if resolved != nil {
		v.resolved = *resolved
	}

	wellKnown := ptr.Deref(val.WellKnownCACertificates, "")
	switch {
	case len(val.CACertificateRefs) > 0 && wellKnown != "":
		invalid("caCertificateRefs and wellKnownCACertificates are both set; set one of them")
	case len(val.CACertificateRefs) > 0 && len(pools) == 0:
		msg := "no CA certificate reference is valid: " + v.resolved.Message
		v.accepted = policyCondition(gwv1.PolicyConditionAccepted, false, gwv1.BackendTLSPolicyReasonNoValidCACertificate, msg, gen)
		settings.Invalid = msg
	case len(val.CACertificateRefs) > 0:
		settings.RootCAs = pools[0]
		if len(pools) > 1 {
			// The certificates of every valid reference, in one pool.
			settings.RootCAs = x509.NewCertPool()
			for _, c := range certs {
				settings.RootCAs.AddCert(c)
			}
		}
	case wellKnown == gwv1.WellKnownCACertificatesSystem:
		sums = append(sums, "system")
	case wellKnown != "":
		invalid(fmt.Sprintf("wellKnownCACertificates %q is not supported; use %q or caCertificateRefs", wellKnown, gwv1.WellKnownCACertificatesSystem))
	default:
		invalid("neither caCertificateRefs nor wellKnownCACertificates is set")
	}
	switch {
	case settings.Invalid != "":
	case settings.ServerName == "":
		invalid("validation.hostname is empty")
	}
	for _, ref := range p.Spec.TargetRefs {
		if ref.Group != "" || ref.Kind != "Service" {
			// Other targets are left alone, and said so; the policy still
			// applies to its Services.
			v.accepted.Message += fmt.Sprintf("; targetRef %s %q is ignored: BackendTLSPolicy applies to Services", kindName(ref.Group, ref.Kind), ref.Name)
		}
	}

	settings.ID = checkID(settings, sums)
	return settings, v
}

// policyCAs loads the CA bundles a policy names: their pools, their
// certificates, the sums of their PEM, and the ResolvedRefs condition when
// some reference is not usable (nil when all are).
func policyCAs(p *gwv1.BackendTLSPolicy, cas *caSource) ([]*x509.CertPool, []*x509.Certificate, []string, *metav1.Condition) {
	var badKind, badRef []string
	var pools []*x509.CertPool
	var certs []*x509.Certificate
	var sums []string
	for _, ref := range p.Spec.Validation.CACertificateRefs {
		var b caBundle
		var ok bool
		switch {
		case isTrustBundle(ref.Group, ref.Kind):
			if b, ok = cas.getBundle(string(ref.Name)); !ok {
				badRef = append(badRef, fmt.Sprintf("ClusterTrustBundle %q: %s", ref.Name, trustBundleMissing))
				continue
			}
			if b.pool == nil {
				badRef = append(badRef, fmt.Sprintf("ClusterTrustBundle %q: %s", ref.Name, b.err))
				continue
			}
		case ref.Group != "" || ref.Kind != kindConfigMap:
			badKind = append(badKind, fmt.Sprintf("%s %q: kind %s is not supported; CA certificates come from ConfigMaps (key %s) "+
				"and ClusterTrustBundles (group %s)",
				kindName(ref.Group, ref.Kind), ref.Name, kindName(ref.Group, ref.Kind), wellknown.CACertificateKey, groupCertificates))
			continue
		default:
			if b, ok = cas.get(p.Namespace, string(ref.Name)); !ok {
				badRef = append(badRef, fmt.Sprintf("ConfigMap %q does not exist in namespace %s", ref.Name, p.Namespace))
				continue
			}
			if b.pool == nil {
				badRef = append(badRef, fmt.Sprintf("ConfigMap %q: %s", ref.Name, b.err))
				continue
			}
		}
		pools = append(pools, b.pool)
		certs = append(certs, b.certs...)
		sums = append(sums, b.sum)
	}
	var resolved *metav1.Condition
	switch {
	case len(badKind) > 0:
		c := policyCondition(gwv1.BackendTLSPolicyConditionResolvedRefs, false, gwv1.BackendTLSPolicyReasonInvalidKind,
			strings.Join(append(badKind, badRef...), "; "), p.Generation)
		resolved = &c
	case len(badRef) > 0:
		c := policyCondition(gwv1.BackendTLSPolicyConditionResolvedRefs, false, gwv1.BackendTLSPolicyReasonInvalidCACertificateRef,
			strings.Join(badRef, "; "), p.Generation)
		resolved = &c
	}
	return pools, certs, sums, resolved
}

// checkID identifies the identity check of settings, so that the same
// check shares pooled connections across policies and rebuilds, and a
// changed one never reuses a connection made under the old one.
func checkID(settings *config.BackendTLS, caSums []string) string {
	h := sha256.New()
	for _, part := range [][]string{{settings.ServerName}, settings.SANHostnames, settings.SANURIs, caSums} {
		for _, s := range part {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// referencedConfigMaps lists, in snapshot order, the ConfigMaps some
// BackendTLSPolicy or Gateway (client certificate validation) names.
func referencedConfigMaps(res *snapshot.Resources) []*corev1.ConfigMap {
	named := configMapNames(res)
	if len(named) == 0 {
		return nil
	}
	var out []*corev1.ConfigMap
	for _, cm := range res.ConfigMaps {
		if named[nn(cm.Namespace, cm.Name)] {
			out = append(out, cm)
		}
	}
	return out
}

// referencedTrustBundles lists, in snapshot order, the ClusterTrustBundles
// some BackendTLSPolicy or Gateway names.
func referencedTrustBundles(res *snapshot.Resources) []*certv1.ClusterTrustBundle {
	if len(res.ClusterTrustBundles) == 0 {
		return nil
	}
	named := trustBundleNames(res)
	var out []*certv1.ClusterTrustBundle
	for _, b := range res.ClusterTrustBundles {
		if named[b.Name] {
			out = append(out, b)
		}
	}
	return out
}

// trustBundleNames are the ClusterTrustBundles res's BackendTLSPolicies
// and Gateways name for CA certificates.
func trustBundleNames(res *snapshot.Resources) map[string]bool {
	named := map[string]bool{}
	for _, p := range res.BackendTLSPolicies {
		for _, ref := range p.Spec.Validation.CACertificateRefs {
			if isTrustBundle(ref.Group, ref.Kind) {
				named[string(ref.Name)] = true
			}
		}
	}
	forEachFrontendRef(res, func(_ *gwv1.Gateway, ref gwv1.ObjectReference) {
		if isTrustBundle(ref.Group, ref.Kind) {
			named[string(ref.Name)] = true
		}
	})
	return named
}

// forEachFrontendRef calls f with every CA certificate reference of the
// Gateways' client certificate validation.
func forEachFrontendRef(res *snapshot.Resources, f func(*gwv1.Gateway, gwv1.ObjectReference)) {
	for _, gw := range res.Gateways {
		if gw.Spec.TLS == nil || gw.Spec.TLS.Frontend == nil {
			continue
		}
		fr := gw.Spec.TLS.Frontend
		configs := []*gwv1.TLSConfig{&fr.Default}
		for i := range fr.PerPort {
			configs = append(configs, &fr.PerPort[i].TLS)
		}
		for _, c := range configs {
			if c.Validation == nil {
				continue
			}
			for _, ref := range c.Validation.CACertificateRefs {
				f(gw, ref)
			}
		}
	}
}

// configMapNames are the ConfigMaps res's BackendTLSPolicies and Gateways
// name for CA certificates.
func configMapNames(res *snapshot.Resources) map[types.NamespacedName]bool {
	named := map[types.NamespacedName]bool{}
	for _, p := range res.BackendTLSPolicies {
		for _, ref := range p.Spec.Validation.CACertificateRefs {
			if !isTrustBundle(ref.Group, ref.Kind) {
				named[nn(p.Namespace, string(ref.Name))] = true
			}
		}
	}
	forEachFrontendRef(res, func(gw *gwv1.Gateway, ref gwv1.ObjectReference) {
		if isTrustBundle(ref.Group, ref.Kind) {
			return
		}
		ns := gw.Namespace
		if ref.Namespace != nil && *ref.Namespace != "" {
			ns = string(*ref.Namespace)
		}
		named[nn(ns, string(ref.Name))] = true
	})
	return named
}

// parseCABundle reads the certificates of a ConfigMap's ca.crt.
func parseCABundle(cm *corev1.ConfigMap) caBundle {
	data, ok := cm.Data[wellknown.CACertificateKey]
	if !ok {
		return caBundle{err: "no key " + wellknown.CACertificateKey}
	}
	certs := pemCertificates(data)
	if len(certs) == 0 {
		return caBundle{err: "key " + wellknown.CACertificateKey + " holds no PEM certificate that can be parsed"}
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	sum := sha256.Sum256([]byte(data))
	return caBundle{certs: certs, pool: pool, sum: hex.EncodeToString(sum[:])}
}

// parseTrustBundle reads the certificates of a ClusterTrustBundle. The API
// server admits only bundles of valid CA certificates; one that still
// holds none (or a file source's, admitted by the same rules) is invalid.
func parseTrustBundle(b *certv1.ClusterTrustBundle) caBundle {
	certs := pemCertificates(b.Spec.TrustBundle)
	if len(certs) == 0 {
		return caBundle{err: "spec.trustBundle holds no PEM certificate that can be parsed"}
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	sum := sha256.Sum256([]byte(b.Spec.TrustBundle))
	return caBundle{certs: certs, pool: pool, sum: hex.EncodeToString(sum[:])}
}

// pemCertificates returns the certificates of a PEM bundle that parse;
// other blocks are skipped.
func pemCertificates(data string) []*x509.Certificate {
	var out []*x509.Certificate
	rest := []byte(data)
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return out
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func kindName(group gwv1.Group, kind gwv1.Kind) string {
	if group == "" {
		return string(kind)
	}
	return string(kind) + "." + string(group)
}

func policyCondition(typ gwv1.PolicyConditionType, ok bool, reason gwv1.PolicyConditionReason, msg string, gen int64) metav1.Condition {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	return metav1.Condition{Type: string(typ), Status: status, Reason: string(reason), Message: msg, ObservedGeneration: gen}
}

// policyAncestors writes the status of every BackendTLSPolicy: one entry
// per Gateway of ours with an accepted route to a port the policy targets
// (whether or not the policy won it), at most status.MaxPolicyAncestors of them.
func policyAncestors(res *snapshot.Resources, st *status.Maps, tls *backendTLS, controller gwv1.GatewayController) map[types.NamespacedName][]gwv1.PolicyAncestorStatus {
	out := map[types.NamespacedName][]gwv1.PolicyAncestorStatus{}
	if len(tls.verdicts) == 0 {
		return out
	}
	// Which policies want each target.
	wanted := map[tlsTarget][]types.NamespacedName{}
	for key, v := range tls.verdicts {
		for _, target := range v.wants {
			wanted[target] = append(wanted[target], key)
		}
	}
	portNames := map[types.NamespacedName]map[int32]string{}
	for _, svc := range res.Services {
		names := make(map[int32]string, len(svc.Spec.Ports))
		for _, p := range svc.Spec.Ports {
			names[p.Port] = p.Name
		}
		portNames[nn(svc.Namespace, svc.Name)] = names
	}
	ancestors := routedGateways(res, st, controller, wanted, portNames)

	group := gwv1.Group(gwv1.GroupName)
	kind := gwv1.Kind("Gateway")
	for key, gws := range ancestors {
		v := tls.verdicts[key]
		list := make([]types.NamespacedName, 0, len(gws))
		for gw := range gws {
			if _, ours := st.Gateways[gw]; ours {
				list = append(list, gw)
			}
		}
		slices.SortFunc(list, func(a, b types.NamespacedName) int {
			return cmp.Compare(a.String(), b.String())
		})
		if len(list) > status.MaxPolicyAncestors {
			list = list[:status.MaxPolicyAncestors]
		}
		entries := make([]gwv1.PolicyAncestorStatus, 0, len(list))
		for _, gw := range list {
			ns := gwv1.Namespace(gw.Namespace)
			entries = append(entries, gwv1.PolicyAncestorStatus{
				AncestorRef:    gwv1.ParentReference{Group: &group, Kind: &kind, Namespace: &ns, Name: gwv1.ObjectName(gw.Name)},
				ControllerName: controller,
				Conditions:     []metav1.Condition{v.accepted, v.resolved},
			})
		}
		if len(entries) > 0 {
			out[key] = entries
		}
	}
	return out
}

// routedGateways finds, for each policy wanted, the Gateways with an
// accepted route (of controller) to a port the policy targets.
func routedGateways(res *snapshot.Resources, st *status.Maps, controller gwv1.GatewayController,
	wanted map[tlsTarget][]types.NamespacedName, portNames map[types.NamespacedName]map[int32]string) map[types.NamespacedName]map[types.NamespacedName]bool {
	lsParent := map[types.NamespacedName]types.NamespacedName{}
	for _, ls := range res.ListenerSets {
		if parent, ok := ListenerSetParent(ls); ok {
			lsParent[nn(ls.Namespace, ls.Name)] = parent
		}
	}
	ancestors := map[types.NamespacedName]map[types.NamespacedName]bool{}
	for _, r := range routeBackends(res, st) {
		var gateways []types.NamespacedName
		for _, ps := range r.parents {
			if ps.ControllerName != controller || !meta.IsStatusConditionTrue(ps.Conditions, string(gwv1.RouteConditionAccepted)) {
				continue
			}
			parent := nn(string(ptr.Deref(ps.ParentRef.Namespace, "")), string(ps.ParentRef.Name))
			if parent.Namespace == "" {
				parent.Namespace = r.namespace
			}
			if ptr.Deref(ps.ParentRef.Kind, "") == "ListenerSet" {
				gw, ok := lsParent[parent]
				if !ok {
					continue
				}
				parent = gw
			}
			gateways = append(gateways, parent)
		}
		if len(gateways) == 0 {
			continue
		}
		visit := func(ref gwv1.BackendObjectReference) {
			if ptr.Deref(ref.Group, "") != "" || (ref.Kind != nil && *ref.Kind != "Service") || ref.Port == nil {
				return
			}
			svc := nn(string(ptr.Deref(ref.Namespace, "")), string(ref.Name))
			if svc.Namespace == "" {
				svc.Namespace = r.namespace
			}
			targets := []tlsTarget{{svc, ""}}
			if name := portNames[svc][*ref.Port]; name != "" {
				targets = append(targets, tlsTarget{svc, name})
			}
			for _, target := range targets {
				for _, policy := range wanted[target] {
					if ancestors[policy] == nil {
						ancestors[policy] = map[types.NamespacedName]bool{}
					}
					for _, gw := range gateways {
						ancestors[policy][gw] = true
					}
				}
			}
		}
		for _, ref := range r.refs {
			visit(ref)
		}
	}
	return ancestors
}

// routedBackends are the backends (mirrors included) a route names, with
// its computed parent statuses.
type routedBackends struct {
	namespace string
	parents   []gwv1.RouteParentStatus
	refs      []gwv1.BackendObjectReference
}

// routeBackends lists the backends of every HTTPRoute, GRPCRoute and
// TLSRoute.
func routeBackends(res *snapshot.Resources, st *status.Maps) []routedBackends {
	out := make([]routedBackends, 0, len(res.HTTPRoutes)+len(res.GRPCRoutes)+len(res.TLSRoutes))
	for _, r := range res.TLSRoutes {
		rb := routedBackends{namespace: r.Namespace, parents: st.TLSRoutes[nn(r.Namespace, r.Name)]}
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				rb.refs = append(rb.refs, b.BackendObjectReference)
			}
		}
		out = append(out, rb)
	}
	for _, r := range res.HTTPRoutes {
		rb := routedBackends{namespace: r.Namespace, parents: st.HTTPRoutes[nn(r.Namespace, r.Name)]}
		for _, rule := range r.Spec.Rules {
			rb.refs = appendMirrors(rb.refs, rule.Filters)
			for _, b := range rule.BackendRefs {
				rb.refs = appendMirrors(append(rb.refs, b.BackendObjectReference), b.Filters)
			}
		}
		out = append(out, rb)
	}
	out = append(out, streamRouteBackends(res, st)...)
	return append(out, grpcRouteBackends(res, st)...)
}

// streamRouteBackends are the Services of TCPRoutes and UDPRoutes, with
// their parents' statuses.
func streamRouteBackends(res *snapshot.Resources, st *status.Maps) []routedBackends {
	out := make([]routedBackends, 0, len(res.TCPRoutes)+len(res.UDPRoutes))
	for _, r := range res.TCPRoutes {
		rb := routedBackends{namespace: r.Namespace, parents: st.TCPRoutes[nn(r.Namespace, r.Name)]}
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				rb.refs = append(rb.refs, b.BackendObjectReference)
			}
		}
		out = append(out, rb)
	}
	for _, r := range res.UDPRoutes {
		rb := routedBackends{namespace: r.Namespace, parents: st.UDPRoutes[nn(r.Namespace, r.Name)]}
		for _, rule := range r.Spec.Rules {
			for _, b := range rule.BackendRefs {
				rb.refs = append(rb.refs, b.BackendObjectReference)
			}
		}
		out = append(out, rb)
	}
	return out
}

func appendMirrors(refs []gwv1.BackendObjectReference, filters []gwv1.HTTPRouteFilter) []gwv1.BackendObjectReference {
	for _, f := range filters {
		if f.RequestMirror != nil {
			refs = append(refs, f.RequestMirror.BackendRef)
		}
	}
	return refs
}
