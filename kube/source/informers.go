// Package source is the cluster's source of snapshots: informers over every
// kind translate reads (and, for per-Gateway data planes, their Deployments
// and PorticoParameters), kept in arrival order so that consecutive
// snapshots list each kind alike, and the check of the installed Gateway
// API CRDs' versions.
package source

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"go.uber.org/zap"

	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/wellknown"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	gwapi "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gwinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"
	gwlisters "sigs.k8s.io/gateway-api/pkg/client/listers/apis/v1"
)

// Informers watches every kind translate reads, cluster-wide, and keeps
// them in shared caches.
type Informers struct {
	factories []factory
	synced    map[string]cache.InformerSynced // by kind

	gatewayClasses  gwlisters.GatewayClassLister
	gateways        gwlisters.GatewayLister
	listenerSets    gwlisters.ListenerSetLister
	httpRoutes      gwlisters.HTTPRouteLister
	grpcRoutes      gwlisters.GRPCRouteLister
	tlsRoutes       gwlisters.TLSRouteLister
	tcpRoutes       gwlisters.TCPRouteLister // nil without the CRD (AddTCPRoutes)
	udpRoutes       gwlisters.UDPRouteLister // nil without the CRD (AddUDPRoutes)
	referenceGrants gwlisters.ReferenceGrantLister
	backendTLS      gwlisters.BackendTLSPolicyLister
	configMaps      corelisters.ConfigMapLister
	namespaces      corelisters.NamespaceLister
	secrets         corelisters.SecretLister
	services        corelisters.ServiceLister
	endpointSlices  discoverylisters.EndpointSliceLister
	dataPlanes      dataPlaneInformers // provisioninformers.go
	// trafficPolicies caches BackendTrafficPolicies; nil when their CRD
	// is not installed (trafficpolicies.go).
	trafficPolicies cache.Store
	// securityPolicies caches SecurityPolicies; nil when their CRD is
	// not installed (securitypolicies.go).
	securityPolicies cache.Store
	// clientPolicies caches ClientTrafficPolicies; nil when their CRD is
	// not installed (clientpolicies.go).
	clientPolicies cache.Store
	// xTrafficPolicies caches XBackendTrafficPolicies; nil when their
	// CRD is not installed (xtrafficpolicies.go).
	xTrafficPolicies cache.Store

	// order lists what snapshots hold, in arrival order (arrivals.go).
	order orders
}

type orders struct {
	gatewayClasses  *arrivals[*gwapi.GatewayClass]
	gateways        *arrivals[*gwapi.Gateway]
	listenerSets    *arrivals[*gwapi.ListenerSet]
	httpRoutes      *arrivals[*gwapi.HTTPRoute]
	grpcRoutes      *arrivals[*gwapi.GRPCRoute]
	tlsRoutes       *arrivals[*gwapi.TLSRoute]
	tcpRoutes       *arrivals[*gwapi.TCPRoute]
	udpRoutes       *arrivals[*gwapi.UDPRoute]
	referenceGrants *arrivals[*gwapi.ReferenceGrant]
	backendTLS      *arrivals[*gwapi.BackendTLSPolicy]
	configMaps      *arrivals[*corev1.ConfigMap]
	trustBundles    *arrivals[*certv1.ClusterTrustBundle] // empty unless AddClusterTrustBundles
	namespaces      *arrivals[*corev1.Namespace]
	secrets         *arrivals[*corev1.Secret]
	services        *arrivals[*corev1.Service]
	endpointSlices  *arrivals[*discoveryv1.EndpointSlice]
}

