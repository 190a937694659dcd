package pipeline

import (
	"iter"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/status"
	"portico.dev/portico/internal/shared/pmap"
)

// LogProblems logs every False Accepted/ResolvedRefs/Programmed condition,
// which in standalone mode is the only place a user sees why an object does
// not serve: of every status when changed is nil, else of those changed
// names (pipeline.Outputs.Statuses), so that a change at 100,000 hostnames
// neither reads them all nor repeats every warning.
func LogProblems(log *zap.Logger, st *status.Computed, changed *status.Changed) {
	report := func(kind, name string, conds []metav1.Condition, extra ...zap.Field) {
		for _, c := range conds {
			if c.Status == metav1.ConditionTrue || c.Type == "Conflicted" {
				continue
			}
			fields := append([]zap.Field{zap.String("kind", kind), zap.String("name", name), zap.String("condition", c.Type), zap.String("reason", c.Reason), zap.String("message", c.Message)}, extra...)
			log.Warn("object not fully serving", fields...)
		}
	}
	for key, gs := range pick(st.Gateways, changed, func(c *status.Changed) []types.NamespacedName { return c.Gateways }) {
		report("Gateway", key.String(), gs.Conditions)
		for _, l := range gs.Listeners {
			report("Gateway", key.String(), l.Conditions, zap.String("listener", string(l.Name)))
		}
	}
	for key, ls := range pick(st.ListenerSets, changed, func(c *status.Changed) []types.NamespacedName { return c.ListenerSets }) {
		report("ListenerSet", key.String(), ls.Conditions)
		for _, l := range ls.Listeners {
			report("ListenerSet", key.String(), l.Conditions, zap.String("listener", string(l.Name)))
		}
	}
	// Only a full translation changes TLSRoutes, TCPRoutes, UDPRoutes and GRPCRoutes.
	none := func(*status.Changed) []types.NamespacedName { return nil }
	for kind, routes := range map[string]iter.Seq2[types.NamespacedName, []gwv1.RouteParentStatus]{
		"HTTPRoute": pick(st.HTTPRoutes, changed, func(c *status.Changed) []types.NamespacedName { return c.HTTPRoutes }),
		"TLSRoute":  pick(st.TLSRoutes, changed, none),
		"TCPRoute":  pick(st.TCPRoutes, changed, none),
		"UDPRoute":  pick(st.UDPRoutes, changed, none),
		"GRPCRoute": pick(st.GRPCRoutes, changed, none),
	} {
		for key, parents := range routes {
			for _, p := range parents {
				report(kind, key.String(), p.Conditions, zap.String("parent", string(p.ParentRef.Name)))
			}
		}
	}
}

// pick yields the statuses of m: every one when changed is nil, else those
// keys names.
func pick[V any](m pmap.Map[types.NamespacedName, V], changed *status.Changed, keys func(*status.Changed) []types.NamespacedName) iter.Seq2[types.NamespacedName, V] {
	if changed == nil {
		return m.All()
	}
	return func(yield func(types.NamespacedName, V) bool) {
		for _, k := range keys(changed) {
			if v, ok := m.Get(k); ok && !yield(k, v) {
				return
			}
		}
	}
}
