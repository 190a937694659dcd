// Package translate is the pure stage between a snapshot of objects and
// what Portico does with them: Translate turns a snapshot.Resources into
// the data plane's config.Config, every status Portico reports and the
// certificates to order over ACME. It starts no goroutine, reads no clock,
// logs nothing and talks to no API server; what it carries from one call to
// the next (parsed certificates and CA bundles, pool addresses handed out,
// the previous result) is the Memory value it is given and returns. Every
// rule of the Gateway API that decides a status or a route lives here or in
// the packages it calls (listeners, routing).
package translate

import (
	"reflect"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/knative"
	"portico.dev/portico/internal/controlplane/parameters"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/tcprouting"
	"portico.dev/portico/internal/controlplane/tlsrouting"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/shared/layered"
	"portico.dev/portico/internal/shared/pmap"
	"portico.dev/portico/listeners"
	"portico.dev/portico/routing"
)

// Settings are what translate is told once, from the flags.
type Settings struct {
	// ControllerName selects the GatewayClasses Portico serves;
	// wellknown.ControllerName when empty.
	ControllerName gwv1.GatewayController
	// AddressPool, when set, gives every Gateway an IP address of its own
	// from this list, on which its ports are bound and which its status
	// reports; without it all Gateways share Portico's addresses.
	AddressPool []string
	// Shared, without an AddressPool, says where Portico's own addresses
	// come from: every accepted Gateway reports them, and its spec.addresses
	// is checked against them. Nil in standalone mode, which writes no
	// status and knows no addresses of its own: Gateways report none.
	Shared *SharedAddresses
	// Knative, when set, serves the KIngresses of its class on two
	// gateways of their own (knative.go).
	Knative *KnativeSettings
	// Gateway, when set, makes this the translation of that Gateway's own
	// data plane (GEP-1762): its Config serves that Gateway and its
	// ListenerSets only. Unset, the Config serves every Gateway whose
	// class shares Portico's data plane, and none of those that have
	// their own.
	Gateway *types.NamespacedName
}

func (s Settings) controller() gwv1.GatewayController {
	if s.ControllerName == "" {
		return wellknown.ControllerName
	}
	return s.ControllerName
}

// Output is one translation's result, never changed once returned: later
// translations and Finish share parts of it (ports, status maps and
// statuses) and make what they change anew. Treat it as read-only (the
// conditions package and pmap.Map.Edit copy what they change).
type Output struct {
	Config   *config.Config
	Statuses *status.Computed
	// StatusesChanged names, after a translation that reused the one
	// before it (a delta, or nothing but EndpointSlices changed), the
	// statuses that may differ from that one's: the others are the same
	// values. nil after a full translation, when any may differ.
	StatusesChanged *status.Changed
	// ACME lists the certificates to obtain over ACME HTTP-01, one per
	// accepted, non-conflicted, opted-in listener (see acme.go), sorted by
	// hostname.
	ACME []ACMECertificate
	// Knative holds what translate says of every KIngress and Certificate
	// of Portico's classes (knative.go); nil without Settings.Knative.
	Knative *KnativeOutput
	// DataPlanes are the Gateways of classes that give each Gateway a
	// data plane of its own, oldest first: what provisioning renders.
	DataPlanes []provision.Input
}

