package translate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/gateway-api/pkg/consts"

	"portico.dev/portico/config"
	"portico.dev/portico/internal/controlplane/conditions"
	"portico.dev/portico/internal/controlplane/provision"
	"portico.dev/portico/internal/controlplane/snapshot"
	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/controlplane/wellknown"
	"portico.dev/portico/internal/shared/pmap"
)

// Facts are what is known of a configuration only once translate has made
// it: whether the data plane could bind its ports, which Gateway API CRDs
// are installed, what each data plane of its own acknowledged. They decide
// statuses too, in Finish, the one step after Translate where a status may
// still change.
type Facts struct {
	// NotApplied, when not empty, says why no configuration could be
	// applied at all: every Gateway is then not programmed.
	NotApplied string
	// Unbound lists the ports the data plane could not bind.
	Unbound []UnboundPort
	// CRDProblems describe each installed Gateway API CRD of a version
	// Portico was not built for.
	CRDProblems []string
	// DataPlaneVersions holds, for each Gateway with a data plane of its
	// own, the version of configuration its data plane is to acknowledge
	// now (on its Deployment, provision.AppliedVersionAnnotation).
	DataPlaneVersions map[types.NamespacedName]string
}

// UnboundPort is a port the data plane could not bind, and why.
type UnboundPort struct {
	Port    config.PortKey
	Message string
}

func (f *Facts) none() bool {
	return f.NotApplied == "" && len(f.Unbound) == 0 && len(f.CRDProblems) == 0 && len(f.DataPlaneVersions) == 0
}

// reasonParentNotProgrammed is listed for the ListenerSet Programmed
// condition but has no constant in the API package.
const reasonParentNotProgrammed gwv1.ListenerSetConditionReason = "ParentNotProgrammed"

// Finish returns the statuses to write: st, as Translate computed them,
// with what f says. It never changes st (no Computed changes): the
// statuses it changes are in copies of st's maps that share every other
// entry. It returns st itself when f changes nothing, and names in
// decorated the Gateways and ListenerSets whose statuses it changed
// (GatewayClasses, a handful, are written whole), so that a writer that
// compares only what changed also compares these, and those of the Finish
// before.
func Finish(st *status.Computed, res *snapshot.Resources, f Facts) (out *status.Computed, decorated *status.Changed) {
	if f.none() {
		return st, nil
	}
	fin := finisher{gateways: st.Gateways.Edit(), listenerSets: st.ListenerSets.Edit(), decorated: &status.Changed{}}
	if f.NotApplied != "" {
		fin.unprogramPort(res, nil, f.NotApplied)
	}
	for _, u := range f.Unbound {
		fin.unprogramPort(res, &u.Port, u.Message)
	}
	fin.demoteUnacknowledged(res, f.DataPlaneVersions)
	done := *st
	done.Gateways, done.ListenerSets = fin.gateways.Done(), fin.listenerSets.Done()
	if len(f.CRDProblems) > 0 {
		done.GatewayClasses = unsupportedVersion(st.GatewayClasses, f.CRDProblems)
	}
	return &done, fin.decorated
}

// finisher edits the Gateway and ListenerSet statuses, and names in
// decorated those it changed.
type finisher struct {
	gateways     *pmap.Edit[types.NamespacedName, gwv1.GatewayStatus]
	listenerSets *pmap.Edit[types.NamespacedName, gwv1.ListenerSetStatus]
	decorated    *status.Changed
}

func (f *finisher) setGateway(key types.NamespacedName, gs gwv1.GatewayStatus) {
	f.gateways.Set(key, gs)
	name(&f.decorated.Gateways, key)
}

func (f *finisher) setListenerSet(key types.NamespacedName, ls gwv1.ListenerSetStatus) {
	f.listenerSets.Set(key, ls)
	name(&f.decorated.ListenerSets, key)
}

// name adds key to names, once.
func name(names *[]types.NamespacedName, key types.NamespacedName) {
	if !slices.Contains(*names, key) {
		*names = append(*names, key)
	}
}