func newOrders() orders {
	o := orders{
		gatewayClasses:  newArrivals[*gwapi.GatewayClass](),
		gateways:        newArrivals[*gwapi.Gateway](),
		listenerSets:    newArrivals[*gwapi.ListenerSet](),
		httpRoutes:      newArrivals[*gwapi.HTTPRoute](),
		grpcRoutes:      newArrivals[*gwapi.GRPCRoute](),
		tlsRoutes:       newArrivals[*gwapi.TLSRoute](),
		tcpRoutes:       newArrivals[*gwapi.TCPRoute](),
		udpRoutes:       newArrivals[*gwapi.UDPRoute](),
		referenceGrants: newArrivals[*gwapi.ReferenceGrant](),
		backendTLS:      newArrivals[*gwapi.BackendTLSPolicy](),
		configMaps:      newArrivals[*corev1.ConfigMap](),
		trustBundles:    newArrivals[*certv1.ClusterTrustBundle](),
		namespaces:      newArrivals[*corev1.Namespace](),
		secrets:         newArrivals[*corev1.Secret](),
		services:        newArrivals[*corev1.Service](),
		endpointSlices:  newArrivals[*discoveryv1.EndpointSlice](),
	}
	// Translate reads no status of the kinds Portico writes status on, but
	// a Gateway's addresses (for an address pool): the echo of every status
	// write would otherwise look like a change of the object.
	o.gatewayClasses.keep = func(old, new *gwapi.GatewayClass) bool { return statusOnly(old, new) }
	o.listenerSets.keep = func(old, new *gwapi.ListenerSet) bool { return statusOnly(old, new) }
	o.httpRoutes.keep = func(old, new *gwapi.HTTPRoute) bool { return statusOnly(old, new) }
	o.grpcRoutes.keep = func(old, new *gwapi.GRPCRoute) bool { return statusOnly(old, new) }
	o.tlsRoutes.keep = func(old, new *gwapi.TLSRoute) bool { return statusOnly(old, new) }
	o.tcpRoutes.keep = func(old, new *gwapi.TCPRoute) bool { return statusOnly(old, new) }
	o.udpRoutes.keep = func(old, new *gwapi.UDPRoute) bool { return statusOnly(old, new) }
	o.backendTLS.keep = func(old, new *gwapi.BackendTLSPolicy) bool { return statusOnly(old, new) }
	o.gateways.keep = func(old, new *gwapi.Gateway) bool {
		return statusOnly(old, new) && reflect.DeepEqual(old.Status.Addresses, new.Status.Addresses)
	}
	return o
}

// statusOnly reports whether an update of a Gateway API object changed
// only its status: not its generation (which the spec moves), labels,
// annotations or deletion.
func statusOnly(o, n metav1.Object) bool {
	return o.GetUID() == n.GetUID() && o.GetGeneration() == n.GetGeneration() && n.GetGeneration() != 0 &&
		maps.Equal(o.GetLabels(), n.GetLabels()) && maps.Equal(o.GetAnnotations(), n.GetAnnotations()) &&
		o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp())
}

// Handlers are what informer events turn into.
type Handlers struct {
	// Changed is called for every event that can change the configuration.
	Changed func()
	// StatusChanged is called when only the status (or nothing translate
	// reads) of a Gateway API object changed: no rebuild is needed, but the
	// status writer should compare again in case someone else wrote it.
	StatusChanged func(metav1.Object)
}

// Listers are the caches of the Gateway API kinds Portico writes status on:
// the status writer compares what it computed with what they hold.
type Listers struct {
	GatewayClasses gwlisters.GatewayClassLister
	Gateways       gwlisters.GatewayLister
	ListenerSets   gwlisters.ListenerSetLister
	HTTPRoutes     gwlisters.HTTPRouteLister
	GRPCRoutes     gwlisters.GRPCRouteLister
	TLSRoutes      gwlisters.TLSRouteLister
	TCPRoutes      gwlisters.TCPRouteLister // nil without the CRD
	UDPRoutes      gwlisters.UDPRouteLister // nil without the CRD
	BackendTLS     gwlisters.BackendTLSPolicyLister
	// TrafficPolicies holds *trafficpolicy.BackendTrafficPolicy, nil
	// when their CRD is not installed.
	TrafficPolicies cache.Store
	// SecurityPolicies holds *securitypolicy.SecurityPolicy, nil when
	// their CRD is not installed.
	SecurityPolicies cache.Store
	// ClientPolicies holds *clientpolicy.ClientTrafficPolicy, nil when
	// their CRD is not installed.
	ClientPolicies cache.Store
	// XTrafficPolicies holds *gwxv1a1.XBackendTrafficPolicy, nil when
	// their CRD is not installed.
	XTrafficPolicies cache.Store
}

// Listers returns the caches of the kinds Portico writes status on.
func (in *Informers) Listers() Listers {
	return Listers{
		GatewayClasses:   in.gatewayClasses,
		Gateways:         in.gateways,
		ListenerSets:     in.listenerSets,
		HTTPRoutes:       in.httpRoutes,
		GRPCRoutes:       in.grpcRoutes,
		TLSRoutes:        in.tlsRoutes,
		TCPRoutes:        in.tcpRoutes,
		UDPRoutes:        in.udpRoutes,
		BackendTLS:       in.backendTLS,
		TrafficPolicies:  in.trafficPolicies,
		SecurityPolicies: in.securityPolicies,
		ClientPolicies:   in.clientPolicies,
		XTrafficPolicies: in.xTrafficPolicies,
	}
}

