package listeners

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestSchemaInvalidListenersAreNotAccepted: standalone YAML is not checked
// by the CRD schema, so a listener Portico could never bind or match is
// refused with a status instead of breaking the whole configuration.
func TestSchemaInvalidListenersAreNotAccepted(t *testing.T) {
	host := func(h string) *gwv1.Hostname { x := gwv1.Hostname(h); return &x }
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "gw", Generation: 1},
		Spec: gwv1.GatewaySpec{GatewayClassName: "portico", Listeners: []gwv1.Listener{
			{Name: "ok", Port: 8080, Protocol: gwv1.HTTPProtocolType, Hostname: host("*.example.com")},
			{Name: "port-zero", Port: 0, Protocol: gwv1.HTTPProtocolType},
			{Name: "port-high", Port: 70000, Protocol: gwv1.HTTPProtocolType},
			{Name: "ip", Port: 8081, Protocol: gwv1.HTTPProtocolType, Hostname: host("10.0.0.1")},
			{Name: "double-wildcard", Port: 8081, Protocol: gwv1.HTTPProtocolType, Hostname: host("*.*.example.com")},
			{Name: "upper", Port: 8081, Protocol: gwv1.HTTPProtocolType, Hostname: host("Example.com")},
			{Name: "empty-label", Port: 8081, Protocol: gwv1.HTTPProtocolType, Hostname: host("a..example.com")},
		}},
	}
	r := Merge(Input{Gateway: gw, ClassAccepted: true})
	for _, l := range r.Listeners {
		want := l.Name == "ok"
		if l.Serves() != want {
			t.Errorf("listener %s: serves=%v, want %v", l.Name, l.Serves(), want)
		}
	}
	for _, ls := range r.Gateway.Listeners {
		c := findCondition(ls.Conditions, string(gwv1.ListenerConditionAccepted))
		if ls.Name == "ok" {
			continue
		}
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != string(gwv1.ListenerReasonUnsupportedValue) {
			t.Errorf("listener %s: Accepted = %+v, want False/UnsupportedValue", ls.Name, c)
		}
	}
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}
