package pipeline

import (
	"errors"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/conditions"
	"portico.dev/portico/config"
	"portico.dev/portico/resources"
	"portico.dev/portico/status"
	"portico.dev/portico/translate"
)

// reasonParentNotProgrammed is listed for the ListenerSet Programmed
// condition but has no constant in the API package.
const reasonParentNotProgrammed gwv1.ListenerSetConditionReason = "ParentNotProgrammed"

// portFailure is a port apply could not bind (nil: the configuration as
// a whole could not be applied), and why.
type portFailure struct {
	port *config.PortKey
	msg  string
}

// apply puts cfg on the data plane. When some new ports cannot be bound,
// it applies everything else, returns those ports (whose Gateways the
// caller reports not programmed) and tries again later. It reports whether
// any configuration was applied.
func (l *Loop) apply(cfg *config.Config) (bool, []portFailure, error) {
	err := l.runtime.Apply(cfg)
	if err == nil {
		return true, nil, nil
	}
	// Ports already bound with the same protocol cannot fail; try those
	// first, then each new port on its own.
	bound := map[config.PortKey]config.Protocol{}
	for _, p := range l.runtime.Current().Ports {
		if l.runtime.Addr(p.Address, p.Number) != nil {
			bound[p.Key()] = p.Protocol
		}
	}
	without := func(ports []*config.Port) *config.Config {
		next := *cfg
		next.Ports = ports
		return &next
	}
	base := without(nil)
	var fresh []*config.Port
	for _, p := range cfg.Ports {
		if proto, ok := bound[p.Key()]; ok && proto == p.Protocol {
			base.Ports = append(base.Ports, p)
		} else {
			fresh = append(fresh, p)
		}
	}
	if baseErr := l.runtime.Apply(base); baseErr != nil {
		l.retryLater()
		return false, []portFailure{{nil, baseErr.Error()}}, baseErr
	}
	var errs []error
	var failed []portFailure
	for _, p := range fresh {
		next := without(append(slices.Clone(base.Ports), p))
		if err := l.runtime.Apply(next); err != nil {
			errs = append(errs, err)
			key := p.Key()
			failed = append(failed, portFailure{&key, err.Error()})
			continue
		}
		base = next
	}
	if len(errs) == 0 {
		return true, nil, nil // the first failure did not repeat
	}
	l.retryLater()
	return true, failed, errors.Join(errs...)
}

func (l *Loop) retryLater() {
	d := l.opts.RetryAfter
	if d == 0 {
		d = 10 * time.Second
	}
	time.AfterFunc(d, l.debouncer.Mark)
}

// markNotProgrammed turns Programmed False on every Gateway that has a
// programmed listener on port (every Gateway when port is nil), on its
// listeners, and on its ListenerSets and their listeners. A port with an
// address is only that of the Gateways given that address (an address
// pool); a port without one is bound for every Gateway. Accepted stays as
// it is: the configuration is valid, it is just not live.
func markNotProgrammed(st *status.Computed, res *resources.Resources, port *config.PortKey, msg string) {
	on := func(gw types.NamespacedName, p gwv1.PortNumber, conds []metav1.Condition) bool {
		switch {
		case port == nil:
			return true
		case int32(p) != port.Number || !meta.IsStatusConditionTrue(conds, string(gwv1.ListenerConditionProgrammed)):
			return false
		case port.Address == "":
			return true
		}
		return slices.ContainsFunc(st.Gateways[gw].Addresses, func(a gwv1.GatewayStatusAddress) bool { return a.Value == port.Address })
	}
	hit := map[types.NamespacedName]bool{}
	for _, gw := range res.Gateways {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		gs, ok := st.Gateways[key]
		if !ok {
			continue
		}
		for _, l := range gw.Spec.Listeners {
			for _, ls := range gs.Listeners {
				if ls.Name == l.Name && on(key, l.Port, ls.Conditions) {
					hit[key] = true
				}
			}
		}
	}
	children := map[types.NamespacedName][]types.NamespacedName{}
	for _, ls := range res.ListenerSets {
		lsKey := types.NamespacedName{Namespace: ls.Namespace, Name: ls.Name}
		lss, ok := st.ListenerSets[lsKey]
		if !ok {
			continue
		}
		parent, ok := translate.ListenerSetParent(ls)
		if !ok {
			continue
		}
		children[parent] = append(children[parent], lsKey)
		for _, l := range ls.Spec.Listeners {
			for _, le := range lss.Listeners {
				if le.Name == l.Name && on(parent, l.Port, le.Conditions) {
					hit[parent] = true
				}
			}
		}
	}
	for key := range hit {
		unprogramGateway(st, key, children[key], msg)
	}
}

// unprogramGateway marks one Gateway and its ListenerSets not programmed.
func unprogramGateway(st *status.Computed, key types.NamespacedName, children []types.NamespacedName, msg string) {
	gs, ok := st.Gateways[key]
	if !ok {
		return
	}
	gs.Conditions = conditions.Set(gs.Conditions, gwv1.GatewayConditionProgrammed, metav1.ConditionFalse, gwv1.GatewayReasonNoResources, msg)
	gs.Listeners = slices.Clone(gs.Listeners)
	for i := range gs.Listeners {
		gs.Listeners[i].Conditions = conditions.Demote(gs.Listeners[i].Conditions, gwv1.ListenerConditionProgrammed, gwv1.ListenerReasonPending, msg)
	}
	st.Gateways[key] = gs
	for _, lsKey := range children {
		lss := st.ListenerSets[lsKey]
		lss.Conditions = conditions.Demote(lss.Conditions, gwv1.ListenerSetConditionProgrammed, reasonParentNotProgrammed, "The parent Gateway is not programmed: "+msg)
		lss.Listeners = slices.Clone(lss.Listeners)
		for i := range lss.Listeners {
			lss.Listeners[i].Conditions = conditions.Demote(lss.Listeners[i].Conditions, gwv1.ListenerConditionProgrammed, gwv1.ListenerReasonPending, "The parent Gateway is not programmed")
		}
		st.ListenerSets[lsKey] = lss
	}
}