// New sets up the informers; nothing runs until Start. Secrets are
// filtered by the API server to type kubernetes.io/tls: only those can be
// listener certificates, and a cluster holds many other Secrets.
func New(kube kubernetes.Interface, gw gatewayclient.Interface, resync time.Duration, h Handlers) (*Informers, error) {
	gwf := gwinformers.NewSharedInformerFactoryWithOptions(gw, resync, gwinformers.WithTransform(stripManagedFields))
	coref := kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync, kubeinformers.WithTransform(stripManagedFields))
	secretf := kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync,
		kubeinformers.WithTransform(stripManagedFields),
		kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS)).String()
		}))

	// ConfigMaps are only read for CA certificates (BackendTLSPolicies,
	// client certificate validation): the caches keep the key ca.crt and
	// nothing else.
	configf := kubeinformers.NewSharedInformerFactoryWithOptions(kube, resync, kubeinformers.WithTransform(keepCACertificate))

	in := &Informers{order: newOrders()}
	o := in.order
	in.factories = []factory{gwf, coref, secretf, configf}

	gwv1 := gwf.Gateway().V1()
	spec, other := specHandler(h), anyHandler(h)
	in.synced = map[string]cache.InformerSynced{}
	for _, reg := range []struct {
		kind     string
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{"GatewayClass", gwv1.GatewayClasses().Informer(), o.gatewayClasses.handler(spec)},
		{"Gateway", gwv1.Gateways().Informer(), o.gateways.handler(spec)},
		{"ListenerSet", gwv1.ListenerSets().Informer(), o.listenerSets.handler(spec)},
		{"HTTPRoute", gwv1.HTTPRoutes().Informer(), o.httpRoutes.handler(spec)},
		{"GRPCRoute", gwv1.GRPCRoutes().Informer(), o.grpcRoutes.handler(spec)},
		{"TLSRoute", gwv1.TLSRoutes().Informer(), o.tlsRoutes.handler(spec)},
		{"ReferenceGrant", gwv1.ReferenceGrants().Informer(), o.referenceGrants.handler(other)},
		{"BackendTLSPolicy", gwv1.BackendTLSPolicies().Informer(), o.backendTLS.handler(spec)},
		{"ConfigMap", configf.Core().V1().ConfigMaps().Informer(), o.configMaps.handler(caHandler(h))},
		{"Namespace", coref.Core().V1().Namespaces().Informer(), o.namespaces.handler(other)},
		{"Service", coref.Core().V1().Services().Informer(), o.services.handler(other)},
		{"EndpointSlice", coref.Discovery().V1().EndpointSlices().Informer(), o.endpointSlices.handler(other)},
		{"Secret", secretf.Core().V1().Secrets().Informer(), o.secrets.handler(other)},
	} {
		registration, err := reg.informer.AddEventHandler(reg.handler)
		if err != nil {
			return nil, fmt.Errorf("%s informer event handler: %w", reg.kind, err)
		}
		// Synced once the handler, not only the cache, has seen the first
		// list: snapshots list what the handler has put in order.
		in.synced[reg.kind] = registration.HasSynced
	}
	in.gatewayClasses = gwv1.GatewayClasses().Lister()
	in.gateways = gwv1.Gateways().Lister()
	in.listenerSets = gwv1.ListenerSets().Lister()
	in.httpRoutes = gwv1.HTTPRoutes().Lister()
	in.grpcRoutes = gwv1.GRPCRoutes().Lister()
	in.tlsRoutes = gwv1.TLSRoutes().Lister()
	in.referenceGrants = gwv1.ReferenceGrants().Lister()
	in.backendTLS = gwv1.BackendTLSPolicies().Lister()
	in.configMaps = configf.Core().V1().ConfigMaps().Lister()
	in.namespaces = coref.Core().V1().Namespaces().Lister()
	in.services = coref.Core().V1().Services().Lister()
	in.endpointSlices = coref.Discovery().V1().EndpointSlices().Lister()
	in.secrets = secretf.Core().V1().Secrets().Lister()
	return in, nil
}

// factory is what the Gateway API and core informer factories share.
type factory interface {
	Start(stopCh <-chan struct{})
	Shutdown()
}

// Start runs the informers until ctx ends.
func (in *Informers) Start(ctx context.Context) {
	for _, f := range in.factories {
		f.Start(ctx.Done())
	}
}

