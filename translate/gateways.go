package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/listeners"
	"portico.dev/portico/routing"
)

// classes accepts every GatewayClass of Portico's controller.
func (t *translation) classes() {
	t.ourClasses = map[string]bool{}
	t.classParams = map[string]parameters.Spec{}
	for _, gc := range t.res.GatewayClasses {
		if gc.Spec.ControllerName != t.controller {
			continue
		}
		spec, invalid := t.classParameters(gc)
		t.ourClasses[gc.Name] = invalid == ""
		t.classParams[gc.Name] = spec
		t.st.GatewayClasses[gc.Name] = gatewayClassStatus(gc, invalid)
	}
}

// gatewayClassStatus accepts gc unless its parameters are invalid (the
// message says why).
func gatewayClassStatus(gc *gwv1.GatewayClass, invalidParameters string) gwv1.GatewayClassStatus {
	accepted := metav1.Condition{
		Type:               string(gwv1.GatewayClassConditionStatusAccepted),
		Status:             metav1.ConditionTrue,
		Reason:             string(gwv1.GatewayClassReasonAccepted),
		Message:            "Portico serves this class",
		ObservedGeneration: gc.Generation,
	}
	if invalidParameters != "" {
		accepted.Status = metav1.ConditionFalse
		accepted.Reason = string(gwv1.GatewayClassReasonInvalidParameters)
		accepted.Message = invalidParameters
	}
	return gwv1.GatewayClassStatus{Conditions: []metav1.Condition{
		accepted,
		{
			Type:               string(gwv1.GatewayClassConditionStatusSupportedVersion),
			Status:             metav1.ConditionTrue,
			Reason:             string(gwv1.GatewayClassReasonSupportedVersion),
			Message:            "Gateway API " + consts.BundleVersion,
			ObservedGeneration: gc.Generation,
		},
	}}
}

// gatewaysAndListeners merges the listeners of each Gateway of ours with
// those of its ListenerSets (GEP-1713), oldest Gateway first, and records
// which Gateways and ListenerSets routes may attach to and the client
// certificate each Gateway presents to TLS backends.
func (t *translation) gatewaysAndListeners() {
	res := t.res
	lsByParent := map[types.NamespacedName][]*gwv1.ListenerSet{}
	for _, ls := range res.ListenerSets {
		if parent, ok := ListenerSetParent(ls); ok {
			lsByParent[parent] = append(lsByParent[parent], ls)
		}
	}
	t.clientCerts = map[types.NamespacedName]*config.BackendClientCert{}
	t.parents = make(map[routing.Parent]bool, len(res.Gateways)+len(res.ListenerSets))
	for _, gw := range snapshot.SortedByAge(res.Gateways) {
		accepted, ours := t.ourClasses[string(gw.Spec.GatewayClassName)]
		if !ours {
			continue
		}
		key := nn(gw.Namespace, gw.Name)
		gwParams, invalidParams := t.gatewayParameters(gw)
		classParams := t.classParams[string(gw.Spec.GatewayClassName)]
		perGateway := classParams.EffectiveMode() == parameters.ModePerGateway
		unsupported := unsupportedAddress(gw, len(t.settings.AddressPool) > 0)
		if perGateway {
			unsupported = perGatewayUnsupportedAddress(gw)
		}
		in := listeners.Input{
			Gateway:            gw,
			ClassAccepted:      accepted,
			InvalidParameters:  invalidParams,
			UnsupportedAddress: unsupported,
			ListenerSets:       lsByParent[key],
			NamespaceLabels:    t.ix.nsLabels,
			ReferenceGrants:    res.ReferenceGrants,
			Certificates:       t.ix.certificate,
			CACertificates:     t.cas.certificates,
			TrustBundles:       t.cas.trustBundle,
			ServicePorts:       t.servicePortsOf,
		}
		r := listeners.Merge(in)
		in.ListenerSets = nil
		t.mergeInputs = append(t.mergeInputs, in)
		t.results = append(t.results, gatewayResult{key, &r})
		if perGateway {
			t.addDataPlane(gw, &r, parameters.Merge(classParams, gwParams))
		}
		if c := t.backendClientCert(r.BackendClientCertificate); c != nil {
			t.clientCerts[key] = c
		}
		t.parents[routing.Parent{Kind: "Gateway", Namespace: gw.Namespace, Name: gw.Name}] = meta.IsStatusConditionTrue(r.Gateway.Conditions, string(gwv1.GatewayConditionAccepted))
		for lsKey, lss := range r.ListenerSets {
			t.parents[routing.Parent{Kind: "ListenerSet", Namespace: lsKey.Namespace, Name: lsKey.Name}] = meta.IsStatusConditionTrue(lss.Conditions, string(gwv1.ListenerSetConditionAccepted))
		}
		if t.merged == nil {
			// One Gateway is the common case: its list is the merged list.
			// (Clipped, so that appending the next Gateway's copies.)
			t.merged = slices.Clip(r.Listeners)
		} else {
			t.merged = append(t.merged, r.Listeners...)
		}
	}
}

// backendClientCert is the certificate a Gateway presents to TLS backends,
// nil when its reference did not resolve.
func (t *translation) backendClientCert(ref *types.NamespacedName) *config.BackendClientCert {
	if ref == nil {
		return nil
	}
	c := t.ix.parsed(*ref)
	if c == nil || len(c.Certificate) == 0 {
		return nil
	}
	h := sha256.New()
	for _, der := range c.Certificate {
		h.Write(der)
	}
	return &config.BackendClientCert{ID: hex.EncodeToString(h.Sum(nil)[:12]), Cert: c}
}

// ListenerSetParent resolves a ListenerSet's parentRef to a Gateway; false
// when it names something else.
func ListenerSetParent(ls *gwv1.ListenerSet) (types.NamespacedName, bool) {
	ref := ls.Spec.ParentRef
	if ref.Group != nil && *ref.Group != gwv1.GroupName {
		return types.NamespacedName{}, false
	}
	if ref.Kind != nil && *ref.Kind != "Gateway" {
		return types.NamespacedName{}, false
	}
	ns := ls.Namespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		ns = string(*ref.Namespace)
	}
	return nn(ns, string(ref.Name)), true
}