// Memory is what one translation hands the next. The zero value is a first
// translation. A Memory, like an Output, is never changed once returned: it
// can be translated from any number of times, from any goroutine, and
// passing the same Memory twice gives the same Output twice
// (TestDeterministic, TestMemoryReused). Each translation from it may be a
// delta (incremental.go), which shares with the Output returned next to the
// Memory everything the change did not touch.
type Memory struct {
	// certs are the parsed key pairs of the Secrets the last translation
	// read, by Secret, with the bytes they were parsed from.
	certs layered.Map[types.NamespacedName, parsedCert]
	// expiries sort certs' base by expiry (expiry.go).
	expiries *expiries
	// caBundles are the parsed CA certificates of the ConfigMaps the last
	// translation read, by object.
	caBundles map[any]caBundle
	// poolAssigned are the pool addresses the last translation gave each
	// Gateway. Until its status reports them (written a second or more
	// later), they are what keeps a Gateway on its address when another
	// Gateway, created in the same second with a name that sorts first,
	// appears.
	poolAssigned map[types.NamespacedName][]string
	// last is the previous full translation, reused when only
	// EndpointSlices changed: endpoints churn constantly in a cluster and
	// must not recompile every route and certificate table.
	last *fullTranslation
	// incremental is set when this memory's translation re-derived only
	// what changed.
	incremental bool
	// eps is the last resolution of endpoints (endpointsmemo.go).
	eps *endpointsMemo
	// inc is what the next translation needs to re-derive only what a
	// change touches; nil when the last one was of a shape it does not
	// cover (incremental.go).
	inc *incremental
	// kingressHashes are the probe hashes of the KIngresses the last
	// full translation served, by object: a changed KIngress is a new
	// pointer.
	kingressHashes map[*knative.Ingress]string
	// kn is what the next translation needs to re-derive only what a
	// change of KIngresses, Secrets and Services touches; nil when the
	// last one was of a shape it does not cover (knativedelta.go).
	kn *knativeState
}

// Incremental reports whether the translation that returned m re-derived
// only what changed since the one before (incremental.go).
func (m Memory) Incremental() bool { return m.incremental }

// Certificates is the number of parsed key pairs the memory holds.
func (m Memory) Certificates() int { return m.certs.Len() }

// EarliestExpiry is when the first of the key pairs the memory holds
// expires; the zero time when it holds none.
func (m Memory) EarliestExpiry() time.Time {
	if m.expiries == nil {
		m.expiries = &expiries{}
	}
	return m.expiries.earliest(m.certs)
}

type fullTranslation struct {
	inputs []any // every object but EndpointSlices, in snapshot order
	out    Output
}

// Translate computes the data plane Config, every status and the ACME
// certificates wanted from res: Routes, then Endpoints.
func Translate(s Settings, res *snapshot.Resources, mem Memory) (Output, Memory) {
	out, next := Routes(s, res, mem)
	cfg := *out.Config
	eps, em := ResolveEndpoints(res, mem)
	cfg.Endpoints = eps
	out.Config = &cfg
	return out, next.WithEndpoints(em)
}

// Routes is Translate without endpoints: the Config it returns has none.
// Endpoints depend on Services and EndpointSlices alone, and nothing here
// depends on them, so a caller with a core to spare resolves them with
// Endpoints meanwhile. When nothing but EndpointSlices changed since the
// translation mem comes from, its Output is returned as it was.
func Routes(s Settings, res *snapshot.Resources, mem Memory) (Output, Memory) {
	var inputs []any
	switch {
	case mem.inc != nil:
		if out, next, ok := mem.inc.apply(s, res, mem); ok {
			return out, next
		}
	case mem.kn != nil:
		if out, next, ok := mem.kn.apply(s, res, mem); ok {
			return out, next
		}
	default:
		inputs = routingInputs(res)
		if mem.last != nil && slices.Equal(mem.last.inputs, inputs) {
			return unchanged(mem.last.out), mem
		}
	}
	t := newTranslation(s, res, mem)
	t.classes()
	t.gatewaysAndListeners()
	t.backendTLS()
	t.trafficPolicies()
	t.securityPolicies()
	t.clientPolicies()
	t.xTrafficPolicies()
	t.telemetryPolicies()
	t.routes()
	t.policyStatuses()
	t.trafficPolicyStatuses()
	t.securityPolicyStatuses()
	t.clientPolicyStatuses()
	t.xTrafficPolicyStatuses()
	t.telemetryPolicyStatuses()
	t.acmeWanted()
	t.gatewayAddresses()
	t.portTables()
	t.knative(mem)
	t.knativeCertificates()
	out := t.output()
	next := Memory{certs: layered.Of(t.ix.certs.used), expiries: &expiries{}, caBundles: t.cas.used, poolAssigned: t.poolAssigned,
		last: &fullTranslation{out: out}, kingressHashes: t.kingressHashes, inc: t.incrementalState()}
	if next.inc == nil {
		next.kn = t.knativeState(out)
	}
	if next.inc == nil && next.kn == nil {
		if inputs == nil {
			inputs = routingInputs(res)
		}
		next.last.inputs = inputs
	}
	return out, next
}