// WaitForSync blocks until every cache holds a full list, or ctx ends.
// Meanwhile it logs which kinds it still waits for: a missing CRD or a
// missing permission shows up there (and in client-go's own log) rather
// than as a silent hang.
func (in *Informers) WaitForSync(ctx context.Context, log *zap.Logger) error {
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	report := time.Now().Add(10 * time.Second)
	for {
		var waiting []string
		for kind, synced := range in.synced {
			if !synced() {
				waiting = append(waiting, kind)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(report) {
			slices.Sort(waiting)
			log.Warn("still waiting for the informer caches; check that the Gateway API CRDs are installed and that Portico may list these kinds", zap.Strings("kinds", waiting))
			report = time.Now().Add(30 * time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("informer caches did not sync: %w", context.Cause(ctx))
		case <-poll.C:
		}
	}
}

// Shutdown waits for the informers' goroutines once ctx has ended.
func (in *Informers) Shutdown() {
	for _, f := range in.factories {
		f.Shutdown()
	}
}

// Snapshot lists every cache into one Resources. The objects are the
// caches' own and must not be modified; translate only reads them.
func (in *Informers) Snapshot() (*snapshot.Resources, error) {
	o := in.order
	res := &snapshot.Resources{
		GatewayClasses:      o.gatewayClasses.list(),
		Gateways:            o.gateways.list(),
		ListenerSets:        o.listenerSets.list(),
		HTTPRoutes:          o.httpRoutes.list(),
		GRPCRoutes:          o.grpcRoutes.list(),
		TLSRoutes:           o.tlsRoutes.list(),
		TCPRoutes:           o.tcpRoutes.list(),
		UDPRoutes:           o.udpRoutes.list(),
		ReferenceGrants:     o.referenceGrants.list(),
		BackendTLSPolicies:  o.backendTLS.list(),
		ConfigMaps:          o.configMaps.list(),
		ClusterTrustBundles: o.trustBundles.list(),
		Namespaces:          o.namespaces.list(),
		Secrets:             o.secrets.list(),
		Services:            o.services.list(),
		EndpointSlices:      o.endpointSlices.list(),
	}
	if err := in.snapshotDataPlanes(res); err != nil {
		return nil, err
	}
	snapshotPolicies(in.trafficPolicies, &res.TrafficPolicies)
	snapshotPolicies(in.securityPolicies, &res.SecurityPolicies)
	snapshotPolicies(in.clientPolicies, &res.ClientPolicies)
	snapshotPolicies(in.xTrafficPolicies, &res.XTrafficPolicies)
	return res, nil
}

// stripManagedFields drops metadata.managedFields before objects enter the
// caches: Portico never reads them, and on thousands of objects they are a
// large share of the memory.
func stripManagedFields(obj any) (any, error) {
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	return obj, nil
}

// keepCACertificate is stripManagedFields for ConfigMaps that also drops
// every key but ca.crt: a cluster's ConfigMaps hold all kinds of
// configuration, of which Portico reads only CA bundles.
func keepCACertificate(obj any) (any, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		cm.SetManagedFields(nil)
		cm.Annotations = nil
		cm.BinaryData = nil
		if ca, ok := cm.Data[wellknown.CACertificateKey]; ok {
			cm.Data = map[string]string{wellknown.CACertificateKey: ca}
		} else {
			cm.Data = nil
		}
		return cm, nil
	}
	return stripManagedFields(obj)
}

// caHandler reports ConfigMaps whose ca.crt appears, changes or goes: the
// caches hold nothing else of them (keepCACertificate), and the rest of a
// cluster's ConfigMap traffic must not cause rebuilds.
func caHandler(h Handlers) cache.ResourceEventHandler {
	hasCA := func(obj any) bool {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		cm, ok := obj.(*corev1.ConfigMap)
		return !ok || cm.Data[wellknown.CACertificateKey] != ""
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if hasCA(obj) {
				h.Changed()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, okOld := oldObj.(*corev1.ConfigMap)
			n, okNew := newObj.(*corev1.ConfigMap)
			if okOld && okNew && o.Data[wellknown.CACertificateKey] == n.Data[wellknown.CACertificateKey] {
				return
			}
			h.Changed()
		},
		DeleteFunc: func(obj any) {
			if hasCA(obj) {
				h.Changed()
			}
		},
	}
}

// anyHandler reports every change.
func anyHandler(h Handlers) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { h.Changed() },
		UpdateFunc: func(oldObj, newObj any) {
			if sameVersion(oldObj, newObj) {
				return // a resync: nothing changed
			}
			h.Changed()
		},
		DeleteFunc: func(any) { h.Changed() },
	}
}

// specHandler is for Gateway API kinds, whose status Portico writes itself:
// an update that leaves generation, labels and annotations alone changed
// only the status, which translate does not read, so rebuilding for it
// would only turn every status write into a rebuild.
func specHandler(h Handlers) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { h.Changed() },
		UpdateFunc: func(oldObj, newObj any) {
			if sameVersion(oldObj, newObj) {
				return
			}
			o, okOld := oldObj.(metav1.Object)
			n, okNew := newObj.(metav1.Object)
			if okOld && okNew && statusOnly(o, n) {
				h.StatusChanged(n)
				return
			}
			h.Changed()
		},
		DeleteFunc: func(any) { h.Changed() },
	}
}

func sameVersion(oldObj, newObj any) bool {
	o, okOld := oldObj.(metav1.Object)
	n, okNew := newObj.(metav1.Object)
	return okOld && okNew && o.GetResourceVersion() == n.GetResourceVersion()
}

func nn(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}
