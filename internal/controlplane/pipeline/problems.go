package pipeline

import (
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"portico.dev/portico/internal/controlplane/status"
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
	if changed != nil {
		st = st.Only(changed)
	}
	for key, gs := range st.Gateways {
		report("Gateway", key.String(), gs.Conditions)
		for _, l := range gs.Listeners {
			report("Gateway", key.String(), l.Conditions, zap.String("listener", string(l.Name)))
		}
	}
	for key, ls := range st.ListenerSets {
		report("ListenerSet", key.String(), ls.Conditions)
		for _, l := range ls.Listeners {
			report("ListenerSet", key.String(), l.Conditions, zap.String("listener", string(l.Name)))
		}
	}
	for kind, routes := range map[string]map[types.NamespacedName][]gwv1.RouteParentStatus{"HTTPRoute": st.HTTPRoutes, "TLSRoute": st.TLSRoutes} {
		for key, parents := range routes {
			for _, p := range parents {
				report(kind, key.String(), p.Conditions, zap.String("parent", string(p.ParentRef.Name)))
			}
		}
	}
	for key, parents := range st.GRPCRoutes {
		for _, p := range parents {
			report("GRPCRoute", key.String(), p.Conditions, zap.String("parent", string(p.ParentRef.Name)))
		}
	}
}