// unchanged is out again, saying that no status changed since.
func unchanged(out Output) Output {
	out.StatusesChanged = &status.Changed{}
	return out
}

// Endpoints resolves every Service port of res to its ready endpoints
// (endpoints.go).
func Endpoints(res *snapshot.Resources) config.EndpointTable {
	return config.NewEndpointTable(endpoints(res.Services, res.EndpointSlices))
}

// translation is the state of one full translation: the lookups built
// once, and what each step leaves for the next.
type translation struct {
	settings   Settings
	controller gwv1.GatewayController
	res        *snapshot.Resources
	ix         *index
	cas        *caSource

	st            *status.Maps
	acmeListeners []acmeCandidate
	ourClasses    map[string]bool // ours -> accepted
	// classParams are the parameters of each class of ours; params
	// indexes res.Parameters once a parametersRef needs it.
	classParams map[string]parameters.Spec
	params      map[types.NamespacedName]*parameters.PorticoParameters
	// dataPlanes are the Gateways with data planes of their own, and
	// perGateway the same by key.
	dataPlanes []provision.Input
	perGateway map[types.NamespacedName]bool
	// merged is every Gateway's merged listener list, oldest Gateway
	// first; results are the Gateways' merge results in the same order.
	merged  []listeners.Listener
	results []gatewayResult
	// mergeInputs are the inputs of the results' merges, without their
	// ListenerSets, for the next translation to merge a few again.
	mergeInputs []listeners.Input
	// placed are the listeners portTables put on ports, in the order it
	// did.
	placed      []placedListener
	parents     map[routing.Parent]bool
	clientCerts map[types.NamespacedName]*config.BackendClientCert
	tls         *backendTLS
	traffic     *trafficPolicies
	security    *securityPolicies
	client      *clientPolicies
	xtraffic    *xTrafficPolicies
	telemetry   *telemetryPolicies
	compiled    routing.Output
	// routingServices are the Services as routes see them (ports, their
	// BackendTLSPolicies), for the ExternalAuth filters of listeners too.
	routingServices map[types.NamespacedName]routing.Service
	compiledTLS     tlsrouting.Output
	compiledTCP     tcprouting.Output
	acme            []ACMECertificate
	// addresses are the pool addresses of each Gateway, nil without a
	// pool; poolAssigned is what the next translation remembers of them.
	addresses    map[types.NamespacedName][]string
	poolAssigned map[types.NamespacedName][]string
	cfg          *config.Config
	// kingresses and kingressHashes are the knative step's results;
	// knativeCompiled, knativeOwners, knativePorts and knativeLocalCerts
	// what it keeps for the next translation, knativeProblems whether a
	// port of its gateways is taken.
	kingresses        pmap.Map[types.NamespacedName, KIngressResult]
	kingressHashes    map[*knative.Ingress]string
	knativeCompiled   map[types.NamespacedName]*kCompiled
	knativeOwners     map[gatewayHost]*kCompiled
	knativePorts      *knativePorts
	knativeLocalCerts int
	knativeProblems   bool
	kcertificates     map[types.NamespacedName]KCertificateResult
}

type gatewayResult struct {
	key types.NamespacedName
	*listeners.Result
}

func newTranslation(s Settings, res *snapshot.Resources, mem Memory) *translation {
	t := &translation{
		settings:   s,
		controller: s.controller(),
		res:        res,
		ix:         newIndex(res, mem.certs),
		cas:        newCASource(res, mem.caBundles),
		st: &status.Maps{
			GatewayClasses: map[string]gwv1.GatewayClassStatus{},
			Gateways:       make(map[types.NamespacedName]gwv1.GatewayStatus, len(res.Gateways)),
			// ListenerSets, HTTPRoutes and BackendTLSPolicies are filled in
			// by their steps.
		},
		poolAssigned: mem.poolAssigned,
	}
	// ACME listeners are found before the merge, which must read a
	// missing Secret of theirs as "waiting for a certificate".
	t.acmeListeners = t.ix.acmeCandidates(res)
	return t
}