// unprogramPort turns Programmed False on every Gateway that has a
// programmed listener on port (every Gateway when port is nil), on its
// listeners, and on its ListenerSets and their listeners. A port with an
// address is only that of the Gateways given that address (an address
// pool); a port without one is bound for every Gateway. Accepted stays as
// it is: the configuration is valid, it is just not live.
func (f *finisher) unprogramPort(res *snapshot.Resources, port *config.PortKey, msg string) {
	on := func(gw types.NamespacedName, p gwv1.PortNumber, protocol gwv1.ProtocolType, conds []metav1.Condition) bool {
		switch {
		case port == nil:
			return true
		case int32(p) != port.Number || (protocol == gwv1.UDPProtocolType) != port.UDP ||
			!meta.IsStatusConditionTrue(conds, string(gwv1.ListenerConditionProgrammed)):
			return false
		case port.Address == "":
			return true
		}
		gs, _ := f.gateways.Get(gw)
		return slices.ContainsFunc(gs.Addresses, func(a gwv1.GatewayStatusAddress) bool { return a.Value == port.Address })
	}
	hit := map[types.NamespacedName]bool{}
	for _, gw := range res.Gateways {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		gs, ok := f.gateways.Get(key)
		if !ok {
			continue
		}
		for _, l := range gw.Spec.Listeners {
			for _, ls := range gs.Listeners {
				if ls.Name == l.Name && on(key, l.Port, l.Protocol, ls.Conditions) {
					hit[key] = true
				}
			}
		}
	}
	children := map[types.NamespacedName][]types.NamespacedName{}
	for _, ls := range res.ListenerSets {
		lsKey := types.NamespacedName{Namespace: ls.Namespace, Name: ls.Name}
		lss, ok := f.listenerSets.Get(lsKey)
		if !ok {
			continue
		}
		parent, ok := ListenerSetParent(ls)
		if !ok {
			continue
		}
		children[parent] = append(children[parent], lsKey)
		for _, l := range ls.Spec.Listeners {
			for _, le := range lss.Listeners {
				if le.Name == l.Name && on(parent, l.Port, l.Protocol, le.Conditions) {
					hit[parent] = true
				}
			}
		}
	}
	// In a fixed order, so that decorated is the same for the same facts.
	keys := slices.SortedFunc(maps.Keys(hit), compareNames)
	for _, key := range keys {
		f.unprogramGateway(key, children[key], msg)
	}
}

func compareNames(a, b types.NamespacedName) int {
	if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// unprogramGateway marks one Gateway and its ListenerSets not programmed.
func (f *finisher) unprogramGateway(key types.NamespacedName, children []types.NamespacedName, msg string) {
	gs, ok := f.gateways.Get(key)
	if !ok {
		return
	}
	gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse, gwv1.GatewayReasonNoResources, msg)
	gs.Listeners = slices.Clone(gs.Listeners)
	for i := range gs.Listeners {
		gs.Listeners[i].Conditions = conditions.Demote(gs.Listeners[i].Conditions, gwv1.ListenerConditionProgrammed, gwv1.ListenerReasonPending, msg)
	}
	f.setGateway(key, gs)
	for _, lsKey := range children {
		lss, _ := f.listenerSets.Get(lsKey)
		lss.Conditions = conditions.Demote(lss.Conditions, gwv1.ListenerSetConditionProgrammed, reasonParentNotProgrammed, "The parent Gateway is not programmed: "+msg)
		lss.Listeners = slices.Clone(lss.Listeners)
		for i := range lss.Listeners {
			lss.Listeners[i].Conditions = conditions.Demote(lss.Listeners[i].Conditions, gwv1.ListenerConditionProgrammed, gwv1.ListenerReasonPending, "The parent Gateway is not programmed")
		}
		f.setListenerSet(lsKey, lss)
	}
}

// demoteUnacknowledged keeps a Gateway with a data plane of its own from
// being Programmed until its Deployment records that its data plane applied
// the configuration it is to apply now (versions).
func (f *finisher) demoteUnacknowledged(res *snapshot.Resources, versions map[types.NamespacedName]string) {
	if len(versions) == 0 {
		return
	}
	deployments := map[types.NamespacedName]string{}
	for _, d := range res.Deployments {
		deployments[types.NamespacedName{Namespace: d.Namespace, Name: d.Name}] = d.Annotations[provision.AppliedVersionAnnotation]
	}
	for _, gw := range res.Gateways {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		current := versions[key]
		gs, ok := f.gateways.Get(key)
		if !ok || current == "" {
			continue
		}
		name := provision.Name(gw.Name, string(gw.Spec.GatewayClassName))
		if applied, ok := deployments[types.NamespacedName{Namespace: gw.Namespace, Name: name}]; ok && applied == current {
			continue
		}
		gs.Conditions = conditions.Demote(gs.Conditions, gwv1.GatewayConditionProgrammed, gwv1.GatewayReasonPending,
			fmt.Sprintf("waiting for the data plane (Deployment %s/%s) to apply configuration %s", gw.Namespace, name, current))
		f.setGateway(key, gs)
	}
}

// unsupportedVersion is classes with every GatewayClass's
// SupportedVersion condition False. Portico keeps serving the classes
// (Accepted stays True): its support for other CRD versions is best
// effort, as the specification allows.
func unsupportedVersion(classes pmap.Map[string, gwv1.GatewayClassStatus], problems []string) pmap.Map[string, gwv1.GatewayClassStatus] {
	msg := fmt.Sprintf("Portico supports Gateway API %s: %s", wellknown.MinorVersion(consts.BundleVersion)+".x", strings.Join(problems, "; "))
	e := classes.Edit()
	for name, gcs := range classes.All() {
		gcs.Conditions = conditions.Set(gcs.Conditions, gwv1.GatewayClassConditionStatusSupportedVersion, metav1.ConditionFalse,
			gwv1.GatewayClassReasonUnsupportedVersion, msg)
		e.Set(name, gcs)
	}
	return e.Done()
}