func (t *translation) output() Output {
	var kn *KnativeOutput
	if t.settings.Knative != nil {
		kn = &KnativeOutput{Ingresses: t.kingresses, Certificates: t.kcertificates}
	}
	return Output{Config: t.cfg, Statuses: t.st.Computed(), ACME: t.acme, Knative: kn, DataPlanes: t.dataPlanes}
}

// routingInputs lists the objects a full translation depends on besides
// EndpointSlices. Informers hand out a new pointer for every changed object,
// so comparing pointers tells whether anything but endpoints changed.
func routingInputs(res *snapshot.Resources) []any {
	n := len(res.GatewayClasses) + len(res.Gateways) + len(res.ListenerSets) + len(res.HTTPRoutes) + len(res.GRPCRoutes) + len(res.TLSRoutes) + len(res.TCPRoutes) + len(res.UDPRoutes) +
		len(res.ReferenceGrants) + len(res.BackendTLSPolicies) + len(res.ConfigMaps) +
		len(res.Namespaces) + len(res.Secrets) + len(res.Services) + len(res.KIngresses) + len(res.KCertificates) +
		len(res.Parameters) + len(res.Deployments) + len(res.TrafficPolicies) +
		len(res.SecurityPolicies) + len(res.ClientPolicies) + len(res.XTrafficPolicies) + len(res.TelemetryPolicies)
	in := make([]any, 0, n+10)
	add := func(kind string, objs ...any) {
		in = append(in, kind)
		in = append(in, objs...)
	}
	add("GatewayClass", anys(res.GatewayClasses)...)
	add("Gateway", anys(res.Gateways)...)
	add("ListenerSet", anys(res.ListenerSets)...)
	add("HTTPRoute", anys(res.HTTPRoutes)...)
	add("GRPCRoute", anys(res.GRPCRoutes)...)
	add("TLSRoute", anys(res.TLSRoutes)...)
	add("TCPRoute", anys(res.TCPRoutes)...)
	add("UDPRoute", anys(res.UDPRoutes)...)
	add("ReferenceGrant", anys(res.ReferenceGrants)...)
	add("BackendTLSPolicy", anys(res.BackendTLSPolicies)...)
	// Only the ConfigMaps a policy names: the others, of which a cluster
	// has many, change nothing here.
	add("ConfigMap", anys(referencedConfigMaps(res))...)
	add("ClusterTrustBundle", anys(referencedTrustBundles(res))...)
	add("Namespace", anys(res.Namespaces)...)
	add("Secret", anys(res.Secrets)...)
	add("Service", anys(res.Services)...)
	add("KIngress", anys(res.KIngresses)...)
	add("KCertificate", anys(res.KCertificates)...)
	add("PorticoParameters", anys(res.Parameters)...)
	add("BackendTrafficPolicy", anys(res.TrafficPolicies)...)
	add("SecurityPolicy", anys(res.SecurityPolicies)...)
	add("ClientTrafficPolicy", anys(res.ClientPolicies)...)
	add("XBackendTrafficPolicy", anys(res.XTrafficPolicies)...)
	add("XTelemetryPolicy", anys(res.TelemetryPolicies)...)
	add("Deployment", anys(res.Deployments)...)
	// Replaced, never modified: its address tells whether it changed.
	add("ACMEErrors", reflect.ValueOf(res.ACMEErrors).Pointer())
	return in
}

func anys[T any](in []T) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

func nn(namespace, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: namespace, Name: name}
}

// ProbesOf are the hostnames of res's routes, which config.Describe looks
// the configuration translated from res up with.
func ProbesOf(res *snapshot.Resources) config.Probes {
	var p config.Probes
	for _, r := range res.HTTPRoutes {
		for _, h := range r.Spec.Hostnames {
			p.RouteHostnames = append(p.RouteHostnames, string(h))
		}
	}
	for _, r := range res.GRPCRoutes {
		for _, h := range r.Spec.Hostnames {
			p.RouteHostnames = append(p.RouteHostnames, string(h))
		}
	}
	for _, r := range res.TLSRoutes {
		for _, h := range r.Spec.Hostnames {
			p.TLSHostnames = append(p.TLSHostnames, string(h))
		}
	}
	return p
}
